import { versionResult } from "./cni.ts";
import { isPlainObject } from "./config.ts";

/** VERSION: the supported CNI versions; needs no config beyond an optional cniVersion. */
export function version(stdin: string): Record<string, unknown> {
  let requested: string | undefined;
  try {
    const raw = JSON.parse(stdin);
    if (isPlainObject(raw) && typeof raw.cniVersion === "string") requested = raw.cniVersion;
  } catch {
    requested = undefined;
  }
  return versionResult(requested);
}
