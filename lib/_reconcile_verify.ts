/**
 * The node's check that every live attachment it holds still has its claim
 * in Milo, with its address: Milo deletes every claim of a namespace when the
 * namespace is deleted ("namespace deletion is the collector"), and a claim
 * deleted by hand or by a tool, or removed in place of another by a DELETE
 * (Milo ignores its uid precondition), leaves a live pod on an address Milo
 * will hand out again.
 *
 * Each run reads a share of the live claims (a record `held`, of this
 * machine, whose container a result cache names): those not verified for
 * `reconcile.verifyIntervalS`, spread over the runs of that interval, and at
 * least one (the least recently verified), so that a namespace's claims all
 * gone is seen within one run, and every claim of a record whose `recheckAt`
 * has passed since it was last read (a DELETE sent before its ADD may have
 * run since: lib/late_deletes.ts); a claim found missing, or another
 * holder's, widens the run to every live claim (a duplicate, read again every run, would
 * otherwise take the run's share for as long as it lasts). A missing claim is
 * made again, under the attachment's lock while its record (still naming it,
 * no release of the attachment journaled since) and its cache entry are still
 * as read, as the ADD posted
 * it with its address pinned (the node's own privilege: no network config
 * asks for it) and verified (lib/restore.ts); a claim of the name another
 * holder has, or an address another claim holds, is a duplicate: reported
 * (log, metric, `show`), never repaired by taking it. Costs Milo one GET per
 * claim verified, never a LIST.
 */
import type { NodeConfig } from "./config.ts";
import { errorText, toCniError } from "./errors.ts";
import { describeHolder, describeRecord, notHeldHere } from "./holder.ts";
import type { Holdings } from "./holdings.ts";
import { Journal } from "./journal.ts";
import type { HeldClaim, Holding } from "./lease.ts";
import { isLive, type LiveReader, type LiveSet, verifiedKey } from "./liveness.ts";
import { withAttachmentLock } from "./lockfile.ts";
import type { MiloClient } from "./milo.ts";
import type { IPClaim } from "./milo_objects.ts";
import { type Duplicate, leased, leases, restoreClaim } from "./restore.ts";

/** What one verification run found, for the reconcile report. */
export interface Verified {
  /** Claims read from Milo this run. */
  checked: number;
  remade: { claim: string; outcome: "made" | "present" }[];
  duplicates: Duplicate[];
  /** Live attachments whose claim could not be made again now (the next run tries again). */
  missing: { claim: string; address?: string; why: string }[];
  errors: { claim: string; error: string }[];
}

/** One live claim of the node's record. */
interface LiveClaim {
  c: HeldClaim;
  h: Holding;
}

/** What verification needs of the reconcile run. */
export interface VerifyRun {
  node: NodeConfig;
  milo: () => MiloClient;
  holdings: Holdings;
  caches: LiveReader;
  /** The claims of this machine's `held` records that no journal entry owes. */
  claims: { c: HeldClaim; h: Holding }[];
  live: LiveSet;
  /** When each claim was last found as recorded (ms, the node's clock), by {@link keyOf}. */
  verified: Record<string, number>;
  now: () => number;
}

/**
 * Verifies this run's share of the live claims; answers what it found, and
 * updates `run.verified` in place (a claim no longer live is dropped from it).
 */
export async function verifyLive(run: VerifyRun): Promise<Verified> {
  const out: Verified = { checked: 0, remade: [], duplicates: [], missing: [], errors: [] };
  const everyMs = run.node.reconcile.verifyIntervalS * 1000;
  const live = run.claims.filter((x) => isLive(run.live, x.h.containerId));
  for (const key of Object.keys(run.verified)) {
    if (!live.some((x) => keyOf(x) === key)) delete run.verified[key];
  }
  if (!everyMs || !live.length) return out;
  const last = (x: LiveClaim) => run.verified[keyOf(x)] ?? x.h.at;
  const byAge = [...live].sort((x, y) => last(x) - last(y));
  const runs = Math.max(1, everyMs / (run.node.agent.reconcileIntervalS * 1000));
  const share = Math.ceil(live.length / runs);
  const due = byAge.filter((x) => run.now() - last(x) >= everyMs);
  // Made while a DELETE sent before may still have run: read once that time has passed.
  const late = live.filter((x) =>
    x.h.recheckAt !== undefined && x.h.recheckAt <= run.now() && last(x) < x.h.recheckAt
  );
  const picked = new Set([byAge[0], ...due.slice(0, share), ...late]);
  let widened = false;
  const queue = [...picked];
  while (queue.length) {
    const x = queue.shift()!;
    const missed = await verifyOne(run, x, out);
    if (missed && !widened) {
      widened = true;
      queue.push(...live.filter((y) => !picked.has(y)));
    }
  }
  return out;
}

