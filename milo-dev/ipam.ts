/**
 * The IPAM service: each tenant project's classes and pools (from the seed),
 * and claim create and delete as one transaction each over the {@link Store}.
 */

import { Allocator, type Capacity, capacity, type Pick } from "./allocator.ts";
import {
  allocationRow,
  type BindRequest,
  claimRow,
  type Placement,
  placementOf,
  timestamp,
} from "./bind.ts";
import { fromIpKey } from "./ipmath.ts";
import {
  allocationObject,
  claimObject,
  classObject,
  type IPAllocationObject,
  type IPClaimObject,
  type IPClassObject,
  type IPPoolObject,
  poolObject,
} from "./objects.ts";
import { Commits, type CreateOptions } from "./overlap.ts";
import { allocationNameFor, refuseReclaim, Retained, scopeKey } from "./reclaim.ts";
import {
  checkAgainstClass,
  type ClaimRequest,
  parseClaimRequest,
  type Preconditions,
  resolveClass,
  unmetPrecondition,
} from "./request.ts";
import { effectiveLease } from "./retention.ts";
import { type ClassSpec, planPool, type PoolPlan, type Seed } from "./seed.ts";
import {
  allocationExists,
  alreadyExists,
  badRequest,
  conflict,
  exhausted,
  forbidden,
  namespaceRefused,
  notFound,
  releaseFailed,
} from "./status.ts";
import type { AllocationRow, ClaimRow, Store } from "./store.ts";

interface Project {
  name: string;
  /** `ipclaims-per-project`. */
  quota: number;
  classes: Map<string, ClassSpec>;
  pools: PoolPlan[];
  /** Namespace name to whether it is being deleted. */
  namespaces: Map<string, boolean>;
}

/** What a DELETE asks besides the name. */
export interface DeleteOptions {
  dryRun?: boolean;
  /** Injected fault: leave the claim Releasing and answer 500. */
  failRelease?: boolean;
  preconditions?: Preconditions;
}

/** The tenants' worlds over one {@link Store}. */
export class Ipam {
  readonly #store: Store;
  readonly #allocator: Allocator;
  #projects = new Map<string, Project>();
  #tokens = new Map<string, string>();
  /** When each recent create of a new allocation committed, by project, namespace and name. */
  readonly #commits = new Commits();
  /** Retained allocations: settings, release, the lease sweep (admin `/retention`). */
  readonly retained: Retained;

