/**
 * `milo-ipam sweep`: the cluster-side safety net. One run compares Milo's
 * claims of one cluster with that cluster's Kubernetes API and releases the
 * leases whose pods are gone (by pod UID, never by name).
 *
 * A claim is a candidate when it records a pod UID and no pod (or mirror pod)
 * with that UID exists, or the node it records is not in the node list. A
 * candidate is released only when it was a candidate in two observations at
 * least `interval` apart, its pod was absent from both pod lists, it is older
 * than `grace` and older than the run, and just before the DELETE a fresh GET
 * of the pod by namespace/name shows it gone (or with another UID) and a fresh
 * GET of the claim shows the same uid (the DELETE carries it as a
 * precondition). Brakes (an empty pod or node list while the cluster has
 * claims, any list error, more candidates than `maxRelease`) stop the run
 * before anything is released. A claim whose pod may be a static pod of a
 * node that still exists (named `<name>-<node>`, its mirror pod missing) is
 * left to that node's reconcile.
 */
import { clusterSelector, holderOf } from "./claims.ts";
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from "./config.ts";
import { toCniError } from "./errors.ts";
import { type KubeClient, podHasUid } from "./kube.ts";
import type { MiloClient, Release } from "./milo.ts";
import { type IPClaim, MAX_LIST_BYTES } from "./milo_objects.ts";
import {
  type Action,
  emptyReport,
  EXIT,
  formatMaxRelease,
  type MaxRelease,
  type Reason,
  type SweepReport,
  type SweepRow,
} from "./sweep_report.ts";
import { after } from "./timers.ts";

/** Everything one run needs. */
export interface SweepOptions {
  cluster: string;
  milo: MiloClient;
  kube: KubeClient;
  apply: boolean;
  graceMs: number;
  intervalMs: number;
  maxRelease: MaxRelease;
  /** Budget of one Milo operation (a LIST, or one claim's GET and DELETE). */
  operationMs: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
  /** Candidates re-checked at once; default 8. */
  concurrency?: number;
}

interface Candidate {
  claim: IPClaim;
  podUid: string;
  reason: Reason;
  podExists: boolean;
}

interface Observation {
  at: number;
  claims: Map<string, IPClaim>;
  foreign: number;
  withoutPodUid: number;
  pods: number;
  nodes: number;
  /** Nodes whose `Ready` condition is not `True` (unreachable, or failing). */
  notReady: Set<string>;
  candidates: Map<string, Candidate>;
}

/** A safety brake: the run stops and releases nothing. */
class Brake extends Error {}

/** One sweep run: observe, wait `intervalMs`, observe again, decide, re-check and release. */
export async function sweep(o: SweepOptions): Promise<SweepReport> {
  const now = o.now ?? Date.now;
  const start = now();
  const report = emptyReport(o, start);
  const finish = (outcome: SweepReport["outcome"], message: string) => {
    report.outcome = outcome;
    report.exitCode = EXIT[outcome];
    report.message = message;
    for (const r of report.rows) report.totals[totalKey(r.action)]++;
    report.totals.candidates = report.rows.length;
    report.requests = { milo: o.milo.requests, kubernetes: o.kube.requests };
    report.durationMs = now() - start;
    return report;
  };
  try {
    const first = await observe(o, now, report);
    let second = first;
    if (first.candidates.size) {
      await (o.sleep ?? after)(o.intervalMs);
      second = await observe(o, now, report);
    }
    const pending = decide(o, start, first, second, report);
    const limit = limitOf(o.maxRelease, second.claims.size);
    report.settings.maxReleaseLimit = limit;
    if (second.candidates.size > limit) {
      throw new Brake(
        `${second.candidates.size} candidates exceed --max-release ` +
          `${formatMaxRelease(o.maxRelease)} (${limit} of ${second.claims.size} claims)`,
      );
    }
    await inPool(pending, o.concurrency ?? 8, (p) => recheck(o, p.row, p.claim));
  } catch (err) {
    if (!(err instanceof Brake)) throw err;
    for (const r of report.rows) {
      if (r.action !== "kept" || !r.why) {
        Object.assign(r, { action: "kept", why: `brake: ${err.message}` });
      }
    }
    return finish("brake", `brake: ${err.message}; nothing released`);
  }
  const t = report.rows.filter((r) => r.action === "failed").length;
  const done = report.rows.filter((r) => r.action === "released" || r.action === "would-release");
  const verb = o.apply ? "released" : "dry run: would release";
  const msg = `${verb} ${done.length} of ${report.rows.length} candidate(s)` +
    (t ? `; ${t} failed` : "");
  return finish(t ? "partial" : "done", msg);
}

