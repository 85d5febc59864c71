/** IPAM domain: tenants, classes, pools, claims, FirstFit allocation. */

import {
  blockSize,
  ceilDiv,
  familyBits,
  formatCIDR,
  formatIP,
  fromIpKey,
  type IPFamily,
  ipKey,
  parseIP,
  percent4,
} from "./ipmath.ts";
import { type ClassSpec, planPool, type PoolPlan, type Seed } from "./seed.ts";
import type { AllocationRow, ClaimRow, ObjectRow, Store } from "./store.ts";
import {
  alreadyExists,
  ApiError,
  badRequest,
  conflict,
  exhausted,
  type FieldCause,
  forbidden,
  invalid,
  notFound,
} from "./status.ts";

/** API group/version of every IPAM kind. */
export const API_VERSION = "ipam.miloapis.com/v1alpha1";

// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

interface Project {
  name: string;
  classes: Map<string, ClassSpec>;
  pools: PoolPlan[];
}

/** Capacity of a pool in units of its class prefix. */
export interface Capacity {
  total: bigint;
  allocated: bigint;
  available: bigint;
  reserved: bigint;
  utilizationPercent: number;
}

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;
const CLAIM_SPEC_KEYS = [
  "className",
  "ipFamily",
  "address",
  "prefixLength",
  "scope",
  "reclaimPolicy",
  "ownerRef",
];

/** RFC 3339 timestamp with whole seconds, as Kubernetes writes it. */
export function timestamp(d = new Date()): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

function randomHex(bytes: number): string {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  return [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function qualifiedNameError(key: string): string | undefined {
  const slash = key.lastIndexOf("/");
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined && (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))) {
    return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'";
  }
  if (name.length === 0 || name.length > 63) return "name part must be no more than 63 characters";
  if (!LABEL_NAME.test(name)) {
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
  }
  return undefined;
}

function validateMeta(meta: Obj, causes: FieldCause[]): void {
  for (const field of ["labels", "annotations"] as const) {
    const m = meta[field];
    if (m === undefined || m === null) continue;
    if (!isObj(m)) {
      causes.push({
        field: `metadata.${field}`,
        value: String(m),
        detail: "must be a map of strings",
      });
      continue;
    }
    for (const [k, v] of Object.entries(m)) {
      const kerr = qualifiedNameError(k);
      if (kerr) causes.push({ field: `metadata.${field}`, value: k, detail: kerr });
      if (typeof v !== "string") {
        causes.push({ field: `metadata.${field}`, value: String(v), detail: "must be a string" });
      } else if (field === "labels" && v.length > 63) {
        causes.push({
          field: "metadata.labels",
          value: v,
          detail: "must be no more than 63 characters",
        });
      } else if (field === "labels" && !LABEL_VALUE.test(v)) {
        causes.push({
          field: "metadata.labels",
          value: v,
          detail:
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        });
      }
    }
  }
}

/** The tenants' worlds over one {@link Store}. */
export class Ipam {
  readonly store: Store;
  #projects = new Map<string, Project>();
  #tokens = new Map<string, string>();
  #hints = new Map<string, bigint>();

  constructor(store: Store, seed: Seed) {
    this.store = store;
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

  #applySeed(seed: Seed): void {
    const now = timestamp();
    this.store.tx(() => {
      const keep = { classes: new Set<string>(), pools: new Set<string>() };
      for (const p of seed.projects) {
        const classes = new Map(p.ipClasses.map((c) => [c.metadata.name, c.spec]));
        const pools = p.ipPools.map((o) => planPool(o.metadata.name, o.spec, classes));
        this.#projects.set(p.name, { name: p.name, classes, pools });
        for (const t of p.tokens) this.#tokens.set(t, p.name);
        p.ipClasses.forEach((c, i) => {
          this.#upsert("classes", p.name, c.metadata.name, c.spec, i, now);
          keep.classes.add(`${p.name}\0${c.metadata.name}`);
        });
        p.ipPools.forEach((o, i) => {
          this.#upsert("pools", p.name, o.metadata.name, o.spec, i, now);
          keep.pools.add(`${p.name}\0${o.metadata.name}`);
        });
      }
      for (const table of ["classes", "pools"] as const) {
        const rows = this.store.sql(`SELECT project, name FROM ${table}`)
          .all() as unknown as ObjectRow[];
        for (const r of rows) {
          if (!keep[table].has(`${r.project}\0${r.name}`)) {
            this.store.sql(`DELETE FROM ${table} WHERE project = ? AND name = ?`).run(
              r.project,
              r.name,
            );
          }
        }
      }
    });
  }

