/**
 * `milo-ipam reconcile`: the node-side safety net for releases that never
 * happened.
 *
 * 1. The release journal: claims a DEL (or an ADD's rollback) failed to
 *    release are released now. The journal is the runtime's own word that the
 *    attachment is gone, so a stale result-cache entry does not keep them.
 *    An in-doubt entry (a create that may land after its DEL) is kept until
 *    `grace` after it was written, releasing its claims whenever they appear.
 *    Records of ADDs in doubt older than `grace` are removed.
 * 2. Orphans: claims of this node and this host whose container no libcni
 *    result cache names (lib/liveness.ts). One is released only when it was
 *    absent in two observations at least `grace` apart, is older than
 *    `grace`, and is still absent and unchanged (same uid) when re-checked
 *    just before release; and never while a brake holds (an empty live set,
 *    or one shrunk under half of the last clean run's), unless forced.
 *    Claims of another host under this node name, and claims made before
 *    claims recorded their host, are never judged here.
 */
import { holderOf, nodeSelector } from "./claims.ts";
import type { NodeConfig } from "./config.ts";
import { CniError, errorText, redactedJson, toCniError } from "./errors.ts";
import { Holdings } from "./holdings.ts";
import { hostId } from "./host.ts";
import { Journal, type JournalClaim, type JournalEntry, writeAtomic } from "./journal.ts";
import {
  type Brake,
  brakeOf,
  type LiveSet,
  readLive,
  readState,
  type State,
  stateFileOf,
} from "./liveness.ts";
import type { MiloClient, Release } from "./milo.ts";
import type { IPClaim } from "./milo_objects.ts";

/** A journal entry the run could not finish. */
export interface JournalReport {
  entry: string;
  containerId?: string;
  ifname?: string;
  claims: string[];
  attempts?: number;
  lastError: string;
}

/** What one reconcile run decided for each claim. */
export interface ReconcileReport {
  dryRun: boolean;
  /** Set when the run was told to release past its brakes. */
  force: boolean;
  cluster: string;
  node: string;
  host: string;
  /** Containers the result caches name. */
  live: number;
  /** Entries read per result cache directory. */
  caches: LiveSet["dirs"];
  /** Set when orphans were due but a brake kept them all. */
  brake: Brake | null;
  /** Claims under this node name made by other hosts (reported, never judged). */
  otherHosts: { host: string; claims: number }[];
  released: {
    claim: string;
    via: "journal" | "orphan";
    network?: string;
    containerId?: string;
    ifname?: string;
    address?: string;
  }[];
  kept: { claim: string; reason: string }[];
  journal: JournalReport[];
  errors: { claim: string; error: string }[];
}

/** Options of one reconcile run. */
export interface ReconcileOptions {
  node: NodeConfig;
  milo: MiloClient;
  graceMs: number;
  dryRun: boolean;
  /** Releases past the brakes (an operator's run by hand). */
  force?: boolean;
  now?: () => number;
}

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
    live: 0,
    caches: [],
    brake: null,
    otherHosts: [],
    released: [],
    kept: [],
    journal: [],
    errors: [],
  };
  const journaled = await finishJournal(o, milo, now, report);
  const live = await readLive(node.resultsDirs);
  report.live = live.containers.size;
  report.caches = live.dirs;
  const claims = await milo().listClaims(nodeSelector(node.cluster, node.node));
  const previous = await readState(stateFileOf(node), now());
  const next: State = { absent: {}, baseline: previous.baseline };
  const candidates: IPClaim[] = [];
  const others = new Map<string, number>();
  let absent = 0;
  for (const claim of claims) {
    const name = claim.metadata.name;
    if (journaled.has(name)) continue;
    const h = holderOf(claim);
    const keep = (reason: string) => report.kept.push({ claim: name, reason });
    if (h.host !== host) {
      if (h.host) others.set(h.host, (others.get(h.host) ?? 0) + 1);
      keep(
        h.host
          ? `made by host ${h.host}, another host under this node name: not judged here`
          : "records no host (made before claims did): not judged here; a DEL or the sweep releases it",
      );
      continue;
    }
    if (!h.containerId) {
      keep("no attachment recorded on the claim");
      continue;
    }
    if (live.containers.has(h.containerId)) {
      keep("live: a result cache names its container");
      continue;
    }
    const uid = claim.metadata.uid;
    const seen = previous.absent[name]?.uid === uid ? previous.absent[name] : undefined;
    next.absent[name] = { firstAbsent: seen?.firstAbsent ?? now(), uid };
    const created = Date.parse(claim.metadata.creationTimestamp ?? "");
    // A claim made within one call's budget may be an ADD whose runtime has not cached it yet.
    if (Number.isNaN(created) || now() - created >= node.timeouts.totalMs) absent++;
    if (!seen || now() - seen.firstAbsent < o.graceMs) {
      keep("absent, waiting for a second observation after the grace period");
    } else if (Number.isNaN(created) || now() - created < o.graceMs) {
      keep("younger than the grace period");
    } else candidates.push(claim);
  }
  report.otherHosts = [...others].map(([host, claims]) => ({ host, claims }));
  const brake = o.force ? undefined : brakeOf(live, previous.baseline, candidates.length);
  if (brake) {
    report.brake = brake;
    for (const c of candidates) {
      report.kept.push({
        claim: c.metadata.name,
        reason: `brake (${brake.reason}): released nothing`,
      });
    }
  } else {
    if (!absent || o.force) next.baseline = { live: live.containers.size, at: now() };
    await releaseOrphans(o, milo, candidates, next, report);
  }
  await Deno.mkdir(node.stateDir, { recursive: true });
  await writeAtomic(stateFileOf(node), next);
  return report;
}

