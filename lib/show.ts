/**
 * `milo-ipam show`: who holds a lease. By address (every claim of
 * `milo.namespace` whose lease holds it, of any cluster), by pod or by node
 * (label selectors in this node config's cluster): each claim with its
 * address, holder, node, host and age on Milo's clock, and on the holder's
 * own node (this node name and host) whether its result caches name the
 * container, the node's record of it and its journal entry. Read-only.
 */
import { clusterSelector, KEYS, labelValue, nodeSelector } from "./claims.ts";
import { holderOf } from "./holder.ts";
import { parseCommandLine, usageError } from "./cli.ts";
import type { NodeConfig } from "./config.ts";
import { readNodeConfig } from "./config_file.ts";
import { redact, redactedJson, toCniError } from "./errors.ts";
import { Holdings } from "./holdings.ts";
import { hostId } from "./host.ts";
import { cidrContains, type Ip, parseCidr, parseIp } from "./ip.ts";
import { Journal } from "./journal.ts";
import { isLive, readLive } from "./liveness.ts";
import { MiloClient } from "./milo.ts";
import type { IPClaim } from "./milo_objects.ts";
import { SHOW_USAGE } from "./usage.ts";
import { requireStateFormat } from "./version.ts";

/** The shortest deadline of a show's LIST (one answer may hold the whole namespace). */
const SHOW_MIN_MS = 60_000;

/** What a show asks for. */
export type ShowQuery =
  | { by: "address"; address: string }
  | { by: "pod"; namespace: string; name: string }
  | { by: "node"; node: string };

/** What the holder's node knows of a claim (only on that node). */
export interface LocalView {
  /** The result cache directories that name the claim's container (none: absent from all). */
  cachesNaming: string[];
  /** The node's record of the attachment: `held`, `adding`, or absent. */
  record: "held" | "adding" | "none";
  /** Whether the release journal owes a release of the attachment. */
  journaled: boolean;
}

/** One claim as `show` reports it. */
export interface ShowRow {
  claim: string;
  uid?: string;
  address?: string;
  family?: string;
  phase?: string;
  pool?: string;
  cluster?: string;
  node?: string;
  host?: string;
  network?: string;
  pod?: string;
  podUid?: string;
  containerId?: string;
  ifname?: string;
  createdAt?: string;
  /** Age on Milo's clock, in seconds. */
  ageS?: number;
  /** Set on the holder's node (its name and host are this node config's and host's). */
  local?: LocalView;
  /** Why `local` is absent. */
  localWhy?: string;
}

/** What `milo-ipam show --output json` prints. */
export interface ShowReport {
  kind: "ShowReport";
  version: 1;
  query: ShowQuery;
  namespace: string;
  /** The label selector of the one LIST made ("" for every claim of the namespace). */
  labelSelector: string;
  /** The cluster the pod and node queries select (the node config's). */
  cluster: string;
  claims: ShowRow[];
  requests: number;
  error: { message: string; details: string } | null;
}

/** The label selector a query lists with, and the claims of the answer it keeps. */
export function selectorOf(q: ShowQuery, cluster: string): {
  selector: string;
  keep: (c: IPClaim) => boolean;
} {
  if (q.by === "node") return { selector: nodeSelector(cluster, q.node), keep: () => true };
  if (q.by === "pod") {
    const selector = `${clusterSelector(cluster)},${KEYS.podNamespace}=${
      labelValue(q.namespace)
    },${KEYS.podName}=${labelValue(q.name)}`;
    const pod = `${q.namespace}/${q.name}`;
    return { selector, keep: (c) => holderOf(c).pod === pod };
  }
  const ip = parseIp(q.address)!;
  return { selector: "", keep: (c) => holds(c, ip) };
}

/** Whether a claim's lease holds `ip` (its address, or its block's range). */
function holds(c: IPClaim, ip: Ip): boolean {
  const cidr = c.status.allocatedCIDR ? parseCidr(c.status.allocatedCIDR) : null;
  if (cidr && cidr.family === ip.family && cidrContains(cidr, ip)) return true;
  const a = c.status.address ? parseIp(c.status.address.split("/")[0]) : null;
  return !!a && a.family === ip.family && a.ip === ip.ip;
}

/** One row per claim; `local` on the holder's node. */
export async function showRows(
  claims: IPClaim[],
  node: NodeConfig,
  serverTime: number,
): Promise<ShowRow[]> {
  const here = hostId(node);
  const mine = claims.some((c) => isHere(c, node, here));
  const perDir = mine
    ? await Promise.all(node.resultsDirs.map(async (d) => ({ d, l: await readLive([d]) })))
    : [];
  const holdings = new Holdings(node.stateDir);
  const journal = new Journal(node.stateDir);
  return claims.map((c) => {
    const h = holderOf(c);
    const created = c.metadata.creationTimestamp;
    const age = created && Number.isFinite(serverTime)
      ? Math.max(0, Math.round((serverTime - Date.parse(created)) / 1000))
      : undefined;
    const row: ShowRow = {
      claim: c.metadata.name,
      uid: c.metadata.uid,
      address: c.status.allocatedCIDR ?? c.status.address,
      family: c.spec.ipFamily,
      phase: c.status.phase,
      pool: c.status.poolRef?.name,
      cluster: h.cluster,
      node: h.node,
      host: h.host,
      network: h.network,
      pod: h.pod,
      podUid: h.podUid,
      containerId: h.containerId,
      ifname: h.ifname,
      createdAt: created,
      ageS: age,
    };
    if (!isHere(c, node, here)) {
      row.localWhy = h.node === node.node && h.cluster === node.cluster
        ? `made by host ${h.host ?? "(none recorded)"}, not this one (${here})`
        : `held on node ${h.node ?? "(none recorded)"}: run show there for its caches`;
      return row;
    }
    const key = { cluster: node.cluster, containerId: h.containerId!, ifname: h.ifname ?? "" };
    const record = holdings.read(key);
    row.local = {
      cachesNaming: perDir.filter((p) => isLive(p.l, h.containerId!)).map((p) => p.d),
      record: record?.state ?? "none",
      journaled: exists(journal.pathOf(key)),
    };
    return row;
  });
}

