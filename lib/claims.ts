import type { CniEnv } from "./cni.ts";
import type { Identity, NetworkConfig, NodeConfig } from "./config.ts";
import type { NetConf } from "./netconf.ts";
import { clip, CniError } from "./errors.ts";
import {
  type Cidr,
  cidrContains,
  type Family,
  formatCidr,
  isNetworkAddress,
  miloFamily,
  parseCidr,
  specialUse,
} from "./ip.ts";
import type { IPClaim } from "./milo_objects.ts";
import { galacticValue, isGalactic } from "./galactic.ts";
import { hostId } from "./host.ts";
import { sha256Hex } from "./sha256.ts";

export { KEYS, PREFIX } from "./keys.ts";
import { KEYS, PREFIX } from "./keys.ts";

/** Who holds a lease: one pod interface on one node of one cluster. */
export interface Attachment {
  cluster: string;
  /** The cluster's `kube-system` UID, when the node config names it. */
  clusterUid?: string;
  node: string;
  network: string;
  containerId: string;
  ifname: string;
  podNamespace?: string;
  podName?: string;
  podUid?: string;
  vpc?: string;
  vpcattachment?: string;
  /** The host that makes the claims (see lib/host.ts). */
  host?: string;
  /** What its claims are named after (the network config's `identity`; default the attachment). */
  identity?: Identity;
}

/** Builds the attachment identity of an invocation. */
export function attachmentOf(node: NodeConfig, conf: NetConf, env: CniEnv): Attachment {
  return {
    cluster: node.cluster,
    ...(node.clusterUid ? { clusterUid: node.clusterUid } : {}),
    node: node.node,
    host: hostId(node),
    network: conf.name,
    containerId: env.containerId,
    ifname: env.ifname,
    podNamespace: env.args.K8S_POD_NAMESPACE || undefined,
    podName: env.args.K8S_POD_NAME || undefined,
    podUid: env.args.K8S_POD_UID || undefined,
    vpc: conf.vpc,
    vpcattachment: conf.vpcattachment,
    identity: conf.network.identity,
  };
}

/** What names an attachment's claims. */
export type Named =
  & Pick<Attachment, "cluster" | "containerId" | "ifname">
  & Partial<
    Pick<
      Attachment,
      "identity" | "network" | "podNamespace" | "podName" | "vpc" | "vpcattachment"
    >
  >;

/** How each identity's claim names begin. */
const NAME_PREFIX: Record<Identity, string> = {
  attachment: "pod-",
  pod: "podid-",
  network: "slot-",
};

/**
 * Deterministic DNS-1123 claim name of one family, by the network's identity:
 * `pod-…` from (cluster, container, interface), `podid-…` from (cluster, pod
 * namespace, pod name, network, interface), `slot-…` from (cluster, pod
 * namespace, and what galactic keys an attachment by: the values of `vpc` and
 * `vpcattachment` in a galactic config; else both as written, or the
 * network's name, and the interface; {@link slotKey}). Every retry and
 * every DEL derives the same name; a re-created pod (`pod`) or the slot's
 * next pod (`network`) derives it again, which is what re-binds its retained
 * address in Milo. A slot belongs to one namespace: another namespace's
 * config, whatever it names, derives another name. Pod identity without the
 * pod's namespace and name is a config error (7), never the container's name.
 */
export function claimName(a: Named, family: Family): string {
  const fam = family === "ipv4" ? "v4" : "v6";
  const identity = a.identity ?? "attachment";
  const prefix = NAME_PREFIX[identity];
  if (identity === "attachment") return `${prefix}${attachmentHash(a)}-${fam}`;
  if (identity === "network") return `${prefix}${hashOf(slotKey(a))}-${fam}`;
  if (!a.podNamespace || !a.podName) {
    throw new CniError(
      "config",
      'field ipam.identity: "pod" needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS',
      "the runtime sent neither or only one; the claim is not named after the container instead",
    );
  }
  return `${prefix}${
    hashOf(["pod", a.cluster, a.podNamespace, a.podName, a.network ?? "", a.ifname])
  }-${fam}`;
}

/**
 * What a slot (`network` identity) is named from. A galactic config's slot is
 * what galactic keys an attachment by: the values `vpc` and `vpcattachment`
 * encode (datum-cloud/galactic `internal/crdnames/crdnames.go`
 * BGPAdvertisementName, `internal/plumbing/intf/intf.go`; see lib/galactic.ts),
 * not their spelling nor the interface name the runtime gives it (`eth0`, or
 * Multus's `net1` by annotation order), and never the conflist's free-text
 * `name`, which its NADs reuse across namespaces and VPCs. Other configs keep
 * the raw values or the network's name, and the interface.
 */
