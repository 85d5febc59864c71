/** The objects milo-dev answers, in Milo's wire shapes, built from stored rows. */

import { createHash } from "node:crypto";
import type { Capacity } from "./allocator.ts";
import type { IPFamily } from "./ipmath.ts";
import type { ClassSpec, PoolPlan, PoolSpec } from "./seed.ts";
import type { AllocationRow, ClaimRow, ObjectRow } from "./store.ts";

/** API group/version of every IPAM kind. */
export const API_VERSION = "ipam.miloapis.com/v1alpha1";

/** `metadata` of an object. */
export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid: string;
  resourceVersion: string;
  creationTimestamp: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
}

/** An `ownerReferences` entry. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string | null;
  controller: boolean;
  blockOwnerDeletion: boolean;
}

/** A scope role's reference, stored as the client sent it. */
export type ScopeRef = { name: string } & Record<string, unknown>;

/** IPClaim `spec` as stored and answered: as posted, but for `ownerRef`. */
export interface ClaimSpec {
  className?: string;
  ipFamily?: IPFamily;
  address?: string;
  prefixLength?: number;
  scope?: Record<string, ScopeRef>;
  reclaimPolicy?: "Delete" | "Retain";
  ownerRef: { apiGroup: string; kind: string; name: string; uid?: string };
}

/**
 * An IPClass in Milo's vocabulary (`pkg/apis/ipam/v1alpha1/types.go`): the
 * seed's `prefixLength` as `defaultPrefixLength` and a one-length
 * `allowedPrefixLengths`, its `requiredScopeRoles` as `uniqueWithin`, its
 * `default` as the `ipam.miloapis.com/is-default-class` annotation.
 */
export interface IPClassObject {
  apiVersion: string;
  kind: "IPClass";
  metadata: ObjectMeta;
  spec: {
    ipFamily: IPFamily;
    uniqueWithin?: string[];
    allowedPrefixLengths: { min: number; max: number };
    defaultPrefixLength: number;
    poolPer?: string[];
    strategy?: string;
    reclaimPolicy?: string;
    retentionLease?: string;
    visibility?: string;
  };
  status: { phase: "Ready"; offeringPools: number; requiredScopeRoles?: string[] };
}

/** An IPPool with live capacity. */
export interface IPPoolObject {
  apiVersion: string;
  kind: "IPPool";
  metadata: ObjectMeta;
  spec: PoolSpec;
  status: {
    phase: "Ready";
    ipFamily: IPFamily;
    capacity: { total: string; allocated: string; available: string };
    utilizationPercent: number;
  };
}

/** An IPClaim. */
export interface IPClaimObject {
  apiVersion: string;
  kind: "IPClaim";
  metadata: ObjectMeta;
  spec: ClaimSpec;
  status: {
    phase: string;
    allocatedCIDR: string;
    address?: string;
    poolRef: { name: string };
    boundAllocationRef: { name: string };
  };
}

/**
 * An IPAllocation, in the shape Milo's claim storage writes it
 * (`AllocatingREST.Create`, `internal/registry/ipam/ipclaim/storage.go`):
 * `status.phase` is `Ready` whether bound or retained; conditions tell a
 * retained one (`Bound` False) and an expiring one (`Expiring` True).
 */
export interface IPAllocationObject {
  apiVersion: string;
  kind: "IPAllocation";
  metadata: ObjectMeta;
  spec: {
    ipFamily: string;
    poolRef: { name: string };
    className: string;
    purpose: "Claim";
    /** The claim it is bound to; absent while retained (Milo's `spec.claimRef` is nil then). */
    claimRef?: { name: string };
    /** The claim's scope projected onto its class's uniqueWithin roles: the address space. */
    scope?: Record<string, ScopeRef>;
    reclaimPolicy: string;
    ownerRef: { apiGroup: string; kind: string; name: string };
  };
  status: {
    phase: "Ready";
    allocatedCIDR: string;
    /** The single address of a /32 or /128. */
    address?: string;
    /** milo-dev's digest of the address space (SHA-256 of reclaim.ts `scopeKey`). */
    scopeDigest: string;
    conditions?: Condition[];
  };
}

/** A `metav1.Condition`. */
export interface Condition {
  type: string;
  status: "True" | "False";
  reason: string;
  message: string;
  lastTransitionTime: string;
}

/** Any object of the group. */
export type ApiObject = IPClassObject | IPPoolObject | IPClaimObject | IPAllocationObject;

/** `metadata` of a stored row (namespace only for namespaced rows). */
function objectMeta(
  r: { name: string; namespace?: string; uid: string; rv: number; created: string },
): ObjectMeta {
  return {
    name: r.name,
    ...(r.namespace === undefined ? {} : { namespace: r.namespace }),
    uid: r.uid,
    resourceVersion: String(r.rv),
    creationTimestamp: r.created,
  };
}

function nonEmpty(json: string): Record<string, string> | undefined {
  const m = JSON.parse(json) as Record<string, string>;
  return Object.keys(m).length ? m : undefined;
}

