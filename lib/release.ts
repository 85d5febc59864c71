/**
 * `milo-ipam release ADDRESS`: the one claim that holds an address, released
 * by hand once its holder is proven gone. Dry run unless `apply`. The claim
 * must be the only one holding the address. Two ways to prove the holder
 * gone, one of which the operator chooses:
 *
 * - **The cluster's Kubernetes API** (`kube`): the claim is of the node
 *   config's cluster, and the pod it records is absent by UID (gone, or
 *   another pod of its name) in two observations, judged by the sweep's rules
 *   (lib/sweep_rules.ts): never a possible static pod, nor one of a node that
 *   is not Ready in either, nor (while any node is not Ready) one whose node
 *   the API does not know; a pod gone from a node shown Ready only once the
 *   observations are the node monitor's grace apart and its termination grace
 *   has passed since, when a last GET still finds it gone. The state that
 *   makes this true for a live pod: a kubelet cut off from the API for longer
 *   than the node monitor's grace on a node the API still shows Ready (the
 *   node controller not running): the sweep's own exposure.
 * - **The operator's word** (`holder`): the claim records exactly that pod
 *   UID (a later holder of the address has another), is older than `quiet`,
 *   and no claim of its node was made within `quiet` (a node that still
 *   starts pods makes claims), on Milo's clock. The state that makes this true
 *   for a live pod: the operator names a live pod's UID on a node that
 *   started no pod within `quiet`. Use it when the cluster's API is gone.
 *
 * Either way the release is by the claim's uid (a fresh GET finds the same
 * object, still recording that pod UID), as every other release path's.
 */
import { holderOf } from "./holder.ts";
import { nodeSelector } from "./claims.ts";
import { CniError, toCniError } from "./errors.ts";
import { type Ip, parseIp } from "./ip.ts";
import type { KubeClient, KubeNode, KubePod } from "./kube.ts";
import { podHasUid } from "./kube.ts";
import type { MiloClient } from "./milo.ts";
import { createdOnMilo, type IPClaim } from "./milo_objects.ts";
import { holds } from "./show_retained.ts";
import { holdUntil, knownNode, mayStillRun, type NodeView, podRef } from "./sweep_rules.ts";

/** How the holder is proven gone. */
export type Proof =
  | {
    kind: "kube";
    kube: KubeClient;
    /** The cluster the API is of (the node config's): the claim must be its. */
    cluster: string;
    intervalMs: number;
    nodeMonitorGraceMs: number;
    terminationGraceMs: number;
  }
  | { kind: "holder"; podUid: string; quietMs: number };

/** What one run needs. */
export interface ReleaseOptions {
  address: string;
  milo: MiloClient;
  proof: Proof;
  apply: boolean;
  operationMs: number;
  sleep: (ms: number) => Promise<void>;
  now?: () => number;
}

/** What `milo-ipam release` prints (`--output json`). */
export interface ReleaseReport {
  kind: "ReleaseReport";
  version: 1;
  address: string;
  apply: boolean;
  proof: "kube" | "holder";
  outcome: "released" | "would-release" | "refused" | "gone" | "error";
  exitCode: number;
  /** The claim holding the address, as Milo recorded it. */
  claim: {
    name: string;
    uid?: string;
    cluster?: string;
    node?: string;
    pod?: string;
    podUid?: string;
    address?: string;
    created?: string;
  } | null;
  /** What was checked, in order, each with what it found. */
  checks: string[];
  message: string;
  requests: { milo: number; kubernetes: number };
  error: { message: string; details: string } | null;
}

/** Exit codes: released (or would be), an error, refused (its holder may live). */
export const RELEASE_EXIT = { released: 0, "would-release": 0, gone: 0, error: 1, refused: 2 };

/** A refusal: nothing is released. */
class Refusal extends Error {}

