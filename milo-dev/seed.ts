/** Seed file: tenants, their bearer tokens, IPClasses and IPPools. */

import { blockSize, type CIDR, type IPFamily, parseCIDR } from "./ipmath.ts";
import { labelError, subdomainError } from "./names.ts";
import {
  defaultRetention,
  leaseError,
  mergeRetention,
  RetentionError,
  type RetentionSettings,
} from "./retention.ts";

/** IPClass spec as seeded (see milo-dev/README.md). */
export interface ClassSpec {
  ipFamily: IPFamily;
  prefixLength: number;
  requiredScopeRoles?: string[];
  /**
   * Milo's `spec.visibility`: `consumer` or `shared` a tenant may name;
   * `platform`, or unset, no tenant may (`AuthorizeClassConsumption`, gate 2).
   */
  visibility?: "platform" | "consumer" | "shared";
  /** The projects whose tokens hold `use` on the class (gate 3, Milo's SAR); unset: none. */
  consumers?: string[];
  /** Milo's `spec.poolPer`: a container class, which no claim may name (gate 1). */
  poolPer?: string[];
  default?: boolean;
  /** Milo's `spec.strategy`: which pool serves a claim (`preferPool`, `internal/allocator/cascade.go`). */
  allocationStrategy?: "FirstFit" | "LeastUtilized";
  /** The policy of claims that name none (Milo's class default); `Delete` when unset. */
  reclaimPolicy?: "Delete" | "Retain";
  /** How long a retained allocation of this class waits (Go duration, e.g. `720h`); unset: forever. */
  retentionLease?: string;
  [k: string]: unknown;
}

/** IPPool spec as seeded. */
export interface PoolSpec {
  cidr: string;
  ipFamily: IPFamily;
  classNames: string[];
  reservations?: { leading?: number; trailing?: number; unitPrefixLength?: number };
  /** Caps the retention lease of every class drawn from this pool (Go duration). */
  maxRetentionLease?: string;
  [k: string]: unknown;
}

/** One seeded object: a name and a spec. */
export interface Seeded<S> {
  metadata: { name: string; labels?: Record<string, string> };
  spec: S;
}

/** A namespace of a project's control plane, and whether it is being deleted. */
export interface SeedNamespace {
  name: string;
  terminating: boolean;
}

/** Milo's default `ipclaims-per-project` (`serviceconfiguration.yaml` of milo-os/ipam). */
export const DEFAULT_IPCLAIMS_QUOTA = 100;

/** One tenant project. */
export interface SeedProject {
  name: string;
  tokens: string[];
  /** The project's `ipclaims-per-project` quota: IPClaims it may hold (default 100). */
  quota: number;
  /** The namespaces claims may be made in (Milo refuses others, 403); default `default`. */
  namespaces: SeedNamespace[];
  ipClasses: Seeded<ClassSpec>[];
  ipPools: Seeded<PoolSpec>[];
}

/** The whole seed document. */
export interface Seed {
  projects: SeedProject[];
  /** Reclaim behaviour and the lease sweeper (see retention.ts). */
  retention: RetentionSettings;
}

/** A pool with its parsed CIDR and the unit it is carved into. */
export interface PoolPlan {
  name: string;
  spec: PoolSpec;
  cidr: CIDR;
  unitPrefix: number;
}

/** Thrown for a seed that does not validate. */
export class SeedError extends Error {}

function fail(where: string, what: string): never {
  throw new SeedError(`seed: ${where}: ${what}`);
}

function nameOf(o: unknown, where: string): string {
  const n = (o as { metadata?: { name?: unknown }; name?: unknown })?.metadata
    ?.name ?? (o as { name?: unknown })?.name;
  if (typeof n !== "string" || subdomainError(n)) fail(where, "needs metadata.name (DNS-1123)");
  return n;
}

function family(v: unknown, where: string): IPFamily {
  if (v !== "IPv4" && v !== "IPv6") {
    fail(where, `ipFamily must be IPv4 or IPv6, got ${JSON.stringify(v)}`);
  }
  return v;
}

function strings(v: unknown, where: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string")) {
    fail(where, "must be a list of strings");
  }
  return v;
}

