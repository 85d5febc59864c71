/**
 * A list answer (`{"kind": ..., "metadata": {...}, "items": [...]}`, as Milo
 * and the Kubernetes API send them) read as a stream: each item is cut out of
 * the bytes as they arrive and handed over parsed, one at a time, so the
 * whole text is never held, only the item being read (at most `maxItemBytes`
 * of it). The other top-level fields are parsed and answered once the answer
 * ends. Anything that is not one JSON object of that shape is an error.
 */
import { clip, CniError, QUOTE_CHARS } from "./errors.ts";
import { type JsonBound, overBound } from "./json_bound.ts";

/** How one list answer is read. */
export interface ListReadOptions {
  /** The list, as errors name it (`Milo's IPClaimList`). */
  what: string;
  /** Largest item, in bytes of its JSON text; a larger one fails the list (105). */
  maxItemBytes: number;
  /** Called with each item of `items`, parsed, in order; what it throws ends the read. */
  item: (value: unknown) => void;
  /** Called as each chunk of the body arrives (a request's idle timeout). */
  onChunk?: () => void;
  /** What an item may hold (lib/json_bound.ts), checked before it is parsed; none when absent. */
  bound?: JsonBound;
}

/** Largest top-level field other than `items` (`metadata`, `kind`), in bytes. */
const MAX_FIELD_BYTES = 64 * 1024;

const QUOTE = 0x22, BACKSLASH = 0x5c, COMMA = 0x2c, COLON = 0x3a;
const OPEN_OBJECT = 0x7b, CLOSE_OBJECT = 0x7d, OPEN_ARRAY = 0x5b, CLOSE_ARRAY = 0x5d;

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

/**
 * Reads the list answer in `body`, calling `o.item` for each item; answers
 * the other top-level fields, parsed.
 */
export async function readList(
  body: ReadableStream<Uint8Array>,
  o: ListReadOptions,
): Promise<Record<string, unknown>> {
  const r = new ByteReader(body.getReader(), o.what, o.onChunk);
  try {
    if (await r.peek() !== OPEN_OBJECT) throw r.malformed("not a JSON object");
    r.pos++;
    const head: Record<string, unknown> = {};
    let items = false;
    for (let first = true;; first = false) {
      let c = await r.peek();
      if (c === CLOSE_OBJECT && first) break;
      if (!first) {
        if (c === CLOSE_OBJECT) break;
        if (c !== COMMA) throw r.malformed("expected , or } after a field");
        r.pos++;
        c = await r.peek();
      }
      if (c !== QUOTE) throw r.malformed("expected a field name");
      const key = r.parse(await r.value(MAX_FIELD_BYTES, "a field name"));
      if (await r.peek() !== COLON) throw r.malformed("expected : after a field name");
      r.pos++;
      const start = await r.peek();
      if (key !== "items") {
        const value = r.parse(await r.value(MAX_FIELD_BYTES, `field ${clip(String(key), 40)}`));
        if (key !== "__proto__") head[String(key)] = value;
        continue;
      }
      if (items) throw r.malformed("two items fields");
      items = true;
      if (start === OPEN_ARRAY) {
        r.pos++;
        await readItems(r, o);
      } else if (r.parse(await r.value(MAX_FIELD_BYTES, "items")) !== null) {
        throw r.malformed("items is not an array");
      }
    }
    r.pos++;
    if (await r.peek() !== -1) throw r.malformed("text after the list's end");
    return head;
  } catch (err) {
    await r.cancel(err);
    throw err;
  }
}

async function readItems(r: ByteReader, o: ListReadOptions): Promise<void> {
  for (let n = 0;; n++) {
    let c = await r.peek();
    if (c === CLOSE_ARRAY) {
      r.pos++;
      return;
    }
    if (n > 0) {
      if (c !== COMMA) throw r.malformed("expected , or ] after an item");
      r.pos++;
      c = await r.peek();
    }
    if (c === -1) throw r.malformed("the answer ends inside items");
    o.item(r.parse(await r.value(o.maxItemBytes, `item ${n}`), o.bound));
  }
}

/** The body's bytes, a chunk at a time; values are cut out of them as whole JSON texts. */
class ByteReader {
  buf: Uint8Array = new Uint8Array(0);
  pos = 0;
  #read = 0;
  readonly #decoder = new TextDecoder();

