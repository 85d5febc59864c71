/**
 * The agent's node-wide limiter of Milo requests. Every call the agent serves,
 * and its reconcile, take a slot here before each attempt (lib/milo.ts) and
 * report what Milo answered, so a node sends what Milo admits instead of
 * resending what it refused:
 *
 * - **Queue.** Requests wait for a slot, earliest deadline first; one that
 *   gets none before its deadline fails (code 11) without being sent.
 * - **Concurrency** (AIMD): at most `limit` requests in flight, 2 at first;
 *   +1/limit per answer to a request the limits held back, x0.7 on overload.
 *   It bounds what a node sends before Milo's first refusal reaches it. A
 *   request unanswered for 100 ms stops counting (a slow or hung Milo still
 *   gets `limit` requests per 100 ms).
 * - **Rate** (AIMD): unlimited until Milo answers 429 or 503 to a busy node;
 *   then 0.7x what Milo admitted in the last second, x0.7 on each later
 *   overload, +2/rate per answer (+2 requests/s per second of sending at the
 *   rate), unlimited again at 500/s or after a minute without overload. Slots
 *   are paced at the rate, one at a time.
 * - **Retry-After, full jitter, node-wide**: a 429 or 503 pauses every call of
 *   the node for a uniformly random time in [0, Retry-After] (1 s without
 *   one, 60 s at most); then one request probes alone. Its refusal pauses
 *   again (no further cut), its answer reopens the paced slots. Answers to
 *   requests sent before the pause began are old news: they neither pause nor
 *   cut again. A node that is not busy (nothing queued) only pauses.
 */
import { type Timer, timer } from "./timers.ts";

/** What Milo answered one attempt: its HTTP status (`error`: none), and its `Retry-After`. */
export interface Outcome {
  status: number | "error";
  retryAfterMs?: number;
}

/** A granted slot: report the attempt's outcome once it is known (again: ignored). */
export interface Slot {
  done(outcome: Outcome): void;
}

/** Counted events: a request waited for a slot, failed at its deadline unsent, a pause, a cut. */
export type LimiterEvent = "queued" | "expired" | "paused" | "cut";

/** The limiter's clock, random and counters; everything has a default. */
export interface LimiterOptions {
  now?: () => number;
  timer?: (ms: number) => Timer;
  random?: () => number;
  onEvent?: (e: LimiterEvent) => void;
}

/** The limiter's parameters (see the module comment). */
export const LIMITS = Object.freeze({
  initialConcurrency: 2,
  maxConcurrency: 64,
  /** How long an unanswered slot counts against the concurrency (and a probe holds the rest). */
  holdMs: 100,
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
});

interface Waiter {
  deadline: number;
  seq: number;
  /** It was not granted on arrival. */
  waited?: boolean;
  resolve(r: Slot | "deadline" | "aborted"): void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** True for Milo's overload answers. */
const isOverload = (s: number | "error") => s === 429 || s === 503;

/** One node's limiter; see the module comment. */
export class MiloLimiter {
  readonly #now: () => number;
  readonly #timer: (ms: number) => Timer;
  readonly #random: () => number;
  readonly #onEvent: (e: LimiterEvent) => void;
  #queue: Waiter[] = [];
  #seq = 0;
  /** When the slots still unanswered were granted. */
  #out: number[] = [];
  #limit: number = LIMITS.initialConcurrency;
  #rate = Infinity;
  /** When the next slot may start by the rate. */
  #nextAt = 0;
  /** Counts the pauses: an answer to a slot granted before the last one is old news. */
  #epoch = 0;
  #pauseUntil = -Infinity;
  #probing = false;
  /** When the probe still unanswered was granted. */
  #probeAt = -Infinity;
  #lastCut = -Infinity;
  #admittedSinceCut = true;
  #lastOverload = -Infinity;
  /** When Milo admitted the requests of the last {@link LIMITS.acceptWindowMs}. */
  #admitted: number[] = [];
  #wake: { at: number; timer: Timer } | undefined;

  constructor(o: LimiterOptions = {}) {
    this.#now = o.now ?? Date.now;
    this.#timer = o.timer ?? timer;
    this.#random = o.random ?? Math.random;
    this.#onEvent = o.onEvent ?? (() => {});
  }

  /** The allowed rate in requests/s (Infinity: none). */
  get rate(): number {
    return this.#rate;
  }

