/**
 * Retained allocations, as Milo keeps them: the deterministic allocation name
 * that is a claim's identity, the address space a claim belongs to, whether a
 * same-name claim may re-bind a retained allocation, and the lease sweep.
 */

import { createHash } from "node:crypto";
import type { Allocator } from "./allocator.ts";
import { fromIpKey } from "./ipmath.ts";
import { allocationObject, type IPAllocationObject, type ScopeRef } from "./objects.ts";
import {
  parseDuration,
  type Recreate,
  type RetentionSettings,
  type SweepResult,
} from "./retention.ts";
import type { ClassSpec } from "./seed.ts";
import { conflict, notFound } from "./status.ts";
import type { AllocationRow, Store } from "./store.ts";

/**
 * The IPAllocation name of claim `ns/name`: `alloc-` and the first 8 bytes of
 * SHA-256 of `ns/name` in hex, as `allocationNameFor` in
 * `internal/registry/ipam/ipclaim/storage.go`. Deterministic, so a claim made
 * again under the same name finds the allocation its predecessor retained.
 */
export function allocationNameFor(ns: string, name: string): string {
  return "alloc-" + createHash("sha256").update(`${ns}/${name}`).digest("hex").slice(0, 16);
}

/**
 * The address space of a claim: its scope projected onto the class's
 * `uniqueWithin` roles (milo-dev's `requiredScopeRoles`), each ref as role,
 * the project that qualifies it, apiGroup, kind, name and uid (an unset uid
 * is its own value, distinct from every set one), as `CanonicalAddressSpace`
 * and `writeUID` in `internal/scope/scope.go` build it. No roles: one space
 * every claim of the pool shares. Compared, never parsed.
 */
export function scopeKey(
  project: string,
  cls: ClassSpec,
  scope: Record<string, ScopeRef> = {},
): string {
  const roles = [...new Set(cls.requiredScopeRoles ?? [])].sort();
  const text = (v: unknown) => typeof v === "string" ? v : "";
  return JSON.stringify(roles.map((role) => {
    const ref = scope[role] ?? { name: "" };
    return [role, project, text(ref.apiGroup), text(ref.kind), ref.name, text(ref.uid)];
  }));
}

/** What a create over a retained allocation asks for. */
export interface ReclaimRequest {
  name: string;
  className: string;
  cls: ClassSpec;
  scopeKey: string;
}

/** ErrRetainedMismatch's text (`internal/allocator/reclaim.go`). */
const MISMATCH = "ipam: retained allocation does not match this claim";

/**
 * Throws unless the claim may re-bind the allocation `r` found under its
 * name. `Rebind` (`ReclaimRetained` in `internal/allocator/reclaim.go`):
 * class, address space and prefix length must agree, each disagreement a 409
 * Conflict naming the field, as `storage.go` maps ErrRetainedMismatch
 * (`apierrors.NewConflict` on ipclaims). `Conflict`: the earlier claim
 * storage refuses every re-creation over a retained allocation with a 409
 * Conflict (`internal/registry/ipam/ipclaim/retain_postgres_test.go`, which
 * asserts `IsConflict`; the wording is milo-dev's).
 */
export function refuseReclaim(mode: Recreate, r: AllocationRow, c: ReclaimRequest): void {
  const refuse = (why: string) => conflict("ipclaims", c.name, why);
  if (r.phase === "Allocated") {
    throw refuse(
      `${MISMATCH}: an allocation under this identity is already bound to "${r.claim_name ?? ""}"`,
    );
  }
  if (mode === "Conflict") {
    throw refuse(
      `IPAllocation "${r.name}" (${r.cidr}, class "${r.class_name}") was retained when the ` +
        "previous claim of this name was deleted and holds its address; this server does not " +
        "re-bind a retained allocation: it is released when its retention lease ends or the " +
        "IPAllocation is deleted",
    );
  }
  if (r.class_name !== c.className) {
    throw refuse(
      `${MISMATCH}: it was allocated under class "${r.class_name}" and this claim names "${c.className}"`,
    );
  }
  if (r.scope_key !== c.scopeKey) {
    throw refuse(
      `${MISMATCH}: it belongs to a different address space; a reference deleted and recreated ` +
        "under the same name is a different space and does not inherit its predecessor's addresses",
    );
  }
  if (r.prefix !== c.cls.prefixLength) {
    throw refuse(
      `${MISMATCH}: it is a /${r.prefix} and this claim asks for a /${c.cls.prefixLength}`,
    );
  }
}

/** Retained allocations one pool's transaction handles (`defaultSweepBatch`, sweep.go). */
export const SWEEP_BATCH = 50;
/** Pools one pass visits (`defaultSweepPools`, sweep.go). */
export const SWEEP_POOLS = 100;

