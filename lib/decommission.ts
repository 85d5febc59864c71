/**
 * `milo-ipam decommission`: every lease a deleted cluster still holds in
 * Milo, released from outside the cluster (no Kubernetes API: the cluster is
 * gone). Its claims are those labelled with its name in `milo.namespace`.
 *
 * The condition it trusts: the operator's word that the cluster is deleted,
 * checked against Milo's record of the cluster's activity. A claim is made by
 * an ADD and lives until its DEL (Milo renews nothing), so a cluster whose
 * runtimes still run shows itself by claims made or removed. The run refuses
 * (releasing nothing) while:
 *
 * - a claim of the cluster was made within `quiet` (default 1 hour) on
 *   Milo's clock (its creation against the LIST answer's `Date`; an answer
 *   without a `Date` proves nothing and is refused too): a node still starts
 *   pods;
 * - the claims changed between two LISTs `interval` apart (default 1
 *   minute): one appeared, went, or was made again (a node still adds or
 *   deletes pods);
 * - with `apply`, their count is not the `expect` the operator read from the
 *   dry run: the dry run comes first, and what it showed is what goes.
 *
 * The state that makes the condition true for a live pod: a cluster that is
 * alive but neither started nor stopped a pod within `quiet` (every pod of it
 * older, none restarted). Nothing in Milo tells it from a deleted one; the
 * operator names the cluster, and its dry run lists the nodes and the newest
 * claim. Each claim is then released by its uid (a fresh GET finds the same
 * object, still the cluster's) as the other release paths do.
 */
import { clusterSelector } from "./claims.ts";
import { toCniError } from "./errors.ts";
import { holderOf } from "./holder.ts";
import { keptSize, ListTally } from "./list_bound.ts";
import type { MiloClient } from "./milo.ts";
import { createdOnMilo } from "./milo_objects.ts";

/** What a decommission keeps of a cluster's LIST: a cluster of 5,000 nodes has 300,000 claims. */
export const DECOMMISSION_BOUND = { items: 1_000_000, bytes: 512 * 2 ** 20 };

/** What one run needs. */
export interface DecommissionOptions {
  cluster: string;
  milo: MiloClient;
  apply: boolean;
  /** With `apply`: the number of claims the dry run found. */
  expect?: number;
  /** No claim of the cluster made within this long (Milo's clock). */
  quietMs: number;
  /** The two LISTs at least this far apart, the same claims in both. */
  intervalMs: number;
  /** Budget of one operation (a LIST, or one claim's GET and DELETE). */
  operationMs: number;
  sleep: (ms: number) => Promise<void>;
  /** Claims released at once; default 8. */
  concurrency?: number;
}

/** One claim as a decommission keeps it. */
export interface DecommissionClaim {
  claim: string;
  uid?: string;
  node?: string;
  pod?: string;
  address?: string;
  /** Its creation on Milo's clock (ms). */
  created: number;
  retain: boolean;
  action: "would-release" | "released" | "gone" | "changed" | "failed" | "kept";
  why?: string;
}

/** What `milo-ipam decommission` prints (`--output json`). */
export interface DecommissionReport {
  kind: "DecommissionReport";
  version: 1;
  cluster: string;
  apply: boolean;
  outcome: "done" | "refused" | "partial" | "error";
  exitCode: number;
  message: string;
  /** Claims per observation, and Milo's clock at each. */
  observations: { at: string; claims: number }[];
  /** Claims per node (the node config's name of each, as recorded). */
  nodes: Record<string, number>;
  /** The newest claim of the cluster, on Milo's clock. */
  newest: { claim: string; node?: string; pod?: string; created: string; ageS: number } | null;
  /** Claims made with reclaimPolicy Retain: Milo keeps their addresses retained until their lease ends. */
  retained: number;
  totals: { claims: number; released: number; wouldRelease: number; gone: number; failed: number };
  claims: DecommissionClaim[];
  requests: number;
  error: { message: string; details: string } | null;
}

/** Exit codes: done, an error, refused (activity, or not the dry run's count), some failed. */
export const DECOMMISSION_EXIT = { done: 0, error: 1, refused: 2, partial: 3 } as const;

/** A refusal: the run releases nothing. */
class Refusal extends Error {}

/** One LIST of the cluster's claims: each kept small, and Milo's clock at the answer. */
async function observe(o: DecommissionOptions) {
  const claims = new Map<string, DecommissionClaim>();
  const tally = new ListTally(`Milo's claims of cluster ${o.cluster}`, DECOMMISSION_BOUND, {
    bytes: "DECOMMISSION_BOUND.bytes",
    items: "DECOMMISSION_BOUND.items",
  });
  const milo = o.milo.withDeadline(Date.now() + o.operationMs);
  const serverTime = await milo.scanClaims(clusterSelector(o.cluster), (c) => {
    const h = holderOf(c);
    if (h.cluster !== o.cluster) return;
    const kept: DecommissionClaim = {
      claim: c.metadata.name,
      uid: c.metadata.uid,
      node: h.node,
      pod: h.pod,
      address: c.status.allocatedCIDR ?? c.status.address,
      created: createdOnMilo(c),
      retain: c.spec.reclaimPolicy === "Retain",
      action: "kept",
    };
    tally.keep(keptSize(kept));
    claims.set(kept.claim, kept);
  });
  return { claims, serverTime };
}

