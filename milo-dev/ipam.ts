/**
 * The IPAM service: each tenant project's classes and pools (from the seed),
 * and claim create and delete as one transaction each over the {@link Store}.
 */

import { Allocator, type Capacity, capacity, type Pick } from "./allocator.ts";
import { familyBits, formatCIDR, formatIP, fromIpKey, ipKey } from "./ipmath.ts";
import {
  allocationObject,
  claimObject,
  type ClaimSpec,
  classObject,
  type IPAllocationObject,
  type IPClaimObject,
  type IPClassObject,
  type IPPoolObject,
  poolObject,
} from "./objects.ts";
import {
  type ClaimRequest,
  parseClaimRequest,
  type Preconditions,
  resolveClass,
  unmetPrecondition,
} from "./request.ts";
import { type ClassSpec, planPool, type PoolPlan, type Seed } from "./seed.ts";
import {
  alreadyExists,
  ApiError,
  badRequest,
  conflict,
  exhausted,
  forbidden,
  notFound,
} from "./status.ts";
import type { AllocationRow, ClaimRow, Store } from "./store.ts";

interface Project {
  name: string;
  classes: Map<string, ClassSpec>;
  pools: PoolPlan[];
}

/** What a DELETE asks besides the name. */
export interface DeleteOptions {
  dryRun?: boolean;
  /** Injected fault: leave the claim Releasing and answer 500. */
  failRelease?: boolean;
  preconditions?: Preconditions;
}

/** RFC 3339 timestamp with whole seconds, as Kubernetes writes it. */
export function timestamp(d = new Date()): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