function totalKey(a: Action): "released" | "wouldRelease" | "kept" | "failed" {
  return a === "would-release" ? "wouldRelease" : a;
}

/** The most candidates a run may have. */
export function limitOf(m: MaxRelease, claims: number): number {
  return "count" in m ? m.count : Math.floor(m.percent * claims / 100);
}

async function listed<T>(what: string, list: () => Promise<T>): Promise<T> {
  try {
    return await list();
  } catch (err) {
    const e = toCniError(err);
    throw new Brake(`${what} failed: ${e.message}${e.details ? ` (${e.details})` : ""}`);
  }
}

/** One observation: Milo's claims first, then pods and nodes (a claim's pod precedes it). */
async function observe(
  o: SweepOptions,
  now: () => number,
  report: SweepReport,
): Promise<Observation> {
  const selector = clusterSelector(o.cluster);
  const milo = o.milo.withDeadline(Date.now() + o.operationMs);
  const claims = await listed(
    "the Milo LIST of the cluster's claims",
    () => milo.listClaims(selector, MAX_LIST_BYTES),
  );
  const [pods, nodes] = await Promise.all([
    listed("the Kubernetes pod list", () => o.kube.listPods()),
    listed("the Kubernetes node list", () => o.kube.listNodes()),
  ]);
  const at = now();
  const uids = new Set(pods.flatMap((p) => p.mirrorUid ? [p.uid, p.mirrorUid] : [p.uid]));
  const nodeSet = new Set(nodes.map((n) => n.name));
  const obs: Observation = {
    at,
    claims: new Map(),
    foreign: 0,
    withoutPodUid: 0,
    pods: pods.length,
    nodes: nodes.length,
    notReady: new Set(nodes.filter((n) => !n.ready).map((n) => n.name)),
    candidates: new Map(),
  };
  for (const claim of claims) {
    const h = holderOf(claim);
    if (h.cluster !== o.cluster) {
      obs.foreign++;
      continue;
    }
    obs.claims.set(claim.metadata.name, claim);
    if (!h.podUid) {
      obs.withoutPodUid++;
      continue;
    }
    const podGone = !uids.has(h.podUid);
    const nodeGone = h.node !== undefined && !nodeSet.has(h.node);
    if (!podGone && !nodeGone) continue;
    const reason = podGone && nodeGone ? "pod-and-node-gone" : podGone ? "pod-gone" : "node-gone";
    obs.candidates.set(claim.metadata.name, {
      claim,
      podUid: h.podUid,
      reason,
      podExists: !podGone,
    });
  }
  report.observations.push({
    at: new Date(at).toISOString(),
    claims: obs.claims.size,
    pods: obs.pods,
    nodes: obs.nodes,
    candidates: obs.candidates.size,
  });
  Object.assign(report.totals, {
    claims: obs.claims.size,
    foreign: obs.foreign,
    withoutPodUid: obs.withoutPodUid,
  });
  if (obs.claims.size && (!obs.pods || !obs.nodes)) {
    throw new Brake(
      `the Kubernetes ${obs.pods ? "node" : "pod"} list is empty while the cluster has ` +
        `${obs.claims.size} claim(s)`,
    );
  }
  return obs;
}

interface Pending {
  row: SweepRow;
  claim: IPClaim;
}

/** Adds a row per candidate of either observation; answers those that may be released. */
function decide(
  o: SweepOptions,
  start: number,
  first: Observation,
  second: Observation,
  report: SweepReport,
): Pending[] {
  const pending: Pending[] = [];
  const names = new Set([...first.candidates.keys(), ...second.candidates.keys()]);
  for (const name of [...names].sort()) {
    const c1 = first.candidates.get(name), c2 = second.candidates.get(name);
    const c = (c2 ?? c1)!;
    const h = holderOf(c.claim);
    const created = Date.parse(c.claim.metadata.creationTimestamp ?? "");
    const row: SweepRow = {
      claim: name,
      uid: c.claim.metadata.uid ?? null,
      address: c.claim.status.allocatedCIDR ?? c.claim.status.address ?? null,
      pod: h.pod ?? null,
      podUid: c.podUid,
      node: h.node ?? null,
      reason: c.reason,
      ageMs: Number.isNaN(created) ? null : second.at - created,
      action: "kept",
      why: "",
    };
    report.rows.push(row);
    const why = keptBecause(o, start, c1, c2, first, second, created, h.pod) ??
      staticPodRule(c.reason, h.pod, h.node) ??
      notReadyRule(c.reason, h.node, first, second);
    if (why) row.why = why;
    else pending.push({ row, claim: c.claim });
  }
  return pending;
}

