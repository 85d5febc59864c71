/**
 * What `milo-ipam show` says of retained addresses: the IPAllocations of
 * `milo.namespace` that Milo keeps after a claim made with reclaimPolicy
 * Retain is deleted (`spec.claimRef` cleared, condition `Bound` False
 * `Retained`: `unbindAllocation`, `internal/registry/ipam/ipclaim/storage.go`),
 * until a claim of the same name re-binds them, their retention lease ends
 * (`internal/allocator/sweep.go`) or they are deleted. Milo copies none of
 * the claim's labels onto its allocation, so no pod, namespace or node of
 * the claim can be read from one: how many and which addresses, not whose.
 */
import type { NodeConfig } from "./config.ts";
import { cidrContains, type Ip, ipValue, parseCidr, parseIp } from "./ip.ts";
import type { IPAllocation } from "./milo_objects.ts";

/** One retained allocation as `show` reports it. */
export interface RetainedRow {
  allocation: string;
  uid?: string;
  /** Its `status.allocatedCIDR`. */
  address?: string;
  family?: string;
  pool?: string;
  className?: string;
  /** The address space it is unique within: each scope role's name (`network`: `vpc7b3e`). */
  scope?: Record<string, string>;
  createdAt?: string;
  /** When its claim was deleted: its `Bound` False condition's time (absent: Milo wrote none). */
  retainedSince?: string;
  /** Seconds since then, on Milo's clock. */
  retainedForS?: number;
  /** Its retention lease elapsed: Milo marked it `Expiring`, to release it at `releaseAt`. */
  expiring: boolean;
  /** When Milo releases it unless it is re-bound (from the `Expiring` condition). */
  releaseAt?: string;
  /** The `Expiring` condition's message, when it names no time this reads. */
  expiringMessage?: string;
}

/** The node config's `allowIdentities` entries that apply to a namespace. */
export type Grant = NodeConfig["allowIdentities"][number];

/** Whether a lease (a claim's or an allocation's status) holds `ip`: its address or block. */
export function holds(lease: { allocatedCIDR?: string; address?: string }, ip: Ip): boolean {
  const cidr = lease.allocatedCIDR ? parseCidr(lease.allocatedCIDR) : null;
  if (cidr && cidr.family === ip.family && cidrContains(cidr, ip)) return true;
  const a = lease.address ? parseIp(lease.address.split("/")[0]) : null;
  return !!a && a.family === ip.family && a.ip === ip.ip;
}

/** Whether Milo keeps `a` retained: handed to a claim, now bound to none. */
export function isRetained(a: IPAllocation): boolean {
  return !a.spec.claimRef && (a.spec.purpose ?? "Claim") === "Claim";
}

/**
 * The retained allocations of a LIST (those holding `ip` when given), by
 * address; their time retained on Milo's clock (`serverTime`, NaN: none).
 */
export function retainedRows(items: IPAllocation[], serverTime: number, ip?: Ip): RetainedRow[] {
  return items
    .filter((a) => isRetained(a) && (!ip || holds(a.status, ip)))
    .map((a) => rowOf(a, serverTime))
    .sort(byAddress);
}

function rowOf(a: IPAllocation, serverTime: number): RetainedRow {
  const cond = (type: string) => a.status.conditions?.find((c) => c.type === type);
  const bound = cond("Bound");
  const since = bound?.status === "False" ? bound.lastTransitionTime : undefined;
  const sinceMs = since ? Date.parse(since) : NaN;
  const expiring = cond("Expiring");
  const isExpiring = expiring?.status === "True";
  // Milo's words: "... will be released at <RFC 3339> unless the allocation is re-bound ..."
  const at = isExpiring
    ? / released at (\S+) unless /.exec(expiring.message ?? "")?.[1]
    : undefined;
  const releaseAt = at && Number.isFinite(Date.parse(at)) ? at : undefined;
  const scope = a.spec.scope
    ? Object.fromEntries(Object.entries(a.spec.scope).map(([role, r]) => [role, r.name ?? ""]))
    : undefined;
  return {
    allocation: a.metadata.name,
    uid: a.metadata.uid,
    address: a.status.allocatedCIDR ?? a.status.address,
    family: a.spec.ipFamily,
    pool: a.spec.poolRef?.name,
    className: a.spec.className,
    scope,
    createdAt: a.metadata.creationTimestamp,
    retainedSince: since,
    retainedForS: Number.isFinite(sinceMs) && Number.isFinite(serverTime)
      ? Math.max(0, Math.round((serverTime - sinceMs) / 1000))
      : undefined,
    expiring: isExpiring,
    releaseAt,
    expiringMessage: isExpiring && !releaseAt ? expiring.message : undefined,
  };
}

/** By family (IPv4 first), then address. */
function byAddress(a: RetainedRow, b: RetainedRow): number {
  const x = a.address ? parseCidr(a.address) : null, y = b.address ? parseCidr(b.address) : null;
  if (!x || !y) return x ? -1 : y ? 1 : a.allocation < b.allocation ? -1 : 1;
  if (x.family !== y.family) return x.family === "ipv4" ? -1 : 1;
  const d = ipValue(x) - ipValue(y);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}

/** The node config's grants of a stable identity that apply to pods of `namespace`. */
export function grantsFor(node: Pick<NodeConfig, "allowIdentities">, namespace: string): Grant[] {
  return node.allowIdentities.filter((g) => g.namespace === undefined || g.namespace === namespace);
}