/** Validates a parsed seed document and returns it normalised. */
export function validateSeed(doc: unknown): Seed {
  const projects = (doc as { projects?: unknown })?.projects;
  if (!Array.isArray(projects) || projects.length === 0) {
    fail("projects", "must be a non-empty list");
  }
  const tokens = new Set<string>();
  const names = new Set<string>();
  const out: SeedProject[] = projects.map((p, i) => {
    const name = nameOf(p, `projects[${i}]`);
    if (names.has(name)) fail(`project ${name}`, "duplicate project");
    names.add(name);
    const toks = strings(p.tokens, `project ${name}.tokens`);
    for (const t of toks) {
      if (tokens.has(t)) fail(`project ${name}`, "a token may map to one project only");
      if (!/^[\x21-\x7e]+$/.test(t)) {
        fail(`project ${name}`, "tokens are printable ASCII without spaces");
      }
      tokens.add(t);
    }
    const classes = ((p.ipClasses ?? []) as unknown[]).map((c, j) => {
      const cn = nameOf(c, `project ${name}.ipClasses[${j}]`);
      const w = `IPClass ${name}/${cn}`;
      const spec = { ...((c as { spec?: ClassSpec }).spec ?? {}) } as ClassSpec;
      spec.ipFamily = family(spec.ipFamily, w);
      const bits = spec.ipFamily === "IPv4" ? 32 : 128;
      if (
        !Number.isInteger(spec.prefixLength) || spec.prefixLength < 1 || spec.prefixLength > bits
      ) {
        fail(w, `prefixLength must be an integer in 1..${bits}`);
      }
      strings(spec.requiredScopeRoles, `${w}.requiredScopeRoles`);
      if (spec.consumers !== undefined) strings(spec.consumers, `${w}.consumers`);
      if (spec.poolPer !== undefined) strings(spec.poolPer, `${w}.poolPer`);
      const vis = spec.visibility;
      if (vis !== undefined && vis !== "platform" && vis !== "consumer" && vis !== "shared") {
        fail(w, "visibility must be platform, consumer or shared");
      }
      const st = spec.allocationStrategy;
      if (st !== undefined && st !== "FirstFit" && st !== "LeastUtilized") {
        fail(w, "allocationStrategy must be FirstFit or LeastUtilized");
      }
      const rp = spec.reclaimPolicy;
      if (rp !== undefined && rp !== "Delete" && rp !== "Retain") {
        fail(w, "reclaimPolicy must be Delete or Retain");
      }
      const le = leaseError(spec.retentionLease, "retentionLease");
      if (le) fail(w, le);
      return { metadata: { name: cn }, spec };
    });
    const classMap = new Map(classes.map((c) => [c.metadata.name, c.spec]));
    if (classMap.size !== classes.length) fail(`project ${name}`, "duplicate IPClass name");
    const pools = ((p.ipPools ?? []) as unknown[]).map((o, j) => {
      const pn = nameOf(o, `project ${name}.ipPools[${j}]`);
      const spec = { ...((o as { spec?: PoolSpec }).spec ?? {}) } as PoolSpec;
      planPool(pn, spec, classMap);
      return { metadata: { name: pn }, spec };
    });
    const plans = pools.map((o) => planPool(o.metadata.name, o.spec, classMap));
    if (new Set(plans.map((x) => x.name)).size !== plans.length) {
      fail(`project ${name}`, "duplicate IPPool name");
    }
    for (const a of plans) {
      for (const b of plans) {
        if (a === b || a.cidr.family !== b.cidr.family) continue;
        const aEnd = a.cidr.base + blockSize(a.cidr.family, a.cidr.prefix);
        const bEnd = b.cidr.base + blockSize(b.cidr.family, b.cidr.prefix);
        if (a.cidr.base < bEnd && b.cidr.base < aEnd) {
          fail(`project ${name}`, `IPPools ${a.name} and ${b.name} overlap`);
        }
      }
    }
    const namespaces = namespacesOf(p.namespaces, `project ${name}.namespaces`);
    const quota = p.quota ?? DEFAULT_IPCLAIMS_QUOTA;
    if (!Number.isSafeInteger(quota) || quota < 0) {
      fail(
        `project ${name}.quota`,
        "must be a non-negative integer (IPClaims the project may hold)",
      );
    }
    return { name, tokens: toks, quota, namespaces, ipClasses: classes, ipPools: pools };
  });
  let retention: RetentionSettings;
  try {
    retention = mergeRetention(defaultRetention(), (doc as { retention?: unknown }).retention);
  } catch (err) {
    if (err instanceof RetentionError) fail("retention", err.message);
    throw err;
  }
  return { projects: out, retention };
}

