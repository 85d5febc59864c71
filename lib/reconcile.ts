/**
 * `milo-ipam reconcile`: the node-side safety net for DELs that never arrive.
 *
 * Live attachments come from the runtime's result cache (libcni's
 * `/var/lib/cni/results/<network>-<containerID>-<ifname>` files). A claim of
 * this node that is absent from the cache is released only when it was absent
 * in two observations at least `grace` apart, is older than `grace`, and is
 * still absent and unchanged when re-checked just before release.
 */
import { parseArgs } from "node:util";
import { attachmentKey, holderOf, nodeSelector } from "./claims.ts";
import {
  DEFAULT_RESULTS_DIR,
  isPlainObject,
  MAX_STDIN_BYTES,
  type NetConf,
  parseNetConf,
  readNodeConfig,
} from "./config.ts";
import { CniError, errorText, toCniError } from "./errors.ts";
import { type IPClaim, MiloClient } from "./milo.ts";

/** Default file remembering when each claim was first seen without a live attachment. */
export const DEFAULT_STATE_FILE = "/var/lib/milo-ipam/reconcile-state.json";
const DEFAULT_GRACE_S = 300;

/** One live attachment found in the result cache. */
export interface CachedAttachment {
  network: string;
  containerId: string;
  ifname: string;
}

/** What one reconcile run decided for each claim. */
export interface ReconcileReport {
  dryRun: boolean;
  network: string;
  node: string;
  live: number;
  released: { claim: string; containerId?: string; ifname?: string; address?: string }[];
  kept: { claim: string; reason: string }[];
  errors: { claim: string; error: string }[];
}

type State = Record<string, { firstAbsent: number; uid?: string }>;

/** Reads every libcni cache entry of `network` in `dir` (a missing dir is empty). */
export async function readResultCache(dir: string, network: string): Promise<CachedAttachment[]> {
  const out: CachedAttachment[] = [];
  let entries: Deno.DirEntry[];
  try {
    entries = await Array.fromAsync(Deno.readDir(dir));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return out;
    throw new CniError("io", `cannot list result cache ${dir}`, errorText(err));
  }
  for (const e of entries) {
    if (!e.isFile || !e.name.startsWith(`${network}-`)) continue;
    const entry = await readCacheEntry(dir, e.name, network);
    if (entry) out.push(entry);
  }
  return out;
}

/** One libcni cache file as an attachment of `network`, or null if absent or not one. */
async function readCacheEntry(
  dir: string,
  file: string,
  network: string,
): Promise<CachedAttachment | null> {
  let doc: unknown;
  try {
    doc = JSON.parse(await Deno.readTextFile(`${dir}/${file}`));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return null;
    throw new CniError("io", `cannot read result cache entry ${file}`, errorText(err));
  }
  if (
    isPlainObject(doc) && doc.networkName === network && typeof doc.containerId === "string" &&
    typeof doc.ifName === "string"
  ) {
    return { network, containerId: doc.containerId, ifname: doc.ifName };
  }
  return null;
}

async function readState(path: string): Promise<State> {
  try {
    const v = JSON.parse(await Deno.readTextFile(path));
    return isPlainObject(v) ? v as State : {};
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof SyntaxError) return {};
    throw new CniError("io", `cannot read reconcile state ${path}`, errorText(err));
  }
}

async function writeState(path: string, state: State): Promise<void> {
  const tmp = `${path}.tmp`;
  await Deno.writeTextFile(tmp, JSON.stringify(state));
  await Deno.rename(tmp, path);
}

/** Options of one reconcile run. */
export interface ReconcileOptions {
  conf: NetConf;
  node: string;
  resultsDir: string;
  stateFile: string;
  graceMs: number;
  dryRun: boolean;
  now?: () => number;
}

