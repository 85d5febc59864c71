/**
 * The real server's allocation ceiling: claim creates beyond N per second
 * are answered 429 (`TooManyRequests`, `Retry-After`) before they are handled.
 *
 * Milo's allocator runs on a pgx pool capped at 10 connections, which its
 * `cmd/ipam/serve.go` puts at a soft ceiling of ~370 synchronous allocations
 * per second per API server: beyond it creates queue and slow down, and with
 * API Priority and Fairness on, an overloaded Milo answers 429. milo-dev
 * makes that ceiling a hard one, without the queue.
 *
 * The window is a sliding one second (a log of the admission times, not a
 * token bucket): no one-second span ever admits more than N creates, and the
 * N+1st within the same second is refused whatever the spacing of the first
 * N, which keeps the behaviour exact and testable.
 */

/** Milo's soft ceiling per API server (`cmd/ipam/serve.go`: MaxConns 10 × ~37/s). */
export const DEFAULT_ALLOCATIONS_PER_SECOND = 370;

/** The largest ceiling accepted (0 is unlimited). */
export const MAX_ALLOCATIONS_PER_SECOND = 1_000_000;

const WINDOW_MS = 1_000;

/** Run-time limits, served at admin `/limits`. */
export interface Limits {
  /** Claim creates (POST `namespaces/{ns}/ipclaims`) admitted per sliding second; 0: unlimited. */
  allocationsPerSecond: number;
  /**
   * LISTs honour `limit` and `continue` (Kubernetes' paging); false answers
   * every matching item at once, as Milo's Postgres store does (`GetList`,
   * `internal/storage/postgres/store.go`, reads neither). Absent: true.
   */
  pagedLists?: boolean;
  /**
   * A claim DELETE checks its DeleteOptions `preconditions` (Kubernetes'
   * stores do); false deletes the claim of that name whatever they say, as
   * Milo's `AllocatingREST.Delete` does (`internal/registry/ipam/ipclaim/
   * storage.go` reads the claim by name and never looks at them). Absent: true.
   */
  checkedPreconditions?: boolean;
}

/** The limits milo-dev starts with unless told otherwise. */
export function defaultLimits(): Limits {
  return { allocationsPerSecond: DEFAULT_ALLOCATIONS_PER_SECOND };
}

/** Thrown for a limits document that does not validate. */
export class LimitsError extends Error {}

/** Checks an `allocationsPerSecond` value (a CLI flag or a JSON field). */
export function checkAllocationsPerSecond(v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > MAX_ALLOCATIONS_PER_SECOND) {
    throw new LimitsError(
      `allocationsPerSecond must be an integer in 0..${MAX_ALLOCATIONS_PER_SECOND} (0: unlimited)`,
    );
  }
  return v;
}

/** Merges a JSON patch into `base`, validating every field. */
export function mergeLimits(base: Limits, patch: unknown): Limits {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) {
    throw new LimitsError("body must be a JSON object");
  }
  const out: Limits = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (k === "allocationsPerSecond") out.allocationsPerSecond = checkAllocationsPerSecond(v);
    else if (k === "pagedLists" || k === "checkedPreconditions") {
      if (typeof v !== "boolean") throw new LimitsError(`${k} must be true or false`);
      out[k] = v;
    } else throw new LimitsError(`unknown limit "${k}"`);
  }
  return out;
}

/** What {@link AllocationCeiling.admit} decided. */
export type Admission = { admitted: true } | { admitted: false; retryAfterSeconds: number };

/** The allocation ceiling: a sliding one-second window over the admitted creates. */
export class AllocationCeiling {
  #limits: Limits;
  readonly #now: () => number;
  /** Admission times (ms, ascending) from `#head` on; older ones are dropped. */
  #times: number[] = [];
  #head = 0;

  constructor(limits: Limits = defaultLimits(), now: () => number = () => performance.now()) {
    this.#limits = { ...limits };
    this.#now = now;
  }

  /** The limits in force. */
  get(): Limits {
    return { ...this.#limits };
  }

  /**
   * Puts new limits in force at once. Creates admitted in the last second
   * still count against a new ceiling (whatever the old one was).
   */
  set(l: Limits): void {
    this.#limits = { ...l };
  }

  /** Admits one create now, or answers how long to wait (whole seconds, ≥ 1). */
  admit(): Admission {
    const now = this.#now();
    this.#expire(now);
    const n = this.#limits.allocationsPerSecond;
    const inWindow = this.#times.length - this.#head;
    if (n > 0 && inWindow >= n) {
      // The window has room again when the admission n places back leaves it.
      const frees = this.#times[this.#times.length - n] + WINDOW_MS;
      return { admitted: false, retryAfterSeconds: Math.max(1, Math.ceil((frees - now) / 1_000)) };
    }
    this.#times.push(now);
    return { admitted: true };
  }

  #expire(now: number): void {
    const t = this.#times;
    while (this.#head < t.length && t[this.#head] <= now - WINDOW_MS) this.#head++;
    if (this.#head > 1_024 && this.#head * 2 > t.length) {
      this.#times = t.slice(this.#head);
      this.#head = 0;
    }
  }
}
