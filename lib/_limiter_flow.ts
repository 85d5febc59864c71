/**
 * One flow of the agent's limiter (lib/limiter.ts): the requests of one
 * purpose (leasing or releasing) for one network of one tenant, or the node
 * reconcile's. A flow adapts to what Milo answers its own requests:
 *
 * - **Concurrency** (AIMD): at most `limit` requests in flight, 2 at first;
 *   +1/limit per timely answer to a request the limits held back, x0.7 on
 *   overload and on a late answer (one that took over half its timeout, or
 *   none before it). A request holds its slot until it is answered or times
 *   out, as a congestion window holds what is unacknowledged: Milo's priority
 *   and fairness queues what it cannot serve at once, so answers come as fast
 *   as Milo serves them and the flow sends no faster.
 * - **Rate** (AIMD): unlimited until Milo answers 429 or 503 to a busy flow;
 *   then 0.7x what Milo admitted of it in the last second, x0.7 on each later
 *   overload, +2/rate per answer, unlimited again at 500/s or after a minute
 *   without overload. It paces the flow's slots only while more than one call
 *   competes in it: one call alone is paced by its own answers.
 * - **Retry-After, full jitter**: a 429 or 503 pauses the flow for a
 *   uniformly random time in [0, Retry-After] (1 s without one, 60 s at
 *   most); then one request probes alone. Its refusal pauses again (no
 *   further cut), its answer reopens the slots. Answers to requests sent
 *   before the pause began are old news.
 *
 * A flow is **busy** when requests of more than one call wait or are in
 * flight in it: only then can its own sending be what Milo refused, so only
 * then does a refusal cut its limits. A call alone, retrying its own refused
 * request, only pauses.
 */

/**
 * What Milo answered one attempt: its HTTP status (`error`: none), its
 * `Retry-After`, and whether it came late (after half the attempt's timeout,
 * or not at all before it).
 */
export interface Outcome {
  status: number | "error";
  retryAfterMs?: number;
  late?: boolean;
}

/** Counted events: a request waited for a slot, failed at its deadline unsent, a pause, a cut. */
export type LimiterEvent = "queued" | "expired" | "paused" | "cut";

/** The limiter's parameters (see the module comment). */
export const LIMITS = Object.freeze({
  initialConcurrency: 2,
  maxConcurrency: 64,
  /** Multiplicative decrease of rate and concurrency on overload. */
  decrease: 0.7,
  /** Additive increase of the rate: requests/s gained per second of sending at it. */
  increasePerS: 2,
  /** The first rate: this share of what Milo admitted in the last second. */
  firstShare: 0.7,
  minRate: 1,
  /** A rate this high is no limit: the limiter drops it. */
  maxRate: 500,
  /** How far back Milo's admitted requests are counted for the first rate. */
  acceptWindowMs: 1_000,
  /** The pause (jittered) after a 429 or 503 without Retry-After, and the most honoured. */
  defaultPauseMs: 1_000,
  maxPauseMs: 60_000,
  /** Another cut needs an admitted request since the last, or this long. */
  cutHoldMs: 1_000,
  /** Without overload for this long, the rate is unlimited again. */
  quietMs: 60_000,
  /** Flows kept at most; past it, idle flows are forgotten whatever they learned. */
  maxFlows: 1_024,
});

/** True for Milo's overload answers. */
const isOverload = (s: number | "error") => s === 429 || s === 503;

/** A slot granted and not yet answered: when, and for which call. */
interface Out {
  at: number;
  call: object;
}

/** One flow's limits and what it has in flight. */
export class Flow {
  /** The slots still unanswered. */
  readonly out: Out[] = [];
  /** Requests of this flow waiting in the node's queue, by call. */
  readonly waiting = new Map<object, number>();
  #limit: number = LIMITS.initialConcurrency;
  #rate = Infinity;
  /** When the next slot may start by the rate. */
  #nextAt = 0;
  /** Counts the pauses: an answer to a slot granted before the last one is old news. */
  #epoch = 0;
  pauseUntil = -Infinity;
  #probing = false;
  /** The probe is out: nothing else of the flow goes until it is answered. */
  #probeOut = false;
  #lastCut = -Infinity;
  #admittedSinceCut = true;
  #lastOverload = -Infinity;
  /** When Milo admitted the requests of the last {@link LIMITS.acceptWindowMs}. */
  #admitted: number[] = [];

  constructor(
    readonly now: () => number,
    readonly random: () => number,
    readonly onEvent: (e: LimiterEvent) => void,
  ) {}

  /** The allowed rate in requests/s (Infinity: none). */
  get rate(): number {
    return this.#rate;
  }

