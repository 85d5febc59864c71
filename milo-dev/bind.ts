/** The rows a bound claim writes: the claim, and its allocation (made now or re-bound). */

import { familyBits, formatCIDR, formatIP, fromIpKey, type IPFamily, ipKey } from "./ipmath.ts";
import type { ClaimSpec } from "./objects.ts";
import type { ClaimRequest } from "./request.ts";
import type { ClassSpec } from "./seed.ts";
import type { AllocationRow, ClaimRow } from "./store.ts";

/** RFC 3339 timestamp with whole seconds, as Kubernetes writes it. */
export function timestamp(d = new Date()): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** Where a claim is bound: a pool and the first address of its unit. */
export interface Placement {
  pool: string;
  start: bigint;
}

/** What a bind needs besides the placement. */
export interface BindRequest {
  project: string;
  ns: string;
  req: ClaimRequest;
  className: string;
  cls: ClassSpec;
  /** The IPAllocation's name (deterministic from the claim's; see reclaim.ts). */
  allocName: string;
  rv: number;
}

/**
 * The claim's spec as Milo stores it: as posted (a class, family, reclaim
 * policy or prefix length it did not name stays unset), `ownerRef`
 * overwritten with the project, the client's uid kept
 * (`AllocatingREST.Create`, `internal/registry/ipam/ipclaim/storage.go`).
 */
function claimSpec(b: BindRequest): ClaimSpec {
  const { className, ipFamily, address, prefixLength, scope, reclaimPolicy, ownerUid } = b.req.spec;
  return {
    ...(className ? { className } : {}),
    ...(ipFamily === undefined ? {} : { ipFamily }),
    ...(address === undefined ? {} : { address }),
    ...(prefixLength === undefined ? {} : { prefixLength }),
    ...(scope === undefined ? {} : { scope }),
    ...(reclaimPolicy === undefined ? {} : { reclaimPolicy }),
    ownerRef: {
      apiGroup: "resourcemanager.miloapis.com",
      kind: "Project",
      name: b.project,
      ...(ownerUid === undefined ? {} : { uid: ownerUid }),
    },
  };
}

/** The policy a release of the claim follows: the claim's, else its class's, else Delete. */
export function effectivePolicy(b: BindRequest): "Delete" | "Retain" {
  return b.req.spec.reclaimPolicy ?? b.cls.reclaimPolicy ?? "Delete";
}

/** The Bound claim row at `at` with a unit of `prefix` (the class's, or a retained one's). */
export function claimRow(b: BindRequest, at: Placement, prefix = b.cls.prefixLength): ClaimRow {
  const fam: IPFamily = b.cls.ipFamily;
  return {
    project: b.project,
    namespace: b.ns,
    name: b.req.name,
    uid: crypto.randomUUID(),
    rv: b.rv,
    created: timestamp(),
    labels: JSON.stringify(b.req.labels),
    annotations: JSON.stringify(b.req.annotations),
    spec: JSON.stringify(claimSpec(b)),
    class_name: b.className,
    pool: at.pool,
    cidr: formatCIDR(fam, at.start, prefix),
    address: prefix === familyBits(fam) ? formatIP(fam, at.start) : "",
    alloc_name: b.allocName,
    phase: "Bound",
  };
}

/** The new allocation row of a fresh claim row. */
export function allocationRow(claim: ClaimRow, b: BindRequest, at: Placement, scopeKey: string) {
  const row: AllocationRow = {
    project: claim.project,
    namespace: claim.namespace,
    name: claim.alloc_name,
    uid: crypto.randomUUID(),
    rv: claim.rv,
    created: claim.created,
    pool: at.pool,
    start: ipKey(at.start),
    prefix: b.cls.prefixLength,
    family: b.cls.ipFamily,
    cidr: claim.cidr,
    class_name: claim.class_name,
    claim_name: claim.name,
    claim_uid: claim.uid,
    labels: claim.labels,
    phase: "Allocated",
    reclaim_policy: effectivePolicy(b),
    scope_key: scopeKey,
    retained_at: null,
    expiring_at: null,
    release_at: null,
  };
  return row;
}

/** Where a retained allocation sits, as a placement. */
export function placementOf(r: AllocationRow): Placement {
  return { pool: r.pool, start: fromIpKey(r.start) };
}
