/**
 * `milo-ipam reconcile`: the node-side safety net for releases that never
 * happened.
 *
 * 1. The release journal (lib/_reconcile_journal.ts).
 * 2. Orphans, judged from the node's own record of the claims it holds
 *    (lib/holdings.ts), without asking Milo: a claim whose container no libcni
 *    result cache names (lib/liveness.ts) is released only when it was absent
 *    in two observations at least `grace` apart, was recorded at least `grace`
 *    ago, and under the attachment's lock, with no later ADD or DEL of it
 *    recorded, is still absent from the caches and in Milo still this host's
 *    and node's claim of that attachment (same uid, released with it as a
 *    precondition);
 *    and never while a brake holds (an empty live set, or one shrunk under
 *    half of the last clean run's), unless forced. A claim of a record an ADD
 *    of an earlier boot wrote (lib/host.ts `bootId`, read twice alike) whose
 *    container no cache names is released at once, past the brakes: every
 *    sandbox of that boot died with it. A galactic attachment is judged by
 *    its absence only once a cache has named it (lib/evidence.ts). Only this
 *    machine's records are judged: this host's, under this node's name
 *    (lib/_reconcile_records.ts).
 *    Milo is listed only when the node has no record yet (its first run, a
 *    lost `stateDir`): its host's claims are added to the record, claims of
 *    another host under this node name are reported, and claims that record
 *    no host are left alone.
 */
import { KEYS, nodeSelector } from "./claims.ts";
import { errorText, toCniError } from "./errors.ts";
import { sawLive, withoutEvidence } from "./evidence.ts";
import { writeAtomic } from "./atomic_write.ts";
import { holderOf } from "./holder.ts";
import { Holdings } from "./holdings.ts";
import { DeleteMarks } from "./late_deletes.ts";
import { Journal } from "./journal.ts";
import { doubtOf, type Holding } from "./lease.ts";
import { hostId, identityDrift } from "./host.ts";
import {
  brakeOf,
  isLive,
  LiveReader,
  type LiveSet,
  readState,
  type State,
  stateFileOf,
} from "./liveness.ts";
import { withAttachmentLock } from "./lockfile.ts";
import type { MiloClient, Release } from "./milo.ts";
import { ReleaseTally } from "./milo_release.ts";
import type { IPClaim } from "./milo_objects.ts";
import { finishJournal, journaledKey } from "./_reconcile_journal.ts";
import { exitOf, type ReconcileOptions, type ReconcileReport } from "./_reconcile_report.ts";
export { exitOf };
export type { ReconcileOptions, ReconcileReport } from "./_reconcile_report.ts";
import { notOwn, type Recorded, recorded, stableBoot } from "./_reconcile_records.ts";
import { verifyLive, type VerifyRun } from "./_reconcile_verify.ts";

