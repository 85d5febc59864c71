/**
 * The network configs a runtime pipes to the master plugins: the shared VPC
 * network through `bridge`, and an IPv6-only network through `ptp`, both
 * delegating to milo-ipam with per-network keys only.
 */

/** The shared VPC network (bridge master) and the IPv6 ptp network. */
export const NET_BRIDGE = "vpc-7b3e";
/** The IPv6-only network through `ptp`. */
export const NET_PTP6 = "vpc-7b3e-ptp6";
/**
 * The network a NetworkAttachmentDefinition attaches through Multus (galactic's
 * layout): bridge + milo-ipam as Multus's delegate, on the pod's `net1`.
 */
export const NET_MULTUS = "vpc-7b3e-nad";
/** The network name of Multus itself: its entry in the runtime's own result cache. */
export const MULTUS_NETWORK = "multus-cni-network";
/** The interface Multus gives the first additional network (the default network gets eth0). */
export const MULTUS_IFNAME = "net1";

/** Usable IPv4 addresses of the pool: 10.244.0.1 .. 10.244.0.200. */
export const POOL_SIZE = 200;

/** The plugin's timeouts in a network config. */
export interface Timeouts {
  requestMs: number;
  totalMs: number;
}

/** Timeouts of the plugin in the e2e configs (the plugin's defaults). */
export const TIMEOUTS: Timeouts = { requestMs: 2000, totalMs: 10_000 };

/** One IP of a CNI result. */
export interface ResultIp {
  address: string;
  gateway?: string;
  interface?: number;
}

/** A CNI result (the fields the e2e reads). */
export interface CniResult {
  cniVersion?: string;
  ips?: ResultIp[];
  [key: string]: unknown;
}

/** A network config as piped on stdin. */
export interface NetConf {
  cniVersion: string;
  name: string;
  type: string;
  ipam: Record<string, unknown>;
  prevResult?: CniResult;
  [key: string]: unknown;
}

/** The address space of the e2e's networks, which each node config grants (testing/e2e/nodes.ts). */
export const E2E_SCOPE = {
  network: { apiGroup: "networking.datumapis.com", kind: "Network", name: NET_BRIDGE },
};

/** The milo-ipam `ipam` block of a network (the same on every cluster: per-network keys only). */
export function ipamBlock(
  timeouts: Timeouts,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    type: "milo-ipam",
    classes: { ipv4: "vpc-pods-ipv4" },
    scope: E2E_SCOPE,
    timeouts,
    ...extra,
  };
}

/** The bridge network config of a cluster (the conflist entry a runtime pipes to bridge). */
export function bridgeConf(
  cluster: string,
  timeouts: Timeouts,
  ipamExtra: Record<string, unknown> = {},
): NetConf {
  return {
    cniVersion: "1.0.0",
    name: NET_BRIDGE,
    type: "bridge",
    bridge: "cni0",
    isGateway: false,
    ipMasq: false,
    vpc: NET_BRIDGE,
    vpcattachment: `${NET_BRIDGE}-${cluster}`,
    ipam: ipamBlock(timeouts, ipamExtra),
  };
}

/** The IPv6-only ptp network: /96 blocks, link-local gateway fe80::1 on the host veths. */
export function ptp6Conf(timeouts: Timeouts): NetConf {
  return {
    cniVersion: "1.0.0",
    name: NET_PTP6,
    type: "ptp",
    ipMasq: false,
    ipam: ipamBlock(timeouts, {
      classes: { ipv6: "vpc-pods-ipv6" },
      gateways: { ipv6: "fe80::1" },
    }),
  };
}

/**
 * The NetworkAttachmentDefinition's config: the delegate Multus runs through
 * libcni for the pod's `net1` (bridge `mbr1` of the node, milo-ipam's block).
 */
export function multusDelegateConf(cluster: string, timeouts: Timeouts): NetConf {
  return {
    ...bridgeConf(cluster, timeouts),
    name: NET_MULTUS,
    bridge: "mbr1",
  };
}

/**
 * Multus's own config as the runtime pipes it (thin plugin, `cniDir` = the
 * node's Multus cache dir: libcni writes its delegates' results under
 * `<cniDir>/results`). The default network's delegate is not run here: only
 * the NAD's delegate involves milo-ipam.
 */
export function multusConf(cniDir: string): Record<string, unknown> {
  return {
    cniVersion: "1.0.0",
    name: MULTUS_NETWORK,
    type: "multus",
    kubeconfig: "/etc/cni/net.d/multus.d/multus.kubeconfig",
    cniDir,
    capabilities: { portMappings: true },
  };
}