  /** The most requests in flight at once. */
  get concurrency(): number {
    return Math.max(1, Math.floor(this.#limit));
  }

  /** Nothing waits, nothing is in flight, no pause runs: forgetting it loses only what it learned. */
  idle(now: number): boolean {
    return !this.out.length && !this.waiting.size && now >= this.pauseUntil;
  }

  /** A late answer: the concurrency is cut when calls compete (once per cut hold), nothing paused. */
  #slow(now: number, limited: boolean, call: object): void {
    if (!limited && !this.busyBesides(call)) return;
    if (!this.#admittedSinceCut && now - this.#lastCut < LIMITS.cutHoldMs) return;
    this.#lastCut = now;
    this.#admittedSinceCut = false;
    this.#limit = Math.max(1, this.#limit * LIMITS.decrease);
    this.onEvent("cut");
  }

  /** Nothing waits or is in flight and it has learned nothing: forgetting it loses nothing. */
  fresh(now: number): boolean {
    return this.idle(now) && this.#rate === Infinity && this.#limit <= LIMITS.initialConcurrency;
  }

  /** True when requests of a call other than `call` wait or are in flight here. */
  busyBesides(call: object): boolean {
    for (const c of this.waiting.keys()) if (c !== call) return true;
    return this.out.some((o) => o.call !== call);
  }

  /** Forgets the rate limit after a quiet minute. */
  refresh(now: number): void {
    if (this.#rate !== Infinity && now - this.#lastOverload >= LIMITS.quietMs) {
      this.#rate = Infinity;
    }
  }

  /**
   * When a request of `call` may start: after the pause, at the paced rate
   * while other calls compete; Infinity while the concurrency is taken (or
   * the probe is out): an answer frees it.
   */
  freeAt(call: object): number {
    if (this.out.length >= this.concurrency || this.#probeOut) return Infinity;
    return this.busyBesides(call) ? Math.max(this.pauseUntil, this.#nextAt) : this.pauseUntil;
  }

  /**
   * Grants a slot to a request of `call` now; `waited`: it was not granted on
   * arrival. Answers the slot's `done`.
   */
  grant(now: number, call: object, waited: boolean): (o: Outcome) => void {
    const busy = this.busyBesides(call);
    // The limits held it back, or would have, while others competed: only such answers raise them.
    const limited = busy &&
      (waited || this.waiting.size > 0 || this.out.length + 1 >= this.concurrency);
    const mine: Out = { at: now, call };
    this.out.push(mine);
    const probe = this.#probing;
    if (probe) this.#probeOut = true;
    if (this.#rate !== Infinity && busy) {
      this.#nextAt = Math.max(this.#nextAt, now) + 1000 / this.#rate;
    }
    const epoch = this.#epoch;
    return (o: Outcome) => {
      const i = this.out.indexOf(mine);
      if (i >= 0) this.out.splice(i, 1);
      if (probe) this.#probeOut = false;
      this.#answered(o, epoch, probe, limited, call);
    };
  }

  /** Adapts the limits to one answer. */
  #answered(o: Outcome, epoch: number, probe: boolean, limited: boolean, call: object): void {
    const now = this.now();
    // A late answer while calls compete: Milo queues what this flow sends; send less.
    if (o.late && !isOverload(o.status) && epoch === this.#epoch) this.#slow(now, limited, call);
    if (o.status === "error" || (o.status >= 500 && !isOverload(o.status))) {
      if (probe) this.#probing = false;
      return;
    }
    if (!isOverload(o.status)) {
      if (probe) this.#probing = false;
      this.#admitted.push(now);
      while (now - this.#admitted[0] >= LIMITS.acceptWindowMs) this.#admitted.shift();
      // Sent before the last pause: it says nothing of the limits set since.
      if (!limited || o.late || epoch !== this.#epoch) return;
      this.#admittedSinceCut = true;
      this.#limit = Math.min(LIMITS.maxConcurrency, this.#limit + 1 / this.#limit);
      if (this.#rate !== Infinity) {
        this.#rate += LIMITS.increasePerS / this.#rate;
        if (this.#rate >= LIMITS.maxRate) this.#rate = Infinity;
      }
      return;
    }
    this.#lastOverload = now;
    // Sent before the last pause began: that pause (and its cut) answered it already.
    if (epoch !== this.#epoch) return;
    const pauseMs = Math.min(LIMITS.maxPauseMs, o.retryAfterMs ?? LIMITS.defaultPauseMs);
    this.#epoch++;
    this.pauseUntil = Math.max(this.pauseUntil, now + this.random() * pauseMs);
    this.#probing = true;
    this.onEvent("paused");
    // A call alone did not cause the overload; one refused probe is no new news.
    const busy = limited || this.busyBesides(call);
    const due = this.#admittedSinceCut || now - this.#lastCut >= LIMITS.cutHoldMs;
    if (!busy || !due) return;
    this.#lastCut = now;
    this.#admittedSinceCut = false;
    this.#limit = Math.max(1, this.#limit * LIMITS.decrease);
    while (now - this.#admitted[0] >= LIMITS.acceptWindowMs) this.#admitted.shift();
    const admitted = this.#admitted.length * 1000 / LIMITS.acceptWindowMs;
    this.#rate = Math.max(
      LIMITS.minRate,
      this.#rate === Infinity ? admitted * LIMITS.firstShare : this.#rate * LIMITS.decrease,
    );
    this.onEvent("cut");
  }
}
