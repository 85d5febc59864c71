/**
 * `milo-ipam show`: who holds a lease. By address (every claim of
 * `milo.namespace` whose lease holds it, of any cluster; when none does, the
 * retained allocation that holds it), by pod or by node (label selectors in
 * this node config's cluster): each claim with its address, holder, node,
 * host and age on Milo's clock, and on the holder's own node (this node name
 * and host) whether its result caches name the container, the node's record
 * of it and its journal entry. `--retained`: every retained allocation of
 * the namespace (lib/show_retained.ts). Then how close the project is to its
 * IPClaim quota, where Milo says (lib/milo_quota.ts). Read-only.
 */
import { clusterSelector, KEYS, labelValue, nodeSelector } from "./claims.ts";
import { holderOf } from "./holder.ts";
import { parseCommandLine, usageError } from "./cli.ts";
import type { NodeConfig } from "./config.ts";
import { readNodeConfig, withConfigFlag } from "./config_file.ts";
import { CniError, toCniError } from "./errors.ts";
import { redactedJson } from "./redact.ts";
import { Holdings } from "./holdings.ts";
import { hostId } from "./host.ts";
import { ipValue, parseIp } from "./ip.ts";
import { Journal } from "./journal.ts";
import { isLive, readLive, readState, stateFileOf } from "./liveness.ts";
import { MiloClient } from "./milo.ts";
import type { IPClaim } from "./milo_objects.ts";
import type { Findings, ShowQuery, ShowReport, ShowRow } from "./_show_report.ts";
import { nodeView } from "./_show_local.ts";
import { poolRows } from "./_show_pools.ts";
import { renderShow } from "./_show_render.ts";
import { grantsFor, holds, retainedRows } from "./show_retained.ts";
import { SHOW_USAGE } from "./usage.ts";
import { requireStateFormat } from "./state_format.ts";

/** The shortest deadline of a show's LIST (one answer may hold the whole namespace). */
const SHOW_MIN_MS = 60_000;

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
  if (q.by === "retained" || q.by === "pools") return { selector: "", keep: () => false };
  const ip = parseIp(q.address)!;
  return { selector: "", keep: (c) => holds(c.status, ip) };
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
      journaled: journal.owes(key),
    };
    return row;
  });
}

function isHere(c: IPClaim, node: NodeConfig, host: string): boolean {
  const h = holderOf(c);
  return h.cluster === node.cluster && h.node === node.node && h.host === host &&
    !!h.containerId;
}

/** Parses the query of the command line, or answers why it is wrong. */
export function parseQuery(
  positionals: string[],
  pod: string | undefined,
  node: string | undefined,
  retained = false,
  pools = false,
): ShowQuery | string {
  const given = [
    positionals.length ? "ADDRESS" : "",
    pod ? "--pod" : "",
    node ? "--node" : "",
    retained ? "--retained" : "",
    pools ? "--pools" : "",
  ].filter(Boolean);
  if (given.length !== 1 || positionals.length > 1) {
    return "give exactly one of ADDRESS, --pod NAMESPACE/NAME, --node NAME, --retained and --pools";
  }
  if (retained) return { by: "retained" };
  if (pools) return { by: "pools" };
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
      retained: { type: "boolean" },
      pools: { type: "boolean" },
      config: { type: "string" },
      output: { type: "string", default: "text" },
    },
  });
  if ("exit" in p) return p.exit;
  const v = p.values as {
    pod?: string;
    node?: string;
    retained?: boolean;
    pools?: boolean;
    config?: string;
    output: string;
  };
  if (v.output !== "text" && v.output !== "json") {
    return usageError("milo-ipam show", `--output ${v.output}: text or json`, SHOW_USAGE).exit;
  }
  const query = parseQuery(p.positionals, v.pod, v.node, v.retained, v.pools);
  if (typeof query === "string") return usageError("milo-ipam show", query, SHOW_USAGE).exit;
  const report = await show(query, v.config);
  const out = v.output === "json" ? redactedJson(report, 2) + "\n" : renderShow(report);
  Deno.stdout.writeSync(new TextEncoder().encode(out));
  return report.error ? 1 : 0;
}

/**
 * Runs one query against Milo with the node config (`config`, else the
 * installed one): one LIST of claims, or of IPAllocations for `--retained`;
 * an address no claim holds costs one more, of IPAllocations; and one GET of
 * the project's quota bucket.
 */
