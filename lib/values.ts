/** Generic checks of JSON values from outside, shared by every reader (a leaf: imports nothing). */

/** Longest value milo-ipam copies into a claim's annotations (a Kubernetes name's limit). */
export const MAX_VALUE_CHARS = 253;

/** True for a non-null, non-array object. */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
