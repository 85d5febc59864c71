/**
 * The simulator's one source of chance: a small seeded PRNG (sfc32, seeded
 * through splitmix32), and streams keyed by name, so that a decision drawn
 * for one activity does not move when another activity is added or dropped
 * (what lets a trace shrink and still replay the same way).
 */

/** A seeded pseudo-random stream. */
export class Prng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  constructor(seed: number) {
    let s = seed >>> 0;
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.#a = next();
    this.#b = next();
    this.#c = next();
    this.#d = next();
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** The next 32 random bits. */
  u32(): number {
    const t = (((this.#a + this.#b) >>> 0) + this.#d) >>> 0;
    this.#d = (this.#d + 1) >>> 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) >>> 0;
    this.#c = ((this.#c << 21) | (this.#c >>> 11)) >>> 0;
    this.#c = (this.#c + t) >>> 0;
    return t;
  }

  /** A number in [0, 1). */
  next(): number {
    return this.u32() / 4294967296;
  }

  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** One element of `xs` (not empty). */
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)];
  }

  /** `[lo, hi]` ms, skewed toward `lo` (a latency's shape: mostly short, a long tail). */
  skewed(lo: number, hi: number): number {
    const x = this.next();
    return Math.round(lo + (hi - lo) * x * x * x);
  }
}

/** FNV-1a over a string: the key of a stream. */
export function hash32(text: string, seed = 0x811c9dc5): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/**
 * Named streams of one seed: `of(key)` is the same stream for the same key
 * (each call goes on where the last left off), whatever else was drawn.
 */
export class Streams {
  readonly seed: number;
  readonly #streams = new Map<string, Prng>();

  constructor(seed: number) {
    this.seed = seed;
  }

  of(key: string): Prng {
    let p = this.#streams.get(key);
    if (!p) {
      p = new Prng(hash32(key, hash32(String(this.seed))));
      this.#streams.set(key, p);
    }
    return p;
  }
}
