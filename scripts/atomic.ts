/**
 * Replacing a file atomically: written beside its target, fsynced, given its
 * mode (and root's ownership when run as root), then renamed over it, so a
 * runtime never execs or loads a half-written file.
 */

/** Moves `tmp` over `target` after fsync, with `mode`, owned by root when run as root. */
export async function commit(tmp: string, target: string, mode: number): Promise<void> {
  const f = await Deno.open(tmp, { read: true, write: true });
  try {
    await f.sync();
  } finally {
    f.close();
  }
  await Deno.chmod(tmp, mode);
  if (Deno.uid() === 0) await Deno.chown(tmp, 0, 0);
  await Deno.rename(tmp, target);
}

/** Writes `data` to `target` atomically (beside it, fsync, rename). */
export async function writeAtomic(target: string, data: string | Uint8Array, mode: number) {
  const tmp = `${target}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    if (typeof data === "string") await Deno.writeTextFile(tmp, data);
    else await Deno.writeFile(tmp, data);
    await commit(tmp, target, mode);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
}
