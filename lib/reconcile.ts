/**
 * `milo-ipam reconcile`: the node-side safety net for releases that never
 * happened.
 *
 * 1. The release journal: claims a DEL (or an ADD's rollback) failed to
 *    release are released now. The journal is the runtime's own word that the
 *    attachment is gone, so a stale result-cache entry does not keep them.
 *    An in-doubt entry (a create that may land after its DEL) is kept until
 *    `grace` after it was written, releasing its claims whenever they appear.
 *    Markers of ADDs in doubt older than `grace` are removed.
 * 2. Orphans: live attachments come from the runtime's result cache (libcni's
 *    `<resultsDir>/<network>-<containerID>-<ifname>` files). A claim of this
 *    node that is absent from the cache is released only when it was absent in
 *    two observations at least `grace` apart, is older than `grace`, and is
 *    still absent and unchanged (same uid) when re-checked just before release.
 */
import { holderOf, nodeSelector } from "./claims.ts";
import { isPlainObject } from "./cni.ts";
import type { NodeConfig } from "./config.ts";
import { CniError, errorText, toCniError } from "./errors.ts";
import { Journal, type JournalClaim, type JournalEntry, writeAtomic } from "./journal.ts";
import type { MiloClient, Release } from "./milo.ts";
import type { IPClaim } from "./milo_objects.ts";

/** One live attachment found in the result cache. */
export interface CachedAttachment {
  network: string;
  containerId: string;
  ifname: string;
}

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
  cluster: string;
  node: string;
  live: number;
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

type State = Record<string, { firstAbsent: number; uid?: string }>;

const key = (network?: string, containerId?: string, ifname?: string) =>
  `${network}\u0000${containerId}\u0000${ifname}`;

/** Reads every libcni cache entry in `dir` (a missing dir is empty). */
export async function readResultCache(dir: string): Promise<CachedAttachment[]> {
  let names: string[];
  try {
    names = (await Array.fromAsync(Deno.readDir(dir))).filter((e) => e.isFile).map((e) => e.name);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw new CniError("io", `cannot list result cache ${dir}`, errorText(err));
  }
  const entries = await Promise.all(names.map((n) => readCacheEntry(dir, n)));
  return entries.filter((e): e is CachedAttachment => e !== null);
}

/** One libcni cache file as an attachment, or null if absent or not one. */
async function readCacheEntry(dir: string, file: string): Promise<CachedAttachment | null> {
  let doc: unknown;
  try {
    doc = JSON.parse(await Deno.readTextFile(`${dir}/${file}`));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof SyntaxError) return null;
    throw new CniError("io", `cannot read result cache entry ${file}`, errorText(err));
  }
  if (
    isPlainObject(doc) && typeof doc.networkName === "string" &&
    typeof doc.containerId === "string" && typeof doc.ifName === "string"
  ) {
    return { network: doc.networkName, containerId: doc.containerId, ifname: doc.ifName };
  }
  return null;
}

async function readState(path: string, now: number): Promise<State> {
  let v: unknown;
  try {
    v = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof SyntaxError) return {};
    throw new CniError("io", `cannot read reconcile state ${path}`, errorText(err));
  }
  const out: State = {};
  for (const [name, s] of Object.entries(isPlainObject(v) ? v : {})) {
    if (!isPlainObject(s)) continue;
    // A timestamp that is not a finite number is "first seen now", never "long ago".
    const at = typeof s.firstAbsent === "number" && Number.isFinite(s.firstAbsent)
      ? Math.min(s.firstAbsent, now)
      : now;
    out[name] = { firstAbsent: at, uid: typeof s.uid === "string" ? s.uid : undefined };
  }
  return out;
}

/** Options of one reconcile run. */
export interface ReconcileOptions {
  node: NodeConfig;
  milo: MiloClient;
  graceMs: number;
  dryRun: boolean;
  now?: () => number;
}

/** The reconcile state file of a node. */
export function stateFileOf(node: NodeConfig): string {
  return `${node.stateDir}/reconcile-state.json`;
}