/** An IPClass and the number of pools that serve it. */
export function classObject(r: ObjectRow, poolNames: string[]): IPClassObject {
  const c = JSON.parse(r.spec) as ClassSpec;
  const roles = [...new Set(c.requiredScopeRoles ?? [])].sort();
  const metadata = objectMeta(r);
  if (c.default) metadata.annotations = { "ipam.miloapis.com/is-default-class": "true" };
  return {
    apiVersion: API_VERSION,
    kind: "IPClass",
    metadata,
    spec: {
      ipFamily: c.ipFamily,
      ...(roles.length ? { uniqueWithin: roles } : {}),
      allowedPrefixLengths: { min: c.prefixLength, max: c.prefixLength },
      defaultPrefixLength: c.prefixLength,
      ...(c.poolPer?.length ? { poolPer: c.poolPer } : {}),
      ...(c.allocationStrategy ? { strategy: c.allocationStrategy } : {}),
      ...(c.reclaimPolicy ? { reclaimPolicy: c.reclaimPolicy } : {}),
      ...(c.retentionLease ? { retentionLease: c.retentionLease } : {}),
      ...(c.visibility ? { visibility: c.visibility } : {}),
    },
    status: {
      phase: "Ready",
      offeringPools: poolNames.length,
      ...(roles.length ? { requiredScopeRoles: roles } : {}),
    },
  };
}

/** An IPPool with the capacity counted now. */
export function poolObject(r: ObjectRow, plan: PoolPlan, c: Capacity): IPPoolObject {
  return {
    apiVersion: API_VERSION,
    kind: "IPPool",
    metadata: objectMeta(r),
    spec: JSON.parse(r.spec),
    status: {
      phase: "Ready",
      ipFamily: plan.cidr.family,
      capacity: {
        total: String(c.total),
        allocated: String(c.allocated),
        available: String(c.available),
      },
      utilizationPercent: c.utilizationPercent,
    },
  };
}

/** An IPClaim; `phase` and `rv` override the row's (a delete answers Releasing). */
export function claimObject(r: ClaimRow, phase = r.phase, rv = r.rv): IPClaimObject {
  const metadata = objectMeta({ ...r, rv });
  const labels = nonEmpty(r.labels);
  const annotations = nonEmpty(r.annotations);
  if (labels) metadata.labels = labels;
  if (annotations) metadata.annotations = annotations;
  return {
    apiVersion: API_VERSION,
    kind: "IPClaim",
    metadata,
    spec: JSON.parse(r.spec),
    status: {
      phase,
      allocatedCIDR: r.cidr,
      ...(r.address ? { address: r.address } : {}),
      poolRef: { name: r.pool },
      boundAllocationRef: { name: r.alloc_name },
    },
  };
}

/** An IPAllocation (see {@link IPAllocationObject}). */
export function allocationObject(r: AllocationRow): IPAllocationObject {
  // Milo makes it with a name and namespace only: none of its claim's labels
  // (internal/registry/ipam/ipclaim/storage.go, AllocatingREST.Create).
  const metadata = objectMeta(r);
  const bound = r.phase === "Allocated";
  const scope = projectedScope(r.scope_key);
  const single = r.prefix === (r.family === "IPv6" ? 128 : 32);
  return {
    apiVersion: API_VERSION,
    kind: "IPAllocation",
    metadata,
    spec: {
      ipFamily: r.family,
      poolRef: { name: r.pool },
      className: r.class_name,
      purpose: "Claim",
      ...(bound && r.claim_name ? { claimRef: { name: r.claim_name } } : {}),
      ...(scope ? { scope } : {}),
      reclaimPolicy: r.reclaim_policy,
      ownerRef: { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: r.project },
    },
    status: {
      phase: "Ready",
      allocatedCIDR: r.cidr,
      ...(single ? { address: r.cidr.split("/")[0] } : {}),
      scopeDigest: createHash("sha256").update(r.scope_key).digest("hex"),
      ...(bound ? {} : { conditions: retainedConditions(r) }),
    },
  };
}

/** The projected scope a reclaim.ts `scopeKey` holds; undefined for none (or an earlier key). */
function projectedScope(key: string): Record<string, ScopeRef> | undefined {
  let refs: unknown;
  try {
    refs = JSON.parse(key);
  } catch {
    return undefined;
  }
  if (!Array.isArray(refs) || refs.length === 0) return undefined;
  const out: Record<string, ScopeRef> = {};
  for (const ref of refs) {
    if (!Array.isArray(ref) || ref.length !== 6) return undefined;
    const [role, , apiGroup, kind, name, uid] = ref as string[];
    out[role] = { apiGroup, kind, name, ...(uid ? { uid } : {}) };
  }
  return out;
}

const rfc3339 = (ms: number | null) => new Date(ms ?? 0).toISOString().replace(/\.\d{3}Z$/, "Z");

/**
 * The conditions of a retained allocation, in Milo's words: `Bound` False
 * `Retained` (`unbindAllocation` in `internal/registry/ipam/ipclaim/storage.go`),
 * and once its lease elapsed `Expiring` True `RetentionLeaseElapsed`
 * (`markExpiring` in `internal/allocator/sweep.go`).
 */
function retainedConditions(r: AllocationRow): Condition[] {
  const out: Condition[] = [{
    type: "Bound",
    status: "False",
    reason: "Retained",
    message: "the claim was deleted under reclaimPolicy Retain; this address is still held",
    lastTransitionTime: rfc3339(r.retained_at),
  }];
  if (r.phase === "Expiring") {
    out.push({
      type: "Expiring",
      status: "True",
      reason: "RetentionLeaseElapsed",
      message: `retention lease elapsed; this address will be released at ${
        rfc3339(r.release_at)
      } unless the allocation is re-bound or its lease extended`,
      lastTransitionTime: rfc3339(r.expiring_at),
    });
  }
  return out;
}
