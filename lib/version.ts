import { isPlainObject, versionResult } from "./cni.ts";

/** VERSION: the supported CNI versions; needs no config beyond an optional cniVersion. */
export function version(stdin: string): Record<string, unknown> {
  return versionResult(requestedVersion(stdin));
}

/** The version a result or error is encoded in: the request's when supported, else the latest. */
export function versionOf(stdin: string): string {
  return versionResult(requestedVersion(stdin)).cniVersion as string;
}

function requestedVersion(stdin: string): string | undefined {
  try {
    const raw = JSON.parse(stdin);
    return isPlainObject(raw) && typeof raw.cniVersion === "string" ? raw.cniVersion : undefined;
  } catch {
    return undefined;
  }
}