function randomHex(bytes: number): string {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  return [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

/** The tenants' worlds over one {@link Store}. */
export class Ipam {
  readonly #store: Store;
  readonly #allocator: Allocator;
  #projects = new Map<string, Project>();
  #tokens = new Map<string, string>();

  constructor(store: Store, seed: Seed) {
    this.#store = store;
    this.#allocator = new Allocator(store);
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
        this.#projects.set(p.name, { name: p.name, classes, pools });
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

  /** Claims of a project (one namespace, or all when `ns` is undefined). */
  listClaims(project: string, ns?: string): IPClaimObject[] {
    this.#project(project);
    return this.#store.listClaims(project, ns).map((r) => claimObject(r));
  }

  /** Creates and binds a claim in one transaction (rolled back on dry run). */
  createClaim(project: string, ns: string, body: unknown, dryRun = false): IPClaimObject {
    const p = this.#project(project);
    const req = parseClaimRequest(ns, body);
    const [className, cls] = resolveClass(p.name, p.classes, req.spec);
    const plans = p.pools.filter((x) => x.spec.classNames.includes(className));
    if (plans.length === 0) throw badRequest(`IPClass "${className}" is not served by any IPPool`);
    let picked: Pick | undefined;
    const row = this.#store.tx(() => {
      if (this.#store.getClaim(project, ns, req.name)) throw alreadyExists("ipclaims", req.name);
      picked = this.#pick(project, plans, className, cls, req);
      return this.#bind(project, ns, req, className, cls, picked);
    }, dryRun);
    if (!dryRun && picked && !req.spec.address) this.#allocator.picked(project, picked);
    return claimObject(row);
  }

  /** A pinned address, or the first free unit over the class's pools in seed order; 507 when none. */
  #pick(
    project: string,
    plans: PoolPlan[],
    className: string,
    cls: ClassSpec,
    req: ClaimRequest,
  ): Pick {
    const address = req.spec.address;
    if (address) {
      return this.#allocator.pinned(project, plans, { name: req.name, className, cls, address });
    }
    for (const plan of plans) {
      const start = this.#allocator.firstFree(project, plan);
      if (start !== undefined) return { plan, start };
    }
    const last = plans[plans.length - 1];
    const used = this.capacity(project, last).utilizationPercent;
    throw exhausted(last.name, className, cls.prefixLength, used);
  }

  /** Writes the claim and its allocation for the picked unit (inside the create's tx). */
  #bind(
    project: string,
    ns: string,
    req: ClaimRequest,
    className: string,
    cls: ClassSpec,
    picked: Pick,
  ): ClaimRow {
    const fam = cls.ipFamily;
    const { address, prefixLength, scope } = req.spec;
    // Milo overwrites ownerRef with the caller's project and keeps only the client's uid.
    const spec: ClaimSpec = {
      className,
      ipFamily: fam,
      ...(address === undefined ? {} : { address }),
      ...(prefixLength === undefined ? {} : { prefixLength }),
      ...(scope === undefined ? {} : { scope }),
      reclaimPolicy: req.spec.reclaimPolicy ?? "Delete",
      ownerRef: {
        apiGroup: "resourcemanager.miloapis.com",
        kind: "Project",
        name: project,
        ...(req.spec.ownerUid === undefined ? {} : { uid: req.spec.ownerUid }),
      },
    };
    const rv = this.#store.nextRV();
    const created = timestamp();
    const cidr = formatCIDR(fam, picked.start, cls.prefixLength);
    const claim: ClaimRow = {
      project,
      namespace: ns,
      name: req.name,
      uid: crypto.randomUUID(),
      rv,
      created,
      labels: JSON.stringify(req.labels),
      annotations: JSON.stringify(req.annotations),
      spec: JSON.stringify(spec),
      class_name: className,
      pool: picked.plan.name,
      cidr,
      address: cls.prefixLength === familyBits(fam) ? formatIP(fam, picked.start) : "",
      alloc_name: `alloc-${randomHex(8)}`,
      phase: "Bound",
    };
    const allocation: AllocationRow = {
      project,
      namespace: ns,
      name: claim.alloc_name,
      uid: crypto.randomUUID(),
      rv,
      created,
      pool: claim.pool,
      start: ipKey(picked.start),
      prefix: cls.prefixLength,
      family: fam,
      cidr,
      class_name: className,
      claim_name: claim.name,
      claim_uid: claim.uid,
      labels: claim.labels,
      phase: "Allocated",
    };
    this.#store.insertClaim(claim);
    this.#store.insertAllocation(allocation);
    this.#store.touchPool(project, claim.pool, rv);
    return claim;
  }

  /**
   * Deletes a claim and (reclaimPolicy Delete) its allocation in one
   * transaction; answers the claim in phase Releasing. 404 when missing,
   * 409 when `preconditions` do not match. With `failRelease` the claim is
   * left in phase Releasing and a 500 is thrown.
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
    let freed: { pool: string; start: string } | undefined;
    const out = this.#store.tx(() => {
      const r = this.#claimToDelete(project, ns, name, opts.preconditions);
      const rv = this.#store.nextRV();
      const spec = JSON.parse(r.spec) as ClaimSpec;
      const alloc = this.#store.getAllocation(project, ns, r.alloc_name);
      this.#store.deleteClaim(project, ns, name);
      if (alloc && spec.reclaimPolicy !== "Retain") {
        this.#store.deleteAllocation(project, ns, r.alloc_name);
        freed = alloc;
      } else if (alloc) {
        this.#store.retainAllocation(project, ns, r.alloc_name, rv);
      }
      this.#store.touchPool(project, r.pool, rv);
      return claimObject(r, "Releasing", rv);
    }, opts.dryRun);
    if (freed && !opts.dryRun) {
      this.#allocator.freed(project, freed.pool, fromIpKey(freed.start));
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
}

/** Names of the pools of `p` that serve class `className`, in seed order. */
function poolsOf(p: Project, className: string): string[] {
  return p.pools.filter((x) => x.spec.classNames.includes(className)).map((x) => x.name);
}

function releaseFailed(name: string): ApiError {
  return new ApiError(
    500,
    "InternalError",
    `Internal error occurred: release of ipclaims.ipam.miloapis.com "${name}" did not complete; retry the delete`,
    {
      name,
      group: "ipam.miloapis.com",
      kind: "ipclaims",
      causes: [{ message: "injected release failure" }],
    },
  );
}