function isHere(c: IPClaim, node: NodeConfig, host: string): boolean {
  const h = holderOf(c);
  return h.cluster === node.cluster && h.node === node.node && h.host === host &&
    !!h.containerId;
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

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

/** The report as text: one block per claim. */
export function renderShow(r: ShowReport): string {
  const q = r.query;
  const what = q.by === "address"
    ? `address ${q.address}`
    : q.by === "pod"
    ? `pod ${q.namespace}/${q.name} in cluster ${r.cluster}`
    : `node ${q.node} in cluster ${r.cluster}`;
  if (r.error) return `milo-ipam show ${what}: ${r.error.message}\n  ${r.error.details}\n`;
  const lines = [
    `${r.claims.length ? r.claims.length : "no"} claim${
      r.claims.length === 1 ? "" : "s"
    } for ${what} (namespace ${r.namespace}; one LIST${
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
  return redact(lines.join("\n")) + "\n";
}

/** Parses the query of the command line, or answers why it is wrong. */
export function parseQuery(
  positionals: string[],
  pod: string | undefined,
  node: string | undefined,
): ShowQuery | string {
  const given = [positionals.length ? "ADDRESS" : "", pod ? "--pod" : "", node ? "--node" : ""]
    .filter(Boolean);
  if (given.length !== 1 || positionals.length > 1) {
    return "give exactly one of ADDRESS, --pod NAMESPACE/NAME and --node NAME";
  }
  if (pod !== undefined) {
    const m = /^([^/\s]+)\/([^/\s]+)$/.exec(pod);
    return m ? { by: "pod", namespace: m[1], name: m[2] } : `--pod ${pod}: NAMESPACE/NAME`;
  }
  if (node !== undefined) return { by: "node", node };
  const text = positionals[0].split("/")[0];
  const ip = parseIp(text);
  return ip ? { by: "address", address: ip.ip } : `${positionals[0]}: not an IP address`;
}

/** CLI entry: `milo-ipam show ...` (see {@link SHOW_USAGE}). */
export async function showCli(args: string[]): Promise<number> {
  const p = parseCommandLine("milo-ipam show", args, {
    usage: SHOW_USAGE,
    positionals: true,
    options: {
      pod: { type: "string" },
      node: { type: "string" },
      config: { type: "string" },
      output: { type: "string", default: "text" },
    },
  });
  if ("exit" in p) return p.exit;
  const v = p.values as { pod?: string; node?: string; config?: string; output: string };
  if (v.output !== "text" && v.output !== "json") {
    return usageError("milo-ipam show", `--output ${v.output}: text or json`, SHOW_USAGE).exit;
  }
  const query = parseQuery(p.positionals, v.pod, v.node);
  if (typeof query === "string") return usageError("milo-ipam show", query, SHOW_USAGE).exit;
  const report = await show(query, v.config);
  const out = v.output === "json" ? redactedJson(report, 2) + "\n" : renderShow(report);
  Deno.stdout.writeSync(new TextEncoder().encode(out));
  return report.error ? 1 : 0;
}

/** Runs one query against Milo with the node config (`config`, else the installed one). */
export async function show(query: ShowQuery, config?: string): Promise<ShowReport> {
  const report: ShowReport = {
    kind: "ShowReport",
    version: 1,
    query,
    namespace: "",
    labelSelector: "",
    cluster: "",
    claims: [],
    requests: 0,
    error: null,
  };
  let milo: MiloClient | undefined;
  try {
    const node = await readNodeConfig((n) =>
      n === "MILO_IPAM_CONFIG" && config ? config : Deno.env.get(n)
    );
    requireStateFormat(node.stateDir, false);
    report.namespace = node.milo.namespace;
    report.cluster = node.cluster;
    const { selector, keep } = selectorOf(query, node.cluster);
    report.labelSelector = selector;
    const t = node.timeouts;
    milo = await MiloClient.open(node, t.requestMs, Date.now() + Math.max(t.totalMs, SHOW_MIN_MS));
    const list = await milo.listClaimsAt(selector);
    const claims = list.items.filter(keep).sort((a, b) =>
      a.metadata.name < b.metadata.name ? -1 : 1
    );
    report.claims = await showRows(claims, node, list.serverTime);
  } catch (err) {
    const e = toCniError(err);
    report.error = { message: e.message, details: e.details };
  } finally {
    report.requests = milo?.requests ?? 0;
    milo?.close();
  }
  return report;
}
