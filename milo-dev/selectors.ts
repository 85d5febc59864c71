/** Kubernetes label and field selector parsing and matching. */

import { labelValueError, qualifiedNameError } from "./names.ts";

/** One label requirement. */
export type LabelRequirement =
  | { key: string; op: "=" | "!="; value: string }
  | { key: string; op: "in" | "notin"; values: string[] }
  | { key: string; op: "exists" | "!exists" };

/** One field requirement. */
export interface FieldRequirement {
  field: string;
  op: "=" | "!=";
  value: string;
}

/** Thrown for a selector that does not parse. */
export class SelectorError extends Error {}

function splitTop(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of s) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  out.push(cur);
  return out.map((x) => x.trim()).filter((x) => x !== "");
}

function checkKey(key: string, whole: string): string {
  if (qualifiedNameError(key) !== undefined) {
    throw new SelectorError(
      `unable to parse requirement: invalid label key "${key}" in "${whole}"`,
    );
  }
  return key;
}

function checkValue(value: string, whole: string): string {
  if (labelValueError(value) !== undefined) {
    throw new SelectorError(
      `unable to parse requirement: invalid label value "${value}" in "${whole}"`,
    );
  }
  return value;
}

/** Parses a `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`). */
export function parseLabelSelector(s: string): LabelRequirement[] {
  return splitTop(s).map((r): LabelRequirement => {
    const set = r.match(/^(\S+)\s+(in|notin)\s*\((.*)\)$/);
    if (set) {
      const values = set[3].split(",").map((v) => checkValue(v.trim(), r));
      return { key: checkKey(set[1], r), op: set[2] as "in" | "notin", values };
    }
    const eq = r.match(/^([^=!\s]+)\s*(==|=|!=)\s*(.*)$/);
    if (eq) {
      const op = eq[2] === "!=" ? "!=" : "=";
      return { key: checkKey(eq[1], r), op, value: checkValue(eq[3].trim(), r) };
    }
    if (r.startsWith("!")) return { key: checkKey(r.slice(1).trim(), r), op: "!exists" };
    return { key: checkKey(r, r), op: "exists" };
  });
}

/** Whether `labels` satisfy every requirement. */
export function matchLabels(reqs: LabelRequirement[], labels: Record<string, string>): boolean {
  return reqs.every((q) => {
    const has = Object.hasOwn(labels, q.key);
    const v = labels[q.key];
    switch (q.op) {
      case "=":
        return has && v === q.value;
      case "!=":
        return !has || v !== q.value;
      case "in":
        return has && q.values.includes(v);
      case "notin":
        return !has || !q.values.includes(v);
      case "exists":
        return has;
      case "!exists":
        return !has;
    }
  });
}

/** Parses a `fieldSelector` restricted to the given field paths. */
export function parseFieldSelector(s: string, allowed: readonly string[]): FieldRequirement[] {
  return splitTop(s).map((r) => {
    const m = r.match(/^([^=!\s]+)\s*(==|=|!=)\s*(.*)$/);
    if (!m) throw new SelectorError(`invalid selector: '${r}'; can't understand '${r}'`);
    if (!allowed.includes(m[1])) throw new SelectorError(`field label not supported: ${m[1]}`);
    return { field: m[1], op: m[2] === "!=" ? "!=" : "=", value: m[3].trim() };
  });
}

/** Whether the field values (by path) satisfy every requirement. */
export function matchFields(reqs: FieldRequirement[], fields: Record<string, string>): boolean {
  return reqs.every((q) => (fields[q.field] ?? "") === q.value ? q.op === "=" : q.op === "!=");
}
