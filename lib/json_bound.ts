/**
 * JSON text from outside (a network config on stdin, a Milo answer) held to a
 * bound before it is parsed. `JSON.parse` is linear, but its constant depends
 * on the text's shape: a MiB of empty objects, of nested lists or of escapes
 * costs it 5-50 ms, which a node agent serving other tenants cannot spend on
 * one call, while the same MiB as a few plain strings costs under 1 ms. One
 * pass counts what costs; a text over the bound is refused before it is
 * parsed. Within {@link JSON_BOUND}, a call's parsing of the costliest MiB
 * took at most 3.3 ms (p50) on a 2-core node (bench/parse.ts, docs/limits.md).
 */

import { CniError } from "./errors.ts";

/** What a bounded JSON text may hold. */
export interface JsonBound {
  /** Objects, lists and commas between entries (`{`, `[`, `,` outside strings). */
  entries: number;
  /** Objects and lists open at once. */
  depth: number;
  /** Escapes (`\n`, `\"`, `\u0041`) in strings. */
  escapes: number;
}

/**
 * The bound of the JSON a call reads: 8,192 entries (a GC's list of 2,700
 * attachments; a bound claim of Milo's has 37), 64 levels (ten times what a
 * network config or a Milo object nests), 8,192 escapes (a text escapes a
 * few quotes).
 */
export const JSON_BOUND: JsonBound = { entries: 8_192, depth: 64, escapes: 8_192 };

const QUOTE = 0x22, BACKSLASH = "\\";
const OPEN_OBJECT = 0x7b, OPEN_ARRAY = 0x5b, CLOSE_OBJECT = 0x7d, CLOSE_ARRAY = 0x5d;
/** What the pass stops at outside strings; the engine skips everything else. */
const STRUCTURE = /["{}[\],]/g;

/**
 * Why `text` exceeds `bound` (`more than 8192 objects, lists and commas`), or
 * undefined when it does not. One pass: the regular expression engine skips
 * to each structural character, `indexOf` to each string's end and to each
 * backslash, each character read at most twice. It does not validate
 * (JSON.parse does, after): what it miscounts in a text that is not JSON,
 * JSON.parse refuses.
 */
export function overBound(text: string, bound: JsonBound = JSON_BOUND): string | undefined {
  let entries = 0, depth = 0, escapes = 0;
  /** The first backslash at or after the current string's start (-1: none left). */
  let escape = text.indexOf(BACKSLASH);
  const re = new RegExp(STRUCTURE);
  while (re.test(text)) {
    const at = re.lastIndex - 1, c = text.charCodeAt(at);
    if (c === QUOTE) {
      let end = text.indexOf('"', at + 1);
      for (;;) {
        if (end < 0) return undefined;
        if (escape >= 0 && escape <= at) escape = text.indexOf(BACKSLASH, at + 1);
        if (escape < 0 || escape > end) break;
        if (++escapes > bound.escapes) return `more than ${bound.escapes} escapes in strings`;
        const next = escape + 2;
        escape = text.indexOf(BACKSLASH, next);
        if (end < next) end = text.indexOf('"', next);
      }
      re.lastIndex = end + 1;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > bound.depth) return `objects and lists nested deeper than ${bound.depth}`;
      if (++entries > bound.entries) return overEntries(bound);
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      depth--;
    } else if (++entries > bound.entries) {
      return overEntries(bound);
    }
  }
  return undefined;
}

function overEntries(bound: JsonBound): string {
  return `more than ${bound.entries} objects, lists and commas`;
}

/** The outcome of {@link parseBounded}: the value, or why the text was refused. */
export type Bounded =
  | { ok: true; value: unknown }
  | { ok: false; why: string; /** Refused by the bound, before any parsing. */ over: boolean };

/** `text` parsed, when it is within `bound`; else why not. */
export function parseBounded(text: string, bound: JsonBound = JSON_BOUND): Bounded {
  const over = overBound(text, bound);
  if (over) return { ok: false, why: over, over: true };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (err) {
    return { ok: false, why: err instanceof Error ? err.message : String(err), over: false };
  }
}

/**
 * The answer of `server` to `what` (method and path) as JSON, or undefined
 * when it is not JSON; over {@link JSON_BOUND} a protocol error (105) before
 * it is parsed.
 */
export function answerJson(text: string, what: string, server: string): unknown {
  const r = parseBounded(text);
  if (r.ok) return r.value;
  if (!r.over) return undefined;
  throw new CniError(
    "protocol",
    `${what}: ${server}'s answer has ${r.why}`,
    `an answer is held to ${JSON_BOUND.entries} objects, lists and commas, ${JSON_BOUND.depth} ` +
      `levels and ${JSON_BOUND.escapes} escapes before it is parsed (docs/limits.md)`,
  );
}