  #upsert(
    table: "classes" | "pools",
    project: string,
    name: string,
    spec: unknown,
    ord: number,
    now: string,
  ): void {
    const json = JSON.stringify(spec);
    const row = this.store.sql(`SELECT spec FROM ${table} WHERE project = ? AND name = ?`).get(
      project,
      name,
    ) as
      | { spec: string }
      | undefined;
    if (!row) {
      this.store.sql(
        `INSERT INTO ${table} (project, name, uid, rv, created, spec, ord) VALUES (?, ?, ?, ?, ?, ?, ?)`,
      ).run(project, name, crypto.randomUUID(), this.store.nextRV(), now, json, ord);
    } else if (row.spec !== json) {
      this.store.sql(`UPDATE ${table} SET spec = ?, rv = ?, ord = ? WHERE project = ? AND name = ?`)
        .run(json, this.store.nextRV(), ord, project, name);
    } else {
      this.store.sql(`UPDATE ${table} SET ord = ? WHERE project = ? AND name = ?`).run(
        ord,
        project,
        name,
      );
    }
  }

  #project(name: string): Project {
    const p = this.#projects.get(name);
    if (!p) throw forbidden("projects", name, "unknown project", "resourcemanager.miloapis.com");
    return p;
  }

  // ---- IPClass / IPPool -------------------------------------------------

  #classObject(r: ObjectRow, p: Project): Obj {
    const pools = p.pools.filter((x) => x.spec.classNames.includes(r.name)).map((x) => x.name);
    return {
      apiVersion: API_VERSION,
      kind: "IPClass",
      metadata: objectMeta(r),
      spec: JSON.parse(r.spec),
      status: { phase: "Ready", poolNames: pools },
    };
  }

  /** One IPClass, or undefined. */
  getClass(project: string, name: string): Obj | undefined {
    const p = this.#project(project);
    const r = this.store.sql("SELECT * FROM classes WHERE project = ? AND name = ?").get(
      project,
      name,
    ) as
      | ObjectRow
      | undefined;
    return r && this.#classObject(r, p);
  }

  /** All IPClasses of a project. */
  listClasses(project: string): Obj[] {
    const p = this.#project(project);
    const rows = this.store.sql("SELECT * FROM classes WHERE project = ? ORDER BY name").all(
      project,
    ) as unknown as ObjectRow[];
    return rows.map((r) => this.#classObject(r, p));
  }

  #bounds(plan: PoolPlan) {
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

  /** Capacity of a pool, counted from the database now. */
  capacity(project: string, plan: PoolPlan): Capacity {
    const b = this.#bounds(plan);
    const row = this.store.sql(
      "SELECT count(*) AS n FROM allocations WHERE project = ? AND pool = ?",
    )
      .get(project, plan.name) as { n: number };
    let allocated = b.reserved + BigInt(row.n);
    if (allocated > b.total) allocated = b.total;
    return {
      total: b.total,
      allocated,
      available: b.total - allocated,
      reserved: b.reserved,
      utilizationPercent: percent4(allocated, b.total),
    };
  }

  /** Pool plans of a project, in seed order. */
  poolPlans(project: string): PoolPlan[] {
    return this.#project(project).pools;
  }

  #poolObject(project: string, r: ObjectRow, plan: PoolPlan): Obj {
    const c = this.capacity(project, plan);
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

  /** One IPPool with live status, or undefined. */
  getPool(project: string, name: string): Obj | undefined {
    const plan = this.#project(project).pools.find((x) => x.name === name);
    const r = this.store.sql("SELECT * FROM pools WHERE project = ? AND name = ?").get(
      project,
      name,
    ) as
      | ObjectRow
      | undefined;
    return r && plan && this.#poolObject(project, r, plan);
  }

  /** All IPPools of a project with live status. */
  listPools(project: string): Obj[] {
    const p = this.#project(project);
    const rows = this.store.sql("SELECT * FROM pools WHERE project = ? ORDER BY name").all(
      project,
    ) as unknown as ObjectRow[];
    return rows.flatMap((r) => {
      const plan = p.pools.find((x) => x.name === r.name);
      return plan ? [this.#poolObject(project, r, plan)] : [];
    });
  }

  // ---- IPClaim ----------------------------------------------------------

  /** The wire object of a stored claim. */
  claimObject(r: ClaimRow, phase = r.phase, rv = r.rv): Obj {
    const metadata = objectMeta({ ...r, rv });
    const labels = JSON.parse(r.labels);
    const annotations = JSON.parse(r.annotations);
    if (Object.keys(labels).length) metadata.labels = labels;
    if (Object.keys(annotations).length) metadata.annotations = annotations;
    const status: Obj = { phase, allocatedCIDR: r.cidr };
    if (r.address) status.address = r.address;
    status.poolRef = { name: r.pool };
    status.boundAllocationRef = { name: r.alloc_name };
    return { apiVersion: API_VERSION, kind: "IPClaim", metadata, spec: JSON.parse(r.spec), status };
  }

  #claimRow(project: string, ns: string, name: string): ClaimRow | undefined {
    return this.store.sql("SELECT * FROM claims WHERE project = ? AND namespace = ? AND name = ?")
      .get(project, ns, name) as ClaimRow | undefined;
  }

  /** One claim, or a 404. */
  getClaim(project: string, ns: string, name: string): Obj {
    this.#project(project);
    const r = this.#claimRow(project, ns, name);
    if (!r) throw notFound("ipclaims", name);
    return this.claimObject(r);
  }

  /** Claims of a project (one namespace, or all when `ns` is undefined). */
  listClaims(project: string, ns?: string): Obj[] {
    this.#project(project);
    const rows =
      (ns === undefined
        ? this.store.sql("SELECT * FROM claims WHERE project = ? ORDER BY namespace, name").all(
          project,
        )
        : this.store.sql("SELECT * FROM claims WHERE project = ? AND namespace = ? ORDER BY name")
          .all(
            project,
            ns,
          )) as unknown as ClaimRow[];
    return rows.map((r) => this.claimObject(r));
  }

  #validateClaim(ns: string, body: unknown): { name: string; meta: Obj; spec: Obj } {
    if (!isObj(body)) throw badRequest("the request body must be a JSON object");
    if (body.apiVersion !== undefined && body.apiVersion !== API_VERSION) {
      throw badRequest(
        `the API version in the data (${body.apiVersion}) does not match the expected API version (${API_VERSION})`,
      );
    }
    if (body.kind !== undefined && body.kind !== "IPClaim") {
      throw badRequest(
        `the kind in the data (${body.kind}) does not match the expected kind (IPClaim)`,
      );
    }
    const meta: Obj = isObj(body.metadata) ? body.metadata : {};
    if (meta.namespace !== undefined && meta.namespace !== "" && meta.namespace !== ns) {
      throw badRequest(
        "the namespace of the provided object does not match the namespace sent on the request",
      );
    }
    const name = typeof meta.name === "string" ? meta.name : "";
    const causes: FieldCause[] = [];
    if (name === "") {
      causes.push({
        field: "metadata.name",
        type: "Required",
        detail: "name is required (metadata.generateName is not supported)",
      });
    } else if (name.length > 253) {
      causes.push({
        field: "metadata.name",
        value: name,
        detail: "must be no more than 253 characters",
      });
    } else if (!DNS1123_SUBDOMAIN.test(name)) {
      causes.push({
        field: "metadata.name",
        value: name,
        detail:
          "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
      });
    }
    validateMeta(meta, causes);
    const spec = body.spec;
    if (!isObj(spec)) causes.push({ field: "spec", type: "Required" });
    else {
      const rp = spec.reclaimPolicy;
      if (rp !== undefined && rp !== "Delete" && rp !== "Retain") {
        causes.push({
          field: "spec.reclaimPolicy",
          type: "Unsupported",
          value: String(rp),
          detail: 'supported values: "Delete", "Retain"',
        });
      }
      for (const k of ["className", "ipFamily", "address"]) {
        if (spec[k] !== undefined && typeof spec[k] !== "string") {
          causes.push({ field: `spec.${k}`, value: String(spec[k]), detail: "must be a string" });
        }
      }
      if (spec.ipFamily !== undefined && spec.ipFamily !== "IPv4" && spec.ipFamily !== "IPv6") {
        causes.push({
          field: "spec.ipFamily",
          type: "Unsupported",
          value: String(spec.ipFamily),
          detail: 'supported values: "IPv4", "IPv6"',
        });
      }
      if (spec.prefixLength !== undefined && !Number.isInteger(spec.prefixLength)) {
        causes.push({
          field: "spec.prefixLength",
          value: String(spec.prefixLength),
          detail: "must be an integer",
        });
      }
      if (spec.scope !== undefined) {
        if (!isObj(spec.scope)) {
          causes.push({ field: "spec.scope", value: String(spec.scope), detail: "must be a map" });
        } else {
          for (const [role, ref] of Object.entries(spec.scope)) {
            if (!isObj(ref) || typeof ref.name !== "string" || ref.name === "") {
              causes.push({ field: `spec.scope.${role}.name`, type: "Required" });
            }
          }
        }
      }
    }
    if (causes.length) throw invalid("IPClaim", name, causes);
    return { name, meta, spec: spec as Obj };
  }

  #resolveClass(p: Project, spec: Obj): [string, ClassSpec] {
    let className: string | undefined = spec.className || undefined;
    if (!className) {
      const defaults = [...p.classes].filter(([, c]) =>
        c.default && (spec.ipFamily === undefined || spec.ipFamily === c.ipFamily)
      );
      if (defaults.length !== 1) {
        throw badRequest(
          `spec.className is empty and there is no default IPClass${
            spec.ipFamily ? ` for ${spec.ipFamily}` : ""
          }`,
        );
      }
      className = defaults[0][0];
    }
    const cls = p.classes.get(className);
    if (!cls) throw badRequest(`IPClass "${className}" not found`);
    if (cls.consumers && !cls.consumers.includes(p.name)) {
      throw forbidden("ipclasses", className, "caller may not claim addresses of this class");
    }
    if (spec.ipFamily !== undefined && spec.ipFamily !== cls.ipFamily) {
      throw badRequest(
        `spec.ipFamily "${spec.ipFamily}" does not match IPClass "${className}" (${cls.ipFamily})`,
      );
    }
    if (spec.prefixLength !== undefined && spec.prefixLength !== cls.prefixLength) {
      throw badRequest(
        `prefix length /${spec.prefixLength} is not allowed by IPClass "${className}" (allowed: /${cls.prefixLength})`,
      );
    }
    for (const role of cls.requiredScopeRoles ?? []) {
      if (!isObj(spec.scope) || !isObj(spec.scope[role])) {
        throw badRequest(`IPClass "${className}" requires scope role "${role}"`);
      }
    }
    return [className, cls];
  }

  #firstFree(project: string, plan: PoolPlan): bigint | undefined {
    const b = this.#bounds(plan);
    const hint = this.#hints.get(`${project}\0${plan.name}`);
    let cand = hint !== undefined && hint > b.first ? hint : b.first;
    const stmt = this.store.sql(
      "SELECT start FROM allocations WHERE project = ? AND pool = ? AND start >= ? ORDER BY start LIMIT 512",
    );
    for (let batch = 0; cand + b.unit <= b.limit; batch++) {
      const rows = stmt.all(project, plan.name, ipKey(cand)) as { start: string }[];
      let gap = false;
      for (const r of rows) {
        const s = fromIpKey(r.start);
        if (s > cand) {
          gap = true;
          break;
        }
        if (s === cand) cand += b.unit;
      }
      if (gap || rows.length < 512) break;
    }
    return cand + b.unit <= b.limit ? cand : undefined;
  }

  #pinned(
    project: string,
    plans: PoolPlan[],
    className: string,
    cls: ClassSpec,
    claimName: string,
    address: string,
  ) {
    const slash = address.indexOf("/");
    const ip = parseIP(slash >= 0 ? address.slice(0, slash) : address);
    if (!ip) throw badRequest(`spec.address "${address}" is not an IP address`);
    if (slash >= 0 && address.slice(slash + 1) !== String(cls.prefixLength)) {
      throw badRequest(
        `spec.address "${address}" does not have the prefix length of IPClass "${className}"`,
      );
    }
    if (ip.family !== cls.ipFamily) {
      throw badRequest(
        `spec.address "${address}" is not ${cls.ipFamily} as IPClass "${className}" requires`,
      );
    }
    if (ip.value % blockSize(ip.family, cls.prefixLength) !== 0n) {
      throw badRequest(`spec.address "${address}" is not aligned to /${cls.prefixLength}`);
    }
    for (const plan of plans) {
      const b = this.#bounds(plan);
      const end = plan.cidr.base + blockSize(ip.family, plan.cidr.prefix);
      if (ip.value < plan.cidr.base || ip.value >= end) continue;
      if (ip.value < b.first || ip.value + b.unit > b.limit) {
        throw badRequest(`spec.address "${address}" is reserved in IPPool "${plan.name}"`);
      }
      const taken = this.store.sql(
        "SELECT 1 FROM allocations WHERE project = ? AND pool = ? AND start = ?",
      )
        .get(project, plan.name, ipKey(ip.value));
      if (taken) {
        throw conflict(
          "ipclaims",
          claimName,
          `address ${formatIP(ip.family, ip.value)} is already allocated`,
        );
      }
      return { plan, start: ip.value };
    }
    throw badRequest(`spec.address "${address}" is not in any IPPool of IPClass "${className}"`);
  }

  /** Creates and binds a claim in one transaction (rolled back on dry run). */
  createClaim(project: string, ns: string, body: unknown, dryRun = false): Obj {
    const p = this.#project(project);
    const { name, meta, spec } = this.#validateClaim(ns, body);
    const [className, cls] = this.#resolveClass(p, spec);
    const plans = p.pools.filter((x) => x.spec.classNames.includes(className));
    if (plans.length === 0) throw badRequest(`IPClass "${className}" is not served by any IPPool`);
    const fam: IPFamily = cls.ipFamily;
    let picked: { plan: PoolPlan; start: bigint } | undefined;
    const row = this.store.tx(() => {
      if (this.#claimRow(project, ns, name)) throw alreadyExists("ipclaims", name);
      if (spec.address) {
        picked = this.#pinned(project, plans, className, cls, name, spec.address);
      } else {
        for (const plan of plans) {
          const start = this.#firstFree(project, plan);
          if (start !== undefined) {
            picked = { plan, start };
            break;
          }
        }
      }
      if (!picked) {
        const last = plans[plans.length - 1];
        throw exhausted(
          last.name,
          className,
          cls.prefixLength,
          this.capacity(project, last).utilizationPercent,
        );
      }
      const rv = this.store.nextRV();
      const now = timestamp();
      const ownerRef: Obj = {
        apiGroup: "resourcemanager.miloapis.com",
        kind: "Project",
        name: project,
      };
      if (isObj(spec.ownerRef) && typeof spec.ownerRef.uid === "string") {
        ownerRef.uid = spec.ownerRef.uid;
      }
      const finalSpec: Obj = { className, ipFamily: fam };
      for (const k of CLAIM_SPEC_KEYS) {
        if (k !== "className" && k !== "ipFamily" && k !== "ownerRef" && spec[k] !== undefined) {
          finalSpec[k] = spec[k];
        }
      }
      finalSpec.reclaimPolicy = spec.reclaimPolicy ?? "Delete";
      finalSpec.ownerRef = ownerRef;
      const cidr = formatCIDR(fam, picked.start, cls.prefixLength);
      const single = cls.prefixLength === familyBits(fam);
      const r: ClaimRow = {
        project,
        namespace: ns,
        name,
        uid: crypto.randomUUID(),
        rv,
        created: now,
        labels: JSON.stringify(meta.labels ?? {}),
        annotations: JSON.stringify(meta.annotations ?? {}),
        spec: JSON.stringify(finalSpec),
        class_name: className,
        pool: picked.plan.name,
        cidr,
        address: single ? formatIP(fam, picked.start) : "",
        alloc_name: `alloc-${randomHex(8)}`,
        phase: "Bound",
      };
      this.store.sql(
        `INSERT INTO claims (project, namespace, name, uid, rv, created, labels, annotations, spec,
           class_name, pool, cidr, address, alloc_name, phase)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        r.project,
        r.namespace,
        r.name,
        r.uid,
        r.rv,
        r.created,
        r.labels,
        r.annotations,
        r.spec,
        r.class_name,
        r.pool,
        r.cidr,
        r.address,
        r.alloc_name,
        r.phase,
      );
      this.store.sql(
        `INSERT INTO allocations (project, namespace, name, uid, rv, created, pool, start, prefix, family,
           cidr, class_name, claim_name, claim_uid, labels, phase)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'Allocated')`,
      ).run(
        project,
        ns,
        r.alloc_name,
        crypto.randomUUID(),
        rv,
        now,
        r.pool,
        ipKey(picked.start),
        cls.prefixLength,
        fam,
        cidr,
        className,
        name,
        r.uid,
        r.labels,
      );
      this.store.sql("UPDATE pools SET rv = ? WHERE project = ? AND name = ?").run(
        rv,
        project,
        r.pool,
      );
      return r;
    }, dryRun);
    if (!dryRun && picked && !spec.address) {
      this.#hints.set(
        `${project}\0${picked.plan.name}`,
        picked.start + this.#bounds(picked.plan).unit,
      );
    }
    return this.claimObject(row);
  }

  /**
   * Deletes a claim and (reclaimPolicy Delete) its allocation in one
   * transaction; answers the claim in phase Releasing. With `failRelease`
   * the claim is left in phase Releasing and a 500 is thrown.
   */
  deleteClaim(
    project: string,
    ns: string,
    name: string,
    opts: { dryRun?: boolean; failRelease?: boolean } = {},
  ): Obj {
    this.#project(project);
    if (opts.failRelease) {
      this.store.tx(() => {
        if (!this.#claimRow(project, ns, name)) throw notFound("ipclaims", name);
        this.store.sql(
          "UPDATE claims SET phase = 'Releasing', rv = ? WHERE project = ? AND namespace = ? AND name = ?",
        )
          .run(this.store.nextRV(), project, ns, name);
      });
      throw new ApiError(
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
    let freed: { pool: string; start: bigint } | undefined;
    const out = this.store.tx(() => {
      const r = this.#claimRow(project, ns, name);
      if (!r) throw notFound("ipclaims", name);
      const rv = this.store.nextRV();
      const spec = JSON.parse(r.spec);
      const alloc = this.store.sql(
        "SELECT * FROM allocations WHERE project = ? AND namespace = ? AND name = ?",
      )
        .get(project, ns, r.alloc_name) as AllocationRow | undefined;
      this.store.sql("DELETE FROM claims WHERE project = ? AND namespace = ? AND name = ?").run(
        project,
        ns,
        name,
      );
      if (alloc && spec.reclaimPolicy !== "Retain") {
        this.store.sql("DELETE FROM allocations WHERE project = ? AND namespace = ? AND name = ?")
          .run(project, ns, r.alloc_name);
        freed = { pool: alloc.pool, start: fromIpKey(alloc.start) };
      } else if (alloc) {
        this.store.sql(
          "UPDATE allocations SET phase = 'Retained', rv = ? WHERE project = ? AND namespace = ? AND name = ?",
        )
          .run(rv, project, ns, r.alloc_name);
      }
      this.store.sql("UPDATE pools SET rv = ? WHERE project = ? AND name = ?").run(
        rv,
        project,
        r.pool,
      );
      return this.claimObject(r, "Releasing", rv);
    }, opts.dryRun);
    if (freed && !opts.dryRun) {
      const key = `${project}\0${freed.pool}`;
      const hint = this.#hints.get(key);
      if (hint === undefined || freed.start < hint) this.#hints.set(key, freed.start);
    }
    return out;
  }

  // ---- IPAllocation -----------------------------------------------------

  #allocationObject(r: AllocationRow): Obj {
    const metadata = objectMeta(r);
    const labels = JSON.parse(r.labels);
    if (Object.keys(labels).length) metadata.labels = labels;
    if (r.claim_name && r.phase === "Allocated") {
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
        claimRef: { namespace: r.namespace, name: r.claim_name, uid: r.claim_uid },
      },
      status: { phase: r.phase },
    };
  }

  /** One allocation, or a 404. */
  getAllocation(project: string, ns: string, name: string): Obj {
    this.#project(project);
    const r = this.store.sql(
      "SELECT * FROM allocations WHERE project = ? AND namespace = ? AND name = ?",
    )
      .get(project, ns, name) as AllocationRow | undefined;
    if (!r) throw notFound("ipallocations", name);
    return this.#allocationObject(r);
  }

  /** Allocations of a project (one namespace, or all). */
  listAllocations(project: string, ns?: string): Obj[] {
    this.#project(project);
    const rows =
      (ns === undefined
        ? this.store.sql("SELECT * FROM allocations WHERE project = ? ORDER BY namespace, name")
          .all(project)
        : this.store.sql(
          "SELECT * FROM allocations WHERE project = ? AND namespace = ? ORDER BY name",
        ).all(
          project,
          ns,
        )) as unknown as AllocationRow[];
    return rows.map((r) => this.#allocationObject(r));
  }
}

/** `metadata` of a stored object (namespace only for namespaced rows). */
function objectMeta(
  r: { name: string; namespace?: string; uid: string; rv: number; created: string },
): Obj {
  return {
    name: r.name,
    ...(r.namespace === undefined ? {} : { namespace: r.namespace }),
    uid: r.uid,
    resourceVersion: String(r.rv),
    creationTimestamp: r.created,
  };
}
