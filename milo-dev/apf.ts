/**
 * API Priority and Fairness as the Kubernetes API server gives it
 * (k8s.io/apiserver `pkg/util/flowcontrol`, its filter
 * `pkg/server/filters/priority-and-fairness.go`), in front of every API
 * request, Milo's front door and its IPAM server alike: a request runs while
 * it holds one of the priority level's seats (`concurrency`), from admission
 * until it is answered (a claim create's quota admission wait included); one
 * that finds none free waits in a queue. A claim create also needs the
 * allocation ceiling's room (limits.ts) and waits in the same queue for it,
 * holding no seat, while the requests behind it that need no room go on
 * (they would take a seat and a pgx connection of their own on Milo). A flow
 * (a bearer token) holds at most `queueLength` queued requests; one that
 * waits `queueWaitMs` is rejected, and so is one that finds its flow's queue
 * full. A rejection is the filter's `tooManyRequests`: 429, `text/plain`, the
 * body `Too many requests, please try again later.` and a `Retry-After` from
 * the dropped-requests tracker
 * (`pkg/util/flowcontrol/dropped_requests_tracker.go`): 1 s, doubled (up to
 * 32) when a second starts and the last `retryAfter` seconds dropped at least
 * three times `retryAfter` requests, at most once per `retryAfter` seconds,
 * and lowered by one when they dropped fewer than `retryAfter`. A caller that
 * hangs up while queued leaves the queue and is never served. Queued requests
 * are served first come, first served (APF's fair queuing between flows and
 * the seats a LIST's width takes are not modelled).
 */

import type { AllocationCeiling } from "./limits.ts";

/** What a request's entry came to; an admitted one gives its seat back with `done`. */
export type Entry =
  | { admitted: true; waitedMs: number; done: () => void }
  | { admitted: false; retryAfterSeconds: number; why: "full" | "timeout" };

interface Waiter {
  flow: string;
  create: boolean;
  since: number;
  settle: (e: Entry | "gone") => void;
}

/** Most seconds `Retry-After` may say (`maxRetryAfter`). */
const MAX_RETRY_AFTER = 32;

/**
 * The dropped-requests tracker of one priority level: the `Retry-After`
 * that rejections carry, from how many were dropped in the last seconds.
 */
export class DroppedRequests {
  readonly #nowS: () => number;
  #history: { second: number; count: number }[] = [];
  #second = 0;
  #count = 0;
  #retryAfter = 1;
  #raisedAt = 0;

  /** `nowS`: the clock in whole seconds (Unix time). */
  constructor(nowS: () => number = () => Math.floor(Date.now() / 1_000)) {
    this.#nowS = nowS;
  }

  /** The `Retry-After` a rejection now carries (seconds). */
  get retryAfter(): number {
    return this.#retryAfter;
  }

  /** Records one dropped request. */
  record(): void {
    const now = this.#nowS();
    if (now === this.#second) {
      this.#count++;
      return;
    }
    this.#history.push({ second: this.#second, count: this.#count });
    const keep = Math.min(2 * this.#retryAfter, MAX_RETRY_AFTER);
    this.#history = this.#history.filter((h) => this.#second - h.second <= keep);
    this.#second = now;
    this.#count = 1;
    this.#update(now);
  }

  #update(now: number): void {
    const r = this.#retryAfter;
    let dropped = 0;
    for (const h of this.#history) {
      if (now - h.second <= r && h.second < now) dropped += h.count;
    }
    if (now - this.#raisedAt >= r && dropped >= 3 * r) {
      this.#retryAfter = Math.min(2 * r, MAX_RETRY_AFTER);
      this.#raisedAt = now;
    } else if (dropped < r && r > 1) {
      this.#retryAfter = r - 1;
    }
  }
}

