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
 * (lib/_journal_shares.ts, {@link Journal.full}): never another tenant's.
 */
import { writeAtomic } from "./atomic_write.ts";
import { type Attachment, attachmentHash } from "./claims.ts";
import type { Doubt, JournalClaim, Owed } from "./lease.ts";
import { sha256Hex } from "./sha256.ts";
import { CniError, errorText } from "./errors.ts";
import {
  type Entries,
  type FullShare,
  MAX_OWED,
  MAX_OWED_PER_SHARE,
  shareOf,
  Shares,
} from "./_journal_shares.ts";
import { lockFile } from "./lockfile.ts";

/** One journal entry: an attachment the runtime removed whose release is unfinished. */
export interface JournalEntry {
  kind?: undefined;
  cluster: string;
  node: string;
  /** The host that wrote it (lib/host.ts): an entry copied to another machine is not its own. */
  host?: string;
  network: string;
  /** The pod's namespace: whose share of the journal the entry counts against. */
  podNamespace?: string;
  /** The pod (`namespace/name`), from CNI_ARGS: what `show --pod` finds without Milo. */
  pod?: string;
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
   * period after `doubtSince` (else `created`), and keeps waiting for an
   * absent one until then.
   */
  inDoubt?: boolean;
  /**
   * When the doubt began (ms, the node's clock): the end of the ADD whose
   * creates may land (lib/lease.ts), the latest of every doubt the entry owes.
   */
  doubtSince?: number;
}

/**
 * A claim owed to Milo again: a release's DELETE removed it in place of the
 * claim it judged (Milo ignores a DELETE's uid precondition), and making it
 * again failed. Reconcile makes it again, verified (lib/restore.ts). One
 * file per claim name (`remake-<hash>.json`), counted against the share of
 * the attachment whose release owes it.
 */
export interface RemakeEntry {
  kind: "remake";
  cluster: string;
  node: string;
  host?: string;
  network: string;
  podNamespace?: string;
  /** The claim's name, and the create that makes it again (its address pinned). */
  name: string;
  body: Record<string, unknown>;
  created: number;
  attempts: number;
  lastError: string;
}

/** Any entry of the journal: a release owed, or a claim owed again. */
export type AnyEntry = JournalEntry | RemakeEntry;

/** Why an in-doubt entry was recorded (its `lastError`). */
export const IN_DOUBT =
  "an ADD of this attachment ended without Milo's answer to its create: the claim may still appear";

/** An entry locked by {@link Journal.hold}: nobody else reads, changes or releases it meanwhile. */
export interface JournalHold {
  readonly path: string;
  /** Removes the entry (the lock is still held until {@link close}). */
  remove(): Promise<void>;
  /** The entry's doubt, when it is in doubt: creates of an earlier ADD that may land yet. */
  doubt(): Promise<Doubt | undefined>;
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

