/**
 * `milo-ipam show`'s text: one block per claim; for an address no claim
 * holds, one per retained allocation holding it; for `--retained`, one line
 * per retained allocation and the total; for a pod with no claim, what its
 * namespace's stable identities may have left retained.
 */
import { redact } from "./redact.ts";
import { printable, printableLines } from "./printable.ts";
import { renderPools } from "./_show_pools.ts";
import type { NodeView, ShowReport } from "./_show_report.ts";
import { quotaText } from "./milo_quota.ts";
import type { Grant, RetainedRow } from "./show_retained.ts";

/** What re-binds a retained address, and what Milo does not record of it. */
const REBIND_TEXT = "re-bound by a new claim of the same name in this namespace, which " +
  "milo-ipam makes when a pod of a stable identity returns (identity pod: the same pod " +
  "namespace and name; network: the same slot); Milo records no pod namespace, pod or node " +
  "for it (an IPAllocation carries none of its claim's labels)";

/** What Milo says of a lease that has not elapsed. */
const NO_LEASE_END = "Milo names no end until the lease elapses (the class's " +
  "retentionLease, capped by the pool's maxRetentionLease, from the retained time: then it " +
  "marks it Expiring with the release time; without a lease it is held until deleted)";

/** Seconds as `3d4h`, `2h5m`, `4m10s` or `12s`. */
export function formatAge(s: number | undefined): string {
  if (s === undefined) return "?";
  const parts: [number, string][] = [[86_400, "d"], [3_600, "h"], [60, "m"], [1, "s"]];
  const out: string[] = [];
  let left = s;
  for (const [unit, name] of parts) {
    if (left >= unit || (unit === 1 && !out.length)) {
      out.push(`${Math.floor(left / unit)}${name}`);
      left %= unit;
    }
    if (out.length === 2) break;
  }
  return out.join("");
}

/** This node's findings first: two sandboxes on one address is never a footnote. */
function renderFindings(r: ShowReport): string[] {
  const f = r.findings;
  if (!f) return [];
  const at = new Date(f.at).toISOString();
  return [
    ...f.duplicates.map((d) =>
      `DUPLICATE ADDRESS ${d.address} (this node's verification, ${at}): ${d.holder} runs on ` +
      `it; ${d.now}`
    ),
    ...f.missing.map((m) =>
      `LIVE WITHOUT ITS CLAIM ${m.address ?? "?"} (this node's verification, ${at}): claim ` +
      `${m.claim}: ${m.why}`
    ),
    "",
  ];
}

/** The report as text: one block per claim. */
export function renderShow(r: ShowReport): string {
  const q = r.query;
  const what = q.by === "address"
    ? `address ${q.address}`
    : q.by === "pod"
    ? `pod ${q.namespace}/${q.name} in cluster ${r.cluster}`
    : q.by === "node"
    ? `node ${q.node} in cluster ${r.cluster}`
    : `--${q.by}`;
  if (r.error) {
    return redact(printableLines([
      ...renderFindings(r),
      `milo-ipam show ${what}: ${r.error.message}`,
      `  ${r.error.details}`,
      ...(r.node ? renderNodeView(r.node) : []),
    ]));
  }
  if (q.by === "pools") {
    return redact(printableLines([
      `${count(r.pools?.length ?? 0, "IPPool")} Milo shows this token, with the utilisation ` +
      "it reports (one LIST of ippools)",
      ...renderPools(r.pools ?? []),
    ]));
  }
  if (q.by === "retained") {
    const lines = [
      `${count(r.retained?.length ?? 0, "retained allocation")} in namespace ${r.namespace} ` +
      "(one LIST of every IPAllocation of the namespace)",
      ...renderRetainedTable(r.retained ?? []),
      quotaText(r.quota),
    ];
    return redact(printableLines(lines));
  }
  const lines = [
    ...renderFindings(r),
    `${count(r.claims.length, "claim")} for ${what} (namespace ${r.namespace}; one LIST${
      r.labelSelector ? ` selecting ${r.labelSelector}` : " of every claim"
    }: Milo reads every claim of the project for it)`,
  ];
  for (const c of r.claims) {
    lines.push(
      "",
      `claim ${c.claim}${c.uid ? ` (uid ${c.uid})` : ""}`,
      `  address  ${c.address ?? "(none)"} ${c.family ?? ""} ${c.phase ?? ""}${
        c.pool ? ` pool ${c.pool}` : ""
      }`.trimEnd(),
      `  holder   pod ${c.pod ?? "?"}${c.podUid ? ` (uid ${c.podUid})` : ""}, container ${
        c.containerId ?? "?"
      }, ifname ${c.ifname ?? "?"}, network ${c.network ?? "?"}`,
      `  where    cluster ${c.cluster ?? "?"}, node ${c.node ?? "?"}, host ${c.host ?? "?"}`,
      `  age      ${formatAge(c.ageS)}${c.createdAt ? ` (created ${c.createdAt})` : ""}`,
    );
    if (c.local) {
      const named = c.local.cachesNaming.length
        ? `named by ${c.local.cachesNaming.join(", ")}`
        : "named by no result cache (reconcile releases it after two runs a grace apart)";
      lines.push(
        `  on node  ${named}; record ${c.local.record}; journal ${
          c.local.journaled ? "owes its release" : "none"
        }`,
      );
    } else if (c.localWhy) {
      lines.push(`  on node  not checked: ${c.localWhy}`);
    }
  }
  if (r.retained) {
    lines.push(
      `${count(r.retained.length, "retained allocation")} ${
        r.retained.length === 1 ? "holds" : "hold"
      } it (one more LIST, of every IPAllocation of the namespace)`,
      ...renderRetainedBlocks(r.retained),
    );
  }
  if (r.grants && q.by === "pod") lines.push(...podNote(r.grants, q.namespace));
  lines.push("", quotaText(r.quota));
  return redact(printableLines(lines));
}

