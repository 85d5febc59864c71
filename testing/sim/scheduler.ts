/**
 * The simulated world's time and turns: one clock, a queue of events, and the
 * processes that wait on them.
 *
 * Determinism: after each event fires, the scheduler waits until the world
 * is at rest (no microtask left, no real file operation in flight: io.ts),
 * that is, until every activity is blocked on a simulated event or finished;
 * only then is the next event drawn: the earliest, and among events of the
 * same instant one picked by the PRNG from the list sorted by key, never by
 * arrival order. Every promise that resumes an activity (a sleep, a Milo
 * answer, a lock granted, another process's word) resolves from an event.
 *
 * Processes: each activity runs as a process (its context follows it across
 * awaits: AsyncLocalStorage); a killed process's events never fire (its code
 * stops where it waited, as a SIGKILL leaves it) and its locks go.
 *
 * While it runs, `AbortSignal.timeout` makes simulated timeouts (lib/milo.ts
 * request timeouts, lib/timers.ts' waits): the code under test keeps its own
 * timing, on the simulated clock.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { setImmediate } from "node:timers";
import { installIo, ioInFlight, uninstallIo } from "./io.ts";
import { type Prng, Streams } from "./prng.ts";

/** A simulated process: an agent, a plugin, a reconcile run, a runtime, a sweep. */
export interface Proc {
  name: string;
  alive: boolean;
  /** Run when it is killed (locks released, connections closed). */
  onKill: (() => void)[];
}

interface Ev {
  at: number;
  key: string;
  seq: number;
  owner?: Proc;
  fire: () => void;
  cancelled?: boolean;
}

/** A scheduled event that can be withdrawn. */
export interface Scheduled {
  cancel(): void;
}

/** The simulated epoch: 2027-01-04 00:00 UTC. */
export const EPOCH = Date.UTC(2027, 0, 4);

const immediate = () => new Promise<void>((r) => setImmediate(r));

export class Scheduler {
  readonly streams: Streams;
  readonly als = new AsyncLocalStorage<Proc>();
  /** Events fired so far. */
  ticks = 0;
  #now = EPOCH;
  #seq = 0;
  #heap: Ev[] = [];
  #pick: Prng;
  #crash: unknown;
  readonly #system: Proc = { name: "world", alive: true, onKill: [] };

  constructor(seed: number) {
    this.streams = new Streams(seed);
    this.#pick = this.streams.of("scheduler");
  }

  readonly now = (): number => this.#now;

  /** The process the calling code runs in (the world itself outside any). */
  current(): Proc {
    return this.als.getStore() ?? this.#system;
  }

  /** A stream of chance named `key` (see prng.ts). */
  rng(key: string): Prng {
    return this.streams.of(key);
  }

  /**
   * Fires `fire` at `now + ms`, unless `owner` (the calling process unless
   * given; null: none) is dead by then.
   */
  after(ms: number, key: string, fire: () => void, owner: Proc | null = this.current()): Scheduled {
    const ev: Ev = {
      at: this.#now + Math.max(0, Math.round(ms)),
      key,
      seq: this.#seq++,
      owner: owner ?? undefined,
      fire,
    };
    this.#push(ev);
    return { cancel: () => ev.cancelled = true };
  }

  /** Resolves after `ms` simulated ms, in the calling process. */
  sleep(ms: number, key = "sleep"): Promise<void> {
    return new Promise<void>((resolve) => this.after(ms, `${this.current().name} ${key}`, resolve));
  }

  /** A new process running `fn` from the next turn; its failure ends the run (a simulator bug). */
  spawn(name: string, fn: (p: Proc) => Promise<unknown>): Proc {
    const p: Proc = { name, alive: true, onKill: [] };
    this.after(0, `${name} start`, () => {
      this.als.run(p, () => fn(p)).catch((err) => this.#crash ??= err);
    }, p);
    return p;
  }

  /** Kills `p`: none of its events fire again, and its kill hooks run. */
  kill(p: Proc): void {
    if (!p.alive) return;
    p.alive = false;
    for (const f of p.onKill.splice(0)) f();
  }

  /**
   * Runs events until the clock would pass `until` or `stop()` says so after
   * an event; answers false when no event is left.
   */
  async runUntil(until: number, stop: () => boolean = () => false): Promise<boolean> {
    while (true) {
      if (this.#crash) throw this.#crash;
      const ev = this.#next(until);
      if (!ev) return this.#heap.length > 0;
      this.#now = Math.max(this.#now, ev.at);
      this.ticks++;
      if (!ev.owner || ev.owner.alive) ev.fire();
      await this.settle();
      if (this.#crash) throw this.#crash;
      if (stop()) return true;
    }
  }

  /** Waits until nothing runs: microtasks drained and no file operation in flight. */
  async settle(): Promise<void> {
    let quiet = 0;
    while (quiet < 2) {
      await immediate();
      quiet = ioInFlight() === 0 ? quiet + 1 : 0;
    }
  }

  /** The next event at or before `until` (ties drawn by the PRNG over the key order). */
  #next(until: number): Ev | undefined {
    let top = this.#pop();
    while (top?.cancelled) top = this.#pop();
    if (!top) return undefined;
    if (top.at > until) {
      this.#push(top);
      return undefined;
    }
    const same = [top];
    while (this.#heap.length && this.#heap[0].at === top.at) {
      const e = this.#pop()!;
      if (!e.cancelled) same.push(e);
    }
    if (same.length === 1) return top;
    const i = Math.floor(this.#pick.next() * same.length);
    const chosen = same[i];
    for (const e of same) if (e !== chosen) this.#push(e);
    return chosen;
  }

  #less(a: Ev, b: Ev): boolean {
    if (a.at !== b.at) return a.at < b.at;
    if (a.key !== b.key) return a.key < b.key;
    return a.seq < b.seq;
  }

  #push(e: Ev): void {
    const h = this.#heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (!this.#less(h[i], h[up])) break;
      [h[i], h[up]] = [h[up], h[i]];
      i = up;
    }
  }

  #pop(): Ev | undefined {
    const h = this.#heap;
    if (!h.length) return undefined;
    const top = h[0];
    const last = h.pop()!;
    if (h.length) {
      h[0] = last;
      let i = 0;
      while (true) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < h.length && this.#less(h[l], h[m])) m = l;
        if (r < h.length && this.#less(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }

  /**
   * Makes the world's own clock-driven waits simulated while `fn` runs:
   * `AbortSignal.timeout` and the file I/O accounting (io.ts).
   */
  async install<T>(fn: () => Promise<T>): Promise<T> {
    const timeout = AbortSignal.timeout;
    installIo();
    AbortSignal.timeout = (ms: number) => {
      const ac = new AbortController();
      this.after(ms, "timeout", () => {
        ac.abort(new DOMException("Signal timed out.", "TimeoutError"));
      }, null);
      return ac.signal;
    };
    try {
      return await fn();
    } finally {
      AbortSignal.timeout = timeout;
      uninstallIo();
    }
  }
}
