/**
 * Two clusters given one `cluster` name (a copied overlay that still says
 * `cluster-a`) look alike to Milo: each one's sweep would release the
 * other's live leases as pods and nodes gone. So every claim also records the
 * UID of its cluster's `kube-system` namespace (`clusterUid` in the node
 * config, which the node install reads from the API), a fact no two clusters
 * share for as long as they live: the sweep brakes on a claim of its name
 * that records another, and says why; the release paths and ADD never take
 * such a claim for their own (lib/holder.ts `otherCluster`).
 */
import { holderOf } from "./holder.ts";
import type { IPClaim } from "./milo_objects.ts";

/** Why the sweep brakes: claims of its cluster name recording another cluster's UID. */
export function clashOf(
  cluster: string,
  uid: string,
  others: Map<string, number>,
): string | undefined {
  if (!others.size) return undefined;
  const [first, n] = [...others].sort((a, b) => b[1] - a[1])[0];
  const total = [...others.values()].reduce((a, b) => a + b, 0);
  return `${total} claim(s) named for cluster ${cluster} record another cluster's kube-system ` +
    `uid (${first}: ${n}), not this one's (${uid}): two clusters share the name ${cluster}; give ` +
    "each its own name (node config cluster) before any sweep releases anything";
}

/** The other cluster UID a claim of this cluster's name records, if it does. */
export function otherUidOf(claim: IPClaim, uid: string): string | undefined {
  const recorded = holderOf(claim).clusterUid;
  return recorded !== undefined && recorded !== uid ? recorded : undefined;
}