function slotKey(a: Named): string[] {
  const ns = a.podNamespace ?? "";
  if (isGalactic(a)) {
    return ["slot-galactic", a.cluster, ns, galacticValue(a.vpc), galacticValue(a.vpcattachment)];
  }
  return a.vpc !== undefined && a.vpcattachment !== undefined
    ? ["slot-vpc", a.cluster, ns, a.vpc, a.vpcattachment, a.ifname]
    : ["slot-net", a.cluster, ns, a.network ?? "", a.ifname];
}

/** True when the claims of `a` can be named: pod identity needs the pod's namespace and name. */
export function canName(a: Named): boolean {
  return a.identity !== "pod" || (!!a.podNamespace && !!a.podName);
}

const hashOf = (parts: string[]) => sha256Hex(parts.join("\u0000")).slice(0, 20);

/** The last attachment hashed: one call names its claims, lock and journal entry from it. */
let lastHash = { key: "", hash: "" };

/** The hash that names an attachment's claims, journal entry and lock (20 hex digits). */
export function attachmentHash(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): string {
  const key = `${a.cluster}\u0000${a.containerId}\u0000${a.ifname}`;
  if (lastHash.key !== key) lastHash = { key, hash: sha256Hex(key).slice(0, 20) };
  return lastHash.hash;
}

const LABEL_VALUE = /^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$/;

/** A label value obeying the 63-character rule: the value itself, or `sha256-` and a hash. */
export function labelValue(value: string): string {
  if (LABEL_VALUE.test(value)) return value;
  return `sha256-${sha256Hex(value).slice(0, 48)}`;
}

/** Label selector for this node's claims in one cluster, of one network when given. */
export function nodeSelector(cluster: string, node: string, network?: string): string {
  const sel = `${KEYS.cluster}=${labelValue(cluster)},${KEYS.node}=${labelValue(node)}`;
  return network === undefined ? sel : `${sel},${KEYS.network}=${labelValue(network)}`;
}

/** Label selector for every claim of one cluster. */
export function clusterSelector(cluster: string): string {
  return `${KEYS.cluster}=${labelValue(cluster)}`;
}

/** Labels and annotations recording who holds a lease. */
export function ownership(
  a: Attachment,
  family: Family,
): { labels: Record<string, string>; annotations: Record<string, string> } {
  const fields: [keyof typeof KEYS, string | undefined][] = [
    ["cluster", a.cluster],
    ["node", a.node],
    ["network", a.network],
    ["podNamespace", a.podNamespace],
    ["podName", a.podName],
    ["podUid", a.podUid],
    ["containerId", a.containerId],
    ["ifname", a.ifname],
    ["vpc", a.vpc],
    ["vpcattachment", a.vpcattachment],
  ];
  const labels: Record<string, string> = { [KEYS.family]: family };
  const annotations: Record<string, string> = a.host ? { [KEYS.host]: a.host } : {};
  if (a.clusterUid) annotations[KEYS.clusterUid] = a.clusterUid;
  for (const [key, value] of fields) {
    if (value === undefined) continue;
    labels[KEYS[key]] = labelValue(value);
    if (key !== "podNamespace" && key !== "podName") annotations[KEYS[key]] = value;
  }
  if (a.podName) annotations[KEYS.pod] = `${a.podNamespace ?? ""}/${a.podName}`;
  return { labels, annotations };
}

/**
 * True when `a`'s claims are made with reclaimPolicy Retain: under pod or
 * network identity (the address waits for the same name), and under every
 * identity of a galactic config, whose released address galactic may still
 * announce (datum-cloud/galactic `internal/cnibgp/ops_del.go` leaves the
 * attachment's BGPAdvertisement; `internal/cnibgp/bgp.go` prunes it at the
 * attachment's next ADD, `internal/gc/gc.go` drops it once none of its
 * sandboxes lives): Milo keeps it for the class's `retentionLease`, and no
 * other claim gets it meanwhile.
 */
export function retains(a: Pick<Attachment, "identity" | "vpc" | "vpcattachment">): boolean {
  return (a.identity ?? "attachment") !== "attachment" || isGalactic(a);
}

/**
 * The IPClaim create body for one family: Retain where {@link retains} says,
 * `spec.address` when one was requested (lib/requested.ts).
 */
