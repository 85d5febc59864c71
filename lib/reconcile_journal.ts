/**
 * The release journal's part of `milo-ipam reconcile`: claims a DEL (or an
 * ADD's rollback) failed to release are released now. The journal is the
 * runtime's own word that the attachment is gone, so a stale result-cache
 * entry does not keep them. An in-doubt entry (a create that may land after
 * its DEL) is kept until `grace` after it was written, releasing its claims
 * whenever they appear.
 */
import { holderOf, isSharedName } from "./claims.ts";
import { toCniError } from "./errors.ts";
import { Holdings } from "./holdings.ts";
import { Journal, type JournalClaim, type JournalEntry } from "./journal.ts";
import type { MiloClient, Release } from "./milo.ts";
import type { ReconcileOptions, ReconcileReport } from "./reconcile.ts";

/** A journal entry the run could not finish. */
export interface JournalReport {
  entry: string;
  containerId?: string;
  ifname?: string;
  claims: string[];
  attempts?: number;
  lastError: string;
}

/**
 * Finishes the release journal: each entry's claims released (see
 * {@link releaseJournaled}), kept with its attempt count and last error, or
 * dropped; an entry whose claims are all dealt with drops the attachment's
 * record too. Answers the claim names it dealt with.
 */
export async function finishJournal(
  o: ReconcileOptions,
  milo: () => MiloClient,
  now: () => number,
  report: ReconcileReport,
): Promise<Set<string>> {
  const journal = new Journal(o.node.stateDir);
  const names = new Set<string>();
  for (const { path, entry, error } of await journal.list()) {
    if (!entry) {
      report.journal.push({ entry: path, claims: [], lastError: error ?? "unreadable" });
      continue;
    }
    for (const c of entry.claims) names.add(c.name);
    if (o.dryRun) {
      report.journal.push({ ...summary(path, entry), lastError: "dry run: not attempted" });
      continue;
    }
    await journal.whileLocked(path, async (entry) => {
      const left: JournalClaim[] = [];
      const waiting: JournalClaim[] = [];
      let lastError = entry.lastError;
      for (const c of entry.claims) {
        try {
          const r = await releaseJournaled(milo(), c, entry, o.graceMs, now);
          if (r === "awaited") {
            waiting.push(c);
            const until = new Date(entry.created + o.graceMs).toISOString();
            report.kept.push({ claim: c.name, reason: `journal entry in doubt until ${until}` });
          } else if (r === "released") {
            report.released.push({
              claim: c.name,
              via: "journal",
              network: entry.network,
              containerId: entry.containerId,
              ifname: entry.ifname,
            });
          } else report.kept.push({ claim: c.name, reason: `journal entry: claim ${r}` });
        } catch (err) {
          left.push(c);
          lastError = toCniError(err).message;
        }
      }
      const rest = left.length
        ? { ...entry, claims: [...left, ...waiting], attempts: entry.attempts + 1, lastError }
        : waiting.length
        ? { ...entry, claims: waiting }
        : null;
      await journal.update(path, rest);
      if (!rest) new Holdings(o.node.stateDir).forget(entry, entry.claims.map((c) => c.name));
      if (left.length) report.journal.push({ ...summary(path, rest!), lastError });
    });
  }
  if (!o.dryRun) await journal.countOwed();
  return names;
}

function summary(path: string, e: JournalEntry): Omit<JournalReport, "lastError"> {
  return {
    entry: path,
    containerId: e.containerId,
    ifname: e.ifname,
    claims: e.claims.map((c) => c.name),
    attempts: e.attempts,
  };
}

/**
 * Releases one journaled claim, only while it is the object the failed call
 * saw: the same uid when it was known, else a claim of the same attachment
 * created before the entry (a newer claim of the same name is never
 * released), or, in doubt, before the entry's grace ends (`awaited` while it
 * is absent and the grace runs).
 */
async function releaseJournaled(
  milo: MiloClient,
  c: JournalClaim,
  entry: JournalEntry,
  graceMs: number,
  now: () => number,
): Promise<Release | "newer than the entry" | "awaited"> {
  if (c.uid) return await milo.releaseClaim(c.name, c.uid);
  const until = entry.created + (entry.inDoubt ? graceMs : 0);
  const current = await milo.getClaim(c.name);
  if (!current) return entry.inDoubt && now() < until ? "awaited" : "absent";
  const h = holderOf(current);
  const created = Date.parse(current.metadata.creationTimestamp ?? "");
  const same = h.cluster === entry.cluster && h.containerId === entry.containerId &&
    h.ifname === entry.ifname;
  if (!same || Number.isNaN(created) || created > until) return "newer than the entry";
  if (!current.metadata.uid) {
    // A claim another sandbox may make again is released by its uid only.
    return isSharedName(c.name) ? "changed" : await milo.deleteClaim(c.name);
  }
  return await milo.releaseClaim(c.name, current.metadata.uid);
}
