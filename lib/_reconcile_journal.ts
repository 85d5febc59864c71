/**
 * The release journal's part of `milo-ipam reconcile`: claims a DEL (or an
 * ADD's rollback) failed to release are released now. The journal is the
 * runtime's own word that the attachment is gone, so a stale result-cache
 * entry does not keep them, and no brake holds them. An in-doubt entry (a
 * create that may land after its DEL) is kept until `grace` after it was
 * written, releasing its claims whenever they appear.
 */
import { holderOf, isHeldBy, notHeldHere, sameNode } from "./holder.ts";
import { toCniError } from "./errors.ts";
import { Holdings } from "./holdings.ts";
import { hostId } from "./host.ts";
import { Journal, type JournalEntry, type RemakeEntry } from "./journal.ts";
import { lateDuplicates } from "./late_deletes.ts";
import type { JournalClaim } from "./lease.ts";
import { withAttachmentLock } from "./lockfile.ts";
import type { MiloClient } from "./milo.ts";
import { ReleaseTally } from "./milo_release.ts";
import { restoreClaim } from "./restore.ts";
import { ageOnMilo, type IPClaim } from "./milo_objects.ts";
import type { JournalReport, ReconcileOptions, ReconcileReport } from "./_reconcile_report.ts";

/**
 * Finishes the release journal: each entry's claims released (see
 * {@link releaseJournaled}), kept with its attempt count and last error, or
 * dropped, under the attachment's lock and then the entry's (the order ADD
 * and DEL take them in: no call of the attachment runs meanwhile). What is
 * released, gone, or not this machine's leaves the node's record; a claim
 * made after the entry stays in it for the liveness rule to judge. An entry
 * another host wrote (a state directory copied with a disk image) is that
 * host's: dropped here, its claims left alone. One this host's machine-id
 * wrote under another node name (a clone that kept the machine-id, or the
 * node's name set differently since) is kept and not judged: its claims are
 * that node's. Answers the claims it dealt with, each by {@link journaledKey}
 * (a name other sandboxes share is another attachment's claim in their records).
 */
export async function finishJournal(
  o: ReconcileOptions,
  milo: () => MiloClient,
  now: () => number,
  report: ReconcileReport,
): Promise<Set<string>> {
  const journal = new Journal(o.node.stateDir);
  const holdings = new Holdings(o.node.stateDir);
  const host = hostId(o.node);
  const names = new Set<string>();
  for (const { path, entry, error } of await journal.list()) {
    if (!entry) {
      report.journal.push({ entry: path, claims: [], lastError: error ?? "unreadable" });
      continue;
    }
    for (const c of entry.claims) names.add(journaledKey(entry, c.name));
    if (o.dryRun) {
      report.journal.push({ ...summary(path, entry), lastError: "dry run: not attempted" });
      continue;
    }
    await withAttachmentLock(o.node.stateDir, entry, async () => {
      await journal.whileLocked(path, async (entry) => {
        if (entry.host !== undefined && entry.host !== host) {
          for (const c of entry.claims) {
            report.kept.push({
              claim: c.name,
              reason: `journal entry written by host ${entry.host} (a copied state directory): ` +
                "left to that host; entry dropped",
            });
          }
          await journal.update(path, null);
          return;
        }
        if (!sameNode(entry.node, o.node.node)) {
          // Kept, not dropped: a node name set differently since (NODE_NAME, `node`) comes back.
          for (const c of entry.claims) {
            report.kept.push({
              claim: c.name,
              reason: `journal entry written by node ${entry.node} under this host's machine-id ` +
                `(a copied state directory, or a node name changed): left to node ${entry.node}'s ` +
                "reconcile or the sweep; entry kept",
            });
          }
          return;
        }
        await finishEntry(o, milo, now, report, { journal, holdings, host, path, entry });
      });
    });
  }
  for (const { path, entry, error } of await journal.remakes()) {
    if (entry) await finishRemake(o, milo, report, { journal, host, path, entry });
    else report.journal.push({ entry: path, claims: [], lastError: error ?? "unreadable" });
  }
  if (!o.dryRun) await journal.countOwed();
  return names;
}