  /** The most requests in flight at once. */
  get concurrency(): number {
    return Math.max(1, Math.floor(this.#limit));
  }

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.#queue.length;
  }

  /**
   * A slot for one attempt, as soon as the limits allow: `deadline` when
   * none comes before it (at once when a pause outlasts it), `aborted` when
   * `signal` aborts first. Never rejects.
   */
  acquire(deadline: number, signal?: AbortSignal): Promise<Slot | "deadline" | "aborted"> {
    if (signal?.aborted) return Promise.resolve("aborted");
    const now = this.#now();
    if (this.#rate !== Infinity && now - this.#lastOverload >= LIMITS.quietMs) {
      this.#rate = Infinity;
    }
    return new Promise((resolve) => {
      const w: Waiter = { deadline, seq: this.#seq++, resolve, signal };
      if (signal) {
        w.onAbort = () => {
          this.#queue = this.#queue.filter((x) => x !== w);
          resolve("aborted");
          this.#pump();
        };
        signal.addEventListener("abort", w.onAbort, { once: true });
      }
      let i = this.#queue.length;
      while (i > 0 && before(w, this.#queue[i - 1])) i--;
      this.#queue.splice(i, 0, w);
      this.#pump();
      if (this.#queue.includes(w)) {
        w.waited = true;
        this.#onEvent("queued");
      }
    });
  }

  /** Grants what the limits allow now, fails what cannot make its deadline, and sets the next wake. */
  #pump(): void {
    const now = this.#now();
    const blockedUntil = Math.max(now, this.#pauseUntil);
    this.#queue = this.#queue.filter((w) => {
      if (w.deadline > blockedUntil) return true;
      this.#settle(w, "deadline");
      this.#onEvent("expired");
      return false;
    });
    while (this.#queue.length && this.#freeAt(now) <= now) this.#grant(this.#queue.shift()!, now);
    this.#schedule(now);
  }

  /**
   * When the next slot may start: after the pause, at the paced rate, once a
   * slot of the concurrency (or the probe) is free. A slot unanswered for
   * {@link LIMITS.holdMs} no longer holds its place: a slow or hung Milo
   * still gets requests, at most `concurrency` per `holdMs`.
   */
  #freeAt(now: number): number {
    let at = Math.max(this.#pauseUntil, this.#nextAt);
    const held = this.#out.filter((t) => t > now - LIMITS.holdMs);
    if (held.length >= this.concurrency) {
      at = Math.max(at, held.sort((a, b) => b - a)[this.concurrency - 1] + LIMITS.holdMs);
    }
    if (this.#probing) at = Math.max(at, this.#probeAt + LIMITS.holdMs);
    return at;
  }

  #grant(w: Waiter, grantedAt: number): void {
    const now = grantedAt;
    this.#out.push(grantedAt);
    // The limits held it back, or would have: only such answers may raise them.
    const limited = !!w.waited || this.#queue.length > 0 ||
      this.#out.filter((t) => t > now - LIMITS.holdMs).length >= this.concurrency;
    const probe = this.#probing;
    if (probe) this.#probeAt = grantedAt;
    if (this.#rate !== Infinity) this.#nextAt = Math.max(this.#nextAt, now) + 1000 / this.#rate;
    const epoch = this.#epoch;
    let open = true;
    this.#settle(w, {
      done: (o: Outcome) => {
        if (!open) return;
        open = false;
        this.#out.splice(this.#out.indexOf(grantedAt), 1);
        if (probe && this.#probeAt === grantedAt) this.#probeAt = -Infinity;
        this.#answered(o, epoch, probe, limited);
        this.#pump();
      },
    });
  }

  /** Adapts the limits to one answer. */
  #answered(o: Outcome, epoch: number, probe: boolean, limited: boolean): void {
    const now = this.#now();
    if (o.status === "error" || (o.status >= 500 && !isOverload(o.status))) {
      if (probe) this.#probing = false;
      return;
    }
    if (!isOverload(o.status)) {
      if (probe) this.#probing = false;
      this.#admitted.push(now);
      while (now - this.#admitted[0] >= LIMITS.acceptWindowMs) this.#admitted.shift();
      // Sent before the last pause: it says nothing of the limits set since.
      if (!limited || epoch !== this.#epoch) return;
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
    this.#pauseUntil = Math.max(this.#pauseUntil, now + this.#random() * pauseMs);
    this.#probing = true;
    this.#onEvent("paused");
    // A node that is not busy did not cause the overload; one refused probe is no new news.
    const busy = limited || this.#queue.length > 0;
    const due = this.#admittedSinceCut || now - this.#lastCut >= LIMITS.cutHoldMs;
    if (!busy || !due) return;
    this.#lastCut = now;
    this.#admittedSinceCut = false;
    this.#limit = Math.max(1, this.#limit * LIMITS.decrease);
    this.#rate = Math.max(
      LIMITS.minRate,
      this.#rate === Infinity
        ? this.#admittedRecently(now) * LIMITS.firstShare
        : this.#rate * LIMITS.decrease,
    );
    this.#onEvent("cut");
  }

  /** Requests Milo admitted in the last {@link LIMITS.acceptWindowMs}, per second. */
  #admittedRecently(now: number): number {
    while (now - this.#admitted[0] >= LIMITS.acceptWindowMs) this.#admitted.shift();
    return this.#admitted.length * 1000 / LIMITS.acceptWindowMs;
  }

  #settle(w: Waiter, r: Slot | "deadline" | "aborted"): void {
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
    const at = Math.min(this.#freeAt(now), ...this.#queue.map((w) => w.deadline));
    if (this.#wake && this.#wake.at <= at && this.#wake.at > now) return;
    this.#wake?.timer.cancel();
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