/** Why a candidate is kept without a re-check, or null when it may be released. */
function keptBecause(
  o: SweepOptions,
  start: number,
  c1: Candidate | undefined,
  c2: Candidate | undefined,
  first: Observation,
  second: Observation,
  created: number,
  pod: string | undefined,
): string | null {
  if (!c2) {
    return c1 && second.claims.has(c1.claim.metadata.name)
      ? "not a candidate in the second observation (pod or node seen again)"
      : "claim gone from Milo by the second observation";
  }
  if (!c1 || c1.claim.metadata.uid !== c2.claim.metadata.uid) {
    return "a candidate in the second observation only";
  }
  if (c1.podExists || c2.podExists) return `pod ${c2.podUid} exists; only its node is gone`;
  if (second.at - first.at < o.intervalMs) return "observations less than --interval apart";
  if (!c2.claim.metadata.uid) return "the claim has no uid to release it by";
  if (Number.isNaN(created)) return "the claim has no creation time";
  // creationTimestamp counts whole seconds: a claim stamped in the start's second may be newer.
  if (created >= Math.floor(start / 1000) * 1000) return "created after the run started";
  if (second.at - created < o.graceMs) return "younger than --grace";
  if (!podRef(pod)) return "no pod namespace/name recorded to re-check";
  return null;
}

/**
 * Keeps a claim whose pod may be a static pod on a node that is still there:
 * kubelet names a static pod `<name>-<node name>` and runs it whether or not
 * its mirror pod could be made in the API, so an absent UID proves nothing.
 * The node's own reconcile judges such claims by its result caches.
 */
function staticPodRule(reason: Reason, pod?: string, node?: string): string | null {
  if (reason !== "pod-gone" || !node) return null;
  const name = podRef(pod)?.name;
  return name?.endsWith(`-${node.toLowerCase()}`)
    ? `may be a static pod of ${node} (named <name>-<node>): left to that node's reconcile`
    : null;
}

/**
 * Keeps a claim whose node is there but not Ready in either observation: a
 * pod deleted from the API while its node is unreachable (force-deleted, a
 * partition) may still run there, on its address. That node's reconcile
 * judges it once the node is back; a node deleted from the API is gone.
 */
function notReadyRule(
  reason: Reason,
  node: string | undefined,
  first: Observation,
  second: Observation,
): string | null {
  if (reason !== "pod-gone" || !node) return null;
  return first.notReady.has(node) || second.notReady.has(node)
    ? `its node ${node} is not Ready: its pods may still run there; left to that node's reconcile`
    : null;
}

function podRef(pod: string | undefined): { namespace: string; name: string } | null {
  const [namespace, name, ...rest] = (pod ?? "").split("/");
  if (rest.length || !DNS1123_LABEL.test(namespace) || !DNS1123_SUBDOMAIN.test(name ?? "")) {
    return null;
  }
  return { namespace, name };
}

/** The re-check right before release: the pod by namespace/name, then the claim by uid. */
async function recheck(o: SweepOptions, row: SweepRow, claim: IPClaim): Promise<void> {
  const ref = podRef(row.pod ?? undefined)!;
  try {
    const pod = await o.kube.getPod(ref.namespace, ref.name);
    if (pod && podHasUid(pod, row.podUid)) {
      row.why = `pod exists on re-check (node ${pod.nodeName ?? "none"}, phase ${pod.phase})`;
      return;
    }
    const milo = o.milo.withDeadline(Date.now() + o.operationMs);
    const uid = claim.metadata.uid!;
    let r: Release;
    if (o.apply) r = await milo.releaseClaim(claim.metadata.name, uid);
    else {
      const current = await milo.getClaim(claim.metadata.name);
      r = !current ? "absent" : current.metadata.uid === uid ? "released" : "changed";
    }
    if (r === "absent") row.why = "claim gone from Milo on re-check";
    else if (r === "changed") row.why = "claim uid changed on re-check";
    else {
      row.action = o.apply ? "released" : "would-release";
      row.why = pod ? `pod ${row.pod} now has uid ${pod.uid}` : `pod ${row.pod} not found`;
    }
  } catch (err) {
    const e = toCniError(err);
    row.action = "failed";
    row.why = `${e.message}${e.details ? ` (${e.details})` : ""}`;
  }
}

async function inPool<T>(items: T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}
