/**
 * The release journal: claims a DEL (or an ADD's rollback) could not release,
 * recorded on the node so `milo-ipam reconcile` finishes the release later.
 *
 * One small JSON file per attachment under `<stateDir>/journal/`, written
 * atomically (temporary file, fsync, rename). A later ADD of the same
 * attachment drops the entry before it leases: the runtime brought the
 * attachment back, so nothing of it may be released. ADD and reconcile take an
 * exclusive lock on the entry file, so an ADD never races a release.
 */
import { type Attachment, claimName } from "./claims.ts";
import { CniError, errorText } from "./errors.ts";

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

/** The release journal of one node. */
export class Journal {
  readonly dir: string;
  readonly #max: number;

  constructor(stateDir: string, max = MAX_JOURNAL_ENTRIES) {
    this.dir = `${stateDir}/journal`;
    this.#max = max;
  }

  /** The entry file of an attachment (named by its first claim name, a hash). */
  async pathOf(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): Promise<string> {
    const name = await claimName(a, "ipv4");
    return `${this.dir}/${name.replace(/-v4$/, "")}.json`;
  }

  /** Records (or extends) the entry of `a` with `claims` and the error that left them. */
  async record(
    a: Attachment,
    claims: JournalClaim[],
    error: string,
    now = Date.now(),
  ): Promise<string> {
    const path = await this.pathOf(a);
    await Deno.mkdir(this.dir, { recursive: true, mode: 0o700 }).catch(rethrowIo(this.dir));
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
    return path;
  }

  /**
   * Drops the entry of `a`, waiting for a release in progress on it. Throws
   * (code 5) when the entry exists and cannot be removed.
   */
  async drop(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): Promise<boolean> {
    const path = await this.pathOf(a);
    let file: Deno.FsFile;
    try {
      file = await Deno.open(path, { read: true, write: true });
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return false;
      throw new CniError("io", `cannot open release journal entry ${path}`, errorText(err));
    }
    try {
      await file.lock(true);
      await Deno.remove(path).catch((err) => {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
      });
      return true;
    } catch (err) {
      throw new CniError("io", `cannot drop release journal entry ${path}`, errorText(err));
    } finally {
      file.close();
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
   * Runs `fn` holding the entry's lock, if the entry still exists at `path`
   * (an ADD may have dropped it meanwhile); answers whether it ran.
   */
  async whileLocked(path: string, fn: () => Promise<void>): Promise<boolean> {
    let file: Deno.FsFile;
    try {
      file = await Deno.open(path, { read: true, write: true });
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return false;
      throw err;
    }
    try {
      await file.lock(true);
      const [held, now] = await Promise.all([file.stat(), Deno.stat(path).catch(() => null)]);
      if (!now || now.ino !== held.ino) return false;
      await fn();
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