/** The queue in front of the API: seats, and the allocation ceiling for creates. */
export class ApfQueue {
  readonly #ceiling: AllocationCeiling;
  readonly #now: () => number;
  readonly #drops: DroppedRequests;
  #waiters: Waiter[] = [];
  #perFlow = new Map<string, number>();
  #busy = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    ceiling: AllocationCeiling,
    now: () => number = () => performance.now(),
    drops = new DroppedRequests(),
  ) {
    this.#ceiling = ceiling;
    this.#now = now;
    this.#drops = drops;
  }

  /** Requests waiting now. */
  get length(): number {
    return this.#waiters.length;
  }

  /** Seats held now (requests running). */
  get running(): number {
    return this.#busy;
  }

  /**
   * Enters one request of `flow` (a claim create when `create`): admitted at
   * once when nothing waits, a seat is free and (a create) the ceiling has
   * room, else queued until they are; rejected when the flow's queue is full
   * or the wait limit passes. `gone` (the caller hung up while queued) is
   * never answered. An admitted request calls `done` once answered.
   */
  enter(flow: string, gone: AbortSignal, create = true): Promise<Entry | "gone"> {
    const now = this.#waiters.length === 0 && this.#seatFree();
    if (now && (!create || this.#ceiling.admit().admitted)) return Promise.resolve(this.#admit(0));
    const { queueLength, queueWaitMs } = this.#ceiling.get();
    if ((this.#perFlow.get(flow) ?? 0) >= queueLength) return Promise.resolve(this.#reject("full"));
    return new Promise((resolve) => {
      const limit = setTimeout(() => w.settle(this.#reject("timeout")), queueWaitMs);
      const onGone = () => w.settle("gone");
      const w: Waiter = {
        flow,
        create,
        since: this.#now(),
        settle: (e) => {
          clearTimeout(limit);
          gone.removeEventListener("abort", onGone);
          this.#remove(w);
          resolve(e);
        },
      };
      this.#waiters.push(w);
      this.#perFlow.set(flow, (this.#perFlow.get(flow) ?? 0) + 1);
      gone.addEventListener("abort", onGone, { once: true });
      if (gone.aborted) onGone();
      this.#pump();
    });
  }

  /** Serves the queue again now (the limits changed). */
  kick(): void {
    this.#pump();
  }

  /** Rejects every queued request and stops (server shutdown). */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const w of [...this.#waiters]) w.settle("gone");
  }

  #seatFree(): boolean {
    const n = this.#ceiling.get().concurrency;
    return n === 0 || this.#busy < n;
  }

  #admit(waitedMs: number): Entry {
    this.#busy++;
    let held = true;
    const done = () => {
      if (!held) return;
      held = false;
      this.#busy--;
      this.#pump();
    };
    return { admitted: true, waitedMs, done };
  }

  #reject(why: "full" | "timeout"): Entry {
    this.#drops.record();
    return { admitted: false, retryAfterSeconds: this.#drops.retryAfter, why };
  }

  #remove(w: Waiter): void {
    const i = this.#waiters.indexOf(w);
    if (i < 0) return;
    this.#waiters.splice(i, 1);
    const n = (this.#perFlow.get(w.flow) ?? 1) - 1;
    if (n > 0) this.#perFlow.set(w.flow, n);
    else this.#perFlow.delete(w.flow);
  }

  /**
   * Serves waiters in order while seats are free. A create the ceiling has
   * no room for stays queued, and so do the creates behind it (they are
   * served in order); the requests behind it that need no room go on.
   */
  #pump(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    let roomIn: number | undefined;
    for (const w of [...this.#waiters]) {
      if (!this.#seatFree()) break;
      if (w.create) {
        if (roomIn !== undefined) continue;
        const a = this.#ceiling.admit();
        if (!a.admitted) {
          roomIn = a.waitMs;
          continue;
        }
      }
      w.settle(this.#admit(this.#now() - w.since));
    }
    if (roomIn !== undefined && this.#seatFree()) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#pump();
      }, Math.ceil(roomIn));
    }
  }
}