/** A project's namespaces: names (DNS-1123 labels) or `{name, terminating}`; default `default`. */
function namespacesOf(v: unknown, where: string): SeedNamespace[] {
  if (v === undefined) return [{ name: "default", terminating: false }];
  if (!Array.isArray(v)) fail(where, "must be a list of names or {name, terminating}");
  const out = v.map((n, i) => {
    const o = typeof n === "string" ? { name: n } : n as { name?: unknown; terminating?: unknown };
    if (typeof o?.name !== "string" || labelError(o.name)) {
      fail(`${where}[${i}]`, "needs a name that is a DNS-1123 label");
    }
    if (o.terminating !== undefined && typeof o.terminating !== "boolean") {
      fail(`${where}[${i}]`, "terminating must be true or false");
    }
    return { name: o.name, terminating: o.terminating === true };
  });
  if (new Set(out.map((n) => n.name)).size !== out.length) fail(where, "duplicate namespace");
  return out;
}

/** Checks a pool against its classes and returns its allocation plan. */
export function planPool(name: string, spec: PoolSpec, classes: Map<string, ClassSpec>): PoolPlan {
  const w = `IPPool ${name}`;
  if (typeof spec.cidr !== "string") fail(w, "needs spec.cidr");
  const cidr = parseCIDR(spec.cidr);
  if (!cidr) {
    fail(w, `spec.cidr ${JSON.stringify(spec.cidr)} is not a network address in CIDR form`);
  }
  spec.ipFamily = spec.ipFamily === undefined ? cidr.family : family(spec.ipFamily, w);
  if (spec.ipFamily !== cidr.family) fail(w, "ipFamily does not match cidr");
  spec.classNames = strings(spec.classNames, `${w}.classNames`);
  const prefixes = new Set<number>();
  for (const cn of spec.classNames) {
    const c = classes.get(cn);
    if (!c) fail(w, `classNames names unknown IPClass ${cn}`);
    if (c.ipFamily !== cidr.family) {
      fail(w, `IPClass ${cn} is ${c.ipFamily}, pool is ${cidr.family}`);
    }
    if (c.prefixLength < cidr.prefix) {
      fail(w, `IPClass ${cn} prefix /${c.prefixLength} is larger than the pool`);
    }
    prefixes.add(c.prefixLength);
  }
  if (prefixes.size > 1) fail(w, "all classes of one pool must share one prefixLength");
  const le = leaseError(spec.maxRetentionLease, "maxRetentionLease");
  if (le) fail(w, le);
  const r = spec.reservations ?? {};
  const bits = cidr.family === "IPv4" ? 32 : 128;
  const unitPrefix = [...prefixes][0] ?? r.unitPrefixLength ?? bits;
  for (const k of ["leading", "trailing"] as const) {
    const v = r[k];
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 0)) {
      fail(w, `reservations.${k} must be a non-negative integer`);
    }
  }
  const up = r.unitPrefixLength;
  if (up !== undefined && (!Number.isInteger(up) || up < cidr.prefix || up > bits)) {
    fail(w, `reservations.unitPrefixLength must be in ${cidr.prefix}..${bits}`);
  }
  return { name, spec, cidr, unitPrefix };
}

/** Reads a seed file: `.yaml`/`.yml` as YAML, anything else as JSON. */
export async function loadSeedFile(path: string): Promise<Seed> {
  const text = await Deno.readTextFile(path);
  let doc: unknown;
  try {
    if (/\.ya?ml$/i.test(path)) {
      const { load } = await import("js-yaml");
      doc = load(text);
    } else doc = JSON.parse(text);
  } catch (err) {
    throw new SeedError(`seed: ${path}: ${err instanceof Error ? err.message : err}`);
  }
  return validateSeed(doc);
}
