/** The objects milo-dev answers, in Milo's wire shapes, built from stored rows. */

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

/** An IPClass. */
export interface IPClassObject {
  apiVersion: string;
  kind: "IPClass";
  metadata: ObjectMeta;
  spec: ClassSpec;
  status: { phase: "Ready"; poolNames: string[] };
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

/** An IPAllocation. */
export interface IPAllocationObject {
  apiVersion: string;
  kind: "IPAllocation";
  metadata: ObjectMeta;
  spec: {
    poolRef: { name: string };
    className: string;
    ipFamily: string;
    cidr: string;
    prefixLength: number;
    reclaimPolicy: string;
    /** The claim it is bound to; absent while retained (Milo's `spec.claimRef` is nil then). */
    claimRef?: { namespace: string; name: string | null; uid: string | null };
  };
  /** `Allocated`, or `Retained` / `Expiring` (lease elapsed) with conditions saying so. */
  status: { phase: string; conditions?: Condition[] };
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

/** An IPClass and the pools that serve it. */
export function classObject(r: ObjectRow, poolNames: string[]): IPClassObject {
  return {
    apiVersion: API_VERSION,
    kind: "IPClass",
    metadata: objectMeta(r),
    spec: JSON.parse(r.spec),
    status: { phase: "Ready", poolNames },
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

/** An IPAllocation; owned by its claim while allocated. */
export function allocationObject(r: AllocationRow): IPAllocationObject {
  const metadata = objectMeta(r);
  const labels = nonEmpty(r.labels);
  if (labels) metadata.labels = labels;
  const bound = r.phase === "Allocated";
  if (r.claim_name && bound) {
    metadata.ownerReferences = [{
      apiVersion: API_VERSION,
      kind: "IPClaim",
      name: r.claim_name,
      uid: r.claim_uid,
      controller: true,
      blockOwnerDeletion: true,
    }];
  }
  return {
    apiVersion: API_VERSION,
    kind: "IPAllocation",
    metadata,
    spec: {
      poolRef: { name: r.pool },
      className: r.class_name,
      ipFamily: r.family,
      cidr: r.cidr,
      prefixLength: r.prefix,
      reclaimPolicy: r.reclaim_policy,
      ...(bound
        ? { claimRef: { namespace: r.namespace, name: r.claim_name, uid: r.claim_uid } }
        : {}),
    },
    status: { phase: r.phase, ...(bound ? {} : { conditions: retainedConditions(r) }) },
  };
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