/** One reconcile pass; the state file carries the previous observation. */
export async function reconcile(o: ReconcileOptions): Promise<ReconcileReport> {
  const now = o.now ?? Date.now;
  const node = o.node;
  const host = hostId(node);
  // Each Milo operation (the LIST, or one claim's re-check and release) gets
  // the node's whole totalMs, as one CNI call would: a slow claim must not eat
  // the budget of the others, and the run is bounded by the number of claims.
  const milo = () => o.milo.withDeadline(now() + node.timeouts.totalMs);
  const report: ReconcileReport = {
    dryRun: o.dryRun,
    force: !!o.force,
    cluster: node.cluster,
    node: node.node,
    host,
    listed: false,
    live: 0,
    caches: [],
    brake: null,
    otherHosts: [],
    boot: null,
    warnings: [],
    released: [],
    kept: [],
    journal: [],
    remade: [],
    duplicates: [],
    verified: 0,
    missing: [],
    errors: [],
  };
  const journaled = await finishJournal(o, milo, now, report);
  if (!o.dryRun) new DeleteMarks(node.stateDir).prune(now());
  const holdings = new Holdings(node.stateDir);
  if (o.list || holdings.listedAt() === undefined) {
    await listIntoRecord(o, milo(), holdings, host, now(), report);
  }
  const caches = new LiveReader(node.resultsDirs);
  const live = await caches.read();
  report.live = live.containers.size;
  report.caches = live.dirs;
  const previous = await readState(stateFileOf(node), now());
  const next: State = { absent: {}, seen: {}, baseline: previous.baseline };
  const candidates: Recorded[] = [];
  const held: VerifyRun["claims"] = [];
  const dead: Recorded[] = [];
  let absent = 0;
  const boot = stableBoot(node);
  report.boot = boot.id ?? null;
  if (boot.warning) report.warnings.push(boot.warning);
  const drift = o.dryRun ? undefined : identityDrift(node, host, boot.id);
  if (drift) report.warnings.push(drift);
  const here = { host, node: node.node };
  const other = (claim: string, reason: string, h: Holding) => {
    if (!journaled.has(journaledKey(h, claim))) report.kept.push({ claim, reason });
  };
  for (const c of recorded(holdings, here, boot.id, now(), other)) {
    const { name, h } = c;
    if (journaled.has(journaledKey(h, name))) continue;
    const keep = (reason: string) => report.kept.push({ claim: name, reason });
    if (isLive(live, h.containerId)) {
      sawLive(next, c);
      keep("live: a result cache names its container");
      const claim = h.claims.find((x) => x.name === name);
      if (h.state === "held" && !c.earlierBoot && claim) held.push({ c: claim, h });
      continue;
    }
    if (c.earlierBoot) {
      // Proven dead, not judged absent: neither a second observation nor a brake waits for it.
      absent++;
      dead.push(c);
      continue;
    }
    const unproven = withoutEvidence(previous, next, c);
    if (unproven) {
      keep(unproven);
      continue;
    }
    const seen = previous.absent[name]?.uid === c.uid ? previous.absent[name] : undefined;
    next.absent[name] = { firstAbsent: seen?.firstAbsent ?? now(), uid: c.uid };
    // A claim recorded within one call's budget may be an ADD whose runtime has not cached it yet.
    if (now() - h.at >= node.timeouts.totalMs) absent++;
    if (!seen || now() - seen.firstAbsent < o.graceMs) {
      keep("absent, waiting for a second observation after the grace period");
    } else if (now() - h.at < o.graceMs) {
      keep("recorded less than the grace period ago");
    } else candidates.push(c);
  }
  const brake = o.force ? undefined : brakeOf(live, previous.baseline, candidates.length);
  if (brake) {
    report.brake = brake;
    for (const c of candidates) {
      report.kept.push({ claim: c.name, reason: `brake (${brake.reason}): released nothing` });
    }
  } else {
    if (!absent || o.force) next.baseline = { live: live.containers.size, at: now() };
    await releaseOrphans(o, milo, caches, holdings, host, candidates, next, report, "orphan");
  }
  await releaseOrphans(o, milo, caches, holdings, host, dead, next, report, "boot");
  next.verified = previous.verified ?? {};
  next.findings = previous.findings;
  if (!o.dryRun) await verify(o, milo, holdings, caches, live, held, next, report, now);
  await Deno.mkdir(node.stateDir, { recursive: true });
  await writeAtomic(stateFileOf(node), next);
  return report;
}

/**
 * Verifies the live claims this run's share names (lib/_reconcile_verify.ts),
 * except those of an attachment the journal owes a release of (its runtime
 * said it is gone, whatever a stale cache entry says); records what it found
 * in the state, for `show`.
 */
async function verify(
  o: ReconcileOptions,
  milo: () => MiloClient,
  holdings: Holdings,
  caches: LiveReader,
  live: LiveSet,
  held: VerifyRun["claims"],
  next: State,
  report: ReconcileReport,
  now: () => number,
): Promise<void> {
  const journal = new Journal(o.node.stateDir);
  const owed = (x: VerifyRun["claims"][number]) => journal.owes(x.h);
  const v = await verifyLive({
    node: o.node,
    milo,
    holdings,
    caches,
    claims: held.filter((x) => !owed(x)),
    live,
    verified: next.verified!,
    now,
  });
  report.verified = v.checked;
  report.remade.push(...v.remade.map((r) => ({ ...r, via: "verify" as const })));
  report.duplicates.push(...v.duplicates);
  report.missing = v.missing;
  for (const e of v.errors) report.errors.push(e);
  if (v.checked) {
    next.findings = { at: now(), duplicates: report.duplicates, missing: v.missing };
  }
}

/**
 * Lists this node's claims in Milo into the record (a node without one: its
 * first run, a lost `stateDir`): this host's claims are added as held, claims
 * of other hosts are counted in the report, claims recording no host are left.
 */
async function listIntoRecord(
  o: ReconcileOptions,
  milo: MiloClient,
  holdings: Holdings,
  host: string,
  now: number,
  report: ReconcileReport,
): Promise<void> {
  const claims = await milo.listClaims(nodeSelector(o.node.cluster, o.node.node));
  report.listed = true;
  const others = new Map<string, number>();
  for (const claim of claims) {
    const h = holderOf(claim);
    if (h.host !== host) {
      if (h.host) others.set(h.host, (others.get(h.host) ?? 0) + 1);
      const reason = h.host
        ? `made by host ${h.host}, another host under this node name: not judged here`
        : "records no host (made before claims did): not judged here; a DEL or the sweep releases it";
      report.kept.push({ claim: claim.metadata.name, reason });
      continue;
    }
    if (!h.containerId || !h.ifname || h.cluster !== o.node.cluster || o.dryRun) continue;
    const a = {
      cluster: h.cluster,
      node: o.node.node,
      host,
      network: h.network ?? "",
      containerId: h.containerId,
      ifname: h.ifname,
      // A galactic attachment is marked in the record (lib/evidence.ts) as its claim records it.
      vpc: claim.metadata.annotations?.[KEYS.vpc],
      vpcattachment: claim.metadata.annotations?.[KEYS.vpcattachment],
    };
    const address = claim.status.allocatedCIDR;
    holdings.adopt(a, { name: claim.metadata.name, uid: claim.metadata.uid, address }, now);
  }
  report.otherHosts = [...others].map(([host, claims]) => ({ host, claims }));
  if (!o.dryRun) holdings.markListed();
}

