/**
 * Retention settings: what a create does over a retained allocation of its
 * name, the lease sweeper's interval and grace, Go-style durations, and the
 * effective retention lease of a class drawn from a pool.
 */

/** What a claim create does when a retained allocation holds its name. */
export type Recreate = "Rebind" | "Conflict";

/** The seed's `retention` block, also admin `/retention`. */
export interface RetentionSettings {
  /**
   * `Rebind` (default): a same-name claim re-binds the retained allocation when
   * class, scope and prefix length agree (`internal/allocator/reclaim.go`).
   * `Conflict`: the earlier claim storage, 409 over any retained allocation
   * (`internal/registry/ipam/ipclaim/retain_postgres_test.go`).
   */
  recreate: Recreate;
  /**
   * How often the lease sweeper runs (Go duration); `0s` turns the timer off
   * (`cmd/ipam/serve.go` `defaultLeaseSweepInterval`: 5m).
   */
  sweepInterval: string;
  /**
   * How long an allocation stays marked Expiring before it is released, clamped
   * to the lease (`internal/allocator/sweep.go`, DefaultLeaseGrace 24h).
   */
  leaseGrace: string;
}

/** Thrown for settings that do not validate (seed or admin). */
export class RetentionError extends Error {}

/** The settings when the seed names none. */
export function defaultRetention(): RetentionSettings {
  return { recreate: "Rebind", sweepInterval: "5m", leaseGrace: "24h" };
}

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
};

/**
 * Milliseconds of a Go duration string as `metav1.Duration` carries it
 * (`"720h"`, `"1h30m"`, `"250ms"`, `"0s"`); undefined when it is not one or
 * is negative.
 */
export function parseDuration(s: unknown): number | undefined {
  if (typeof s !== "string") return undefined;
  if (s === "0") return 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;
  let ms = 0;
  let at = 0;
  while (at < s.length) {
    re.lastIndex = at;
    const m = re.exec(s);
    if (!m) return undefined;
    ms += Number(m[1]) * UNIT_MS[m[2]];
    at = re.lastIndex;
  }
  return at > 0 ? Math.round(ms) : undefined;
}

/**
 * Checks a lease field wherever one appears: a positive duration, in the
 * words of `ValidateLease` (`internal/allocator/lease.go`).
 */
export function leaseError(v: unknown, field: string): string | undefined {
  if (v === undefined) return undefined;
  const ms = parseDuration(v);
  if (ms === undefined) return `${field} must be a duration such as "30m" or "720h"`;
  if (ms <= 0) {
    return `${field} must be a positive duration; leave it unset for no expiry, and use reclaimPolicy Delete to release immediately`;
  }
  return undefined;
}

/**
 * Merges a JSON patch (seed block or admin body) into `base` and validates
 * the result; unknown keys are refused.
 */
export function mergeRetention(base: RetentionSettings, patch: unknown): RetentionSettings {
  if (patch === undefined || patch === null) return { ...base };
  if (typeof patch !== "object" || Array.isArray(patch)) {
    throw new RetentionError("retention must be an object");
  }
  const out = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (k === "recreate") {
      if (v !== "Rebind" && v !== "Conflict") {
        throw new RetentionError('retention.recreate must be "Rebind" or "Conflict"');
      }
      out.recreate = v;
    } else if (k === "sweepInterval" || k === "leaseGrace") {
      if (parseDuration(v) === undefined) {
        throw new RetentionError(`retention.${k} must be a duration such as "30s" or "24h"`);
      }
      out[k] = v as string;
    } else {
      throw new RetentionError(`retention has no setting ${JSON.stringify(k)}`);
    }
  }
  return out;
}

/**
 * The lease of an allocation of a class from a pool: the shorter of the
 * class's `retentionLease` and the pool's `maxRetentionLease`; undefined
 * (held until released) when neither is set (`EffectiveLease` in
 * `internal/allocator/lease.go`).
 */
export function effectiveLease(classLease: unknown, poolCap: unknown): number | undefined {
  const c = classLease === undefined ? undefined : parseDuration(classLease);
  const p = poolCap === undefined ? undefined : parseDuration(poolCap);
  if (c === undefined) return p;
  return p === undefined ? c : Math.min(c, p);
}

/** What one sweep pass did (`SweepResult` in `internal/allocator/sweep.go`). */
export interface SweepResult {
  /** Retained allocations examined. */
  candidates: number;
  /** Newly past their lease and marked Expiring. */
  marked: number;
  /** Past lease and grace and released. */
  released: number;
  /** Held indefinitely: no lease applies. */
  noLease: number;
}

/** The sweeper's timer: one pass every `sweepInterval`, restarted when it changes. */
export class SweepTimer {
  #timer?: ReturnType<typeof setInterval>;
  readonly #pass: () => void;

  constructor(pass: () => void) {
    this.#pass = pass;
  }

  /** (Re)starts the timer at `settings.sweepInterval`; `0s` leaves it stopped. */
  start(settings: RetentionSettings): void {
    this.stop();
    const ms = parseDuration(settings.sweepInterval) ?? 0;
    if (ms > 0) this.#timer = setInterval(this.#pass, Math.max(ms, 10));
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
