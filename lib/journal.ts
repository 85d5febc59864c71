/**
 * The release journal: claims a DEL (or an ADD's rollback) could not release,
 * recorded on the node so `milo-ipam reconcile` finishes the release later.
 *
 * One small JSON file per attachment under `<stateDir>/journal/`, written
 * atomically (temporary file, fsync, rename). An ADD of the same attachment
 * holds the entry's lock while it leases and drops the entry once it
 * succeeded: the runtime brought the attachment back, so nothing of it may be
 * released; a failed ADD leaves the entry owed. ADD, DEL, recording and
 * reconcile take the entry file's exclusive lock, so none races another.
 */
import { type Attachment, attachmentHash } from "./claims.ts";
import { CniError, errorText } from "./errors.ts";
import { lockFile } from "./lockfile.ts";

/** Most entries kept; the oldest go first when a new one would exceed it. */
export const MAX_JOURNAL_ENTRIES = 1024;

/** One claim a release is owed for. */
export interface JournalClaim {
  name: string;
  /** The claim's uid when the failed call knew it. */
  uid?: string;
}

/** One journal entry: an attachment the runtime removed whose release is unfinished. */
export interface JournalEntry {
  cluster: string;
  node: string;
  network: string;
  containerId: string;
  ifname: string;
  /** When the release first failed (ms since epoch). */
  created: number;
  claims: JournalClaim[];
  attempts: number;
  lastError: string;
}

/** An entry locked by {@link Journal.hold}: nobody else reads, changes or releases it meanwhile. */
export interface JournalHold {
  readonly path: string;
  /** Removes the entry (the lock is still held until {@link close}). */
  remove(): Promise<void>;
  /** Releases the lock. */
  close(): void;
}

/** The release journal of one node. */
export class Journal {
  readonly dir: string;
  readonly #max: number;

  constructor(stateDir: string, max = MAX_JOURNAL_ENTRIES) {
    this.dir = `${stateDir}/journal`;
    this.#max = max;
  }

  /** The entry file of an attachment (`pod-` and the hash its claims are named by). */
  pathOf(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): string {
    return `${this.dir}/pod-${attachmentHash(a)}.json`;
  }

  /**
   * Records (or extends) the entry of `a` with `claims` and the error that
   * left them, under the entry's lock (`held`: the caller holds it already).
   */
  async record(
    a: Attachment,
    claims: JournalClaim[],
    error: string,
    now = Date.now(),
    held?: JournalHold | null,
  ): Promise<string> {
    const path = this.pathOf(a);
    await Deno.mkdir(this.dir, { recursive: true, mode: 0o700 }).catch(rethrowIo(this.dir));
    const lock = held?.path === path ? null : await lockFile(path);
    try {
      await this.#merge(a, path, claims, error, now);
    } finally {
      lock?.close();
    }
    return path;
  }

  async #merge(
    a: Attachment,
    path: string,
    claims: JournalClaim[],
    error: string,
    now: number,
  ): Promise<void> {
    const old = await this.#read(path);
    const byName = new Map((old?.claims ?? []).map((c) => [c.name, c]));
    for (const c of claims) byName.set(c.name, { ...byName.get(c.name), ...c });
    const entry: JournalEntry = {
      cluster: a.cluster,
      node: a.node,
      network: a.network,
      containerId: a.containerId,
      ifname: a.ifname,
      created: old?.created ?? now,
      claims: [...byName.values()],
      attempts: old?.attempts ?? 0,
      lastError: error,
    };
    if (!old) await this.#makeRoom();
    await writeAtomic(path, entry);
  }

  /**
   * Locks the entry of `a`, waiting for a release in progress on it; null when
   * there is none. Throws (code 5) when it exists and cannot be locked.
   */
  async hold(
    a: Pick<Attachment, "cluster" | "containerId" | "ifname">,
  ): Promise<JournalHold | null> {
    const path = this.pathOf(a);
    const file = await lockFile(path).catch((err) => {
      throw new CniError("io", `cannot lock release journal entry ${path}`, errorText(err));
    });
    if (!file) return null;
    return {
      path,
      remove: () =>
        this.update(path, null).catch((err) => {
          throw new CniError("io", `cannot drop release journal entry ${path}`, errorText(err));
        }),
      close: () => file.close(),
    };
  }

  /** Drops the entry of `a` (see {@link hold}); answers whether there was one. */
  async drop(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): Promise<boolean> {
    const h = await this.hold(a);
    if (!h) return false;
    try {
      await h.remove();
      return true;
    } finally {
      h.close();
    }
  }

  /** Every entry, oldest first; unreadable files are reported with their error. */
  async list(): Promise<{ path: string; entry?: JournalEntry; error?: string }[]> {
    let names: string[];
    try {
      names = (await Array.fromAsync(Deno.readDir(this.dir)))
        .filter((e) => e.isFile && e.name.endsWith(".json")).map((e) => e.name);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return [];
      throw new CniError("io", `cannot list release journal ${this.dir}`, errorText(err));
    }
    const out = await Promise.all(names.map(async (n) => {
      const path = `${this.dir}/${n}`;
      try {
        return { path, entry: await this.#read(path) };
      } catch (err) {
        return { path, error: errorText(err) };
      }
    }));
    return out.filter((e) => e.entry || e.error).sort((x, y) =>
      (x.entry?.created ?? 0) - (y.entry?.created ?? 0)
    );
  }

  /**
   * Runs `fn` on the entry at `path` as it is under its lock, if it still
   * exists (an ADD may have dropped it meanwhile); answers whether it ran.
   */
  async whileLocked(path: string, fn: (entry: JournalEntry) => Promise<void>): Promise<boolean> {
    const file = await lockFile(path);
    if (!file) return false;
    try {
      const entry = await this.#read(path);
      if (!entry) return false;
      await fn(entry);
      return true;
    } finally {
      file.close();
    }
  }

  /** Replaces an entry (after a failed attempt) or removes it (`null`). */
  async update(path: string, entry: JournalEntry | null): Promise<void> {
    if (entry) return await writeAtomic(path, entry);
    await Deno.remove(path).catch((err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    });
  }

  async #read(path: string): Promise<JournalEntry | undefined> {
    let text: string;
    try {
      text = await Deno.readTextFile(path);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw new CniError("io", `cannot read release journal entry ${path}`, errorText(err));
    }
    const v = JSON.parse(text) as JournalEntry;
    if (!Array.isArray(v?.claims) || typeof v.containerId !== "string") {
      throw new CniError("io", `release journal entry ${path} is malformed`);
    }
    return v;
  }

  async #makeRoom(): Promise<void> {
    const all = await this.list();
    for (const e of all.slice(0, Math.max(0, all.length - this.#max + 1))) {
      await this.update(e.path, null);
    }
  }
}

/** Writes JSON to `path` atomically: a temporary file beside it, fsync, rename. */
export async function writeAtomic(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;
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

function rethrowIo(path: string): (err: unknown) => never {
  return (err) => {
    throw new CniError("io", `cannot create ${path}`, errorText(err));
  };
}
