/**
 * FirstFit allocation over a pool's units: the usable bounds after
 * reservations, the lowest free unit, a pinned address, and capacity.
 */

import { blockSize, ceilDiv, type IPFamily, parseIP, percent4 } from "./ipmath.ts";
import type { ClassSpec, PoolPlan } from "./seed.ts";
import { badRequest, conflict } from "./status.ts";

/** The part of the store the allocator reads (`space`: an address space, reclaim.ts `scopeKey`). */
export interface AllocationIndex {
  allocationsFrom(
    project: string,
    pool: string,
    space: string,
    from: bigint,
    limit: number,
  ): bigint[];
  isAllocated(project: string, pool: string, space: string, start: bigint): boolean;
}

/** Where a pool hands out units: `[first, limit)`, in steps of `unit` addresses. */
export interface Bounds {
  unit: bigint;
  /** Units in the whole pool. */
  total: bigint;
  /** Units kept free by the reservations. */
  reserved: bigint;
  first: bigint;
  limit: bigint;
}

/** Capacity of a pool in units of its class prefix. */
export interface Capacity {
  total: bigint;
  allocated: bigint;
  available: bigint;
  reserved: bigint;
  utilizationPercent: number;
}

/** A unit chosen for a claim. */
export interface Pick {
  plan: PoolPlan;
  start: bigint;
}

/**
 * Allocated starts read per query while walking. Thanks to the cursor the
 * first page nearly always holds the answer, so a page only has to be big
 * enough for a dense run (pinned or retained units above the cursor, or the
 * first walk after a restart) to take few queries: 128 for a full /16
 * instead of one query loading 65,536 rows into memory. A larger page would
 * mostly read rows beyond the gap for nothing.
 */
const PAGE = 512;

/** The usable bounds of a pool after its leading and trailing reservations. */
export function bounds(plan: PoolPlan): Bounds {
  const fam = plan.cidr.family;
  const unit = blockSize(fam, plan.unitPrefix);
  const size = blockSize(fam, plan.cidr.prefix);
  const total = size / unit;
  const r = plan.spec.reservations ?? {};
  const rsize = blockSize(fam, r.unitPrefixLength ?? plan.unitPrefix);
  let lead = ceilDiv(BigInt(r.leading ?? 0) * rsize, unit);
  let trail = ceilDiv(BigInt(r.trailing ?? 0) * rsize, unit);
  if (lead > total) lead = total;
  if (lead + trail > total) trail = total - lead;
  const first = plan.cidr.base + lead * unit;
  const limit = plan.cidr.base + size - trail * unit;
  return { unit, total, reserved: lead + trail, first, limit };
}

/** Capacity of a pool holding `allocations` units; reserved units count as allocated. */
export function capacity(plan: PoolPlan, allocations: number): Capacity {
  const b = bounds(plan);
  let allocated = b.reserved + BigInt(allocations);
  if (allocated > b.total) allocated = b.total;
  return {
    total: b.total,
    allocated,
    available: b.total - allocated,
    reserved: b.reserved,
    utilizationPercent: percent4(allocated, b.total),
  };
}

/**
 * FirstFit over the store's allocations, with a cursor per pool and address
 * space. A unit is taken once per address space: two claims of different
 * spaces may hold one address (`inScope` and `selectBlock` in
 * `internal/allocator/prefix.go`); reservations keep their units from every
 * space.
 */
export class Allocator {
  readonly #index: AllocationIndex;
  /**
   * Per project, pool and address space, a unit below which every unit is allocated: the
   * unit after the last FirstFit pick, lowered when a unit below it is
   * freed. Starting the walk there gives the same answer as starting at the
   * pool's first unit (FirstFit stays exact) without re-reading every
   * allocated row on each create, which made filling a pool quadratic. It
   * lives in memory only: after a restart the first walk starts at the
   * bottom. Pinned picks and dry runs leave it alone.
   */
  readonly #cursor = new Map<string, bigint>();

  constructor(index: AllocationIndex) {
    this.#index = index;
  }

