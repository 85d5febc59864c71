/**
 * The labels and annotations milo-ipam writes on a claim: one prefix, and
 * each key under it (a leaf: Milo's objects and the claims' identity both
 * read them).
 */

/** The one prefix of every label and annotation milo-ipam writes. */
export const PREFIX = "milo-ipam.io/";

/** Label and annotation keys (all under {@link PREFIX}). */
export const KEYS = {
  cluster: `${PREFIX}cluster`,
  /** The UID of the cluster's `kube-system` namespace (lib/cluster_uid.ts). */
  clusterUid: `${PREFIX}cluster-uid`,
  node: `${PREFIX}node`,
  network: `${PREFIX}network`,
  podNamespace: `${PREFIX}pod-namespace`,
  podName: `${PREFIX}pod-name`,
  podUid: `${PREFIX}pod-uid`,
  pod: `${PREFIX}pod`,
  containerId: `${PREFIX}container-id`,
  ifname: `${PREFIX}ifname`,
  family: `${PREFIX}family`,
  vpc: `${PREFIX}vpc`,
  vpcattachment: `${PREFIX}vpcattachment`,
  host: `${PREFIX}host`,
  /** The call id of the ADD that created the claim (its retried create finds it its own). */
  addId: `${PREFIX}add-id`,
} as const;
