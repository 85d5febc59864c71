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
 *
 * No entry is ever dropped unmade: an entry leaves only when its release was
 * made (or the attachment came back). The journal's size is bounded instead
 * by refusing ADDs of a tenant (a pod namespace) that owes too many
 * (lib/journal_shares.ts, {@link Journal.full}): never another tenant's.
 */
import { writeAtomic } from "./atomic_write.ts";
import { type Attachment, attachmentHash } from "./claims.ts";
import { CniError, errorText } from "./errors.ts";
import {
  type Entries,
  type FullShare,
  MAX_OWED,
  MAX_OWED_PER_SHARE,
  shareOf,
  Shares,
} from "./journal_shares.ts";
import { lockFile } from "./lockfile.ts";

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
  /** The host that wrote it (lib/host.ts): an entry copied to another machine is not its own. */
  host?: string;
  network: string;
  /** The pod's namespace: whose share of the journal the entry counts against. */
  podNamespace?: string;
  containerId: string;
  ifname: string;
  /** When the release first failed (ms since epoch, the node's clock). */
  created: number;
  claims: JournalClaim[];
  attempts: number;
  lastError: string;
  /**
   * The claims may not exist yet: an ADD's create went unanswered before the
   * DEL. Reconcile releases a claim of the attachment created up to a grace
   * period after `created`, and keeps waiting for an absent one until then.
   */
  inDoubt?: boolean;
}

/** Why an in-doubt entry was recorded (its `lastError`). */
export const IN_DOUBT =
  "an ADD of this attachment ended without Milo's answer to its create: the claim may still appear";

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
  readonly #shares: Shares;

  /** Bounded at `max` entries owed by the node, `shareMax` by one share. */
  constructor(stateDir: string, max = MAX_OWED, shareMax = MAX_OWED_PER_SHARE) {
    this.dir = `${stateDir}/journal`;
    this.#max = max;
    this.#shares = new Shares(this.dir, max, shareMax);
  }

  /** The entry file of an attachment (`pod-` and the hash its claims are named by). */
  pathOf(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): string {
    return `${this.dir}/pod-${attachmentHash(a)}.json`;
  }

  /**
   * Records that the released claims `names` of `a` may still appear (an ADD
   * in doubt), replacing what the entry owed: the caller just released it all.
   */
  recordDoubt(a: Attachment, names: string[], now = Date.now()): Promise<string> {
    return this.#write(a, (old) => ({
      ...entryOf(a, old?.created ?? now, names.map((name) => ({ name })), IN_DOUBT),
      inDoubt: true,
    }));
  }

  /**
   * Why ADDs of `a`'s share (its pod namespace, else its network) are refused
   * until reconcile makes some of its releases, or undefined: it owes
   * {@link MAX_OWED_PER_SHARE}, or, while the node owes {@link MAX_OWED}, an
   * even part of them or more. Another share's entries never refuse it.
   */
  full(a: Pick<Attachment, "podNamespace" | "network">): FullShare | undefined {
    return this.#shares.full(shareOf(a));
  }

  /** Entries owed by the node at which its shares owing an even part or more are refused. */
  get max(): number {
    return this.#max;
  }

  /** The entries owed now (counted, nothing changed). */
  async owed(): Promise<number> {
    return (await this.#entries()).files.length;
  }

  /** Counts the entries owed, rebuilds the shares' counts and flags; answers the count. */
  countOwed(): Promise<number> {
    return this.#shares.recount(() => this.#entries());
  }

  /** The entry files, each one's share read on demand. */
  async #entries(): Promise<Entries> {
    const files: string[] = [];
    try {
      for await (const e of Deno.readDir(this.dir)) {
        if (e.isFile && e.name.endsWith(".json")) files.push(e.name);
      }
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        throw new CniError("io", `cannot list release journal ${this.dir}`, errorText(err));
      }
    }
    const shareOfFile = async (f: string) => {
      const e = await this.#read(`${this.dir}/${f}`).catch(() => undefined);
      return e ? shareOf(e) : undefined;
    };
    return { files, shareOf: shareOfFile };
  }

  /**
   * Records (or extends) the entry of `a` with `claims` and the error that
   * left them, under the entry's lock (`held`: the caller holds it already).
   */
  record(
    a: Attachment,
    claims: JournalClaim[],
    error: string,
    now = Date.now(),
    held?: JournalHold | null,
  ): Promise<string> {
    return this.#write(a, (old) => {
      const byName = new Map((old?.claims ?? []).map((c) => [c.name, c]));
      for (const c of claims) byName.set(c.name, { ...byName.get(c.name), ...c });
      const entry = entryOf(a, old?.created ?? now, [...byName.values()], error);
      entry.attempts = old?.attempts ?? 0;
      if (old?.inDoubt) entry.inDoubt = true;
      return entry;
    }, held);
  }

  /**
   * Writes the entry of `a` that `next` makes of the current one, under the
   * entry's lock (`held`: the caller holds it already); answers its path.
   */
  async #write(
    a: Attachment,
    next: (old: JournalEntry | undefined) => JournalEntry,
    held?: JournalHold | null,
  ): Promise<string> {
    const path = this.pathOf(a);
    await Deno.mkdir(this.dir, { recursive: true, mode: 0o700 }).catch(rethrowIo(this.dir));
    const lock = held?.path === path ? null : await lockFile(path);
    try {
      const old = await this.#read(path);
      const entry = next(old);
      if (old) entry.podNamespace = old.podNamespace;
      await writeAtomic(path, entry);
      if (!old) {
        const entries = () => this.#entries();
        const total = (await entries()).files.length;
        await this.#shares.added(shareOf(entry), baseName(path), total, entries);
      }
    } finally {
      lock?.close();
    }
    return path;
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

  /**
   * Drops the entry of `a` once its claims were released (see {@link hold}),
   * unless it is in doubt: a create may still land after this release too.
   * Answers whether it dropped one.
   */
  async drop(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): Promise<boolean> {
    const h = await this.hold(a);
    if (!h) return false;
    try {
      if ((await this.#read(h.path))?.inDoubt) return false;
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

  /** Replaces an entry (after a failed attempt) or removes it (`null`), under its lock. */
  async update(path: string, entry: JournalEntry | null): Promise<void> {
    if (entry) return await writeAtomic(path, entry);
    const old = await this.#read(path).catch(() => undefined);
    await Deno.remove(path).catch((err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    });
    if (old) await this.#shares.removed(shareOf(old), baseName(path));
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
}

function entryOf(
  a: Attachment,
  created: number,
  claims: JournalClaim[],
  lastError: string,
): JournalEntry {
  const { cluster, node, host, network, containerId, ifname, podNamespace } = a;
  return {
    cluster,
    node,
    ...(host ? { host } : {}),
    network,
    ...(podNamespace ? { podNamespace } : {}),
    containerId,
    ifname,
    created,
    claims,
    attempts: 0,
    lastError,
  };
}

const baseName = (path: string) => path.slice(path.lastIndexOf("/") + 1);

function rethrowIo(path: string): (err: unknown) => never {
  return (err) => {
    throw new CniError("io", `cannot create ${path}`, errorText(err));
  };
}
