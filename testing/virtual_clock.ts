/**
 * Simulated time for in-process tests of timing: a clock whose timers fire in
 * order, each once everything the last one started has settled, so seconds of
 * retries, pauses and pacing run in milliseconds and the same way every time.
 */
import type { Timer } from "../lib/timers.ts";

interface Pending {
  at: number;
  seq: number;
  fire(): void;
}

/** A simulated clock: `now`, `timer` and `sleep` for the code under test; `run` drives it. */
export class VirtualClock {
  #now: number;
  #seq = 0;
  #pending: Pending[] = [];

  constructor(start = Date.UTC(2026, 11, 4)) {
    this.#now = start;
  }

  readonly now = (): number => this.#now;

  readonly timer = (ms: number): Timer => {
    let fire = () => {};
    const done = new Promise<void>((r) => fire = r);
    const p: Pending = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fire: () => fire() };
    this.#pending.push(p);
    return { done, cancel: () => this.#pending = this.#pending.filter((x) => x !== p) };
  };

  readonly sleep = (ms: number): Promise<void> => this.timer(ms).done;

  /**
   * Runs until `work` settles: whenever the code under test is idle (only
   * timers left), the clock jumps to the earliest timer and fires it. Throws
   * when nothing is pending and `work` never settles, or past `limitMs`.
   */
  async run<T>(work: Promise<T>, limitMs = 3_600_000): Promise<T> {
    let settled = false;
    work.then(() => settled = true, () => settled = true);
    const end = this.#now + limitMs;
    while (true) {
      await new Promise((r) => setTimeout(r, 0));
      if (settled) return await work;
      this.#pending.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.#pending.shift();
      if (!next) throw new Error("the work waits on nothing the clock drives");
      if (next.at > end) throw new Error(`still running after ${limitMs} simulated ms`);
      this.#now = Math.max(this.#now, next.at);
      next.fire();
    }
  }
}