/**
 * A claim the journal owes Milo again (a release's DELETE removed it in
 * place of the claim judged): made again, its address pinned, and verified
 * (lib/restore.ts); a duplicate is reported and the entry dropped (nothing
 * more can be made of it here); a failure keeps it with its attempt count.
 * Another host's entry is dropped, another node's kept, as release entries.
 */
async function finishRemake(
  o: ReconcileOptions,
  milo: () => MiloClient,
  report: ReconcileReport,
  x: { journal: Journal; host: string; path: string; entry: RemakeEntry },
): Promise<void> {
  const { entry } = x;
  if (o.dryRun) {
    report.journal.push({
      entry: x.path,
      claims: [entry.name],
      lastError: "dry run: not attempted",
    });
    return;
  }
  await x.journal.whileLockedRemake(x.path, async (e) => {
    if (e.host !== undefined && e.host !== x.host) return await x.journal.update(x.path, null);
    if (!sameNode(e.node, o.node.node)) return;
    try {
      const r = await restoreClaim(milo(), e.body);
      if (r.outcome === "duplicate") report.duplicates.push(r.duplicate);
      else report.remade.push({ claim: e.name, via: "journal", outcome: r.outcome });
      await x.journal.update(x.path, null);
    } catch (err) {
      const lastError = toCniError(err).message;
      await x.journal.update(x.path, { ...e, attempts: e.attempts + 1, lastError });
      report.journal.push({ entry: x.path, claims: [e.name], attempts: e.attempts + 1, lastError });
    }
  });
}

