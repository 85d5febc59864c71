/**
 * Who a claim records as its holder (its `milo-ipam.io/` annotations), and
 * how a release path judges it against an attachment of this machine.
 */
import { type Attachment, KEYS } from "./claims.ts";
import type { HeldClaim, Holding } from "./lease.ts";
import type { IPClaim } from "./milo_objects.ts";

/** Who a claim records as its holder (from its annotations). */
export interface Holder {
  cluster?: string;
  clusterUid?: string;
  node?: string;
  network?: string;
  containerId?: string;
  ifname?: string;
  pod?: string;
  podUid?: string;
  host?: string;
}

/** The call id of the ADD that created `claim`, as the claim records it. */
export function madeBy(claim: IPClaim): string | undefined {
  return claim.metadata.annotations?.[KEYS.addId];
}

/** The holder recorded on a claim. */
export function holderOf(claim: IPClaim): Holder {
  const ann = claim.metadata.annotations ?? {};
  return {
    cluster: ann[KEYS.cluster],
    clusterUid: ann[KEYS.clusterUid],
    node: ann[KEYS.node],
    network: ann[KEYS.network],
    containerId: ann[KEYS.containerId],
    ifname: ann[KEYS.ifname],
    pod: ann[KEYS.pod],
    podUid: ann[KEYS.podUid],
    host: ann[KEYS.host],
  };
}

/** The namespace of the pod a holder records (`namespace/name`); undefined for none. */
export function podNamespaceOf(h: Holder): string | undefined {
  const slash = h.pod?.indexOf("/") ?? -1;
  return slash > 0 ? h.pod!.slice(0, slash) : undefined;
}

/** A part of a claim's recorded holder that differs from an attachment's. */
export type Mismatch = "cluster" | "attachment" | "node" | "host" | "network" | "pod";

/**
 * True when a claim records another cluster's `kube-system` UID than `a`'s
 * (both recorded): another cluster given the same name (lib/cluster_uid.ts).
 */
export function otherCluster(claim: IPClaim, a: Pick<Attachment, "clusterUid">): boolean {
  const uid = holderOf(claim).clusterUid;
  return uid !== undefined && a.clusterUid !== undefined && uid !== a.clusterUid;
}

/**
 * What differs between a claim's recorded holder and `a`: the attachment
 * (cluster, container, interface), the node, the host (a claim made before
 * host identity records none and is not held against it), the network, the
 * pod (UID and namespace/name).
 */
export function mismatches(claim: IPClaim, a: Attachment): Mismatch[] {
  const h = holderOf(claim);
  const pod = a.podName ? `${a.podNamespace ?? ""}/${a.podName}` : undefined;
  const out: Mismatch[] = [];
  if (otherCluster(claim, a)) out.push("cluster");
  if (!isHeldBy(claim, a)) out.push("attachment");
  if (h.node !== a.node) out.push("node");
  if (h.host !== undefined && h.host !== a.host) out.push("host");
  if (h.network !== a.network) out.push("network");
  if (h.podUid !== a.podUid || h.pod !== pod) out.push("pod");
  return out;
}

/** The holder a claim records, in one line for an error. */
export function describeHolder(claim: IPClaim): string {
  const h = holderOf(claim);
  return [
    `cluster=${h.cluster ?? "?"}`,
    `node=${h.node ?? "?"}`,
    `host=${h.host ?? "?"}`,
    `network=${h.network ?? "?"}`,
    `pod=${h.pod ?? "?"}`,
    `pod-uid=${h.podUid ?? "?"}`,
    `container=${h.containerId ?? "?"}`,
    `ifname=${h.ifname ?? "?"}`,
  ].join(" ");
}

/** The holder a node's record of claim `c` names, in one line. */
export function describeRecord(h: Holding, c: HeldClaim): string {
  const ann = (c.body?.metadata as { annotations?: Record<string, string> } | undefined)
    ?.annotations ?? {};
  const pod = ann[KEYS.pod] ?? "?";
  return `pod=${pod} container=${h.containerId} ifname=${h.ifname} node=${h.node ?? "?"} ` +
    `host=${h.host ?? "?"}`;
}

/**
 * True when a claim records another attachment (cluster, container,
 * interface) or another host than `a`'s, in a value it carries (a missing one
 * records nothing): it may be another holder's.
 */
export function recordsAnother(claim: IPClaim, a: Attachment): boolean {
  const h = holderOf(claim);
  const other = (have: string | undefined, want: string | undefined) =>
    have !== undefined && have !== want;
  return other(h.cluster, a.cluster) || other(h.containerId, a.containerId) ||
    other(h.ifname, a.ifname) || other(h.host, a.host) || otherCluster(claim, a);
}

/**
 * Why `claim` is not this machine's claim of the attachment `a`, or undefined
 * when it is: its cluster, container and interface, and this host (its
 * machine-id) and this node, or, recording no host, this node. A claim of
 * another host, or of this host's machine-id under another node (a machine
 * cloned with this one's machine-id and given its own node name), is its own
 * machine's to release (its node's reconcile) or the sweep's; the reason says
 * whose it is and who releases it.
 */
export function notHeldHere(claim: IPClaim, a: Attachment): string | undefined {
  const h = holderOf(claim);
  if (otherCluster(claim, a)) {
    return `records cluster uid ${h.clusterUid}, not this cluster's (${a.clusterUid}): another ` +
      `cluster named ${a.cluster}; left alone`;
  }
  if (!isHeldBy(claim, a)) {
    return `records another holder (container ${h.containerId ?? "?"}, ifname ${
      h.ifname ?? "?"
    }, cluster ${h.cluster ?? "?"})`;
  }
  if (h.host !== undefined && h.host !== a.host) {
    return `recorded for host ${h.host}, not this one: left to that host`;
  }
  if (sameNode(h.node, a.node)) return undefined;
  const node = h.node ?? "(none)";
  return h.host === undefined
    ? `records no host, and node ${node}, not this one: left to that node or the sweep`
    : `recorded for node ${node} under this host's machine-id, not for this node (${a.node}): ` +
      `left to node ${node}'s reconcile or the sweep`;
}

/**
 * True when two node names name one node: compared as the kubelet names a
 * node after its hostname (trimmed, lowercased), for a claim or record made
 * before node names were lowercased may carry the raw hostname. A missing
 * name is no node.
 */
export function sameNode(a: string | undefined, b: string | undefined): boolean {
  const norm = (n: string) => n.trim().toLowerCase();
  return a !== undefined && b !== undefined && norm(a) === norm(b);
}

/** True when a claim was made by this exact cluster/container/interface. */
export function isHeldBy(claim: IPClaim, a: Attachment): boolean {
  const h = holderOf(claim);
  return h.cluster === a.cluster && h.containerId === a.containerId && h.ifname === a.ifname &&
    !otherCluster(claim, a);
}
