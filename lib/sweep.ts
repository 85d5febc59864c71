/**
 * `milo-ipam sweep`: the cluster-side safety net. One run compares Milo's
 * claims of one cluster with that cluster's Kubernetes API and releases the
 * leases whose pods are gone (by pod UID, never by name).
 *
 * An observation lists the pods and nodes, then reads Milo's claims of the
 * cluster as a stream, judging each as it comes and keeping only the
 * candidates: a claim that records a pod UID no pod (or mirror pod) has, or a
 * node the node list lacks. A candidate is released only when it was one in
 * two observations at least `interval` apart, its pod absent from both pod
 * lists (the second taken after the first claim list showed the claim, and a
 * pod precedes its claims), it is older than `grace` and older than the run,
 * both on Milo's clock (a Milo answer without a usable `Date` keeps every
 * candidate), and just before the DELETE a fresh GET of the pod by
 * namespace/name shows it gone (or with another UID) and a fresh GET of the
 * claim shows the same uid.
 * Brakes (an empty pod or node list while the cluster has claims, any list
 * error, the claims of more pods to release than `maxRelease`) stop the run
 * before anything is released. Pods that may still run without their API
 * object (on a node that is not Ready; a static pod without its mirror) are
 * left to their node's reconcile, also when the API does not know the
 * claim's node (lib/sweep_rules.ts).
 */
import { clusterSelector } from "./claims.ts";
import { clashOf, otherUidOf } from "./cluster_uid.ts";
import { holderOf, sameNode } from "./holder.ts";
import { toCniError } from "./errors.ts";
import { type KubeClient, podHasUid } from "./kube.ts";
import { keptSize, type ListBound } from "./list_bound.ts";
import type { MiloClient, Release } from "./milo.ts";
import { ageOnMilo, claimListTally, createdOnMilo, type IPClaim } from "./milo_objects.ts";
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
import {
  holdUntil,
  type Judged,
  knownNode,
  mayStillRun,
  NODE_MONITOR_GRACE_MS,
  type NodeView,
  podRef,
  TERMINATION_GRACE_MS,
} from "./sweep_rules.ts";
import { after } from "./timers.ts";

/** Everything one run needs. */
export interface SweepOptions {
  cluster: string;
  /** The node config's `clusterUid`, when it names one: it must be this API's cluster's. */
  clusterUid?: string;
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
  /**
   * The termination grace a pod gone from the API on a node shown Ready is
   * given before its claim goes (its re-created namesake's when longer);
   * default {@link TERMINATION_GRACE_MS}.
   */
  terminationGraceMs?: number;
  /** How long a partitioned node still shows Ready; default {@link NODE_MONITOR_GRACE_MS}. */
  nodeMonitorGraceMs?: number;
  /** Candidates re-checked at once; default 8. */
  concurrency?: number;
  /** What an observation may keep of its candidates; default {@link claimListTally}'s. */
  candidateBound?: ListBound;
}

/**
 * A `P%` `--max-release` never allows fewer pods than this, so a small
 * cluster's ordinary loss (one pod, dual-stack or not, or two) never trips
 * it, while a bad pod list of a small cluster releases no more than this.
 */
export const MAX_RELEASE_FLOOR = 2;

/** Why every candidate is kept when Milo's clock is unknown. */
const NO_DATE = "Milo's LIST answer carried no usable Date header: the claim's age on Milo's " +
  "clock is unknown";

/** What the sweep keeps of a candidate claim. */
interface Candidate extends Judged {
  name: string;
  uid?: string;
  /** Creation and age on Milo's clock ({@link ageOnMilo}: NaN when unknown). */
  created: number;
  ageMs: number;
  address: string | null;
  podUid: string;
  reason: Reason;
}

interface Observation extends NodeView {
  /** The sweeper's clock as the observation started. */
  at: number;
  /** The sweeper's clock as Milo's first claim was read (or its list, when empty). */
  read: number;
  /** Milo's clock at its LIST answer (its `Date`; NaN without one). */
  miloAt: number;
  claims: number;
  foreign: number;
  withoutPodUid: number;
  pods: number;
  candidates: Map<string, Candidate>;
  /** Candidates of the previous observation that this one's claim list held. */
  seen: Set<string>;
  /** Pods with claims: live ones the claims record, and the pod UIDs of candidates. */
  claimedPods: number;
}

