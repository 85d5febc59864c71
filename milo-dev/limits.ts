/**
 * Run-time limits and behaviour switches (admin `/limits`), and the
 * allocation ceiling: the throughput of claim creates, a sliding one-second
 * window over the admission times.
 *
 * Milo's allocator runs on a pgx pool capped at 10 connections, which its
 * `cmd/ipam/serve.go` puts at a soft ceiling of ~370 synchronous allocations
 * per second per API server (~37 per connection). A create beyond it waits:
 * in API Priority and Fairness' queue in front of the server (apf.ts), which
 * admits it once the window has room. The window is a log of admission
 * times, not a token bucket: no one-second span ever admits more than N.
 */

/** Milo's soft ceiling per API server (`cmd/ipam/serve.go`: MaxConns 10 × ~37/s). */
export const DEFAULT_ALLOCATIONS_PER_SECOND = 370;

/** The largest ceiling accepted (0 is unlimited). */
export const MAX_ALLOCATIONS_PER_SECOND = 1_000_000;

/**
 * Most requests of one flow (one token) APF queues: Kubernetes' default
 * priority levels queue by shuffle sharding, a hand of 6 queues of at most 50
 * requests each (`handSize: 6`, `queueLengthLimit: 50` of `global-default` and
 * `workload-low`).
 */
export const DEFAULT_QUEUE_LENGTH = 300;

/**
 * Seats of the priority level a tenant's token lands in: requests running at
 * once. Kubernetes' apiserver shares its concurrency limit (600:
 * `--max-requests-inflight` 400 + `--max-mutating-requests-inflight` 200)
 * among the suggested priority levels by their shares (system 30, node-high
 * 40, leader-election 10, workload-high 40, workload-low 100, global-default
 * 20, catch-all 5: `pkg/apis/flowcontrol/bootstrap/default.go`); a token that
 * is no Kubernetes service account falls to `global-default`:
 * ceil(600 × 20 / 245) = 49.
 */
export const DEFAULT_CONCURRENCY = 49;

/**
 * How long a request may wait in APF's queue: a quarter of the apiserver's
 * 60 s `--request-timeout` (the `requestWaitLimit` k8s.io/apiserver gives APF).
 */
export const DEFAULT_QUEUE_WAIT_MS = 15_000;

const WINDOW_MS = 1_000;

/**
 * Run-time limits, served at admin `/limits`. The boolean switches are off
 * by default, as Milo behaves; a test that needs milo-dev's kinder behaviour
 * turns one on and says why.
 */
export interface Limits {
  /** Claim creates (POST `namespaces/{ns}/ipclaims`) admitted per sliding second; 0: unlimited. */
  allocationsPerSecond: number;
  /** Requests running at once (APF's seats, every verb); 0: no limit. */
  concurrency: number;
  /** Requests of one flow APF holds while it has no seat or room; 0: every one past them is refused. */
  queueLength: number;
  /** How long a queued request waits before it is refused (ms). */
  queueWaitMs: number;
  /**
   * LISTs honour `limit` and `continue` (Kubernetes' paging). Off, as Milo:
   * its Postgres store (`GetList`, `internal/storage/postgres/store.go`)
   * reads neither and answers every matching item at once.
   */
  pagedLists: boolean;
  /**
   * A claim DELETE checks its DeleteOptions `preconditions` (409, as
   * Kubernetes' stores do). Off, as Milo: `AllocatingREST.Delete`
   * (`internal/registry/ipam/ipclaim/storage.go`) reads the claim by name
   * and never looks at them.
   */
  checkedPreconditions: boolean;
  /**
   * A tenant's GET and LIST of `ipclasses` answer its project's seeded
   * classes. Off, as Milo: the catalog lives in the platform project
   * (`ipclass/storage.go` `validateClassAuthorship`), and a tenant's read
   * goes through its own key space, which holds none.
   */
  tenantClasses: boolean;
  /**
   * Two overlapping creates of one name: the later answers 409 as if it came
   * after. Off, as Milo: both pass the reclaim probe and the loser's
   * allocation insert fails, 500 (`ipclaim/storage.go` Create; inferred from
   * the order of its phases).
   */
  sameNameRaceConflict: boolean;
}

/** The boolean switches of {@link Limits}. */
const SWITCHES = [
  "pagedLists",
  "checkedPreconditions",
  "tenantClasses",
  "sameNameRaceConflict",
] as const;

/** The limits milo-dev starts with unless told otherwise: Milo's. */
export function defaultLimits(): Limits {
  return {
    allocationsPerSecond: DEFAULT_ALLOCATIONS_PER_SECOND,
    concurrency: DEFAULT_CONCURRENCY,
    queueLength: DEFAULT_QUEUE_LENGTH,
    queueWaitMs: DEFAULT_QUEUE_WAIT_MS,
    pagedLists: false,
    checkedPreconditions: false,
    tenantClasses: false,
    sameNameRaceConflict: false,
  };
}

/** Thrown for a limits document that does not validate. */
export class LimitsError extends Error {}

function integer(v: unknown, key: string, max: number, unit = ""): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > max) {
    throw new LimitsError(`${key} must be an integer in 0..${max}${unit}`);
  }
  return v;
}

/** Checks an `allocationsPerSecond` value (a CLI flag or a JSON field). */
export function checkAllocationsPerSecond(v: unknown): number {
  return integer(v, "allocationsPerSecond", MAX_ALLOCATIONS_PER_SECOND, " (0: unlimited)");
}

/** Merges a JSON patch into `base`, validating every field. */
export function mergeLimits(base: Limits, patch: unknown): Limits {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) {
    throw new LimitsError("body must be a JSON object");
  }
  const out: Limits = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (k === "allocationsPerSecond") out.allocationsPerSecond = checkAllocationsPerSecond(v);
    else if (k === "concurrency") out.concurrency = integer(v, k, 100_000, " (0: no limit)");
    else if (k === "queueLength") out.queueLength = integer(v, k, 100_000);
    else if (k === "queueWaitMs") out.queueWaitMs = integer(v, k, 600_000, " (ms)");
    else if ((SWITCHES as readonly string[]).includes(k)) {
      if (typeof v !== "boolean") throw new LimitsError(`${k} must be true or false`);
      out[k as typeof SWITCHES[number]] = v;
    } else throw new LimitsError(`unknown limit "${k}"`);
  }
  return out;
}

/** What {@link AllocationCeiling.admit} decided: admitted, or when the window has room (ms). */
export type Admission = { admitted: true } | { admitted: false; waitMs: number };

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

  /** Admits one create now, or answers how long until the window has room (ms, > 0). */
  admit(): Admission {
    const now = this.#now();
    this.#expire(now);
    const n = this.#limits.allocationsPerSecond;
    const inWindow = this.#times.length - this.#head;
    if (n > 0 && inWindow >= n) {
      // The window has room again when the admission n places back leaves it.
      const frees = this.#times[this.#times.length - n] + WINDOW_MS;
      return { admitted: false, waitMs: Math.max(1, frees - now) };
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