export async function show(
  query: ShowQuery,
  config?: string,
  open: typeof MiloClient.open = MiloClient.open,
): Promise<ShowReport> {
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
  let node: NodeConfig | undefined;
  try {
    node = await readNodeConfig(withConfigFlag(config));
    requireStateFormat(node.stateDir, false);
    report.namespace = node.milo.namespace;
    report.cluster = node.cluster;
    const { selector, keep } = selectorOf(query, node.cluster);
    report.labelSelector = selector;
    const t = node.timeouts;
    milo = await open(node, t.requestMs, Date.now() + Math.max(t.totalMs, SHOW_MIN_MS));
    if (query.by === "pools") {
      report.pools = poolRows((await milo.listPoolsAt().catch(poolsRefused)).items);
    } else if (query.by !== "retained") {
      const list = await milo.listClaimsAt(selector);
      const claims = list.items.filter(keep).sort((a, b) =>
        a.metadata.name < b.metadata.name ? -1 : 1
      );
      report.claims = await showRows(claims, node, list.serverTime);
    }
    if (query.by === "retained" || (query.by === "address" && !report.claims.length)) {
      const list = await milo.listAllocationsAt().catch(allocationsRefused);
      const ip = query.by === "address" ? parseIp(query.address)! : undefined;
      report.retained = retainedRows(list.items, list.serverTime, ip);
    }
    if (query.by === "pod" && !report.claims.length) {
      report.grants = grantsFor(node, query.namespace);
    }
    const findings = await findingsFor(query, node);
    if (findings) report.findings = findings;
    report.quota = await milo.quotaUsage();
  } catch (err) {
    const e = toCniError(err);
    report.error = { message: e.message, details: e.details };
    if (node && query.by !== "retained" && query.by !== "pools") {
      report.node = await nodeView(query, node, [`Milo's ${askedOf(query)}: ${e.message}`]);
      const findings = await findingsFor(query, node);
      if (findings) report.findings = findings;
    }
  } finally {
    report.requests = milo?.requests ?? 0;
    milo?.close();
  }
  return report;
}

/** What a query asks Milo for, in words. */
function askedOf(q: ShowQuery): string {
  if (q.by === "node") return `claims of node ${q.node}`;
  if (q.by === "pod") return `claims of pod ${q.namespace}/${q.name}`;
  return q.by === "address" ? `claims holding ${q.address}` : "retained allocations";
}

/**
 * What this node's last verification found wrong that `query` names: by
 * address, those of the address; by pod, those of the pod; by node, all of
 * this node's (none for another node).
 */
async function findingsFor(query: ShowQuery, node: NodeConfig): Promise<Findings | undefined> {
  const f = (await readState(stateFileOf(node), Date.now()).catch(() => undefined))?.findings;
  if (
    !f || query.by === "retained" || query.by === "pools" ||
    (query.by === "node" && query.node !== node.node)
  ) {
    return undefined;
  }
  const ip = query.by === "address" ? parseIp(query.address) : undefined;
  const names = (text: string | undefined) => {
    if (query.by === "address") return !!text && sameIp(text, ip!);
    if (query.by === "pod") return !!text?.includes(`pod=${query.namespace}/${query.name} `);
    return true;
  };
  const duplicates = f.duplicates.filter((d) => names(query.by === "pod" ? d.holder : d.address));
  const missing = f.missing.filter((m) => query.by !== "pod" && names(m.address));
  return duplicates.length || missing.length ? { at: f.at, duplicates, missing } : undefined;
}

function sameIp(text: string, ip: NonNullable<ReturnType<typeof parseIp>>): boolean {
  const got = parseIp(text.split("/")[0]);
  return !!got && got.family === ip.family && ipValue(got) === ipValue(ip);
}

/** Milo's 403 to the IPPool LIST, as what the token lacks. */
function poolsRefused(err: unknown): never {
  const e = toCniError(err);
  if (e.outcome !== "auth" || !/: HTTP 403\b/.test(e.details)) throw err;
  throw new CniError(
    "auth",
    "Milo forbids this token to list ippools (403): the pools' utilisation needs it",
    `${e.details}; grant the token's role list on ippools (group ipam.miloapis.com, ` +
      "cluster-scoped), or ask the platform for the pools' utilisation",
  );
}

/** Milo's 403 to the IPAllocation LIST, as what the token lacks. */
function allocationsRefused(err: unknown): never {
  const e = toCniError(err);
  if (e.outcome !== "auth" || !/: HTTP 403\b/.test(e.details)) throw err;
  throw new CniError(
    "auth",
    "Milo forbids this token to list ipallocations (403): retained addresses need it",
    `${e.details}; grant the token's role list on ipallocations in milo.namespace (group ` +
      "ipam.miloapis.com), or use show by pod or node",
  );
}