/**
 * What `verified` knows a live claim by: its name and the container whose
 * record names it (a name other sandboxes make again may be named by two
 * records of this node, one of them a duplicate the other's verification
 * must not hide).
 */
function keyOf(x: LiveClaim): string {
  return verifiedKey(x.c.name, x.h.containerId);
}

/** Verifies one live claim; answers true when Milo had no claim of its name, or another's. */
async function verifyOne(run: VerifyRun, x: LiveClaim, out: Verified): Promise<boolean> {
  const { c } = x;
  try {
    out.checked++;
    const claim = await run.milo().getClaim(c.name);
    if (claim) return judgeFound(run, x, claim, out);
    await repair(run, x, out);
    return true;
  } catch (err) {
    out.errors.push({ claim: c.name, error: toCniError(err).message });
    return false;
  }
}

/**
 * A live claim Milo has: as recorded (verified), or another holder's (a
 * duplicate: answers true).
 */
function judgeFound(run: VerifyRun, x: LiveClaim, claim: IPClaim, out: Verified): boolean {
  const { c, h } = x;
  const a = { ...h, node: h.node ?? run.node.node };
  const other = notHeldHere(claim, a);
  if (!other && (!c.address || leases(claim, c.address))) {
    run.verified[keyOf(x)] = run.now();
    if (claim.metadata.uid && claim.metadata.uid !== c.uid) {
      // Made again (a restore, the journal's remake): the same lease under a new uid.
      run.holdings.adopt(a, { ...c, uid: claim.metadata.uid }, run.now(), true);
    }
    return false;
  }
  out.duplicates.push({
    claim: c.name,
    address: c.address ?? "(not recorded)",
    holder: holderOfRecord(h, c),
    now: `claim ${c.name} now records ${describeHolder(claim)} on ${leased(claim)}`,
  });
  return true;
}

/**
 * Makes a live attachment's missing claim again, under its lock, while its
 * record names the same ADD and a cache still names its container.
 */
async function repair(run: VerifyRun, x: LiveClaim, out: Verified): Promise<void> {
  const { c, h } = x;
  const key = { cluster: h.cluster, containerId: h.containerId, ifname: h.ifname };
  const body = c.body;
  if (!body) {
    out.missing.push({
      claim: c.name,
      address: c.address,
      why: "recorded without the create that makes it (an ADD of an older release): not made " +
        "again; DEL and ADD the pod to lease it again",
    });
    return;
  }
  await withAttachmentLock(run.node.stateDir, key, async () => {
    try {
      const now = run.holdings.read(key);
      // Made again only while the record still holds it and no release of the attachment is
      // owed: a DEL that ran meanwhile released it (and dropped it) or journaled it, and a
      // runtime keeps the cache entry of a DEL that failed.
      if (now?.addId !== h.addId || now.state !== "held") return;
      const journal = new Journal(run.node.stateDir);
      if (!now.claims.some((x) => x.name === c.name) || journal.owes(key)) return;
      if (!isLive(await run.caches.read(), h.containerId)) return;
      const claim = await run.milo().getClaim(c.name);
      if (claim) return judgeFound(run, x, claim, out);
      const r = await restoreClaim(run.milo(), body, {
        // A create that may land after the attachment's DEL: the record's doubt, which that DEL
        // journals.
        unanswered: () => run.holdings.doubt(key, [c.name], run.now()),
      });
      if (r.outcome === "duplicate") {
        out.duplicates.push({ ...r.duplicate, holder: holderOfRecord(h, c) });
        return;
      }
      out.remade.push({ claim: c.name, outcome: r.outcome });
      run.verified[keyOf(x)] = run.now();
      const made = await run.milo().getClaim(c.name);
      if (made?.metadata.uid) {
        const a = { ...h, node: h.node ?? run.node.node };
        run.holdings.adopt(a, { ...c, uid: made.metadata.uid }, run.now(), true);
      }
    } catch (err) {
      out.missing.push({ claim: c.name, address: c.address, why: errorText(err) });
    }
  });
}

/** The holder a record names, live on this node, in one line. */
function holderOfRecord(h: Holding, c: HeldClaim): string {
  return `${describeRecord(h, c)} (live on this node)`;
}
