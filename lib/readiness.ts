/**
 * The agent's probes. Readiness (the STATUS rule): Milo answered a request
 * with the node's token accepted lately, else one check now, its failure
 * answered a while before Milo is asked again. Liveness: the agent's socket
 * is there and its own.
 */
import { untrustedSocket } from "./owned.ts";

/**
 * How long an answer of Milo that accepted the node's token keeps the agent
 * ready: an idle node asks Milo once per this for its readiness.
 */
export const READY_FRESH_MS = 300_000;
/** How long a failed readiness check is answered again before Milo is asked again. */
export const READY_RETRY_MS = 10_000;

/** Whether Milo accepts the node's token, from the answers seen and, when stale, a check. */
export class Readiness {
  /** When Milo last answered a request with the node's token accepted (ms since epoch). */
  #provenAt = 0;
  /** The last check made here, and what it found (null: ready). */
  #checked: { at: number; failure: string | null } | undefined;
  #checking: Promise<string | null> | undefined;
  readonly #check: () => Promise<string | null>;

  /** `check` asks Milo once (null: it accepted the node's token, else why not). */
  constructor(check: () => Promise<string | null>) {
    this.#check = check;
  }

  /** Notes one of Milo's answers: 401/403 end readiness, any other answered request proves it. */
  observe(status: number | "error"): void {
    if (status === 401 || status === 403) this.#provenAt = 0;
    else if (typeof status === "number" && status < 500 && status !== 408 && status !== 429) {
      this.#provenAt = Date.now();
    }
  }

  /** The probe: null while ready, else why not (see the module's rule). */
  probe(): Promise<string | null> {
    const now = Date.now();
    if (now - this.#provenAt < READY_FRESH_MS) return Promise.resolve(null);
    const c = this.#checked;
    if (c && c.failure !== null && now - c.at < READY_RETRY_MS) return Promise.resolve(c.failure);
    this.#checking ??= this.#check().then((failure) => {
      this.#checked = { at: Date.now(), failure };
      if (failure === null) this.#provenAt = Date.now();
      return failure;
    }).finally(() => this.#checking = undefined);
    return this.#checking;
  }
}

/** The liveness probe: null while the agent's socket at `path` is there and its own. */
export function socketLiveness(path: string): string | null {
  try {
    Deno.lstatSync(path);
  } catch {
    return `the agent socket ${path} is gone`;
  }
  return untrustedSocket(path) ?? null;
}