/** One entry of this host, its locks held. */
async function finishEntry(
  o: ReconcileOptions,
  milo: () => MiloClient,
  now: () => number,
  report: ReconcileReport,
  x: { journal: Journal; holdings: Holdings; host: string; path: string; entry: JournalEntry },
): Promise<void> {
  const { entry, holdings } = x;
  const left: JournalClaim[] = [];
  const waiting: JournalClaim[] = [];
  const done: string[] = [];
  const tally = new ReleaseTally();
  /** Claims of the entry's names that record another holder. */
  const others: IPClaim[] = [];
  let lastError = entry.lastError;
  for (const c of entry.claims) {
    try {
      const here = { ...entry, host: x.host, node: o.node.node };
      const r = await releaseJournaled(milo(), c, here, o.graceMs, now, tally);
      if (r.other) others.push(r.other);
      if (r.outcome === "awaited") {
        waiting.push(c);
        const until = new Date(doubtUntil(entry, o.graceMs)).toISOString();
        report.kept.push({ claim: c.name, reason: `journal entry in doubt until ${until}` });
        continue;
      }
      if (r.outcome === "newer") {
        // Not the release owed: the node's record keeps it, and the liveness rule judges it.
        if (r.claim) {
          const a = { ...entry, host: x.host, node: o.node.node };
          holdings.adopt(a, { name: c.name, uid: r.claim.metadata.uid }, now());
        }
      } else done.push(c.name);
      // In doubt, another create of the name (a retry's) may land after this one: watched on.
      if (r.outcome === "released" && entry.inDoubt && now() < doubtUntil(entry, o.graceMs)) {
        waiting.push({ name: c.name });
      }
      if (r.outcome === "released") {
        const pod = r.claim ? holderOf(r.claim).pod : undefined;
        const address = r.claim?.status.allocatedCIDR ?? r.claim?.status.address;
        report.released.push({
          claim: c.name,
          via: "journal",
          ...(pod ? { pod } : {}),
          network: entry.network,
          containerId: entry.containerId,
          ifname: entry.ifname,
          ...(address ? { address } : {}),
        });
      } else report.kept.push({ claim: c.name, reason: `journal entry: claim ${r.why}` });
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
  const here = { ...entry, host: x.host, node: o.node.node };
  for (const remake of tally.owed) await x.journal.recordRemake(here, remake, now());
  report.duplicates.push(...tally.duplicates);
  report.duplicates.push(...await lateDuplicates(o.node, holdings.read(entry), others, now()));
  await x.journal.update(x.path, rest);
  holdings.forget(entry, done);
  if (left.length) report.journal.push({ ...summary(x.path, rest!), lastError });
}

/** A claim the journal dealt with: its name and the attachment whose entry names it. */
export function journaledKey(a: { containerId: string; ifname: string }, name: string): string {
  return `${a.containerId}/${a.ifname} ${name}`;
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
 * The end of an in-doubt entry's window (ms, the node's clock): `graceMs`
 * after its doubt began (the ADD's end), or after the entry was written when
 * it names no beginning (an entry of an older release).
 */
export function doubtUntil(entry: JournalEntry, graceMs: number): number {
  return (entry.doubtSince ?? entry.created) + graceMs;
}

/** What became of one journaled claim, and why when it was not released. */
interface Judged {
  outcome: "released" | "absent" | "changed" | "newer" | "awaited";
  why?: string;
  /** The claim kept as newer than the entry; or the claim released, as judged. */
  claim?: IPClaim;
  /** The claim of the name found recording another holder, if one was. */
  other?: IPClaim;
}

/**
 * Releases one journaled claim, only while it is this machine's claim (this
 * host's, of this node: `entry` carries them) of the entry's attachment, and
 * the object the failed call saw (its uid) or, another or none known, created
 * before the entry (or, in doubt, before its grace ends). Both ages are told
 * on one clock each: the claim's on Milo's (its creation against the answer's
 * `Date`, whole seconds), the entry's on the node's; a claim within a second
 * of the entry counts as newer. An absent claim, or one another holder has
 * now, is `awaited` while an entry in doubt's grace runs (the node's clock on
 * both sides).
 */
async function releaseJournaled(
  milo: MiloClient,
  c: JournalClaim,
  entry: JournalEntry,
  graceMs: number,
  now: () => number,
  tally: ReleaseTally,
): Promise<Judged> {
  const why: string[] = [];
  let newer: IPClaim | undefined;
  let mine: IPClaim | undefined;
  let other: IPClaim | undefined;
  const r = await milo.releaseIf(c.name, (claim, serverTime) => {
    const not = notHeldHere(claim, entry);
    if (not) {
      why.push(not);
      if (!isHeldBy(claim, entry)) other = claim;
      return false;
    }
    const claimAge = ageOnMilo(claim, serverTime);
    const entryAge = now() - (entry.inDoubt ? doubtUntil(entry, graceMs) : entry.created);
    // The object the failed call judged this machine's claim of the attachment, or one older
    // than the entry.
    if ((c.uid && claim.metadata.uid === c.uid) || claimAge - 1_000 >= entryAge) {
      mine = claim;
      return true;
    }
    newer = claim;
    why.push(
      Number.isNaN(claimAge)
        ? "of unknown age on Milo's clock (no creation time or Date): kept in the node's record"
        : "newer than the entry: kept in the node's record",
    );
    return false;
  }, tally.of((w) => why.push(w)));
  // In doubt, the attachment's own create may land yet: while the name is absent, or another
  // holder's (a name other sandboxes make again lands once that holder's claim is gone).
  const waiting = entry.inDoubt && now() < doubtUntil(entry, graceMs);
  if (r === "absent") {
    return waiting ? { outcome: "awaited" } : { outcome: "absent", why: "absent" };
  }
  if (r === "released") return { outcome: "released", claim: mine };
  if (newer) return { outcome: "newer", why: why.join("; "), claim: newer };
  if (waiting) return { outcome: "awaited" };
  return { outcome: "changed", why: why.join("; ") || "changed", ...(other ? { other } : {}) };
}