/** One reconcile pass; the state file carries the previous observation. */
export async function reconcile(o: ReconcileOptions): Promise<ReconcileReport> {
  const now = o.now ?? Date.now;
  const node = o.node;
  // Each Milo operation (the LIST, or one claim's re-check and release) gets
  // the node's whole totalMs, as one CNI call would: a slow claim must not eat
  // the budget of the others, and the run is bounded by the number of claims.
  const milo = () => o.milo.withDeadline(now() + node.timeouts.totalMs);
  const report: ReconcileReport = {
    dryRun: o.dryRun,
    cluster: node.cluster,
    node: node.node,
    live: 0,
    released: [],
    kept: [],
    journal: [],
    errors: [],
  };
  const journaled = await finishJournal(o, milo, now, report);
  const live = new Set(
    (await readResultCache(node.resultsDir)).map((a) => key(a.network, a.containerId, a.ifname)),
  );
  report.live = live.size;
  const claims = await milo().listClaims(nodeSelector(node.cluster, node.node));
  const previous = await readState(stateFileOf(node), now());
  const next: State = {};
  const candidates: IPClaim[] = [];
  for (const claim of claims) {
    const name = claim.metadata.name;
    if (journaled.has(name)) continue;
    const h = holderOf(claim);
    const keep = (reason: string) => report.kept.push({ claim: name, reason });
    if (!h.network || !h.containerId || !h.ifname) {
      keep("no attachment recorded on the claim");
      continue;
    }
    if (live.has(key(h.network, h.containerId, h.ifname))) {
      keep("live attachment in the result cache");
      continue;
    }
    const uid = claim.metadata.uid;
    const seen = previous[name]?.uid === uid ? previous[name] : undefined;
    next[name] = { firstAbsent: seen?.firstAbsent ?? now(), uid };
    const created = Date.parse(claim.metadata.creationTimestamp ?? "");
    if (!seen || now() - seen.firstAbsent < o.graceMs) {
      keep("absent, waiting for a second observation after the grace period");
    } else if (Number.isNaN(created) || now() - created < o.graceMs) {
      keep("younger than the grace period");
    } else candidates.push(claim);
  }
  for (const claim of candidates) {
    const name = claim.metadata.name;
    try {
      const r = await releaseOrphan(o, milo(), claim);
      if (r !== "released") {
        report.kept.push({ claim: name, reason: r });
        delete next[name];
        continue;
      }
      if (!o.dryRun) delete next[name];
      const h = holderOf(claim);
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
  await Deno.mkdir(node.stateDir, { recursive: true });
  await writeAtomic(stateFileOf(node), next);
  return report;
}

/** Re-checks an orphan just before release; answers `released` or why it was kept. */
async function releaseOrphan(
  o: ReconcileOptions,
  milo: MiloClient,
  claim: IPClaim,
): Promise<string> {
  const h = holderOf(claim);
  const again = await readCacheEntry(
    o.node.resultsDir,
    `${h.network}-${h.containerId}-${h.ifname}`,
  );
  if (again && again.containerId === h.containerId && again.ifname === h.ifname) {
    return "attachment reappeared on re-check";
  }
  const uid = claim.metadata.uid;
  if (!uid) return "claim has no uid to re-check";
  let r: Release;
  if (o.dryRun) {
    const current = await milo.getClaim(claim.metadata.name);
    r = !current ? "absent" : current.metadata.uid === uid ? "released" : "changed";
  } else r = await milo.releaseClaim(claim.metadata.name, uid);
  return r === "released" ? r : "claim changed or vanished on re-check";
}

/** Releases journaled claims and prunes old ADD-in-doubt markers; answers the names it dealt with. */
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
  if (!o.dryRun) journal.pruneMarkers(Math.max(o.graceMs, o.node.timeouts.totalMs), now());
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

/** CLI entry: `milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run]`. */
export async function reconcileCli(args: string[]): Promise<number> {
  const { parseArgs } = await import("node:util");
  const { readNodeConfig } = await import("./config.ts");
  const { MiloClient } = await import("./milo.ts");
  const usage = "usage: milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run]";
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        config: { type: "string" },
        grace: { type: "string" },
        "dry-run": { type: "boolean", default: false },
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
    });
    console.log(JSON.stringify(report, null, 2));
    return report.errors.length || (!report.dryRun && report.journal.length) ? 1 : 0;
  } finally {
    milo.close();
  }
}