/**
 * One pass of the lease sweeper (`SweepExpiredLeases` in
 * `internal/allocator/sweep.go`): at most {@link SWEEP_POOLS} pools holding
 * retained allocations, and in each (`sweepPool`, one transaction under the
 * pool's lock) its {@link SWEEP_BATCH} longest retained
 * (`loadRetainedAllocations`, oldest first); a backlog is worked off over
 * several passes. Past `retainedAt + lease` an allocation is marked Expiring,
 * past that plus the grace (clamped to the lease, `graceFor`) it is released.
 * No lease: held, counted as `noLease`. Runs inside the caller's
 * transaction; the released rows are pushed to `freed`.
 */
export function sweepPass(
  store: Store,
  leaseOf: (r: AllocationRow) => number | undefined,
  graceMs: number,
  now: number,
  freed: AllocationRow[],
): SweepResult {
  const res: SweepResult = { candidates: 0, marked: 0, released: 0, noLease: 0 };
  const byPool = new Map<string, AllocationRow[]>();
  for (const r of store.listRetained()) {
    const key = `${r.project}\0${r.pool}`;
    const rows = byPool.get(key) ?? (byPool.size < SWEEP_POOLS ? [] : undefined);
    if (!rows || rows.length >= SWEEP_BATCH) continue;
    rows.push(r);
    byPool.set(key, rows);
  }
  for (const r of [...byPool.values()].flat()) {
    res.candidates++;
    const lease = leaseOf(r);
    if (lease === undefined || r.retained_at === null) {
      res.noLease++;
      continue;
    }
    const expiresAt = r.retained_at + lease;
    const releaseAt = expiresAt + Math.min(graceMs, lease);
    if (now >= releaseAt) {
      store.deleteAllocation(r.project, r.namespace, r.name);
      store.touchPool(r.project, r.pool, store.nextRV());
      freed.push(r);
      res.released++;
    } else if (now >= expiresAt && r.phase !== "Expiring") {
      store.updateAllocation(r.project, r.namespace, r.name, {
        phase: "Expiring",
        expiring_at: now,
        release_at: releaseAt,
        rv: store.nextRV(),
      });
      res.marked++;
    }
  }
  return res;
}

/** The retained allocations of every project: settings, release by delete, the sweep. */
export class Retained {
  readonly #store: Store;
  readonly #allocator: Allocator;
  readonly #seed: RetentionSettings;
  readonly #leaseOf: (r: AllocationRow) => number | undefined;
  #settings: RetentionSettings;

  constructor(
    store: Store,
    allocator: Allocator,
    seed: RetentionSettings,
    leaseOf: (r: AllocationRow) => number | undefined,
  ) {
    this.#store = store;
    this.#allocator = allocator;
    this.#seed = { ...seed };
    this.#settings = { ...seed };
    this.#leaseOf = leaseOf;
  }

  /** The settings in force. */
  settings(): RetentionSettings {
    return { ...this.#settings };
  }

  /** The seed's settings: the base of admin PUT and DELETE. */
  seedSettings(): RetentionSettings {
    return { ...this.#seed };
  }

  /** Puts new settings in force (the caller restarts the sweep timer). */
  set(next: RetentionSettings): void {
    this.#settings = { ...next };
  }

  /** Allocations retained now (claim gone), in one project or all. */
  count(project?: string): number {
    return this.#store.countRetained(project);
  }

  /**
   * Deletes a retained allocation and frees its address at once; 404 when
   * missing, 409 Conflict when a claim still holds it
   * (`IPAllocationStorage.Delete` and `refuseIfBound`,
   * `internal/registry/ipam/ipallocation/storage.go`). Answers the allocation.
   */
  release(project: string, ns: string, name: string, dryRun = false): IPAllocationObject {
    const r = this.#store.tx(() => {
      const r = this.#store.getAllocation(project, ns, name);
      if (!r) throw notFound("ipallocations", name);
      if (r.phase === "Allocated") {
        throw conflict(
          "ipallocations",
          name,
          `this allocation is bound to IPClaim "${r.claim_name}"; delete the claim to release ` +
            "the address, and its reclaimPolicy decides whether the address is freed or retained",
        );
      }
      this.#store.deleteAllocation(project, ns, name);
      this.#store.touchPool(project, r.pool, this.#store.nextRV());
      return r;
    }, dryRun);
    if (!dryRun) this.#allocator.freed(project, r.pool, r.scope_key, fromIpKey(r.start));
    return allocationObject(r);
  }

  /** One pass of the lease sweeper at `now` (epoch ms), in one transaction. */
  sweep(now = Date.now()): SweepResult {
    const grace = parseDuration(this.#settings.leaseGrace) ?? 0;
    const freed: AllocationRow[] = [];
    const res = this.#store.tx(() => sweepPass(this.#store, this.#leaseOf, grace, now, freed));
    for (const r of freed) {
      this.#allocator.freed(r.project, r.pool, r.scope_key, fromIpKey(r.start));
    }
    return res;
  }
}