/** One reconcile pass; the state file carries the previous observation. */
export async function reconcile(o: ReconcileOptions): Promise<ReconcileReport> {
  const now = o.now ?? Date.now;
  const cfg = o.conf.ipam;
  const network = o.conf.name;
  const milo = await MiloClient.open(cfg, now() + cfg.timeouts.totalMs * 4);
  const report: ReconcileReport = {
    dryRun: o.dryRun,
    network,
    node: o.node,
    live: 0,
    released: [],
    kept: [],
    errors: [],
  };
  try {
    const live = new Set(
      (await readResultCache(o.resultsDir, network)).map((a) =>
        attachmentKey(a.containerId, a.ifname)
      ),
    );
    report.live = live.size;
    const claims = await milo.listClaims(await nodeSelector(cfg.cluster, o.node, network));
    const previous = await readState(o.stateFile);
    const next: State = {};
    const candidates: IPClaim[] = [];
    for (const claim of claims) {
      const name = claim.metadata.name;
      const h = holderOf(claim);
      if (!h.containerId || !h.ifname) {
        report.kept.push({ claim: name, reason: "no attachment recorded on the claim" });
        continue;
      }
      if (live.has(attachmentKey(h.containerId, h.ifname))) {
        report.kept.push({ claim: name, reason: "live attachment in the result cache" });
        continue;
      }
      const uid = claim.metadata.uid;
      const seen = previous[name]?.uid === uid ? previous[name] : undefined;
      next[name] = { firstAbsent: seen?.firstAbsent ?? now(), uid };
      const created = Date.parse(claim.metadata.creationTimestamp ?? "");
      if (!seen || now() - seen.firstAbsent < o.graceMs) {
        report.kept.push({
          claim: name,
          reason: "absent, waiting for a second observation after the grace period",
        });
      } else if (Number.isNaN(created) || now() - created < o.graceMs) {
        report.kept.push({ claim: name, reason: "younger than the grace period" });
      } else candidates.push(claim);
    }
    for (const claim of candidates) {
      const name = claim.metadata.name;
      try {
        const h = holderOf(claim);
        const again = await readCacheEntry(
          o.resultsDir,
          `${network}-${h.containerId}-${h.ifname}`,
          network,
        );
        const current = await milo.getClaim(name);
        if (again && again.containerId === h.containerId && again.ifname === h.ifname) {
          report.kept.push({ claim: name, reason: "attachment reappeared on re-check" });
          delete next[name];
          continue;
        }
        if (!current || current.metadata.uid !== claim.metadata.uid) {
          report.kept.push({ claim: name, reason: "claim changed or vanished on re-check" });
          delete next[name];
          continue;
        }
        if (!o.dryRun) {
          await milo.deleteClaim(name);
          delete next[name];
        }
        report.released.push({
          claim: name,
          containerId: h.containerId,
          ifname: h.ifname,
          address: claim.status.allocatedCIDR,
        });
      } catch (err) {
        report.errors.push({ claim: name, error: toCniError(err).message });
      }
    }
    if (!o.dryRun) await writeState(o.stateFile, next);
    return report;
  } finally {
    milo.close();
  }
}

/** CLI entry: `milo-ipam reconcile --config FILE [--results-dir D] [--state F] [--grace S] [--dry-run]`. */
export async function reconcileCli(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      config: { type: "string" },
      "results-dir": { type: "string", default: DEFAULT_RESULTS_DIR },
      state: { type: "string", default: DEFAULT_STATE_FILE },
      grace: { type: "string", default: String(DEFAULT_GRACE_S) },
      node: { type: "string" },
      "dry-run": { type: "boolean", default: false },
    },
  });
  const grace = Number(values.grace);
  if (!values.config || !Number.isFinite(grace) || grace < 0) {
    throw new CniError(
      "config",
      "usage: milo-ipam reconcile --config FILE [--results-dir DIR] [--state FILE] [--grace SECONDS] [--node NAME] [--dry-run]",
    );
  }
  const text = await Deno.readTextFile(values.config).catch((err) => {
    throw new CniError("config", `cannot read --config ${values.config}`, errorText(err));
  });
  if (text.length > MAX_STDIN_BYTES) throw new CniError("config", `${values.config} is too large`);
  const conf = parseNetConf(
    networkOf(text, values.config),
    await readNodeConfig(Deno.env.get("MILO_IPAM_CONFIG")),
  );
  const node = values.node || conf.ipam.node || Deno.env.get("NODE_NAME") || Deno.hostname();
  const report = await reconcile({
    conf,
    node,
    resultsDir: values["results-dir"],
    stateFile: values.state,
    graceMs: grace * 1000,
    dryRun: values["dry-run"],
  });
  console.log(JSON.stringify(report, null, 2));
  return report.errors.length ? 1 : 0;
}

/** A conflist is reduced to the network config of its milo-ipam plugin. */
function networkOf(text: string, path: string): string {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return text;
  }
  if (!isPlainObject(doc) || !Array.isArray(doc.plugins)) return text;
  const plugin = doc.plugins.find((p: unknown) =>
    isPlainObject(p) && isPlainObject(p.ipam) && p.ipam.type === "milo-ipam"
  );
  if (!plugin) throw new CniError("config", `${path}: no plugin delegates to milo-ipam`);
  return JSON.stringify({ ...plugin, cniVersion: doc.cniVersion, name: doc.name });
}
