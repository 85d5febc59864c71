/**
 * Files of the node state replaced whole: written to a temporary file beside
 * the target, then renamed over it, so a reader finds the old file or the new
 * one, never a part.
 */
import { CniError, errorText } from "./errors.ts";

/** A temporary name beside `path`. */
const tempOf = (path: string) => `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;

/** Writes JSON to `path` atomically: a temporary file beside it (0600), fsync, rename. */
export async function writeAtomic(path: string, value: unknown): Promise<void> {
  const tmp = tempOf(path);
  try {
    const f = await Deno.open(tmp, { write: true, createNew: true, mode: 0o600 });
    try {
      await f.write(new TextEncoder().encode(JSON.stringify(value)));
      await f.sync();
    } finally {
      f.close();
    }
    await Deno.rename(tmp, path);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw new CniError("io", `cannot write ${path}`, errorText(err));
  }
}

/**
 * Writes `text` to `path` synchronously: a temporary file beside it (`mode`),
 * renamed over it, without fsync (for a record that matters only while the
 * processes using it live). The temporary file is removed on failure and the
 * error thrown as it is (`NotFound`: the directory is missing).
 */
export function writeAtomicSync(path: string, text: string, mode: number): void {
  const tmp = tempOf(path);
  try {
    Deno.writeTextFileSync(tmp, text, { createNew: true, mode });
    Deno.renameSync(tmp, path);
  } catch (err) {
    try {
      Deno.removeSync(tmp);
    } catch {
      // Never made.
    }
    throw err;
  }
}
