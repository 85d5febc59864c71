/**
 * A config's fields held to the one schema (lib/config.ts): the keys its
 * objects know, an unknown key refused naming the nearest known one, and the
 * schema's issues as field messages.
 */
import type * as z from "zod/mini";
import { isPlainObject } from "./values.ts";
import { clip, CniError } from "./errors.ts";

/** The schema's issues of `error` as field messages, each path under `prefix`. */
export function issuesOf(error: z.core.$ZodError, prefix: string): string[] {
  return error.issues.map((i) =>
    `field ${prefix}${i.path.map(String).join(".")}: ${wanted(i) ?? i.message}`
  );
}

/** zod/mini's message of an issue its schema gave no words for. */
const BARE = "Invalid input";

/**
 * What the schema wanted, for an issue zod/mini leaves as "Invalid input"
 * (it carries no locale): the type, the values allowed, the bound.
 */
function wanted(i: z.core.$ZodIssue): string | undefined {
  if (i.message !== BARE) return undefined;
  switch (i.code) {
    case "invalid_type":
      return `must be ${/^[aeiou]/.test(i.expected) ? "an" : "a"} ${i.expected}`;
    case "invalid_value":
      return `must be one of ${i.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "too_small":
      return `must be at least ${i.minimum}${i.origin === "string" ? " characters" : ""}`;
    case "too_big":
      return `must be at most ${i.maximum}${i.origin === "string" ? " characters" : ""}`;
    case "invalid_format":
      return `must be a ${i.format}`;
    default:
      return undefined;
  }
}

/** The keys a schema's objects know, by nesting: null for a value with no keys of its own. */
export type KeyTree = { [key: string]: KeyTree | null } | null;

/** What {@link keyTree} reads of a zod schema's definition (zod's `_zod.def`). */
interface SchemaDef {
  type: string;
  innerType?: unknown;
  shape?: Record<string, unknown>;
  valueType?: unknown;
}

/** The known keys of `schema`'s objects (a record's values under `*`), from the one schema. */
export function keyTree(schema: unknown): KeyTree {
  const def = (schema as { _zod?: { def?: SchemaDef } } | undefined)?._zod?.def;
  if (!def) return null;
  if (def.type === "default" || def.type === "optional" || def.type === "nullable") {
    return keyTree(def.innerType);
  }
  if (def.type === "object") {
    return Object.fromEntries(Object.entries(def.shape ?? {}).map(([k, v]) => [k, keyTree(v)]));
  }
  if (def.type === "record") {
    const values = keyTree(def.valueType);
    return values ? { "*": values } : null;
  }
  return null;
}

/** Longest key of a config object: a key past it is refused before anything else is done with it. */
export const MAX_KEY_CHARS = 253;
/**
 * Longest unknown key a known one is suggested for: a typo is a few edits
 * from a known key (the longest is 23 characters). With it the suggestion
 * costs at most 64 × 23 steps per known key, whatever the key.
 */
export const SUGGEST_MAX_CHARS = 64;

/**
 * Edit distance (insertions, deletions, substitutions, adjacent swaps)
 * between two keys, case aside, in three rows of `b`'s length.
 */
function distance(a: string, b: string): number {
  const x = a.toLowerCase(), y = b.toLowerCase();
  let older = new Array<number>(y.length + 1).fill(0);
  let prev = Array.from({ length: y.length + 1 }, (_, j) => j);
  let row = new Array<number>(y.length + 1).fill(0);
  for (let i = 1; i <= x.length; i++) {
    const xi = x.charCodeAt(i - 1);
    row[0] = i;
    for (let j = 1; j <= y.length; j++) {
      const yj = y.charCodeAt(j - 1);
      row[j] = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (xi === yj ? 0 : 1));
      if (i > 1 && j > 1 && xi === y.charCodeAt(j - 2) && x.charCodeAt(i - 2) === yj) {
        row[j] = Math.min(row[j], older[j - 2] + 1);
      }
    }
    const spare = older;
    older = prev;
    prev = row;
    row = spare;
  }
  return prev[y.length];
}

/**
 * The known key nearest to `key` (the first of equals, in the schema's
 * order), or undefined for a key over {@link SUGGEST_MAX_CHARS}: no typo of a
 * known key is that long, and the distance costs the product of the lengths.
 */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  if (key.length > SUGGEST_MAX_CHARS) return undefined;
  let best: string | undefined, bestDistance = Infinity;
  for (const k of known) {
    const d = distance(key, k);
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best;
}

/**
 * Most entries of a record of the schema (a scope's roles, of which a
 * class's `uniqueWithin` names a few), counted before any entry is checked:
 * the schema's cost is its entries, each an object of its own.
 */
export const MAX_RECORD_KEYS = 16;

/**
 * Throws code 7 for the first key of `value` that `tree` does not know,
 * naming it and the nearest known key at its place: a typo (`gateway` for
 * `gateways`) would otherwise be dropped, and its setting silently absent. A
 * key over {@link MAX_KEY_CHARS} is refused first, known or not, named by its
 * head and length: a key is looked at only once its length is known sane;
 * so is a record of more than {@link MAX_RECORD_KEYS} entries. `listed`:
 * the keys an author may set here, named and suggested (default every key of
 * `tree`; the ipam block's tree also holds the node's keys, refused by value).
 */
export function refuseUnknownKeys(
  value: unknown,
  tree: KeyTree,
  at: string,
  where: string,
  listed?: readonly string[],
): void {
  if (!tree || !isPlainObject(value)) return;
  const known = listed ?? Object.keys(tree).filter((k) => k !== "*");
  const of = `known keys${at ? ` of ${at.slice(0, -1)}` : ""}: ${known.join(", ")}`;
  const keys = Object.keys(value);
  if (tree["*"] !== undefined && keys.length > MAX_RECORD_KEYS) {
    throw new CniError(
      "config",
      `${where}field ${at.slice(0, -1)}: ${keys.length} entries; at most ${MAX_RECORD_KEYS} ` +
        "(MAX_RECORD_KEYS)",
    );
  }
  for (const k of keys) {
    if (k.length > MAX_KEY_CHARS) {
      throw new CniError(
        "config",
        `${where}field ${at}${clip(k.slice(0, 41), 40)}: a key of ${k.length} characters; ` +
          `a key is at most ${MAX_KEY_CHARS} (MAX_KEY_CHARS)`,
        of,
      );
    }
    const sub = Object.hasOwn(tree, k) ? tree[k] : tree["*"];
    if (sub === undefined) {
      const near = nearestKey(k, known);
      throw new CniError(
        "config",
        `${where}field ${at}${k}: unknown key; ${
          near ? `the nearest known key is ${near}` : "no known key is near it"
        }`,
        of,
      );
    }
    refuseUnknownKeys(value[k], sub, `${at}${k}.`, where);
  }
}
