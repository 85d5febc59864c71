/**
 * The format of the node state under `stateDir`: the record a release
 * writes, and the refusal of a state written by a newer release (a rollback
 * past a format change).
 */
import { writeAtomicSync } from "./atomic_write.ts";
import { CniError, errorText } from "./errors.ts";
import { isPlainObject } from "./values.ts";
import { RELEASE } from "./version.ts";

/**
 * The format of the node state this release writes under `stateDir`
 * (journal, holdings, locks, reconcile state, host id). A release reads its
 * own format and older ones, and refuses a newer one.
 */
export const STATE_FORMAT = 1;

/** The file under `stateDir` recording the state's format and the release that wrote it. */
export const STATE_FORMAT_FILE = "format.json";

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