/** What the node itself holds, when Milo could not be asked. */
function renderNodeView(v: NodeView): string[] {
  const lines = [
    "",
    `could not ask: ${v.unasked.join("; ")}`,
    `what node ${v.node} itself holds (its records, journal and result caches; Milo not asked):`,
  ];
  if (!v.records.length && !v.journal.length) lines.push("  no record and no owed release");
  for (const x of v.records) {
    const named = x.cachesNaming.length
      ? `named by ${x.cachesNaming.join(", ")}`
      : "named by no result cache";
    lines.push(
      `  record ${x.state} ${x.pod ?? "(pod not recorded)"} container ${x.containerId} ifname ` +
        `${x.ifname} network ${x.network}: ${x.addresses.join(", ") || "(no address yet)"} ` +
        `(claims ${x.claims.join(", ")}; since ${x.at}); ${named}; journal ${
          x.journaled ? "owes its release" : "none"
        }`,
    );
  }
  for (const j of v.journal) {
    lines.push(
      `  journal owes ${j.claims.join(", ")} of ${j.pod ?? j.podNamespace ?? "?"} container ` +
        `${j.containerId} ifname ${j.ifname} (since ${j.since}, ${j.attempts} attempt(s)${
          j.lastError ? `, last: ${j.lastError}` : ""
        })`,
    );
  }
  return lines;
}

/** `no claims`, `1 claim`, `2 claims`. */
function count(n: number, what: string): string {
  return `${n || "no"} ${what}${n === 1 ? "" : "s"}`;
}

/** What a pod with no claim may have left retained, by the node config's grants. */
function podNote(grants: Grant[], namespace: string): string[] {
  if (!grants.length) {
    return [
      `  this node config grants no stable identity to namespace ${namespace}: its pods' claims ` +
      "are released with them and leave nothing retained",
    ];
  }
  return [
    `  this node config grants namespace ${namespace} stable identities (allowIdentities ${
      grants.map((g) => JSON.stringify(g)).join(", ")
    }): a pod of a stable identity leaves its addresses retained in Milo when it goes, for ` +
    "the next pod of the same name (identity pod) or slot (network) to re-bind. Milo records " +
    "no pod or namespace on a retained allocation, and the claim names hash the network and " +
    "interface: `milo-ipam show --retained` lists every retained address of the namespace",
  ];
}

/** When a retained allocation's lease ends, in words. */
function leaseText(r: RetainedRow): string {
  if (r.releaseAt) return `elapsed: Milo releases it at ${r.releaseAt} unless it is re-bound`;
  if (r.expiring) return `elapsed: ${r.expiringMessage ?? "Milo marked it Expiring"}`;
  return "not elapsed";
}

/** `since 2026-12-01T10:15:02Z (3m10s)`, or what Milo did not say. */
function sinceText(r: RetainedRow): string {
  return r.retainedSince
    ? `${r.retainedSince} (${formatAge(r.retainedForS)} ago)`
    : "(Milo wrote no Bound condition)";
}

/** The retained allocations holding an address, one block each. */
function renderRetainedBlocks(rows: RetainedRow[]): string[] {
  const lines: string[] = [];
  for (const r of rows) {
    const scope = Object.entries(r.scope ?? {}).map(([k, v]) => `${k}=${v}`).join(",");
    lines.push(
      "",
      `retained allocation ${r.allocation}${r.uid ? ` (uid ${r.uid})` : ""}`,
      `  address   ${r.address ?? "(none)"} ${r.family ?? ""}${r.pool ? ` pool ${r.pool}` : ""}${
        r.className ? ` class ${r.className}` : ""
      }${scope ? ` scope ${scope}` : ""}`,
      `  retained  since ${sinceText(r)}`,
      `  lease     ${r.expiring ? leaseText(r) : NO_LEASE_END}`,
      `  re-bind   ${REBIND_TEXT}`,
    );
  }
  return lines;
}

/** Every retained allocation of the namespace, one line each, and the total. */
function renderRetainedTable(rows: RetainedRow[]): string[] {
  if (!rows.length) return [];
  const table = [
    ["ADDRESS", "ALLOCATION", "RETAINED SINCE", "LEASE"],
    ...rows.map((r) =>
      [
        r.address ?? "(none)",
        r.allocation,
        sinceText(r),
        r.expiring ? leaseText(r) : "not elapsed",
      ].map(printable)
    ),
  ];
  const widths = [0, 1, 2].map((i) => Math.max(...table.map((t) => t[i].length)));
  const expiring = rows.filter((r) => r.expiring).length;
  return [
    "",
    ...table.map((t) => t.map((c, i) => i < 3 ? c.padEnd(widths[i]) : c).join("  ")),
    "",
    `total ${rows.length} retained (${expiring} past their lease). Lease: ${NO_LEASE_END}.`,
    `Each is ${REBIND_TEXT}.`,
  ];
}