  constructor(
    readonly reader: ReadableStreamDefaultReader<Uint8Array>,
    readonly what: string,
    readonly onChunk?: () => void,
  ) {}

  malformed(why: string): CniError {
    return new CniError(
      "protocol",
      `${this.what} is not valid JSON`,
      `${why} (at byte ${this.#read - this.buf.length + this.pos})`,
    );
  }

  async cancel(reason: unknown): Promise<void> {
    await this.reader.cancel(reason).catch(() => {});
  }

  /** Loads the next chunk; false at the end of the body. */
  async #more(): Promise<boolean> {
    for (;;) {
      const { value, done } = await this.reader.read();
      if (done) return false;
      this.onChunk?.();
      if (!value.length) continue;
      this.#read += value.length;
      this.buf = value;
      this.pos = 0;
      return true;
    }
  }

  /** The next byte that is not whitespace, not consumed; -1 at the end of the body. */
  async peek(): Promise<number> {
    for (;;) {
      const b = this.buf;
      let i = this.pos;
      while (i < b.length && isSpace(b[i])) i++;
      this.pos = i;
      if (i < b.length) return b[i];
      if (!await this.#more()) return -1;
    }
  }

  /** The text of one value as JSON.parse reads it (within `bound`), or a protocol error. */
  parse(bytes: Uint8Array, bound?: JsonBound): unknown {
    const text = this.#decoder.decode(bytes);
    const over = bound && overBound(text, bound);
    if (over) {
      throw new CniError(
        "protocol",
        `${this.what} has an item with ${over}`,
        `an item is held to ${bound.entries} objects, lists and commas, ${bound.depth} levels ` +
          `and ${bound.escapes} escapes before it is parsed (docs/limits.md)`,
      );
    }
    try {
      return JSON.parse(text);
    } catch (err) {
      throw this.malformed(clip(err instanceof Error ? err.message : String(err), QUOTE_CHARS));
    }
  }

  /**
   * The bytes of the value starting at the next byte (an object, array,
   * string, or a scalar up to the next delimiter), consumed; more than `max`
   * is an error naming `what`.
   */
  async value(max: number, what: string): Promise<Uint8Array> {
    const pieces: Uint8Array[] = [];
    let size = 0, depth = 0, inString = false, escaped = false;
    for (;;) {
      const b = this.buf, start = this.pos;
      let i = start, end = -1;
      while (i < b.length) {
        if (inString) {
          if (escaped) {
            escaped = false;
            i++;
            continue;
          }
          const q = b.indexOf(QUOTE, i);
          let k = q < 0 ? b.length : q;
          const from = k;
          while (k > i && b[k - 1] === BACKSLASH) k--;
          if (q < 0) {
            escaped = (from - k) % 2 === 1;
            i = b.length;
            break;
          }
          i = q + 1;
          if ((q - k) % 2 === 1) continue; // an escaped quote
          inString = false;
          if (depth === 0) {
            end = i;
            break;
          }
          continue;
        }
        const c = b[i];
        if (c === QUOTE) {
          if (depth === 0 && i > start) {
            end = i;
            break;
          }
          inString = true;
        } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) depth++;
        else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
          if (depth === 0) {
            end = i;
            break;
          }
          if (--depth === 0) {
            end = i + 1;
            break;
          }
        } else if (depth === 0 && (c === COMMA || c === COLON || isSpace(c))) {
          end = i;
          break;
        }
        i++;
      }
      const stop = end < 0 ? b.length : end;
      size += stop - start;
      if (size > max) {
        throw new CniError(
          "protocol",
          `${this.what} has a value over ${max} bytes (${what})`,
          "larger than any object the server can store",
        );
      }
      if (stop > start) pieces.push(b.subarray(start, stop));
      this.pos = stop;
      if (end >= 0) return join(pieces, size);
      if (!await this.#more()) {
        if (depth === 0 && !inString && size) return join(pieces, size);
        throw this.malformed(`the answer ends inside ${what}`);
      }
    }
  }
}

function join(pieces: Uint8Array[], size: number): Uint8Array {
  if (pieces.length === 1) return pieces[0];
  const all = new Uint8Array(size);
  let at = 0;
  for (const p of pieces) {
    all.set(p, at);
    at += p.length;
  }
  return all;
}