  /** The lowest unit of a pool free in the address space `space`, or undefined when it is full. */
  firstFree(project: string, plan: PoolPlan, space: string): bigint | undefined {
    const b = bounds(plan);
    const hint = this.#cursor.get(cursorKey(project, plan.name, space));
    let cand = hint !== undefined && hint > b.first ? hint : b.first;
    while (cand + b.unit <= b.limit) {
      const starts = this.#index.allocationsFrom(project, plan.name, space, cand, PAGE);
      let gap = false;
      for (const s of starts) {
        if (s > cand) {
          gap = true;
          break;
        }
        if (s === cand) cand += b.unit;
      }
      if (gap || starts.length < PAGE) break;
    }
    return cand + b.unit <= b.limit ? cand : undefined;
  }

  /**
   * Checks a pinned `spec.address` against the pool `DiscoverPool` chose,
   * in Milo's words (`selectBlock` and `parseRequestedBlock` in
   * `internal/allocator/prefix.go`, mapped by `mapAllocationError` in
   * `internal/registry/ipam/ipclaim/storage.go`). A bare address is masked to
   * the class's prefix length, so an IPv6 address inside a /96 binds that
   * block; not an address, 400 `ipam: invalid address`; outside the pool
   * (another pool of the class, another family), 400 `ipam: address outside
   * pool` naming the pool's key; held in the same address space (a retained
   * allocation included) or reserved (Milo's reservations are allocation
   * rows every space excludes: `inScope`), 409 Conflict `ipam: address
   * already allocated` with an empty name, as Milo passes it. A CIDR of
   * another prefix length than the class's is milo-dev's own 400 (Milo
   * would bind a block of that size).
   */
  pinned(
    project: string,
    plan: PoolPlan,
    space: string,
    claim: { className: string; cls: ClassSpec; address: string },
  ): Pick {
    const { className, cls, address } = claim;
    const slash = address.indexOf("/");
    const ip = parseIP(slash >= 0 ? address.slice(0, slash) : address);
    if (!ip) {
      const what = slash >= 0 ? "a CIDR" : "an IP address";
      throw badRequest(`ipam: invalid address: ${JSON.stringify(address)} is not ${what}`);
    }
    if (slash >= 0 && address.slice(slash + 1) !== String(cls.prefixLength)) {
      throw badRequest(
        `spec.address "${address}" does not have the prefix length of IPClass "${className}"`,
      );
    }
    const b = bounds(plan);
    const start = ip.family === cls.ipFamily ? ip.value - ip.value % b.unit : ip.value;
    if (ip.family !== plan.cidr.family || !contains(plan, ip.family, start)) {
      throw badRequest(
        `ipam: address outside pool: ${address} is outside pool "${poolKey(project, plan.name)}"`,
      );
    }
    const reserved = start < b.first || start + b.unit > b.limit;
    if (reserved || this.#index.isAllocated(project, plan.name, space, start)) {
      throw conflict("ipclaims", "", `ipam: address already allocated: ${address}`);
    }
    return { plan, start };
  }

  /** Records a committed FirstFit pick: the next walk of its space starts after it. */
  picked(project: string, space: string, p: Pick): void {
    this.#cursor.set(cursorKey(project, p.plan.name, space), p.start + bounds(p.plan).unit);
  }

  /** Records a committed release: the next walk of its space starts no higher than the freed unit. */
  freed(project: string, pool: string, space: string, start: bigint): void {
    const key = cursorKey(project, pool, space);
    const hint = this.#cursor.get(key);
    if (hint === undefined || start < hint) this.#cursor.set(key, start);
  }
}

/** A pool's storage key, as Milo's errors name it (`tenant.Identity.ResourceKey`). */
function poolKey(project: string, pool: string): string {
  return `project/${project}/ipam.miloapis.com/ippools/${pool}`;
}

function cursorKey(project: string, pool: string, space: string): string {
  return `${project}\0${pool}\0${space}`;
}

function contains(plan: PoolPlan, family: IPFamily, value: bigint): boolean {
  const end = plan.cidr.base + blockSize(family, plan.cidr.prefix);
  return value >= plan.cidr.base && value < end;
}