/** One run: find the claim, prove its holder gone, release it by uid. */
export async function releaseAddress(o: ReleaseOptions): Promise<ReleaseReport> {
  const report: ReleaseReport = {
    kind: "ReleaseReport",
    version: 1,
    address: o.address,
    apply: o.apply,
    proof: o.proof.kind,
    outcome: "refused",
    exitCode: RELEASE_EXIT.refused,
    claim: null,
    checks: [],
    message: "",
    requests: { milo: 0, kubernetes: 0 },
    error: null,
  };
  const end = (outcome: ReleaseReport["outcome"], message: string) => {
    report.outcome = outcome;
    report.exitCode = RELEASE_EXIT[outcome];
    report.message = message;
    report.requests = {
      milo: o.milo.requests,
      kubernetes: o.proof.kind === "kube" ? o.proof.kube.requests : 0,
    };
    return report;
  };
  try {
    const ip = parseIp(o.address);
    if (!ip) throw new CniError("config", `${o.address}: not an IP address`);
    const claim = await theClaim(o, ip);
    const h = holderOf(claim);
    report.claim = {
      name: claim.metadata.name,
      uid: claim.metadata.uid,
      cluster: h.cluster,
      node: h.node,
      pod: h.pod,
      podUid: h.podUid,
      address: claim.status.allocatedCIDR ?? claim.status.address,
      created: claim.metadata.creationTimestamp,
    };
    if (!claim.metadata.uid) throw new Refusal("the claim has no uid to release it by");
    if (!h.podUid) throw new Refusal("the claim records no pod UID: its holder cannot be checked");
    if (o.proof.kind === "kube") await podGone(o, o.proof, claim, report.checks);
    else await holderNamed(o, o.proof, claim, report.checks);
    if (!o.apply) {
      return end("would-release", `dry run: would release claim ${claim.metadata.name}; --apply`);
    }
    const milo = o.milo.withDeadline(Date.now() + o.operationMs);
    const r = await milo.releaseIf(
      claim.metadata.name,
      (c) => c.metadata.uid === claim.metadata.uid && holderOf(c).podUid === h.podUid,
      { note: (w) => report.checks.push(w) },
    );
    if (r === "absent") return end("gone", `claim ${claim.metadata.name} was gone already`);
    if (r === "changed") {
      throw new Refusal(`claim ${claim.metadata.name} is another object now: left alone`);
    }
    return end("released", `released claim ${claim.metadata.name} (${report.claim.address})`);
  } catch (err) {
    if (err instanceof Refusal) return end("refused", `refused: ${err.message}; nothing released`);
    const e = toCniError(err);
    report.error = { message: e.message, details: e.details };
    return end("error", `error: ${e.message}`);
  }
}

/**
 * The one claim whose lease holds `ip`: one LIST of the namespace (an address
 * is no label), read as a stream, keeping only the claims that hold it.
 */
async function theClaim(o: ReleaseOptions, ip: Ip): Promise<IPClaim> {
  const milo = o.milo.withDeadline(Date.now() + o.operationMs);
  const holding: IPClaim[] = [];
  await milo.scanClaims("", (c) => {
    if (holds(c.status, ip)) holding.push(c);
  });
  if (!holding.length) throw new Refusal(`no claim holds ${o.address}`);
  if (holding.length > 1) {
    throw new Refusal(
      `${holding.length} claims hold ${o.address} (${
        holding.map((c) => c.metadata.name).join(", ")
      }): two address spaces, or two holders; milo-ipam show ${o.address} names them`,
    );
  }
  return holding[0];
}