/**
 * Releases the candidates, each under its attachment's lock: only while the
 * record still names the ADD observed (no later ADD or DEL of it), its
 * container is still absent from the caches, and Milo's claim of that name is
 * still this host's claim of that attachment (by uid when recorded); then
 * drops it from the record.
 */
async function releaseOrphans(
  o: ReconcileOptions,
  milo: () => MiloClient,
  caches: LiveReader,
  holdings: Holdings,
  host: string,
  candidates: Recorded[],
  next: State,
  report: ReconcileReport,
  via: "orphan" | "boot",
): Promise<void> {
  if (!candidates.length) return;
  const again = await caches.read();
  const tally = new ReleaseTally();
  const journal = new Journal(o.node.stateDir);
  for (const c of candidates) {
    const { h, name } = c;
    const keep = (reason: string) => {
      report.kept.push({ claim: name, reason });
      delete next.absent[name];
    };
    if (isLive(again, h.containerId)) {
      keep("its container reappeared in a result cache on re-check");
      continue;
    }
    const key = {
      cluster: h.cluster ?? o.node.cluster,
      containerId: h.containerId,
      ifname: h.ifname,
    };
    const judge = async () => {
      try {
        const now = holdings.read(key);
        if (now?.addId !== h.addId || now.state !== h.state) {
          keep("a later ADD or DEL of its attachment is recorded");
          return;
        }
        if (isLive(await caches.read(), h.containerId)) {
          keep("its container reappeared in a result cache on re-check");
          return;
        }
        const { r, why, claim } = await releaseOwn(o, milo(), c, host, tally);
        const doubt = doubtOf(now);
        const clock = (o.now ?? Date.now)();
        if (r === "absent" && doubt?.names.includes(name) && clock < doubt.since + o.graceMs) {
          // Its create may land yet: the record keeps it, to be judged again.
          const until = new Date(doubt.since + o.graceMs).toISOString();
          report.kept.push({ claim: name, reason: `absent, its create in doubt until ${until}` });
          return;
        }
        if (!o.dryRun) {
          holdings.forget(key, [name]);
          delete next.absent[name];
        }
        if (r === "changed") {
          // Not this machine's lease (any more): no longer counted as one it holds.
          report.kept.push({
            claim: name,
            reason: `in Milo it is ${
              why ?? "another claim now"
            }: left alone, dropped from the record`,
          });
          return;
        }
        if (r === "absent") {
          report.kept.push({
            claim: name,
            reason: "gone from Milo already: dropped from the record",
          });
          return;
        }
        const pod = claim ? holderOf(claim).pod : undefined;
        report.released.push({
          claim: name,
          via,
          ...(pod ? { pod } : {}),
          network: h.network,
          containerId: h.containerId,
          ifname: h.ifname,
          address: c.address ?? claim?.status.allocatedCIDR,
        });
      } catch (err) {
        report.errors.push({ claim: name, error: toCniError(err).message });
      }
    };
    // A dry run takes no lock: it releases nothing.
    if (o.dryRun) await judge();
    else await withAttachmentLock(o.node.stateDir, key, judge);
    for (const remake of tally.owed.splice(0)) {
      const a = { ...c.h, node: c.h.node ?? o.node.node, host };
      await journal.recordRemake(a, remake, (o.now ?? Date.now)()).catch((err) =>
        report.errors.push({ claim: name, error: `owed again, not journaled: ${errorText(err)}` })
      );
    }
  }
  report.duplicates.push(...tally.duplicates);
}

/**
 * Releases a recorded claim while Milo's claim of that name is still this
 * machine's claim (this host's, of this node) of the same attachment (and the
 * recorded uid, when there is one), by its uid as a precondition; a dry run
 * only compares. Answers why it was not, when Milo's claim is another's.
 */
async function releaseOwn(
  o: ReconcileOptions,
  milo: MiloClient,
  c: Recorded,
  host: string,
  tally: ReleaseTally,
): Promise<{ r: Release; why?: string; claim?: IPClaim }> {
  let why: string | undefined;
  let judged: IPClaim | undefined;
  const ours = (claim: IPClaim) => {
    why = notOwn(claim, c, { host, node: o.node.node });
    if (!why) judged = claim;
    return !why;
  };
  if (!o.dryRun) {
    const r = await milo.releaseIf(c.name, ours, tally.of());
    return { r, why, claim: judged };
  }
  const current = await milo.getClaim(c.name);
  if (!current) return { r: "absent" };
  return { r: ours(current) && current.metadata.uid ? "released" : "changed", why, claim: judged };
}
