/**
 * Two creates of one name that overlap in Milo: each passes the reclaim
 * probe before the other commits (`AllocatingREST.Create`,
 * `internal/registry/ipam/ipclaim/storage.go`), so the later one's
 * allocation insert finds the name's allocation and answers 500. milo-dev
 * handles one request at a time, so it keeps when each new allocation of a
 * name committed and judges a create by when it started.
 */

/** What a create asks besides its body. */
export interface CreateOptions {
  dryRun?: boolean;
  /**
   * When the request started (`performance.now()`): a create of the same
   * name that committed a new allocation after it overlapped it, and this
   * one fails as Milo's loser does (500).
   */
  startedAt?: number;
  /** The overlapping loser answers 409 instead (admin `/limits` `sameNameRaceConflict`). */
  raceConflict?: boolean;
}

/** How long the commit time of a create is kept (ms): far longer than any request. */
const MEMORY_MS = 60_000;

/** When the recent creates of new allocations committed, by project, namespace and name. */
export class Commits {
  #at = new Map<string, number>();

  /** Records that a create of `key` committed a new allocation now. */
  record(key: string): void {
    const now = performance.now();
    if (this.#at.size > 4_096) {
      for (const [k, at] of this.#at) if (at < now - MEMORY_MS) this.#at.delete(k);
    }
    this.#at.set(key, now);
  }

  /** True when a create of `key` that started at `o.startedAt` lost to one that committed since. */
  lost(key: string, o: CreateOptions): boolean {
    const at = this.#at.get(key);
    return !o.raceConflict && o.startedAt !== undefined && at !== undefined && at > o.startedAt;
  }
}
