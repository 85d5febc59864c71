/**
 * Replacing a file atomically: written beside its target (0600 until whole),
 * fsynced, given its mode (and root's ownership when run as root), then
 * renamed over it, so a runtime never execs or loads a half-written file and
 * nobody else reads a secret.
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

/**
 * Writes `data` to `target` atomically (beside it, fsync, rename). The file
 * beside it is made new (O_CREAT|O_EXCL: never one planted there before, nor
 * through a symlink) and 0600 before its first byte, and gets `mode` only once
 * whole: a secret written through it (the Milo token) is never readable by
 * another user, not even while it is being written.
 */
export async function writeAtomic(target: string, data: string | Uint8Array, mode: number) {
  const tmp = `${target}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const f = await Deno.open(tmp, { write: true, createNew: true, mode: 0o600 });
    try {
      for (let at = 0; at < bytes.byteLength;) at += await f.write(bytes.subarray(at));
    } finally {
      f.close();
    }
    await commit(tmp, target, mode);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
}
