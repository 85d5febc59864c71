/**
 * The sweep's rules for pods that may still run without their API object
 * (lib/sweep.ts): a static pod without its mirror pod, a pod on a node that
 * is not Ready, and either on a node the API does not know under the name the
 * claim records, are left to their node's reconcile, which sees the sandbox
 * in its result caches; a pod on a node shown Ready is released only once
 * its kubelet has certainly ended it.
 */
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from "./config.ts";

/** A candidate as these rules judge it. */
export interface Judged {
  /** `namespace/name` recorded on the claim. */
  pod?: string;
  /** The node the claim records. */
  node?: string;
  /** That node as the API knows it, if it does. */
  known?: string;
  podExists: boolean;
}

/** What one observation saw of the nodes. */
export interface NodeView {
  nodes: Set<string>;
  /** Nodes whose `Ready` condition is not `True` (unreachable, or failing). */
  notReady: Set<string>;
  /** When each node's `Ready` condition last changed, as the API wrote it. */
  readySince: Map<string, string | undefined>;
}

/**
 * The Kubernetes node controller's `--node-monitor-grace-period` (50 s since
 * Kubernetes 1.32, 40 s before) and its `--node-monitor-period` (5 s): a node
 * it still shows Ready heard from its kubelet within this long (k8s.io
 * kubernetes `pkg/controller/nodelifecycle`). A partition's first seconds
 * look Ready.
 */
export const NODE_MONITOR_GRACE_MS = 55_000;

/** The pod's own termination grace when none is known: Kubernetes' default (30 s). */
export const TERMINATION_GRACE_MS = 30_000;

/** Beyond a termination grace: the kubelet's watch, its kill and the runtime's DEL. */
export const SETTLE_MS = 10_000;

/**
 * Whether the kubelet of `c`'s node may still run `c`'s pod, gone from the
 * API while the node shows Ready (force-deleted during a partition, the
 * kubelet killing it with its termination grace once it hears): kept when
 * the node's `Ready` changed between the observations (it came back meanwhile:
 * the next run judges it), or the observations are less than `monitorMs`
 * apart (a node partitioned just before the first looks Ready until then).
 * Otherwise the second observation saw it Ready, so its kubelet heard from
 * the API after the pod was gone, and the pod is dead once its termination
 * grace has passed since (the sweep waits that long before its re-check:
 * {@link holdUntil}).
 */
export function terminatingRule(
  c: Judged,
  first: NodeView & { at: number },
  second: NodeView & { at: number },
  monitorMs: number,
): string | null {
  if (c.podExists || c.known === undefined) return null;
  const node = c.known;
  if (first.readySince.get(node) !== second.readySince.get(node)) {
    return `its node ${node} became Ready again between the observations: its kubelet may ` +
      "still be ending the pod; judged by the next run";
  }
  if (second.at - first.at < monitorMs) {
    return `its node ${node} shows Ready, but a partition's first ${
      Math.round(monitorMs / 1000)
    } s look Ready too: observations ${Math.round((second.at - first.at) / 1000)} s apart`;
  }
  return null;
}

/**
 * When a pod gone from the API on a node shown Ready at `secondAt` is
 * certainly dead: its kubelet heard from the API within the node monitor's
 * grace before then, and kills a deleted pod within its termination grace
 * (the longest of `graceMs` and the grace of a pod re-created under its name,
 * a StatefulSet's, whose template it shares), and the runtime's DEL follows
 * ({@link SETTLE_MS}). A grace of 0 waits nothing.
 */
export function holdUntil(secondAt: number, graceMs: number, recreatedGraceS?: number): number {
  const g = Math.max(graceMs, (recreatedGraceS ?? 0) * 1000);
  return g > 0 ? secondAt + g + SETTLE_MS : secondAt;
}

/** Why a candidate whose pod is gone from the API may still run, or null. */
export function mayStillRun(
  c: Judged,
  first: NodeView & { at: number },
  second: NodeView & { at: number },
  monitorMs: number,
): string | null {
  if (c.podExists) return null;
  return staticPodRule(c, first, second) ?? notReadyRule(c, first, second) ??
    terminatingRule(c, first, second, monitorMs);
}

/** The node `recorded` names as the API knows it, if it does (kubelet lowercases a hostname). */
export function knownNode(nodes: Set<string>, recorded: string): string | undefined {
  if (nodes.has(recorded)) return recorded;
  const lower = recorded.toLowerCase();
  return nodes.has(lower) ? lower : undefined;
}

/** A recorded `namespace/name` that can be put in a URL, or null. */
export function podRef(pod: string | undefined): { namespace: string; name: string } | null {
  const [namespace, name, ...rest] = (pod ?? "").split("/");
  if (rest.length || !DNS1123_LABEL.test(namespace) || !DNS1123_SUBDOMAIN.test(name ?? "")) {
    return null;
  }
  return { namespace, name };
}

/**
 * Keeps a claim whose pod may be a static pod of a node that is there:
 * kubelet names a static pod `<name>-<node name>` and runs it whether or not
 * its mirror pod could be made in the API, so an absent UID proves nothing.
 * When the API does not know the claim's node (recorded under another name),
 * any node of the cluster may be it.
 */
function staticPodRule(c: Judged, first: NodeView, second: NodeView): string | null {
  const name = podRef(c.pod)?.name;
  if (!name) return null;
  const nodes = c.known !== undefined ? [c.known] : nodeSuffixes(name, first, second);
  const node = nodes.find((n) => name.endsWith(`-${n}`));
  return node === undefined
    ? null
    : `may be a static pod of ${node} (named <name>-<node>): left to that node's reconcile`;
}

/** The known nodes (either observation) that a pod name ends in, after a `-`. */
function nodeSuffixes(name: string, first: NodeView, second: NodeView): string[] {
  const out: string[] = [];
  for (let i = name.indexOf("-"); i >= 0; i = name.indexOf("-", i + 1)) {
    const s = name.slice(i + 1);
    if (first.nodes.has(s) || second.nodes.has(s)) out.push(s);
  }
  return out;
}

/**
 * Keeps a claim whose node is there but not Ready in either observation: a
 * pod deleted from the API while its node is unreachable (force-deleted, a
 * partition) may still run there, on its address. A claim whose node the API
 * does not know (deleted, or registered under another name) may be any
 * node's: it goes only while every node of the cluster is Ready in both
 * observations, whose kubelets kill a pod the API no longer has.
 */
function notReadyRule(c: Judged, first: NodeView, second: NodeView): string | null {
  if (c.known !== undefined) {
    return first.notReady.has(c.known) || second.notReady.has(c.known)
      ? `its node ${c.known} is not Ready: its pods may still run there; left to that ` +
        "node's reconcile"
      : null;
  }
  const notReady = [...new Set([...first.notReady, ...second.notReady])].sort();
  if (!notReady.length) return null;
  const listed = notReady.slice(0, 3).join(", ") + (notReady.length > 3 ? ", ..." : "");
  return `its node ${c.node ?? "(none recorded)"} is unknown to the API and ` +
    `${notReady.length} node(s) are not Ready (${listed}): its pod may still run on one ` +
    "of them; left to that node's reconcile";
}