/** Why the two observations show a cluster that still runs, or null. */
function changed(
  first: Map<string, DecommissionClaim>,
  second: Map<string, DecommissionClaim>,
): string | null {
  for (const [name, c] of second) {
    const was = first.get(name);
    if (!was) return `claim ${name} (node ${c.node ?? "?"}, pod ${c.pod ?? "?"}) appeared`;
    if (was.uid !== c.uid) return `claim ${name} was made again (node ${c.node ?? "?"})`;
  }
  for (const [name, c] of first) {
    if (!second.has(name)) return `claim ${name} (node ${c.node ?? "?"}) was released`;
  }
  return null;
}

/** One run: two LISTs `intervalMs` apart, the rules, then (with `apply`) each claim released. */
export async function decommission(o: DecommissionOptions): Promise<DecommissionReport> {
  const report: DecommissionReport = {
    kind: "DecommissionReport",
    version: 1,
    cluster: o.cluster,
    apply: o.apply,
    outcome: "done",
    exitCode: DECOMMISSION_EXIT.done,
    message: "",
    observations: [],
    nodes: {},
    newest: null,
    retained: 0,
    totals: { claims: 0, released: 0, wouldRelease: 0, gone: 0, failed: 0 },
    claims: [],
    requests: 0,
    error: null,
  };
  const end = (outcome: DecommissionReport["outcome"], message: string) => {
    report.outcome = outcome;
    report.exitCode = DECOMMISSION_EXIT[outcome];
    report.message = message;
    report.requests = o.milo.requests;
    return report;
  };
  try {
    const first = await observe(o);
    report.observations.push({ at: isoOf(first.serverTime), claims: first.claims.size });
    await o.sleep(o.intervalMs);
    const second = await observe(o);
    report.observations.push({ at: isoOf(second.serverTime), claims: second.claims.size });
    const claims = [...second.claims.values()].sort((a, b) => a.claim < b.claim ? -1 : 1);
    report.claims = claims;
    report.totals.claims = claims.length;
    for (const c of claims) {
      const node = c.node ?? "(none recorded)";
      report.nodes[node] = (report.nodes[node] ?? 0) + 1;
      if (c.retain) report.retained++;
    }
    const newest = claims.reduce<DecommissionClaim | undefined>(
      (n, c) => !n || c.created > n.created ? c : n,
      undefined,
    );
    if (newest) {
      report.newest = {
        claim: newest.claim,
        node: newest.node,
        pod: newest.pod,
        created: isoOf(newest.created),
        ageS: Math.round((second.serverTime - newest.created) / 1000),
      };
    }
    const activity = changed(first.claims, second.claims);
    if (activity) throw new Refusal(`the cluster still runs: between the two LISTs ${activity}`);
    if (claims.length && !Number.isFinite(second.serverTime)) {
      throw new Refusal("Milo's LIST answer carried no Date: the claims' ages are unknown");
    }
    if (claims.some((c) => !Number.isFinite(c.created))) {
      throw new Refusal("a claim of the cluster has no creation time: its age is unknown");
    }
    if (newest && second.serverTime - newest.created < o.quietMs) {
      throw new Refusal(
        `the cluster still runs: claim ${newest.claim} (node ${newest.node ?? "?"}, pod ${
          newest.pod ?? "?"
        }) was made ${report.newest!.ageS} s ago, within --quiet`,
      );
    }
    if (!o.apply) {
      for (const c of claims) c.action = "would-release";
      report.totals.wouldRelease = claims.length;
      return end(
        "done",
        `dry run: would release ${claims.length} claim(s) of cluster ${o.cluster} on ${
          Object.keys(report.nodes).length
        } node(s); run again with --apply --expect ${claims.length}`,
      );
    }
    if (o.expect !== claims.length) {
      throw new Refusal(
        `--expect ${o.expect} but the cluster has ${claims.length} claim(s) now: run the dry ` +
          "run again and check what it lists",
      );
    }
    await inPool(claims, o.concurrency ?? 8, (c) => release(o, c));
    for (const c of claims) {
      if (c.action === "released") report.totals.released++;
      else if (c.action === "gone") report.totals.gone++;
      else report.totals.failed++;
    }
    const t = report.totals;
    const msg = `released ${t.released} claim(s) of cluster ${o.cluster} (${t.gone} gone ` +
      `already${t.failed ? `, ${t.failed} failed or changed: run it again` : ""})`;
    return end(t.failed ? "partial" : "done", msg);
  } catch (err) {
    if (err instanceof Refusal) {
      return end("refused", `refused: ${err.message}; nothing released`);
    }
    const e = toCniError(err);
    report.error = { message: e.message, details: e.details };
    return end("error", `error: ${e.message}`);
  }
}

/** Releases one claim while Milo's claim of that name is the object listed, still the cluster's. */
async function release(o: DecommissionOptions, c: DecommissionClaim): Promise<void> {
  try {
    const milo = o.milo.withDeadline(Date.now() + o.operationMs);
    const r = await milo.releaseIf(
      c.claim,
      (now) => now.metadata.uid === c.uid && holderOf(now).cluster === o.cluster,
      { note: (why) => c.why = why },
    );
    c.action = r === "released" ? "released" : r === "absent" ? "gone" : "changed";
    if (r === "changed") c.why ??= "another object of that name now: left alone";
  } catch (err) {
    const e = toCniError(err);
    c.action = "failed";
    c.why = `${e.message}${e.details ? ` (${e.details})` : ""}`;
  }
}

function isoOf(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : "(no Date)";
}

async function inPool<T>(items: T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}
