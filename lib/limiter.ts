/**
 * The agent's limiter of Milo requests. Every call the agent serves, and its
 * reconcile, take a slot here before each attempt (lib/milo.ts) and report
 * what Milo answered, so a node sends what Milo admits instead of resending
 * what it refused.
 *
 * Requests belong to **flows**: one per purpose (leasing: ADD, CHECK,
 * STATUS; releasing: DEL, GC, an ADD's rollback), tenant (the pod's
 * namespace) and network, and one for the node reconcile. Each flow pauses,
 * probes and adapts its rate and concurrency to Milo's answers to its own
 * requests (lib/_limiter_flow.ts): one tenant's refusals hold back neither
 * another tenant's calls nor the reconcile, and a DEL is never held back by
 * the refusals of the ADD it rolls back. Node-wide:
 *
 * - **Queue.** Requests wait for a slot; one that gets none before its
 *   deadline fails (code 11) without being sent.
 * - **Fairness.** Of the requests whose flow admits them, the tenant served
 *   least recently goes first, then the earliest deadline.
 * - **Ceiling.** At most {@link LIMITS.maxConcurrency} requests unanswered in
 *   all flows together.
 * - **A call that has answered** holds nothing: its waiting requests leave
 *   and its unanswered slots stop counting ({@link CallLimiter.close}).
 */
import { Flow, type LimiterEvent, LIMITS, type Outcome } from "./_limiter_flow.ts";
import { type Timer, timer } from "./timers.ts";

export { type LimiterEvent, LIMITS, type Outcome } from "./_limiter_flow.ts";

/** A granted slot: report the attempt's outcome once it is known (again: ignored). */
export interface Slot {
  done(outcome: Outcome): void;
}

/** What asking for a slot came to. */
export type Acquired = Slot | "deadline" | "aborted";

/** Why a request is sent: to lease (ADD, CHECK, STATUS) or to release (DEL, GC, a rollback). */
export type Purpose = "lease" | "release";

/** Whose call it is: the pod's namespace (its tenant) and the network's name. */
export interface Route {
  tenant: string;
  network: string;
}

/** The route of the node reconcile's requests: no namespace or network is named so. */
export const RECONCILE_ROUTE: Route = Object.freeze({ tenant: "(node)", network: "(reconcile)" });

/** What a Milo client asks of a limiter: a slot for one attempt. */
export interface RequestLimiter {
  /**
   * A slot for one attempt, as soon as the limits allow: `deadline` when
   * none comes before it (at once when a pause outlasts it), `aborted` when
   * `signal` aborts first. Never rejects.
   */
  acquire(deadline: number, signal?: AbortSignal, purpose?: Purpose): Promise<Acquired>;
}

/** One call's view of the node's limiter. */
export interface CallLimiter extends RequestLimiter {
  /** The call has answered: its waiting requests leave, its unanswered slots stop counting. */
  close(): void;
}

/** The limiter's clock, random and counters; everything has a default. */
export interface LimiterOptions {
  now?: () => number;
  timer?: (ms: number) => Timer;
  random?: () => number;
  onEvent?: (e: LimiterEvent) => void;
}

interface Waiter {
  flow: Flow;
  tenant: string;
  call: object;
  deadline: number;
  seq: number;
  /** It was not granted on arrival. */
  waited?: boolean;
  resolve(r: Acquired): void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** Tenants remembered for fairness at most; past it the order starts afresh. */
const MAX_TENANTS = 4_096;
/** The route of requests whose caller names none (tests, tools). */
const ANONYMOUS: Route = { tenant: "", network: "" };

/** One node's limiter; see the module comment. */
export class MiloLimiter implements RequestLimiter {
  readonly #now: () => number;
  readonly #timer: (ms: number) => Timer;
  readonly #random: () => number;
  readonly #onEvent: (e: LimiterEvent) => void;
  readonly #flows = new Map<string, Flow>();
  #queue: Waiter[] = [];
  #seq = 0;
  /** When each tenant was last granted a slot (a count of grants). */
  readonly #served = new Map<string, number>();
  #grants = 0;
  #wake: { at: number; timer: Timer } | undefined;

  constructor(o: LimiterOptions = {}) {
    this.#now = o.now ?? Date.now;
    this.#timer = o.timer ?? timer;
    this.#random = o.random ?? Math.random;
    this.#onEvent = o.onEvent ?? (() => {});
  }

