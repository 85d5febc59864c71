/**
 * The total bound of one paginated LIST (Milo's claims, the Kubernetes pods
 * and nodes). A page is already capped in size and the pages in number; this
 * caps what the whole list may add up to, across its pages, so a server that
 * keeps answering full pages with a `continue` token ends the list with a
 * protocol error naming the bound instead of growing the process. The callers
 * keep only the few fields they read of each page (the rest is dropped before
 * the next page is fetched), so what a list holds is at most the kept part of
 * the bytes counted here.
 */
import { CniError } from "./errors.ts";

/** What one LIST may add up to across all its pages. */
export interface ListBound {
  /** Bytes of the answers' bodies, summed over the pages (as read, before parsing). */
  bytes: number;
  /** Items, summed over the pages. */
  items: number;
}

/** `n` bytes in the largest binary unit that divides it (`64 MiB`), else in bytes. */
export function formatBytes(n: number): string {
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const) {
    if (n >= size && n % size === 0) return `${n / size} ${unit}`;
  }
  return `${n} bytes`;
}

/** The UTF-8 length of a text, without encoding it. */
export function utf8Length(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

/**
 * Adds up one LIST's pages against its {@link ListBound}: {@link page} as each
 * page is read, {@link items} before its items are kept. Past a bound, a
 * protocol error (105) names it, its constant and how far the list got.
 */
export class ListTally {
  #bytes = 0;
  #items = 0;
  #pages = 0;

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

  /** Bytes the list may still read. */
  get bytesLeft(): number {
    return this.bound.bytes - this.#bytes;
  }

  /** Counts a page of `bytes` bytes, as it is read. */
  page(bytes: number): void {
    this.#pages++;
    this.#bytes += bytes;
    if (this.#bytes > this.bound.bytes) throw this.#overBytes();
  }

  /** Counts `n` items of the page just counted, before they are kept. */
  items(n: number): void {
    this.#items += n;
    if (this.#items > this.bound.items) {
      throw this.#over(
        `more than ${this.bound.items.toLocaleString("en-US")} items across its pages`,
        this.names.items,
      );
    }
  }

  /** The error of a page cut because it would pass the byte bound (it counts as read). */
  overflow(): CniError {
    this.#pages++;
    return this.#overBytes();
  }

  #overBytes(): CniError {
    return this.#over(
      `more than ${formatBytes(this.bound.bytes)} across its pages`,
      this.names.bytes,
    );
  }

  #over(what: string, name: string): CniError {
    return new CniError(
      "protocol",
      `${this.what} exceeds its list bound: ${what} (${name})`,
      `cut after ${this.#pages} page(s): ${this.#bytes} bytes, ${this.#items} items`,
    );
  }
}
