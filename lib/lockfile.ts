/**
 * Exclusive file locks on the node (flock, shared by the plugin, the agent
 * and reconcile): the per-attachment lock that orders ADD and DEL of one
 * attachment across processes, and the lock of a release journal entry.
 */
import { type Attachment, attachmentHash } from "./claims.ts";
import { CniError, errorText } from "./errors.ts";

/** Takes the exclusive lock of an open file, waiting for its holder; closing the file drops it. */
export type Flock = (file: Deno.FsFile) => Promise<void>;

/** flock(2), as Deno takes it. */
const kernelFlock: Flock = (file) => file.lock(true);

let flock: Flock = kernelFlock;

/**
 * Replaces how {@link lockFile} takes a lock (undefined: flock again): the
 * simulator (testing/sim) grants them in its own deterministic order, by the
 * same inode, released when the file is closed.
 */
export function useFlock(f: Flock | undefined): void {
  flock = f ?? kernelFlock;
}

/**
 * Opens and locks the file at `path` (creating it when `create`), waiting for
 * its holder; null when it does not exist. A file replaced or removed while
 * we waited (another inode at `path`) is locked afresh.
 */
export async function lockFile(path: string, create = false): Promise<Deno.FsFile | null> {
  // Open and stat are synchronous (a local file; Deno's async file ops cost a thread hand-off
  // each, ~50 µs); only the lock, which may wait for another process, is awaited.
  const inode = () => {
    try {
      return Deno.statSync(path).ino;
    } catch {
      return undefined;
    }
  };
  for (let tries = 0; tries < 8; tries++) {
    let file: Deno.FsFile;
    try {
      file = Deno.openSync(path, { read: true, write: true, create, mode: 0o600 });
    } catch (err) {
      if (err instanceof Deno.errors.NotFound && !create) return null;
      throw err;
    }
    try {
      await flock(file);
      if (inode() === file.statSync().ino) return file;
    } catch (err) {
      file.close();
      throw err;
    }
    file.close();
    if (!create && inode() === undefined) return null;
  }
  throw new Error(`${path} kept being replaced while waiting for its lock`);
}

/** Lock files the attachments are spread over (`locks/000` … `locks/fff`). */
const STRIPES_HEX = 3;

/** The lock of one attachment, held for one ADD or DEL. */
export interface AttachmentLock {
  close(): void;
}

/**
 * Locks the attachment `a`: an ADD or DEL of the same attachment in another
 * process (a runtime's retry, the agent finishing a call its client gave up
 * on) waits for this one, so a rollback never deletes the claim a concurrent
 * call of the same attachment returned. Attachments share 4096 lock files
 * under `<stateDir>/locks/` by their names' hash: the files are made once and
 * never removed (a new pod costs no file creation, and no waiter can hold an
 * unlinked file), and two attachments rarely wait for each other.
 */
export async function lockAttachment(
  stateDir: string,
  a: Pick<Attachment, "cluster" | "containerId" | "ifname">,
): Promise<AttachmentLock> {
  const dir = `${stateDir}/locks`;
  const path = `${dir}/${attachmentHash(a).slice(0, STRIPES_HEX)}`;
  try {
    const file = (await lockFile(path, true).catch(async (err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
      await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
      return await lockFile(path, true);
    }))!;
    return { close: () => file.close() };
  } catch (err) {
    throw new CniError("io", `cannot lock attachment ${path}`, errorText(err));
  }
}

/**
 * Runs `fn` holding the lock of the attachment `a` ({@link lockAttachment}),
 * released however `fn` ends: the one way every ADD, DEL, GC, journal entry,
 * reconcile and repair of an attachment takes it.
 */
export async function withAttachmentLock<T>(
  stateDir: string,
  a: Pick<Attachment, "cluster" | "containerId" | "ifname">,
  fn: () => Promise<T>,
): Promise<T> {
  const lock = await lockAttachment(stateDir, a);
  try {
    return await fn();
  } finally {
    lock.close();
  }
}
