/**
 * A config's fields held to the one schema (lib/config.ts): the keys its
 * objects know, an unknown key refused naming the nearest known one, and the
 * schema's issues as field messages.
 */
import type * as z from "zod/mini";
import { isPlainObject } from "./cni.ts";
import { CniError } from "./errors.ts";

/** The schema's issues of `error` as field messages, each path under `prefix`. */
export function issuesOf(error: z.core.$ZodError, prefix: string): string[] {
  return error.issues.map((i) => `field ${prefix}${i.path.map(String).join(".")}: ${i.message}`);
}

/** The keys a schema's objects know, by nesting: null for a value with no keys of its own. */
export type KeyTree = { [key: string]: KeyTree | null } | null;

/** The known keys of `schema`'s objects (a record's values under `*`), from the one schema. */
export function keyTree(schema: unknown): KeyTree {
  // deno-lint-ignore no-explicit-any
  const def = (schema as any)?._zod?.def;
  if (!def) return null;
  if (def.type === "default" || def.type === "optional" || def.type === "nullable") {
    return keyTree(def.innerType);
  }
  if (def.type === "object") {
    return Object.fromEntries(Object.entries(def.shape).map(([k, v]) => [k, keyTree(v)]));
  }
  if (def.type === "record") {
    const values = keyTree(def.valueType);
    return values ? { "*": values } : null;
  }
  return null;
}

/** Edit distance (insertions, deletions, substitutions, adjacent swaps) between two keys. */
function distance(a: string, b: string): number {
  const x = a.toLowerCase(), y = b.toLowerCase();
  const d = Array.from({ length: x.length + 1 }, (_, i) => [i, ...Array(y.length).fill(0)]);
  for (let j = 1; j <= y.length; j++) d[0][j] = j;
  for (let i = 1; i <= x.length; i++) {
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1]) {
        d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[x.length][y.length];
}

/** The known key nearest to `key` (the first of equals, in the schema's order). */
export function nearestKey(key: string, known: string[]): string {
  let best = known[0];
  for (const k of known) if (distance(key, k) < distance(key, best)) best = k;
  return best;
}

/**
 * Throws code 7 for the first key of `value` that `tree` does not know,
 * naming it and the nearest known key at its place: a typo (`gateway` for
 * `gateways`) would otherwise be dropped, and its setting silently absent.
 */
export function refuseUnknownKeys(value: unknown, tree: KeyTree, at: string, where: string): void {
  if (!tree || !isPlainObject(value)) return;
  const known = Object.keys(tree).filter((k) => k !== "*");
  for (const [k, v] of Object.entries(value)) {
    const sub = Object.hasOwn(tree, k) ? tree[k] : tree["*"];
    if (sub === undefined) {
      const near = nearestKey(k, known);
      throw new CniError(
        "config",
        `${where}field ${at}${k}: unknown key; the nearest known key is ${near}`,
        `known keys${at ? ` of ${at.slice(0, -1)}` : ""}: ${known.join(", ")}`,
      );
    }
    refuseUnknownKeys(v, sub, `${at}${k}.`, where);
  }
}
