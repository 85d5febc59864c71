/**
 * This release of milo-ipam, and the VERSION verb: the CNI versions it
 * speaks, and the version a result is encoded in.
 */
import { versionResult } from "./cni.ts";
import { isPlainObject } from "./values.ts";
import { parseBounded } from "./json_bound.ts";

/** This release of milo-ipam (docs/upgrade.md lists the releases). */
export const RELEASE = "0.2.0";

/** VERSION: the supported CNI versions; needs no config beyond an optional cniVersion. */
export function version(stdin: string): Record<string, unknown> {
  const r = parseBounded(stdin);
  return versionResult(requestedVersion(r.ok ? r.value : undefined));
}

/**
 * The version a result or error is encoded in: the request's (stdin, parsed)
 * when supported, else the latest.
 */
export function versionOf(raw: unknown): string {
  return versionResult(requestedVersion(raw)).cniVersion as string;
}

function requestedVersion(raw: unknown): string | undefined {
  return isPlainObject(raw) && typeof raw.cniVersion === "string" ? raw.cniVersion : undefined;
}