  /** The lowest rate any flow allows now, in requests/s (Infinity: none). */
  get rate(): number {
    return Math.min(Infinity, ...[...this.#flows.values()].map((f) => f.rate));
  }

  /** The lowest concurrency any flow allows now. */
  get concurrency(): number {
    const all = [...this.#flows.values()].map((f) => f.concurrency);
    return all.length ? Math.min(...all) : LIMITS.initialConcurrency;
  }

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Flows remembered. */
  get flows(): number {
    return this.#flows.size;
  }

  /** A limiter for one call of `route`: its requests are one call's, until it is closed. */
  forCall(route: Route): CallLimiter {
    const call = {};
    let closed = false;
    return {
      acquire: (deadline, signal, purpose = "lease") =>
        closed ? Promise.resolve("aborted") : this.#acquire(route, purpose, call, deadline, signal),
      close: () => {
        closed = true;
        this.#forget(call);
      },
    };
  }

  /** A slot for a request of its own call, of no tenant or network. */
  acquire(deadline: number, signal?: AbortSignal, purpose: Purpose = "lease"): Promise<Acquired> {
    return this.#acquire(ANONYMOUS, purpose, {}, deadline, signal);
  }

  #acquire(
    route: Route,
    purpose: Purpose,
    call: object,
    deadline: number,
    signal: AbortSignal | undefined,
  ): Promise<Acquired> {
    if (signal?.aborted) return Promise.resolve("aborted");
    const flow = this.#flow(`${purpose}\u0000${route.tenant}\u0000${route.network}`);
    flow.refresh(this.#now());
    return new Promise((resolve) => {
      const w: Waiter = { flow, tenant: route.tenant, call, deadline, seq: this.#seq++, resolve };
      if (signal) {
        w.signal = signal;
        w.onAbort = () => {
          this.#leave(w);
          resolve("aborted");
          this.#pump();
        };
        signal.addEventListener("abort", w.onAbort, { once: true });
      }
      this.#queue.push(w);
      flow.waiting.set(call, (flow.waiting.get(call) ?? 0) + 1);
      this.#pump();
      if (this.#queue.includes(w)) {
        w.waited = true;
        this.#onEvent("queued");
      }
    });
  }

  /**
   * The flow of `key`, made when new. Past maxFlows, flows that learned
   * nothing are forgotten, then idle ones: only flows with requests waiting
   * or in flight (bounded by the calls in flight) are kept past it.
   */
  #flow(key: string): Flow {
    const known = this.#flows.get(key);
    if (known) return known;
    const now = this.#now();
    if (this.#flows.size >= LIMITS.maxFlows) {
      for (const [k, f] of this.#flows) if (f.fresh(now)) this.#flows.delete(k);
    }
    if (this.#flows.size >= LIMITS.maxFlows) {
      for (const [k, f] of this.#flows) if (f.idle(now)) this.#flows.delete(k);
    }
    const flow = new Flow(this.#now, this.#random, this.#onEvent);
    this.#flows.set(key, flow);
    return flow;
  }

  /** Takes `w` out of the queue and of its flow's count. */
  #leave(w: Waiter): void {
    const i = this.#queue.indexOf(w);
    if (i < 0) return;
    this.#queue.splice(i, 1);
    const n = (w.flow.waiting.get(w.call) ?? 1) - 1;
    if (n > 0) w.flow.waiting.set(w.call, n);
    else w.flow.waiting.delete(w.call);
  }

  /** A call has answered: its waiters leave (aborted) and its slots stop counting. */
  #forget(call: object): void {
    for (const w of this.#queue.filter((w) => w.call === call)) {
      this.#leave(w);
      this.#settle(w, "aborted");
    }
    for (const f of this.#flows.values()) {
      for (let i = f.out.length - 1; i >= 0; i--) if (f.out[i].call === call) f.out.splice(i, 1);
    }
    this.#pump();
  }

  /** Grants what the limits allow now, fails what cannot make its deadline, and sets the next wake. */
  #pump(): void {
    const now = this.#now();
    for (const w of [...this.#queue]) {
      if (w.deadline > Math.max(now, w.flow.pauseUntil)) continue;
      this.#leave(w);
      this.#settle(w, "deadline");
      this.#onEvent("expired");
    }
    while (this.#nodeFreeAt(now) <= now) {
      const w = this.#next(now);
      if (!w) break;
      this.#grant(w, now);
    }
    this.#schedule(now);
  }

  /** The waiter to grant now: its flow admits it; the tenant served least recently, then EDF. */
  #next(now: number): Waiter | undefined {
    let best: Waiter | undefined;
    let bestServed = Infinity;
    for (const w of this.#queue) {
      if (w.flow.freeAt(w.call) > now) continue;
      const served = this.#served.get(w.tenant) ?? -1;
      if (
        !best || served < bestServed ||
        (served === bestServed && before(w, best))
      ) [best, bestServed] = [w, served];
    }
    return best;
  }

  /** When the node-wide ceiling admits another request: now, or once an answer frees a slot. */
  #nodeFreeAt(now: number): number {
    let out = 0;
    for (const f of this.#flows.values()) out += f.out.length;
    return out < LIMITS.maxConcurrency ? now : Infinity;
  }

  #grant(w: Waiter, now: number): void {
    this.#leave(w);
    const done = w.flow.grant(now, w.call, !!w.waited);
    if (this.#served.size >= MAX_TENANTS && !this.#served.has(w.tenant)) this.#served.clear();
    this.#served.set(w.tenant, ++this.#grants);
    let open = true;
    this.#settle(w, {
      done: (o: Outcome) => {
        if (!open) return;
        open = false;
        done(o);
        this.#pump();
      },
    });
  }

  #settle(w: Waiter, r: Acquired): void {
    if (w.onAbort) w.signal?.removeEventListener("abort", w.onAbort);
    w.resolve(r);
  }

  /** Wakes at the next grant or the next deadline, whichever is first; not at all when idle. */
  #schedule(now: number): void {
    if (!this.#queue.length) {
      this.#wake?.timer.cancel();
      this.#wake = undefined;
      return;
    }
    const node = this.#nodeFreeAt(now);
    let at = Infinity;
    for (const w of this.#queue) {
      at = Math.min(at, w.deadline, Math.max(node, w.flow.freeAt(w.call)));
    }
    if (this.#wake && this.#wake.at <= at && this.#wake.at > now) return;
    this.#wake?.timer.cancel();
    this.#wake = undefined;
    // Only answers can free a slot now: the next one pumps.
    if (at === Infinity) return;
    const t = this.#timer(at - now);
    this.#wake = { at, timer: t };
    t.done.then(() => {
      if (this.#wake?.timer === t) this.#wake = undefined;
      this.#pump();
    });
  }
}

/** Earliest deadline first; first come first among equals. */
function before(a: Waiter, b: Waiter): boolean {
  return a.deadline < b.deadline || (a.deadline === b.deadline && a.seq < b.seq);
}