  /** True when the journal owes a release of `a` (its entry exists). */
  owes(a: Pick<Attachment, "cluster" | "containerId" | "ifname">): boolean {
    try {
      Deno.statSync(this.pathOf(a));
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Records (or extends) the entry of `a` with what a release owes (lib/lease.ts
   * `owedAfterRelease`): its claims and the error that left them, and, when
   * creates may still land, the doubt (in doubt from then on, its window from
   * the latest doubt's beginning). `replace`: the claims the entry owed before
   * were just released (only the doubt is owed of them; an entry in doubt
   * keeps them all, for another create of them may land yet). Under the
   * entry's lock (`held`: the caller holds it already).
   */
  owe(
    a: Attachment,
    owed: Owed,
    error: string,
    o: { now?: number; held?: JournalHold | null; replace?: boolean } = {},
  ): Promise<string> {
    const now = o.now ?? Date.now();
    return this.#write(a, (old) => {
      const kept = o.replace && !old?.inDoubt ? [] : old?.claims ?? [];
      const byName = new Map(kept.map((c) => [c.name, c]));
      for (const c of owed.claims) byName.set(c.name, { ...byName.get(c.name), ...c });
      for (const name of owed.doubt?.names ?? []) byName.set(name, byName.get(name) ?? { name });
      const entry = entryOf(a, old?.created ?? now, [...byName.values()], error);
      entry.attempts = old?.attempts ?? 0;
      const since = Math.max(
        old?.doubtSince ?? old?.created ?? -Infinity,
        owed.doubt?.since ?? -Infinity,
      );
      if (old?.inDoubt || owed.doubt) Object.assign(entry, { inDoubt: true, doubtSince: since });
      if (owed.doubt && !owed.claims.length) entry.lastError = IN_DOUBT;
      return entry;
    }, o.held);
  }

  /**
   * Records that the claim `remake.body` names is owed to Milo again, on
   * behalf of the release of `a` (whose share it counts against).
   */
  recordRemake(
    a: Attachment,
    remake: { body: Record<string, unknown>; why: string },
    now = Date.now(),
  ): Promise<string> {
    const name = String((remake.body.metadata as { name?: unknown })?.name ?? "");
    const path = `${this.dir}/${REMAKE}${sha256Hex(name).slice(0, 20)}.json`;
    return this.#writeAt(path, (old) => ({
      kind: "remake",
      cluster: a.cluster,
      node: a.node,
      ...(a.host ? { host: a.host } : {}),
      network: a.network,
      ...(a.podNamespace ? { podNamespace: a.podNamespace } : {}),
      name,
      body: remake.body,
      created: old?.created ?? now,
      attempts: old?.attempts ?? 0,
      lastError: remake.why,
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
    return this.owe(a, { claims }, error, { now, held });
  }

  /**
   * Writes the entry of `a` that `next` makes of the current one, under the
   * entry's lock (`held`: the caller holds it already); answers its path.
   */
  #write(
    a: Attachment,
    next: (old: JournalEntry | undefined) => JournalEntry,
    held?: JournalHold | null,
  ): Promise<string> {
    return this.#writeAt(this.pathOf(a), (old) => {
      const entry = next(old?.kind === "remake" ? undefined : old);
      if (old) entry.podNamespace = old.podNamespace;
      return entry;
    }, held);
  }

  /** Writes the entry at `path` that `next` makes of the current one, under its lock. */
  async #writeAt<T extends AnyEntry>(
    path: string,
    next: (old: AnyEntry | undefined) => T,
    held?: JournalHold | null,
  ): Promise<string> {
    await Deno.mkdir(this.dir, { recursive: true, mode: 0o700 }).catch(rethrowIo(this.dir));
    const lock = held?.path === path ? null : await lockFile(path);
    try {
      const old = await this.#read(path);
      const entry = next(old);
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
      doubt: async () => {
        const e = await this.#read(path);
        if (!e || e.kind !== undefined || !e.inDoubt) return undefined;
        return { since: e.doubtSince ?? e.created, names: e.claims.map((c) => c.name) };
      },
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
      const e = await this.#read(h.path);
      if (e?.kind === undefined && e?.inDoubt) return false;
      await h.remove();
      return true;
    } finally {
      h.close();
    }
  }

  /** Every release entry, oldest first; unreadable files are reported with their error. */
  async list(): Promise<{ path: string; entry?: JournalEntry; error?: string }[]> {
    return (await this.#list((n) => !n.startsWith(REMAKE))).map((e) =>
      e.entry?.kind === "remake" ? { path: e.path, error: "a claim owed again in its place" } : {
        path: e.path,
        ...(e.entry ? { entry: e.entry } : {}),
        ...(e.error ? { error: e.error } : {}),
      }
    );
  }

  /** Every claim owed again ({@link recordRemake}), oldest first; unreadable ones with their error. */
  async remakes(): Promise<{ path: string; entry?: RemakeEntry; error?: string }[]> {
    return (await this.#list((n) => n.startsWith(REMAKE))).map((e) =>
      e.entry && e.entry.kind !== "remake"
        ? { path: e.path, error: "a release entry under a remake's name" }
        : {
          path: e.path,
          ...(e.entry ? { entry: e.entry } : {}),
          ...(e.error ? { error: e.error } : {}),
        }
    );
  }

  async #list(
    named: (name: string) => boolean,
  ): Promise<{ path: string; entry?: AnyEntry; error?: string }[]> {
    let names: string[];
    try {
      names = (await Array.fromAsync(Deno.readDir(this.dir)))
        .filter((e) => e.isFile && e.name.endsWith(".json") && named(e.name)).map((e) => e.name);
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
    return await this.#whileLocked(path, (e) => e.kind === "remake" ? undefined : fn(e));
  }

  /** {@link whileLocked} for a claim owed again ({@link recordRemake}). */
  async whileLockedRemake(
    path: string,
    fn: (entry: RemakeEntry) => Promise<void>,
  ): Promise<boolean> {
    return await this.#whileLocked(path, (e) => e.kind === "remake" ? fn(e) : undefined);
  }

  async #whileLocked(
    path: string,
    fn: (entry: AnyEntry) => Promise<void> | undefined,
  ): Promise<boolean> {
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
  async update(path: string, entry: JournalEntry | null): Promise<void>;
  async update(path: string, entry: RemakeEntry | null): Promise<void>;
  async update(path: string, entry: AnyEntry | null): Promise<void> {
    if (entry) return await writeAtomic(path, entry);
    const old = await this.#read(path).catch(() => undefined);
    await Deno.remove(path).catch((err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    });
    if (old) await this.#shares.removed(shareOf(old), baseName(path));
  }

  async #read(path: string): Promise<AnyEntry | undefined> {
    let text: string;
    try {
      text = await Deno.readTextFile(path);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw new CniError("io", `cannot read release journal entry ${path}`, errorText(err));
    }
    const v = JSON.parse(text) as AnyEntry;
    const ok = v?.kind === "remake"
      ? typeof v.name === "string" && typeof v.body === "object" && v.body !== null
      : Array.isArray(v?.claims) && typeof v.containerId === "string";
    if (!ok) throw new CniError("io", `release journal entry ${path} is malformed`);
    return v;
  }
}

function entryOf(
  a: Attachment,
  created: number,
  claims: JournalClaim[],
  lastError: string,
): JournalEntry {
  const { cluster, node, host, network, containerId, ifname, podNamespace, podName } = a;
  return {
    cluster,
    node,
    ...(host ? { host } : {}),
    network,
    ...(podNamespace ? { podNamespace } : {}),
    ...(podNamespace && podName ? { pod: `${podNamespace}/${podName}` } : {}),
    containerId,
    ifname,
    created,
    claims,
    attempts: 0,
    lastError,
  };
}

/** How the file of a claim owed again begins (a release entry's begins `pod-`). */
const REMAKE = "remake-";

const baseName = (path: string) => path.slice(path.lastIndexOf("/") + 1);

function rethrowIo(path: string): (err: unknown) => never {
  return (err) => {
    throw new CniError("io", `cannot create ${path}`, errorText(err));
  };
}
