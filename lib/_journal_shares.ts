/**
 * The release journal's shares: each entry counts against the share of the
 * tenant whose attachment it is (its pod namespace; without one, its
 * network), so that one tenant owing releases never refuses another's ADDs.
 *
 * Each entry has a marker, `<journal>/shares/<share hash>/<entry file>`
 * (empty), written with the entry and removed with it: a share's count is the
 * length of its directory, read without opening any entry. A share whose ADDs
 * are refused has a flag beside its directory, `<share hash>.full` (what it
 * owes and its limit), set when it owes {@link MAX_OWED_PER_SHARE} or, while
 * the node owes {@link MAX_OWED} in all, at least an even part of them (the
 * shares owing less go on). {@link Shares.recount} rebuilds markers and flags
 * from the entries (reconcile runs it after the journal).
 */
import type { Attachment } from "./claims.ts";
import { CniError, errorText } from "./errors.ts";
import { sha256Hex } from "./sha256.ts";

/** Entries owed by the whole node at which the shares owing an even part or more are refused. */
export const MAX_OWED = 4096;
/** Entries owed by one share at which its ADDs are refused. */
export const MAX_OWED_PER_SHARE = 512;

/** A share whose ADDs are refused: what it owes, and its limit when the flag was set. */
export interface FullShare {
  share: string;
  owed: number;
  limit: number;
}

/** The share an attachment's entries count against: its pod namespace, else its network. */
export function shareOf(a: Pick<Attachment, "podNamespace" | "network">): string {
  return a.podNamespace ? `namespace ${a.podNamespace}` : `network ${a.network}`;
}

const hashOf = (share: string) => sha256Hex(share).slice(0, 20);

/** The shares of one release journal. */
export class Shares {
  readonly #dir: string;
  readonly #max: number;
  readonly #shareMax: number;

  constructor(journalDir: string, max: number, shareMax: number) {
    this.#dir = `${journalDir}/shares`;
    this.#max = max;
    this.#shareMax = shareMax;
  }

  /** Why `share`'s ADDs are refused, or undefined while they are not (one file read). */
  full(share: string): FullShare | undefined {
    const flag = `${this.#dir}/${hashOf(share)}.full`;
    let text: string;
    try {
      text = Deno.readTextFileSync(flag);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw new CniError("io", `cannot read release journal flag ${flag}`, errorText(err));
    }
    try {
      const v = JSON.parse(text) as FullShare;
      if (typeof v.owed === "number" && typeof v.limit === "number") return { ...v, share };
    } catch {
      // Torn: full all the same.
    }
    return { share, owed: this.#shareMax, limit: this.#shareMax };
  }

  /**
   * Marks the new entry `file` as `share`'s and flags the share when it is
   * full now; `total` is the node's count of entries (at the node's limit,
   * every share is judged again).
   */
  async added(
    share: string,
    file: string,
    total: number,
    entries: () => Promise<Entries>,
  ): Promise<void> {
    const owed = await this.#mark(share, file);
    if (total >= this.#max) await this.recount(entries);
    else if (owed >= this.#shareMax) {
      await this.#flag(hashOf(share), { share, owed, limit: this.#shareMax });
    }
  }

  /** Removes the marker of the entry `file` of `share`. */
  async removed(share: string, file: string): Promise<void> {
    await Deno.remove(`${this.#dir}/${hashOf(share)}/${file}`).catch(() => {});
  }

  /**
   * Rebuilds the markers from the journal's entries (an entry without one is
   * read for its share; a marker without an entry is removed) and sets or
   * clears every share's flag; answers the count of entries. Markers are
   * listed before the entries: an entry journaled meanwhile is found
   * unmarked and marked, never its marker taken for a stale one.
   */
  async recount(listEntries: () => Promise<Entries>): Promise<number> {
    const markers = new Map<string, string[]>();
    for (const hash of await list(this.#dir, (e) => e.isDirectory)) {
      markers.set(hash, await list(`${this.#dir}/${hash}`, (e) => e.isFile));
    }
    const entries = await listEntries();
    const present = new Set(entries.files);
    const byShare = new Map<string, Set<string>>();
    for (const [hash, names] of markers) {
      const files = new Set<string>();
      for (const f of names) {
        if (present.has(f)) files.add(f);
        else await Deno.remove(`${this.#dir}/${hash}/${f}`).catch(() => {});
      }
      byShare.set(hash, files);
    }
    const marked = new Set([...byShare.values()].flatMap((s) => [...s]));
    for (const f of entries.files) {
      if (marked.has(f)) continue;
      const share = await entries.shareOf(f);
      if (share === undefined) continue;
      await this.#mark(share, f);
      const hash = hashOf(share);
      byShare.set(hash, (byShare.get(hash) ?? new Set()).add(f));
    }
    const owing = [...byShare.values()].filter((s) => s.size).length;
    const total = entries.files.length;
    const even = total >= this.#max
      ? Math.max(1, Math.floor(total / Math.max(1, owing)))
      : Infinity;
    const limit = Math.min(this.#shareMax, even);
    for (const flag of await list(this.#dir, (e) => e.isFile && e.name.endsWith(".full"))) {
      if (!byShare.has(flag.slice(0, -".full".length))) {
        await Deno.remove(`${this.#dir}/${flag}`).catch(() => {});
      }
    }
    for (const [hash, files] of byShare) {
      if (!files.size) {
        // Not recursive: a marker written meanwhile keeps its share.
        const gone = await Deno.remove(`${this.#dir}/${hash}`).then(() => true, () => false);
        for (const p of gone ? [`${hash}.share`, `${hash}.full`] : []) {
          await Deno.remove(`${this.#dir}/${p}`).catch(() => {});
        }
      } else if (files.size >= limit) {
        const share = await Deno.readTextFile(`${this.#dir}/${hash}.share`).catch(() => hash);
        await this.#flag(hash, { share, owed: files.size, limit });
      } else await Deno.remove(`${this.#dir}/${hash}.full`).catch(() => {});
    }
    return total;
  }

  /** Writes the marker of `file` in `share`'s directory; answers the share's count. */
  async #mark(share: string, file: string): Promise<number> {
    const hash = hashOf(share);
    const dir = `${this.#dir}/${hash}`;
    try {
      await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
      await Deno.writeTextFile(`${this.#dir}/${hash}.share`, share, { mode: 0o600 });
      await Deno.writeTextFile(`${dir}/${file}`, "", { mode: 0o600 });
    } catch (err) {
      throw new CniError("io", `cannot write release journal share ${dir}`, errorText(err));
    }
    return (await list(dir, (e) => e.isFile)).length;
  }

  async #flag(hash: string, full: FullShare): Promise<void> {
    const flag = `${this.#dir}/${hash}.full`;
    await Deno.writeTextFile(flag, JSON.stringify(full), { mode: 0o600 }).catch((err) => {
      throw new CniError("io", `cannot write release journal flag ${flag}`, errorText(err));
    });
  }
}

/** The journal's entries as the shares see them: file names, and each one's share on demand. */
export interface Entries {
  files: string[];
  shareOf(file: string): Promise<string | undefined>;
}

async function list(dir: string, keep: (e: Deno.DirEntry) => boolean): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) if (keep(e)) out.push(e.name);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw new CniError("io", `cannot list ${dir}`, errorText(err));
  }
  return out;
}