  constructor(store: Store, seed: Seed) {
    this.#store = store;
    this.#allocator = new Allocator(store);
    this.retained = new Retained(store, this.#allocator, seed.retention, (r) => this.#leaseOf(r));
    this.#applySeed(seed);
  }

  /** Project names in seed order. */
  projects(): string[] {
    return [...this.#projects.keys()];
  }

  /** The project a bearer token belongs to. */
  projectForToken(token: string): string | undefined {
    return this.#tokens.get(token);
  }

  /** The current global resourceVersion (of lists). */
  resourceVersion(): number {
    return this.#store.currentRV();
  }

  /** Replaces the seeded classes and pools (claims are kept). */
  #applySeed(seed: Seed): void {
    const created = timestamp();
    const keep = { classes: new Set<string>(), pools: new Set<string>() };
    this.#store.tx(() => {
      for (const p of seed.projects) {
        const classes = new Map(p.ipClasses.map((c) => [c.metadata.name, c.spec]));
        const pools = p.ipPools.map((o) => planPool(o.metadata.name, o.spec, classes));
        const namespaces = new Map(p.namespaces.map((n) => [n.name, n.terminating]));
        this.#projects.set(p.name, { name: p.name, quota: p.quota, classes, pools, namespaces });
        for (const t of p.tokens) this.#tokens.set(t, p.name);
        for (const [table, objects] of [["classes", p.ipClasses], ["pools", p.ipPools]] as const) {
          objects.forEach((o, ord) => {
            const spec = JSON.stringify(o.spec);
            this.#store.syncObject(table, {
              project: p.name,
              name: o.metadata.name,
              created,
              spec,
              ord,
            });
            keep[table].add(`${p.name}\0${o.metadata.name}`);
          });
        }
      }
      for (const table of ["classes", "pools"] as const) {
        this.#store.pruneObjects(table, (project, name) => keep[table].has(`${project}\0${name}`));
      }
    });
  }

  #project(name: string): Project {
    const p = this.#projects.get(name);
    if (!p) throw forbidden("projects", name, "unknown project", "resourcemanager.miloapis.com");
    return p;
  }

  // ---- IPClass / IPPool -------------------------------------------------

  /** One IPClass, or undefined. */
  getClass(project: string, name: string): IPClassObject | undefined {
    const p = this.#project(project);
    const r = this.#store.getObject("classes", project, name);
    return r && classObject(r, poolsOf(p, r.name));
  }

  /** All IPClasses of a project. */
  listClasses(project: string): IPClassObject[] {
    const p = this.#project(project);
    return this.#store.listObjects("classes", project).map((r) =>
      classObject(r, poolsOf(p, r.name))
    );
  }

  /** Capacity of a pool, counted from the database now. */
  capacity(project: string, plan: PoolPlan): Capacity {
    return capacity(plan, this.#store.countAllocations(project, plan.name));
  }

  /** Pool plans of a project, in seed order. */
  poolPlans(project: string): PoolPlan[] {
    return this.#project(project).pools;
  }

  /** One IPPool with live status, or undefined. */
  getPool(project: string, name: string): IPPoolObject | undefined {
    const plan = this.#project(project).pools.find((x) => x.name === name);
    const r = this.#store.getObject("pools", project, name);
    return r && plan && poolObject(r, plan, this.capacity(project, plan));
  }

  /** All IPPools of a project with live status. */
  listPools(project: string): IPPoolObject[] {
    const p = this.#project(project);
    return this.#store.listObjects("pools", project).flatMap((r) => {
      const plan = p.pools.find((x) => x.name === r.name);
      return plan ? [poolObject(r, plan, this.capacity(project, plan))] : [];
    });
  }

  // ---- IPClaim ----------------------------------------------------------

  /** One claim, or a 404. */
  getClaim(project: string, ns: string, name: string): IPClaimObject {
    this.#project(project);
    const r = this.#store.getClaim(project, ns, name);
    if (!r) throw notFound("ipclaims", name);
    return claimObject(r);
  }

  /** How many claims a project holds (its IPClaims, as Milo's quota counts them). */
  countClaims(project: string): number {
    return this.#store.countClaims(project);
  }

  /** Whether claim `name` exists in `ns` of `project`. */
  hasClaim(project: string, ns: string, name: string): boolean {
    return this.#store.getClaim(project, ns, name) !== undefined;
  }

  /** Each project's `ipclaims-per-project` quota from the seed. */
  quotas(): Map<string, number> {
    return new Map([...this.#projects.values()].map((p) => [p.name, p.quota]));
  }

  /** Claims of a project (one namespace, or all when `ns` is undefined). */
  listClaims(project: string, ns?: string): IPClaimObject[] {
    this.#project(project);
    return this.#store.listClaims(project, ns).map((r) => claimObject(r));
  }

  /**
   * Creates and binds a claim in one transaction (rolled back on dry run), in
   * the order of Milo's `AllocatingREST.Create`
   * (`internal/registry/ipam/ipclaim/storage.go`): validation (422), the
   * class (400, 403), the namespace (403, `RefuseNamespace`), the claim
   * against its class (400), then, unless a dry run, the reclaim probe: a
   * retained allocation under the claim's name is re-bound, or refused
   * (reclaim.ts), and a pinned `spec.address` is not looked at then. A dry
   * run skips the probe and allocates under the claim's allocation name, so
   * a name Milo holds fails its insert (500), as does the later of two
   * overlapping creates of one name (see {@link CreateOptions.startedAt}).
   */
  createClaim(
    project: string,
    ns: string,
    body: unknown,
    opts: CreateOptions = {},
  ): IPClaimObject {
    const p = this.#project(project);
    const req = parseClaimRequest(ns, body);
    const [className, cls] = resolveClass(p.name, p.classes, req.spec);
    const terminating = p.namespaces.get(ns);
    if (terminating !== false) throw namespaceRefused(ns, terminating === true);
    checkAgainstClass(className, cls, req.spec);
    const allocName = allocationNameFor(ns, req.name);
    const space = scopeKey(project, cls, req.spec.scope);
    const dryRun = opts.dryRun ?? false;
    const key = `${project}\0${ns}\0${req.name}`;
    let picked: Pick | undefined;
    const row = this.#store.tx(() => {
      const b: BindRequest = { project, ns, req, className, cls, allocName, rv: 0 };
      const held = this.#store.getAllocation(project, ns, allocName);
      // Milo probes for a retained allocation before it resolves a pool (storage.go, phase 1a).
      const plan = () => this.#discoverPool(p, className, cls);
      const taken = () => allocationExists(project, ns, allocName, plan().name);
      if (dryRun && held) throw taken();
      const live = dryRun ? undefined : this.#store.getClaim(project, ns, req.name);
      if (live && this.#commits.lost(key, opts)) throw taken();
      const mode = this.retained.settings().recreate;
      // Milo probes for a retained allocation before anything else (storage.go,
      // phase 1a): a live claim's name finds its bound allocation there and is
      // refused as "already bound" (Conflict); the earlier storage's unique
      // claim key answers AlreadyExists.
      if (live && (mode === "Conflict" || !held)) throw alreadyExists("ipclaims", req.name);
      if (held && !dryRun) {
        const c = { name: req.name, className, cls, scopeKey: space };
        refuseReclaim(mode, held, c);
        return this.#rebind({ ...b, rv: this.#store.nextRV() }, held);
      }
      picked = this.#pick(project, plan(), className, cls, req, space);
      const at = { pool: picked.plan.name, start: picked.start };
      return this.#bind({ ...b, rv: this.#store.nextRV() }, at, space);
    }, dryRun);
    if (!dryRun && picked) {
      if (!req.spec.address) this.#allocator.picked(project, space, picked);
      this.#commits.record(key);
    }
    return claimObject(row);
  }

  /**
   * The one pool that serves a claim of class `className`, as Milo's
   * `DiscoverPool` (`internal/allocator/cascade.go`) picks it among the pools
   * offering the class: the first by key (`offeringPools` orders by
   * `pool_key`; within one project, by name), or under `LeastUtilized` the
   * least utilised (`preferPool`: a later pool only when strictly less). No
   * fallback: the claim draws from that pool or fails (507 when it is full,
   * however much room the others have). None offers the class: 400
   * (`ErrNoOfferingPool`, `mapResolveError`).
   */
  #discoverPool(p: Project, className: string, cls: ClassSpec): PoolPlan {
    const offered = p.pools.filter((x) => x.spec.classNames.includes(className))
      .sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    if (offered.length === 0) {
      throw badRequest(`ipam: no pool offers this class: class "${className}"`);
    }
    if (cls.allocationStrategy !== "LeastUtilized") return offered[0];
    const used = (x: PoolPlan) => this.capacity(p.name, x).utilizationPercent;
    return offered.reduce((best, x) => used(x) < used(best) ? x : best);
  }

  /** A pinned address in `plan`, or its first unit free in the address space `space`; 507 when none. */
  #pick(
    project: string,
    plan: PoolPlan,
    className: string,
    cls: ClassSpec,
    req: ClaimRequest,
    space: string,
  ): Pick {
    const address = req.spec.address;
    if (address) {
      return this.#allocator.pinned(project, plan, space, { className, cls, address });
    }
    const start = this.#allocator.firstFree(project, plan, space);
    if (start !== undefined) return { plan, start };
    const used = this.capacity(project, plan).utilizationPercent;
    throw exhausted(plan.name, className, cls.prefixLength, used);
  }

  /** Writes the claim and its new allocation at `at` (inside the create's tx). */
  #bind(b: BindRequest, at: Placement, scope: string): ClaimRow {
    const claim = claimRow(b, at);
    this.#store.insertClaim(claim);
    this.#store.insertAllocation(allocationRow(claim, b, at, scope));
    this.#store.touchPool(b.project, claim.pool, b.rv);
    return claim;
  }

  /**
   * Writes the claim over the retained allocation `r` and binds `r` to it
   * again: same address, lease clock stopped, its recorded reclaimPolicy kept
   * (Milo re-binds the row and decides a later release by the policy on it).
   */
  #rebind(b: BindRequest, r: AllocationRow): ClaimRow {
    const claim = claimRow(b, placementOf(r), r.prefix);
    this.#store.insertClaim(claim);
    this.#store.updateAllocation(b.project, b.ns, r.name, {
      claim_name: claim.name,
      claim_uid: claim.uid,
      labels: claim.labels,
      phase: "Allocated",
      retained_at: null,
      expiring_at: null,
      release_at: null,
      rv: b.rv,
    });
    this.#store.touchPool(b.project, claim.pool, b.rv);
    return claim;
  }

  /**
   * Deletes a claim and, by the reclaimPolicy its allocation recorded, frees
   * (Delete) or retains (Retain: kept, unbound, its lease clock started) the
   * allocation, in one transaction; answers the claim in phase Releasing.
   * 404 when missing, 409 when `preconditions` do not match. With
   * `failRelease` the claim is left in phase Releasing and a 500 is thrown.
   */
  deleteClaim(project: string, ns: string, name: string, opts: DeleteOptions = {}): IPClaimObject {
    this.#project(project);
    if (opts.failRelease) {
      this.#store.tx(() => {
        this.#claimToDelete(project, ns, name, opts.preconditions);
        this.#store.markClaimReleasing(project, ns, name, this.#store.nextRV());
      });
      throw releaseFailed(name);
    }
    let freed: AllocationRow | undefined;
    const out = this.#store.tx(() => {
      const r = this.#claimToDelete(project, ns, name, opts.preconditions);
      const rv = this.#store.nextRV();
      const alloc = this.#store.getAllocation(project, ns, r.alloc_name);
      this.#store.deleteClaim(project, ns, name);
      if (alloc && alloc.reclaim_policy !== "Retain") {
        this.#store.deleteAllocation(project, ns, r.alloc_name);
        freed = alloc;
      } else if (alloc) {
        this.#store.updateAllocation(project, ns, r.alloc_name, {
          phase: "Retained",
          claim_uid: null,
          retained_at: Date.now(),
          expiring_at: null,
          release_at: null,
          rv,
        });
      }
      this.#store.touchPool(project, r.pool, rv);
      return claimObject(r, "Releasing", rv);
    }, opts.dryRun);
    if (freed && !opts.dryRun) {
      this.#allocator.freed(project, freed.pool, freed.scope_key, fromIpKey(freed.start));
    }
    return out;
  }

  /** The stored claim a delete may remove: 404 when missing, 409 when a precondition fails. */
  #claimToDelete(project: string, ns: string, name: string, pre: Preconditions = {}): ClaimRow {
    const r = this.#store.getClaim(project, ns, name);
    if (!r) throw notFound("ipclaims", name);
    const why = unmetPrecondition(pre, { uid: r.uid, resourceVersion: String(r.rv) });
    if (why) throw conflict("ipclaims", name, why);
    return r;
  }

  // ---- IPAllocation -----------------------------------------------------

  /** One allocation, or a 404. */
  getAllocation(project: string, ns: string, name: string): IPAllocationObject {
    this.#project(project);
    const r = this.#store.getAllocation(project, ns, name);
    if (!r) throw notFound("ipallocations", name);
    return allocationObject(r);
  }

  /** Allocations of a project (one namespace, or all). */
  listAllocations(project: string, ns?: string): IPAllocationObject[] {
    this.#project(project);
    return this.#store.listAllocations(project, ns).map(allocationObject);
  }

  /** Deletes a retained allocation (its address is free at once); a bound one is 422. */
  deleteAllocation(project: string, ns: string, name: string, dryRun = false): IPAllocationObject {
    this.#project(project);
    return this.retained.release(project, ns, name, dryRun);
  }

  /** The lease of a retained allocation: its class's, capped by its pool's (lease.go). */
  #leaseOf(r: AllocationRow): number | undefined {
    const p = this.#projects.get(r.project);
    const plan = p?.pools.find((x) => x.name === r.pool);
    return effectiveLease(
      p?.classes.get(r.class_name)?.retentionLease,
      plan?.spec.maxRetentionLease,
    );
  }
}

/** Names of the pools of `p` that serve class `className`, in seed order. */
function poolsOf(p: Project, className: string): string[] {
  return p.pools.filter((x) => x.spec.classNames.includes(className)).map((x) => x.name);
}