/** Re-checks the candidates against a fresh read of the caches and releases them by uid. */
async function releaseOrphans(
  o: ReconcileOptions,
  milo: () => MiloClient,
  candidates: IPClaim[],
  next: State,
  report: ReconcileReport,
): Promise<void> {
  if (!candidates.length) return;
  const again = await readLive(o.node.resultsDirs);
  for (const claim of candidates) {
    const name = claim.metadata.name;
    const h = holderOf(claim);
    const keep = (reason: string) => {
      report.kept.push({ claim: name, reason });
      delete next.absent[name];
    };
    if (again.containers.has(h.containerId!)) {
      keep("its container reappeared in a result cache on re-check");
      continue;
    }
    try {
      const r = await releaseOrphan(o, milo(), claim);
      if (r !== "released") {
        keep("claim changed or vanished on re-check");
        continue;
      }
      if (!o.dryRun) delete next.absent[name];
      report.released.push({
        claim: name,
        via: "orphan",
        network: h.network,
        containerId: h.containerId,
        ifname: h.ifname,
        address: claim.status.allocatedCIDR,
      });
    } catch (err) {
      report.errors.push({ claim: name, error: toCniError(err).message });
    }
  }
}

/** Releases an orphan while it is the object observed (uid); a dry run only compares. */
async function releaseOrphan(
  o: ReconcileOptions,
  milo: MiloClient,
  claim: IPClaim,
): Promise<Release> {
  const uid = claim.metadata.uid;
  if (!uid) return "changed";
  if (!o.dryRun) return await milo.releaseClaim(claim.metadata.name, uid);
  const current = await milo.getClaim(claim.metadata.name);
  return !current ? "absent" : current.metadata.uid === uid ? "released" : "changed";
}

/** Releases journaled claims and prunes old ADD-in-doubt records; answers the names it dealt with. */
async function finishJournal(
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
      if (left.length) report.journal.push({ ...summary(path, rest!), lastError });
    });
  }
  if (!o.dryRun) {
    new Holdings(o.node.stateDir).pruneAdding(Math.max(o.graceMs, o.node.timeouts.totalMs), now());
    await journal.countOwed();
  }
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
  if (!current.metadata.uid) return await milo.deleteClaim(c.name);
  return await milo.releaseClaim(c.name, current.metadata.uid);
}

/** Exit status of a run: 0 done, 1 errors or journal entries left, 2 a brake held. */
export function exitOf(r: ReconcileReport): number {
  if (r.errors.length || (!r.dryRun && r.journal.length)) return 1;
  return r.brake ? 2 : 0;
}

/** CLI entry: `milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run] [--force]`. */
export async function reconcileCli(args: string[]): Promise<number> {
  const { parseArgs } = await import("node:util");
  const { readNodeConfig } = await import("./config_file.ts");
  const { MiloClient } = await import("./milo.ts");
  const usage =
    "usage: milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run] [--force]";
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        config: { type: "string" },
        grace: { type: "string" },
        "dry-run": { type: "boolean", default: false },
        force: { type: "boolean", default: false },
      },
    }));
  } catch (err) {
    throw new CniError("config", usage, errorText(err));
  }
  const grace = values.grace === undefined ? undefined : Number(values.grace);
  if (grace !== undefined && (!Number.isFinite(grace) || grace < 0)) {
    throw new CniError("config", usage, "--grace must be a number of seconds");
  }
  const node = await readNodeConfig((n) =>
    n === "MILO_IPAM_CONFIG" && values.config ? values.config : Deno.env.get(n)
  );
  const t = node.timeouts;
  const milo = await MiloClient.open(node, t.requestMs, Date.now() + t.totalMs);
  try {
    const report = await reconcile({
      node,
      milo,
      graceMs: (grace ?? node.reconcile.graceS) * 1000,
      dryRun: values["dry-run"],
      force: values.force,
    });
    console.log(redactedJson(report, 2));
    return exitOf(report);
  } finally {
    milo.close();
  }
}
