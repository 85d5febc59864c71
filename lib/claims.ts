import type { IpamConfig } from "./config.ts";
import type { CniEnv } from "./cni.ts";
import { type Cidr, type Family, miloFamily, parseCidr } from "./ip.ts";
import type { IPClaim } from "./milo.ts";

/** The one prefix of every label and annotation milo-ipam writes. */
export const PREFIX = "milo-ipam.io/";

/** Label and annotation keys (all under {@link PREFIX}). */
export const KEYS = {
  cluster: `${PREFIX}cluster`,
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
} as const;

/** Who holds a lease: one pod interface on one node of one cluster. */
export interface Attachment {
  cluster: string;
  node: string;
  network: string;
  containerId: string;
  ifname: string;
  podNamespace?: string;
  podName?: string;
  podUid?: string;
  vpc?: string;
  vpcattachment?: string;
}

/** Builds the attachment identity of an invocation. */
export function attachmentOf(
  cfg: IpamConfig,
  node: string,
  network: string,
  env: CniEnv,
  extra: { vpc?: string; vpcattachment?: string },
): Attachment {
  return {
    cluster: cfg.cluster,
    node,
    network,
    containerId: env.containerId,
    ifname: env.ifname,
    podNamespace: env.args.K8S_POD_NAMESPACE || undefined,
    podName: env.args.K8S_POD_NAME || undefined,
    podUid: env.args.K8S_POD_UID || undefined,
    vpc: extra.vpc,
    vpcattachment: extra.vpcattachment,
  };
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Deterministic DNS-1123 claim name for (cluster, container, interface, family):
 * every retry and every DEL derives the same name.
 */
export async function claimName(
  a: Pick<Attachment, "cluster" | "containerId" | "ifname">,
  family: Family,
): Promise<string> {
  const hash = await sha256Hex(`${a.cluster}\u0000${a.containerId}\u0000${a.ifname}`);
  return `pod-${hash.slice(0, 20)}-${family === "ipv4" ? "v4" : "v6"}`;
}

const LABEL_VALUE = /^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$/;

/** A label value obeying the 63-character rule: the value itself, or `sha256-` and a hash. */
export async function labelValue(value: string): Promise<string> {
  if (LABEL_VALUE.test(value)) return value;
  return `sha256-${(await sha256Hex(value)).slice(0, 48)}`;
}

/** Label selector for this node's claims of one network in one cluster. */
export async function nodeSelector(
  cluster: string,
  node: string,
  network: string,
): Promise<string> {
  const [c, n, w] = await Promise.all([cluster, node, network].map(labelValue));
  return `${KEYS.cluster}=${c},${KEYS.node}=${n},${KEYS.network}=${w}`;
}

/** Labels and annotations recording who holds a lease. */
export async function ownership(
  a: Attachment,
  family: Family,
): Promise<{ labels: Record<string, string>; annotations: Record<string, string> }> {
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
  const annotations: Record<string, string> = {};
  await Promise.all(fields.map(async ([key, value]) => {
    if (value === undefined) return;
    labels[KEYS[key]] = await labelValue(value);
    if (key !== "podNamespace" && key !== "podName") annotations[KEYS[key]] = value;
  }));
  if (a.podName) annotations[KEYS.pod] = `${a.podNamespace ?? ""}/${a.podName}`;
  return { labels, annotations };
}

/** The IPClaim create body for one family. */
export async function claimBody(
  cfg: IpamConfig,
  a: Attachment,
  family: Family,
): Promise<Record<string, unknown>> {
  const [name, meta] = await Promise.all([claimName(a, family), ownership(a, family)]);
  return {
    apiVersion: "ipam.miloapis.com/v1alpha1",
    kind: "IPClaim",
    metadata: { name, namespace: cfg.milo.namespace, ...meta },
    spec: {
      className: cfg.classes[family],
      ipFamily: miloFamily(family),
      ...(cfg.scope ? { scope: cfg.scope } : {}),
      reclaimPolicy: cfg.reclaimPolicy,
    },
  };
}

/** The attachment (container, interface) recorded on a claim, if any. */
export function holderOf(
  claim: IPClaim,
): { cluster?: string; containerId?: string; ifname?: string } {
  const ann = claim.metadata.annotations ?? {};
  return {
    cluster: ann[KEYS.cluster],
    containerId: ann[KEYS.containerId],
    ifname: ann[KEYS.ifname],
  };
}

/** A set key for one attachment (container, interface) of a network. */
export function attachmentKey(containerId?: string, ifname?: string): string {
  return `${containerId}\u0000${ifname}`;
}

/** True when a claim was made by this exact cluster/container/interface. */
export function isHeldBy(claim: IPClaim, a: Attachment): boolean {
  const h = holderOf(claim);
  return h.cluster === a.cluster && h.containerId === a.containerId && h.ifname === a.ifname;
}

/**
 * The address a bound claim leases, in result form: IPv4 as /32, IPv6 with the
 * prefix length Milo allocated (/128, or a block such as /96). Null when the
 * claim carries no usable address of the family.
 */
export function leaseOf(claim: IPClaim, family: Family): Cidr | null {
  const st = claim.status;
  const block = st.allocatedCIDR ? parseCidr(st.allocatedCIDR) : null;
  const single = st.address ? parseCidr(st.address) : null;
  const picked = single ?? block;
  if (!picked || picked.family !== family) return null;
  if (family === "ipv4") return { ...picked, prefix: 32 };
  return single && block ? { ...single, prefix: block.prefix } : picked;
}
