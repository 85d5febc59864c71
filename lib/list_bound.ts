/**
 * The bound of one LIST (Milo's claims, the Kubernetes pods and nodes) by
 * what the process holds of it: the items kept and their estimated size in
 * memory, summed over the pages. The answers themselves are read as a stream
 * (lib/list_stream.ts) and never held whole, so their size on the wire costs
 * nothing and is not bounded; a list too large for the process to hold ends
 * with a protocol error naming the bound instead of growing the process.
 */
import { CniError } from "./errors.ts";

/** What one LIST may keep across all its pages. */
export interface ListBound {
  /** Estimated memory of the items kept ({@link keptSize}), summed over the pages. */
  bytes: number;
  /** Items kept, summed over the pages. */
  items: number;
}

/** `n` bytes in the largest binary unit that divides it (`64 MiB`), else in bytes. */
export function formatBytes(n: number): string {
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const) {
    if (n >= size && n % size === 0) return `${n / size} ${unit}`;
  }
  return `${n} bytes`;
}

/**
 * The memory a kept value takes, estimated as V8 lays it out: a string its
 * header and one byte a character (two beyond Latin-1), an object or array
 * its header and a slot per entry, a number or boolean a slot.
 */
export function keptSize(v: unknown): number {
  if (typeof v === "string") {
    // deno-lint-ignore no-control-regex
    return 16 + (/[^\x00-\xff]/.test(v) ? 2 * v.length : v.length);
  }
  if (v === null || typeof v !== "object") return 8;
  let n = 24;
  if (Array.isArray(v)) {
    for (const x of v) n += 8 + keptSize(x);
    return n;
  }
  for (const k in v) n += 16 + keptSize((v as Record<string, unknown>)[k]);
  return n;
}

/**
 * Adds up what one LIST keeps against its {@link ListBound}, item by item
 * ({@link keep}) before each is kept. Past a bound, a protocol error (105)
 * names it, its constant and how far the list got.
 */
export class ListTally {
  #bytes = 0;
  #items = 0;

  /**
   * @param what the list, as errors name it (`Milo's IPClaimList`)
   * @param bound the bound
   * @param names the constants of the bound, as errors name them
   */
  constructor(
    readonly what: string,
    readonly bound: ListBound,
    readonly names: { bytes: string; items: string },
  ) {}

  /** Counts an item of `bytes` ({@link keptSize}) before it is kept. */
  keep(bytes: number): void {
    this.#items++;
    this.#bytes += bytes;
    if (this.#items > this.bound.items) {
      throw this.#over(
        `more than ${this.bound.items.toLocaleString("en-US")} items kept`,
        this.names.items,
      );
    }
    if (this.#bytes > this.bound.bytes) {
      throw this.#over(`more than ${formatBytes(this.bound.bytes)} kept`, this.names.bytes);
    }
  }

  #over(what: string, name: string): CniError {
    return new CniError(
      "protocol",
      `${this.what} exceeds what this process holds of a list: ${what} (${name})`,
      `cut after ${this.#items} items, ${this.#bytes} bytes kept`,
    );
  }
}
