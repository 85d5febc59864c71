/** Run-time fault injection: latency, error answers, resets, hangs, down. */

/** Bounds every fault respects. */
export const LIMITS = {
  latencyMs: 10_000,
  latencyJitterMs: 10_000,
  hangMs: 60_000,
  retryAfterSeconds: 3_600,
} as const;

/** Fault settings; everything off by default. */
export interface Faults {
  /** Added delay before every API request is handled (ms, ≤ 10 s). */
  latencyMs: number;
  /** Extra uniformly random delay on top of latencyMs (ms, ≤ 10 s). */
  latencyJitterMs: number;
  /** Share (0..1) of requests answered with one of errorStatuses. */
  errorRate: number;
  /** Statuses to answer with: 429 or 500..599 (picked at random). */
  errorStatuses: number[];
  /** Retry-After (seconds) sent with 429 and 503. */
  retryAfterSeconds: number;
  /** Share (0..1) of requests whose connection is destroyed. */
  resetRate: number;
  /** Share (0..1) of requests that get no answer for hangMs, then a closed connection. */
  hangRate: number;
  /** How long a hung request is held (ms, ≤ 60 s). */
  hangMs: number;
  /** Share (0..1) of claim DELETEs that fail with 500 leaving the claim Releasing. */
  releaseFailRate: number;
  /** "before": fault instead of handling; "after": handle (commit), then fault the answer. */
  faultPoint: "before" | "after";
  /** Only these methods are faulted (empty: all). */
  methods: string[];
  /** Only these resources (ipclaims, ipallocations, ipclasses, ippools) are faulted (empty: all). */
  kinds: string[];
  /** Listener closed: connections are refused until cleared. */
  down: boolean;
  /** PRNG seed for the rates; null picks a random one. */
  seed: number | null;
}

/** The default (no faults). */
export function defaultFaults(): Faults {
  return {
    latencyMs: 0,
    latencyJitterMs: 0,
    errorRate: 0,
    errorStatuses: [503],
    retryAfterSeconds: 1,
    resetRate: 0,
    hangRate: 0,
    hangMs: 30_000,
    releaseFailRate: 0,
    faultPoint: "before",
    methods: [],
    kinds: [],
    down: false,
    seed: null,
  };
}

/** Thrown for a fault document that does not validate. */
export class FaultError extends Error {}

function num(v: unknown, key: string, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) {
    throw new FaultError(`${key} must be a number in ${min}..${max}`);
  }
  return v;
}

/** Merges a JSON patch into `base`, validating every field. */
export function mergeFaults(base: Faults, patch: unknown): Faults {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) {
    throw new FaultError("body must be a JSON object");
  }
  const out: Faults = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    switch (k) {
      case "latencyMs":
      case "latencyJitterMs":
      case "hangMs":
      case "retryAfterSeconds":
        out[k] = Math.round(num(v, k, 0, LIMITS[k]));
        break;
      case "errorRate":
      case "resetRate":
      case "hangRate":
      case "releaseFailRate":
        out[k] = num(v, k, 0, 1);
        break;
      case "errorStatuses":
        if (
          !Array.isArray(v) || v.length === 0 ||
          v.some((s) => s !== 429 && !(Number.isInteger(s) && s >= 500 && s <= 599))
        ) throw new FaultError("errorStatuses must be a non-empty list of 429 or 5xx");
        out.errorStatuses = [...v];
        break;
      case "faultPoint":
        if (v !== "before" && v !== "after") {
          throw new FaultError('faultPoint must be "before" or "after"');
        }
        out.faultPoint = v;
        break;
      case "methods":
      case "kinds":
        if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) {
          throw new FaultError(`${k} must be a list of strings`);
        }
        out[k] = k === "methods" ? v.map((s) => s.toUpperCase()) : [...v];
        break;
      case "down":
        if (typeof v !== "boolean") throw new FaultError("down must be a boolean");
        out.down = v;
        break;
      case "seed":
        if (v !== null && !Number.isSafeInteger(v)) {
          throw new FaultError("seed must be an integer or null");
        }
        out.seed = v as number | null;
        break;
      default:
        throw new FaultError(`unknown fault "${k}"`);
    }
  }
  return out;
}

/** What to do to one request. */
export interface Decision {
  delayMs: number;
  action: "none" | "error" | "reset" | "hang";
  status: number;
  failRelease: boolean;
}

/** Current faults plus a seeded PRNG that draws decisions. */
export class FaultState {
  #faults = defaultFaults();
  #rand = mulberry32(randomSeed());

  /** The settings in force. */
  get(): Faults {
    return structuredClone(this.#faults);
  }

  /** Replaces the settings (and re-seeds the PRNG). */
  set(f: Faults): void {
    this.#faults = f;
    this.#rand = mulberry32(f.seed ?? randomSeed());
  }

  /** Draws the decision for one API request. */
  decide(method: string, kind: string): Decision {
    const f = this.#faults;
    const none: Decision = { delayMs: 0, action: "none", status: 0, failRelease: false };
    if (f.methods.length && !f.methods.includes(method)) return none;
    if (f.kinds.length && !f.kinds.includes(kind)) return none;
    const d = { ...none };
    d.delayMs = Math.min(
      f.latencyMs + (f.latencyJitterMs ? this.#rand() * f.latencyJitterMs : 0),
      20_000,
    );
    if (f.resetRate && this.#rand() < f.resetRate) d.action = "reset";
    else if (f.hangRate && this.#rand() < f.hangRate) d.action = "hang";
    else if (f.errorRate && this.#rand() < f.errorRate) {
      d.action = "error";
      d.status = f.errorStatuses[Math.floor(this.#rand() * f.errorStatuses.length)];
    }
    if (d.action === "none" && method === "DELETE" && kind === "ipclaims") {
      d.failRelease = f.releaseFailRate > 0 && this.#rand() < f.releaseFailRate;
    }
    return d;
  }
}

function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