/** A safety brake: the run stops and releases nothing. */
class Brake extends Error {}

/**
 * One sweep run: observe, wait `intervalMs`, observe again, decide, re-check
 * and release; then how close the project is to its IPClaim quota, where
 * Milo says (one GET, lib/milo_quota.ts).
 */
export async function sweep(o: SweepOptions): Promise<SweepReport> {
  const report = await run(o);
  report.quota = await o.milo.withDeadline(Date.now() + o.operationMs).quotaUsage();
  report.requests.milo = o.milo.requests;
  return report;
}

async function run(o: SweepOptions): Promise<SweepReport> {
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
    const uid = await listed(
      "the kube-system namespace (its UID names the cluster)",
      () => o.kube.clusterUid(),
    );
    if (o.clusterUid !== undefined && o.clusterUid !== uid) {
      throw new Brake(
        `the node config's clusterUid ${o.clusterUid} is not this cluster's (kube-system ` +
          `uid ${uid}): it is another cluster's node config`,
      );
    }
    const first = await observe(o, now, report, uid);
    let second = first;
    if (first.candidates.size) {
      // A pod gone from a node shown Ready: a partition's first seconds look Ready too.
      const ready = [...first.candidates.values()].some((c) => mayBeEnding(c, first));
      const monitor = o.nodeMonitorGraceMs ?? NODE_MONITOR_GRACE_MS;
      await (o.sleep ?? after)(ready ? Math.max(o.intervalMs, monitor) : o.intervalMs);
      second = await observe(o, now, report, uid, first);
    }
    // The run's start on Milo's clock, at the earliest: the time from the start to the first
    // claim read includes the moment Milo dated its answer.
    const miloStart = first.miloAt - (first.read - start);
    const pending = decide(o, miloStart, first, second, report);
    const pods = new Set(pending.map((p) => p.c.podUid)).size;
    const limit = limitOf(o.maxRelease, second.claimedPods);
    Object.assign(report.totals, { pods: second.claimedPods, podsToRelease: pods });
    report.settings.maxReleaseLimit = limit;
    if (pods > limit) {
      throw new Brake(
        `the claims of ${pods} pods would be released, more than --max-release ` +
          `${formatMaxRelease(o.maxRelease)} allows (${limit} of the ${second.claimedPods} ` +
          "pods with claims)",
      );
    }
    await inPool(pending, o.concurrency ?? 8, (p) => recheck(o, p.row, p.c, second.at, now));
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

/**
 * The most pods whose claims a run may release: `N`, or `P%` of the pods
 * with claims but never fewer than {@link MAX_RELEASE_FLOOR}.
 */
export function limitOf(m: MaxRelease, pods: number): number {
  return "count" in m ? m.count : Math.max(MAX_RELEASE_FLOOR, Math.floor(m.percent * pods / 100));
}

async function listed<T>(what: string, list: () => Promise<T>): Promise<T> {
  try {
    return await list();
  } catch (err) {
    const e = toCniError(err);
    throw new Brake(`${what} failed: ${e.message}${e.details ? ` (${e.details})` : ""}`);
  }
}

/**
 * One observation: the pods and nodes, then Milo's claims of the cluster,
 * each judged as it is read; only the candidates are kept (bounded like a
 * node's list: {@link claimListTally}).
 */
async function observe(
  o: SweepOptions,
  now: () => number,
  report: SweepReport,
  uid: string,
  previous?: Observation,
): Promise<Observation> {
  const [pods, nodes] = await Promise.all([
    listed("the Kubernetes pod list", () => o.kube.listPods()),
    listed("the Kubernetes node list", () => o.kube.listNodes()),
  ]);
  const obs: Observation = {
    at: now(),
    read: NaN,
    miloAt: NaN,
    claims: 0,
    foreign: 0,
    withoutPodUid: 0,
    pods: pods.length,
    nodes: new Set(nodes.map((n) => n.name)),
    notReady: new Set(nodes.filter((n) => !n.ready).map((n) => n.name)),
    readySince: new Map(nodes.map((n) => [n.name, n.readySince])),
    candidates: new Map(),
    seen: new Set(),
    claimedPods: 0,
  };
  /** Every pod UID: has a claim recorded it yet? */
  const claimed = new Map<string, boolean>();
  /**
   * Mirror pods by their static pod's UID: each vouches only for a claim that
   * records its own namespace/name and node (a user may annotate any pod).
   */
  const mirrors = new Map<string, { pod: string; node?: string }>();
  for (const p of pods) {
    claimed.set(p.uid, false);
    if (p.mirrorUid) {
      mirrors.set(p.mirrorUid, { pod: `${p.namespace}/${p.name}`, node: p.nodeName });
    }
  }
  const judged = !!pods.length && !!nodes.length;
  const tally = claimListTally("the sweep's candidates of Milo's IPClaimList", o.candidateBound);
  const gonePods = new Set<string>();
  const clash = new Map<string, number>();
  const judge = (claim: IPClaim, serverTime: number) => {
    if (Number.isNaN(obs.read)) obs.read = now();
    const h = holderOf(claim);
    if (h.cluster !== o.cluster) return void obs.foreign++;
    obs.claims++;
    const other = otherUidOf(claim, uid);
    if (other) return void clash.set(other, (clash.get(other) ?? 0) + 1);
    const name = claim.metadata.name;
    if (previous?.candidates.has(name)) obs.seen.add(name);
    if (!h.podUid) return void obs.withoutPodUid++;
    if (!judged) return;
    const m = mirrors.get(h.podUid);
    if (m && m.pod === h.pod && sameNode(m.node, h.node) && !claimed.has(h.podUid)) {
      claimed.set(h.podUid, false);
    }
    const live = claimed.get(h.podUid);
    if (live === false) {
      claimed.set(h.podUid, true);
      obs.claimedPods++;
    }
    const known = h.node === undefined ? undefined : knownNode(obs.nodes, h.node);
    const nodeGone = h.node !== undefined && known === undefined;
    if (live !== undefined && !nodeGone) return;
    const c: Candidate = {
      name,
      uid: claim.metadata.uid,
      created: createdOnMilo(claim),
      ageMs: ageOnMilo(claim, serverTime),
      address: claim.status.allocatedCIDR ?? claim.status.address ?? null,
      pod: h.pod,
      podUid: h.podUid,
      node: h.node,
      known,
      reason: live === undefined ? (nodeGone ? "pod-and-node-gone" : "pod-gone") : "node-gone",
      podExists: live !== undefined,
    };
    tally.keep(keptSize(c));
    obs.candidates.set(name, c);
    if (live === undefined) gonePods.add(h.podUid);
  };
  const milo = o.milo.withBudget(o.operationMs);
  obs.miloAt = await listed(
    "the Milo LIST of the cluster's claims",
    () => milo.scanClaims(clusterSelector(o.cluster), judge),
  );
  if (Number.isNaN(obs.read)) obs.read = now();
  obs.claimedPods += gonePods.size;
  report.observations.push({
    at: new Date(obs.at).toISOString(),
    claims: obs.claims,
    pods: obs.pods,
    nodes: obs.nodes.size,
    candidates: obs.candidates.size,
  });
  Object.assign(report.totals, {
    claims: obs.claims,
    foreign: obs.foreign,
    withoutPodUid: obs.withoutPodUid,
  });
  const why = clashOf(o.cluster, uid, clash);
  if (why) throw new Brake(why);
  if (!judged && obs.claims) {
    throw new Brake(
      `the Kubernetes ${obs.pods ? "node" : "pod"} list is empty while the cluster has ` +
        `${obs.claims} claim(s)`,
    );
  }
  return obs;
}

interface Pending {
  row: SweepRow;
  c: Candidate;
}

/** Adds a row per candidate of either observation; answers those that may be released. */
function decide(
  o: SweepOptions,
  miloStart: number,
  first: Observation,
  second: Observation,
  report: SweepReport,
): Pending[] {
  const pending: Pending[] = [];
  const names = new Set([...first.candidates.keys(), ...second.candidates.keys()]);
  for (const name of [...names].sort()) {
    const c1 = first.candidates.get(name), c2 = second.candidates.get(name);
    const c = (c2 ?? c1)!;
    const row: SweepRow = {
      claim: name,
      uid: c.uid ?? null,
      address: c.address,
      pod: c.pod ?? null,
      podUid: c.podUid,
      node: c.node ?? null,
      reason: c.reason,
      ageMs: Number.isNaN(c.ageMs) ? null : c.ageMs,
      action: "kept",
      why: "",
    };
    report.rows.push(row);
    const why = keptBecause(o, miloStart, c1, c2, first, second) ??
      mayStillRun(c, first, second, o.nodeMonitorGraceMs ?? NODE_MONITOR_GRACE_MS);
    if (why) row.why = why;
    else pending.push({ row, c });
  }
  return pending;
}

/**
 * Why a candidate is kept without a re-check, or null when it may be
 * released. Its creation and age are told on Milo's clock alone, the
 * observations' interval on the sweeper's.
 */
function keptBecause(
  o: SweepOptions,
  miloStart: number,
  c1: Candidate | undefined,
  c2: Candidate | undefined,
  first: Observation,
  second: Observation,
): string | null {
  if (!c2) {
    return c1 && second.seen.has(c1.name)
      ? "not a candidate in the second observation (pod or node seen again)"
      : "claim gone from Milo by the second observation";
  }
  if (!c1 || c1.uid !== c2.uid) return "a candidate in the second observation only";
  if (c1.podExists || c2.podExists) return `pod ${c2.podUid} exists; only its node is gone`;
  if (second.at - first.at < o.intervalMs) return "observations less than --interval apart";
  if (!c2.uid) return "the claim has no uid to release it by";
  if (Number.isNaN(c2.created)) return "the claim has no creation time";
  if (Number.isNaN(c2.ageMs) || Number.isNaN(miloStart)) return NO_DATE;
  // creationTimestamp counts whole seconds: a claim stamped in the start's second may be newer.
  if (c2.created >= Math.floor(miloStart / 1000) * 1000) return "created after the run started";
  if (c2.ageMs < o.graceMs) return "younger than --grace";
  if (!podRef(c2.pod)) return "no pod namespace/name recorded to re-check";
  return null;
}

/**
 * True when a candidate's pod is gone from the API while the node the claim
 * records shows Ready: its kubelet may still be ending it (lib/sweep_rules.ts).
 */
function mayBeEnding(c: Candidate, obs: NodeView): boolean {
  return !c.podExists && c.known !== undefined && !obs.notReady.has(c.known);
}

/**
 * The re-check right before release: the pod by namespace/name (for a pod
 * gone from a node shown Ready, again once its kubelet has certainly ended
 * it: {@link holdUntil}), then the claim by uid.
 */
async function recheck(
  o: SweepOptions,
  row: SweepRow,
  c: Candidate,
  secondAt: number,
  now: () => number,
): Promise<void> {
  const ref = podRef(c.pod)!;
  try {
    let pod = await o.kube.getPod(ref.namespace, ref.name);
    if (!(pod && podHasUid(pod, c.podUid, c.node)) && c.known !== undefined && !c.podExists) {
      const graceMs = o.terminationGraceMs ?? TERMINATION_GRACE_MS;
      const until = holdUntil(secondAt, graceMs, pod?.graceS);
      if (now() < until) {
        await (o.sleep ?? after)(until - now());
        pod = await o.kube.getPod(ref.namespace, ref.name);
      }
    }
    if (pod && podHasUid(pod, c.podUid, c.node)) {
      row.why = `pod exists on re-check (node ${pod.nodeName ?? "none"}, phase ${pod.phase})`;
      return;
    }
    const milo = o.milo.withBudget(o.operationMs);
    const notes: string[] = [];
    const duplicates: string[] = [];
    let r: Release;
    if (o.apply) {
      r = await milo.releaseClaim(c.name, c.uid!, {
        note: (w) => notes.push(w),
        duplicate: (d) => duplicates.push(`${d.address}: ${d.holder} runs on it; ${d.now}`),
      });
    } else {
      const current = await milo.getClaim(c.name);
      r = !current ? "absent" : current.metadata.uid === c.uid ? "released" : "changed";
    }
    if (duplicates.length) {
      // Two sandboxes on one address: never reported as a success.
      row.action = "failed";
      row.why = `DUPLICATE address: ${duplicates.join("; ")}`;
    } else if (r === "absent") row.why = "claim gone from Milo on re-check";
    else if (r === "changed") {
      row.why = ["claim uid changed on re-check", ...notes].join(": ");
    } else {
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