export function claimBody(
  namespace: string,
  net: NetworkConfig,
  a: Attachment,
  family: Family,
  address?: string,
  addId?: string,
): Record<string, unknown> {
  const own = ownership(a, family);
  if (addId) own.annotations[KEYS.addId] = addId;
  return {
    apiVersion: "ipam.miloapis.com/v1alpha1",
    kind: "IPClaim",
    metadata: { name: claimName(a, family), namespace, ...own },
    spec: {
      className: net.classes[family],
      ipFamily: miloFamily(family),
      ...(net.scope && Object.keys(net.scope).length ? { scope: net.scope } : {}),
      ...(address ? { address } : {}),
      reclaimPolicy: retains(a) ? "Retain" : net.reclaimPolicy,
    },
  };
}

/**
 * How a create's answer differs from the claim posted (`body`, as
 * {@link claimBody} builds it): its name, each `milo-ipam.io/` annotation (a
 * value changed, missing or added: the holder recorded), its class, its
 * family and a requested address, each with what was posted. Empty when the
 * answer is the claim posted.
 */
export function answerDiffers(body: Record<string, unknown>, answer: IPClaim): string[] {
  const meta = body.metadata as { name: string; annotations?: Record<string, string> };
  const spec = body.spec as { className?: string; ipFamily?: string; address?: string };
  const out: string[] = [];
  const compare = (field: string, posted: string | undefined, got: string | undefined) => {
    if (posted !== got) out.push(`${field} ${quoted(got)} (posted ${quoted(posted)})`);
  };
  compare("metadata.name", meta.name, answer.metadata.name);
  const posted = meta.annotations ?? {};
  const got = answer.metadata.annotations ?? {};
  const keys = new Set([...Object.keys(posted), ...Object.keys(got)]);
  for (const k of [...keys].filter((k) => k.startsWith(PREFIX)).sort()) {
    compare(`annotation ${k}`, posted[k], got[k]);
  }
  compare("spec.className", spec.className, answer.spec.className);
  compare("spec.ipFamily", spec.ipFamily, answer.spec.ipFamily);
  if (spec.address !== undefined) compare("spec.address", spec.address, answer.spec.address);
  return out;
}

const quoted = (v: string | undefined) => v === undefined ? "(none)" : JSON.stringify(clip(v, 80));

/**
 * True for a claim name another sandbox makes again (pod or network identity):
 * such a claim is released only by its uid, never by its name alone.
 */
export function isSharedName(name: string): boolean {
  return name.startsWith(NAME_PREFIX.pod) || name.startsWith(NAME_PREFIX.network);
}

/** Prefix lengths a class may hand out per family when the network does not pin one. */
const HOST_OR_BLOCK: Record<Family, number[]> = { ipv4: [32], ipv6: [128, 96] };

/**
 * The address a bound claim leases, in result form: IPv4 as /32, IPv6 with the
 * prefix length Milo allocated (/128, or a block such as /96). Anything else
 * Milo might answer (a wrong family or prefix length, an address outside the
 * CIDR, an unspecified, loopback, link-local or multicast address) is a
 * protocol error (105) that quotes what Milo answered.
 */
export function leaseOf(
  claim: IPClaim,
  family: Family,
  pinned: Partial<Record<Family, number>> = {},
): Cidr {
  const st = claim.status;
  const unusable = (why: string) =>
    new CniError(
      "protocol",
      `claim ${claim.metadata.name}: Milo answered an unusable ${miloFamily(family)} lease: ${why}`,
      `status.allocatedCIDR=${JSON.stringify(clip(st.allocatedCIDR ?? "", 60))} ` +
        `status.address=${JSON.stringify(clip(st.address ?? "", 60))}`,
    );
  const block = st.allocatedCIDR ? parseCidr(st.allocatedCIDR) : null;
  if (!block) throw unusable("status.allocatedCIDR is missing or not a CIDR");
  if (block.family !== family) throw unusable(`${formatCidr(block)} is not ${miloFamily(family)}`);
  const lengths = pinned[family] ? [pinned[family]] : HOST_OR_BLOCK[family];
  if (!lengths.includes(block.prefix)) {
    throw unusable(`prefix /${block.prefix} is not the class's /${lengths.join(" or /")}`);
  }
  if (!isNetworkAddress(block)) throw unusable(`${formatCidr(block)} has host bits set`);
  let picked: Cidr = block;
  if (st.address) {
    const single = parseCidr(st.address);
    if (!single || single.family !== family || !cidrContains(block, single)) {
      throw unusable(`status.address is not an address inside ${formatCidr(block)}`);
    }
    picked = { ...single, prefix: block.prefix };
  }
  const special = specialUse(picked);
  if (special) throw unusable(`${picked.ip} is a ${special} address`);
  return picked;
}