/** The operator's word: the pod UID named, and the claim's node quiet on Milo's clock. */
async function holderNamed(
  o: ReleaseOptions,
  p: Extract<Proof, { kind: "holder" }>,
  claim: IPClaim,
  checks: string[],
): Promise<void> {
  const h = holderOf(claim);
  if (h.podUid !== p.podUid) {
    throw new Refusal(
      `the claim records pod ${h.pod ?? "?"} of UID ${h.podUid}, not --holder ${p.podUid}: ` +
        "the address has another holder than the one named",
    );
  }
  checks.push(`the claim records pod UID ${p.podUid}, as --holder names`);
  if (!h.cluster || !h.node) throw new Refusal("the claim records no cluster and node to check");
  const milo = o.milo.withDeadline(Date.now() + o.operationMs);
  const { items, serverTime } = await milo.listClaimsAt(nodeSelector(h.cluster, h.node));
  if (!Number.isFinite(serverTime)) {
    throw new Refusal("Milo's LIST answer carried no Date: the claims' ages are unknown");
  }
  const newest = Math.max(...items.map(createdOnMilo), createdOnMilo(claim));
  const ageS = Math.round((serverTime - newest) / 1000);
  if (!Number.isFinite(newest) || serverTime - newest < p.quietMs) {
    throw new Refusal(
      `node ${h.node} of cluster ${h.cluster} made a claim ${
        Number.isFinite(ageS) ? `${ageS} s ago` : "at an unknown time"
      }, within --quiet: it still starts pods, and its pods may live`,
    );
  }
  checks.push(`node ${h.node}'s newest of ${items.length} claim(s) was made ${ageS} s ago`);
}

/** The API's word, by the sweep's rules: the pod gone by UID, its kubelet certain to have ended it. */
async function podGone(
  o: ReleaseOptions,
  p: Extract<Proof, { kind: "kube" }>,
  claim: IPClaim,
  checks: string[],
): Promise<void> {
  const h = holderOf(claim);
  if (h.cluster !== p.cluster) {
    throw new Refusal(
      `the claim is of cluster ${h.cluster ?? "(none)"}, and this API is cluster ${p.cluster}'s ` +
        "(the node config's): use the node config of its cluster, or --holder",
    );
  }
  const ref = podRef(h.pod);
  if (!ref) throw new Refusal("the claim records no pod namespace/name to look up");
  const now = o.now ?? Date.now;
  const observe = async () => {
    const [pod, nodes] = await Promise.all([
      p.kube.getPod(ref.namespace, ref.name),
      p.kube.listNodes(),
    ]);
    return { pod, at: now(), ...viewOf(nodes) };
  };
  const lives = (pod: KubePod | null, when: string) => {
    if (pod && podHasUid(pod, h.podUid!)) {
      throw new Refusal(
        `its holder lives: pod ${h.pod} of UID ${h.podUid} is in the API ${when} (node ${
          pod.nodeName ?? "none"
        }, phase ${pod.phase})`,
      );
    }
  };
  const first = await observe();
  lives(first.pod, "now");
  checks.push(`pod ${h.pod} of UID ${h.podUid} is not in the API`);
  await o.sleep(Math.max(p.intervalMs, p.nodeMonitorGraceMs));
  const second = await observe();
  lives(second.pod, "again");
  if (!first.nodes.size || !second.nodes.size) {
    throw new Refusal("the API lists no node: it cannot say whether the pod's node lives");
  }
  const known = h.node === undefined ? undefined : knownNode(second.nodes, h.node);
  const why = mayStillRun(
    { pod: h.pod, node: h.node, known, podExists: false },
    first,
    second,
    p.nodeMonitorGraceMs,
  );
  if (why) throw new Refusal(why);
  checks.push(`not in the API again ${Math.round((second.at - first.at) / 1000)} s later`);
  if (known !== undefined) {
    const until = holdUntil(second.at, p.terminationGraceMs, second.pod?.graceS);
    if (now() < until) await o.sleep(until - now());
    lives(await p.kube.getPod(ref.namespace, ref.name), "after its termination grace");
    checks.push(`node ${known} is Ready: its kubelet has ended the pod (its termination grace)`);
  } else {
    checks.push(`node ${h.node ?? "?"} is gone from the API, and every node is Ready`);
  }
}

/** One observation's nodes, as the sweep's rules read them. */
function viewOf(nodes: KubeNode[]): NodeView {
  return {
    nodes: new Set(nodes.map((n) => n.name)),
    notReady: new Set(nodes.filter((n) => !n.ready).map((n) => n.name)),
    readySince: new Map(nodes.map((n) => [n.name, n.readySince])),
  };
}
