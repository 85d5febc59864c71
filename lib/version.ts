import { writeAtomicSync } from "./atomic_write.ts";
import { SUPPORTED_VERSIONS, versionResult } from "./cni.ts";
import { isPlainObject } from "./values.ts";
import { CniError, errorText } from "./errors.ts";
import { parseBounded } from "./json_bound.ts";

/** This release of milo-ipam (docs/upgrade.md lists the releases). */
export const RELEASE = "0.2.0";

/**
 * The format of the node state this release writes under `stateDir`
 * (journal, holdings, locks, reconcile state, host id). A release reads its
 * own format and older ones, and refuses a newer one.
 */
export const STATE_FORMAT = 1;

/** The file under `stateDir` recording the state's format and the release that wrote it. */
export const STATE_FORMAT_FILE = "format.json";

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

/** What `milo-ipam version` prints. */
function releaseInfo(): Record<string, unknown> {
  return {
    release: RELEASE,
    stateFormat: STATE_FORMAT,
    cniVersions: [...SUPPORTED_VERSIONS],
    deno: Deno.version.deno,
  };
}

/** The state directories this process found in a format it reads. */
const checked = new Set<string>();

/**
 * Refuses a `stateDir` written in a newer state format than this release's
 * (a rollback past a format change), naming the release that wrote it; a
 * directory without the record gets this release's (`write`), so a later
 * release knows what it finds. Checked once per directory and process.
 */
export function requireStateFormat(stateDir: string, write = true): void {
  if (checked.has(stateDir)) return;
  const path = `${stateDir}/${STATE_FORMAT_FILE}`;
  let text: string | undefined;
  try {
    text = Deno.readTextFileSync(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) {
      throw new CniError("io", `cannot read the state format record ${path}`, errorText(err));
    }
  }
  if (text === undefined) {
    if (write) writeFormat(path);
    checked.add(stateDir);
    return;
  }
  let found: { format?: unknown; release?: unknown } = {};
  try {
    const v = JSON.parse(text);
    if (isPlainObject(v)) found = v;
  } catch {
    // Judged below.
  }
  if (typeof found.format !== "number" || !Number.isInteger(found.format) || found.format < 1) {
    throw new CniError(
      "config",
      `the state format record ${path} is not {"format": N, "release": "..."}`,
      "it is written by milo-ipam; restore it, or remove it if this release wrote the state",
    );
  }
  if (found.format > STATE_FORMAT) {
    throw new CniError(
      "config",
      `node state in ${stateDir} is in format ${found.format}, written by milo-ipam ${
        typeof found.release === "string" ? found.release : "(unknown release)"
      }; this release (${RELEASE}) reads format ${STATE_FORMAT} and older`,
      "roll forward to that release or a later one; docs/upgrade.md says which rollbacks " +
        "keep the state",
    );
  }
  checked.add(stateDir);
}

function writeFormat(path: string): void {
  const text = JSON.stringify({ format: STATE_FORMAT, release: RELEASE }) + "\n";
  try {
    writeAtomicSync(path, text, 0o644);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return; // stateDir not made yet: the next call writes it
    throw new CniError("io", `cannot write the state format record ${path}`, errorText(err));
  }
}

/**
 * `milo-ipam version [--output text|json]`: the release, its state format and
 * CNI versions on stdout; answers the exit code (2 for a wrong command line).
 */
export async function versionCli(args: string[]): Promise<number> {
  const [{ parseCommandLine, usageError }, { VERSION_USAGE }] = await Promise.all([
    import("./cli.ts"),
    import("./usage.ts"),
  ]);
  const p = parseCommandLine("milo-ipam version", args, {
    usage: VERSION_USAGE,
    options: { output: { type: "string", default: "text" } },
  });
  if ("exit" in p) return p.exit;
  const output = p.values.output;
  if (output !== "text" && output !== "json") {
    return usageError("milo-ipam version", `--output ${output}: text or json`, VERSION_USAGE).exit;
  }
  const i = releaseInfo();
  const text = output === "json"
    ? JSON.stringify(i) + "\n"
    : `milo-ipam ${i.release} (state format ${i.stateFormat}; CNI ${
      (i.cniVersions as string[]).join(", ")
    }; Deno ${i.deno})\n`;
  Deno.stdout.writeSync(new TextEncoder().encode(text));
  return 0;
}
