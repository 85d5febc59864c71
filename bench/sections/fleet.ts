/**
 * A fleet against one Milo (issue 20): K real node agents, each its own
 * install, state, socket and node name in one cluster, against one TLS
 * milo-dev, every call the installed plugin exec'd with a runtime's CNI
 * environment and stdin. A successful ADD gets a libcni result cache entry
 * (what the node's reconcile counts as live) and loses it after its DEL, as
 * libcni does.
 *
 * 1. Start: the agents start without a record of their claims; each lists
 *    Milo once, at a random moment of its first reconcile interval.
 * 2. Pace: every node starts N dual-stack pods at once against no ceiling:
 *    the claims per second the fleet offers on this machine (then deleted).
 * 3. Boot storm: Milo's ceiling set to half that pace (2x oversubscription);
 *    every node starts N new pods at once.
 * 4. Idle: nothing happens for several reconcile intervals.
 * 5. Drain: every pod of the storm is deleted at once.
 *
 * milo-dev's admin `/stats` is reset before and read after each step.
 */
import { rollbackReserveMs } from "../../lib/invoke.ts";
import { FALLBACK_COUNTER } from "../../lib/run.ts";
import { type MiloDev, startMiloDev } from "../../testing/milo_dev.ts";
import type { TestPlugin } from "../../testing/plugin.ts";
import { BENCH_CLASSES, BENCH_SEED, BENCH_TOKEN } from "../../testing/seeds.ts";
import type { Stats } from "../../milo-dev/stats.ts";
import { waitForQuiet } from "../machine.ts";
import { type FleetIdle, type FleetResults, type FleetRound, summarize } from "../model.ts";
import type { Plan } from "../plan.ts";
import { brief, cniCode, ok, say, text } from "../proc.ts";
import { FLEET_LIMITS } from "../report/fleet.ts";
import { installBench, PRODUCTION_TIMEOUTS } from "../world.ts";

const CLUSTER = "cluster-fleet";
/** The shortest reconcile interval the node config allows (lib/config.ts). */
export const FLEET_INTERVAL_S = 10;
/** The network name of the bench's network config (the libcni cache entry names it). */
const NETWORK = "vpc-7b3e";
/** Longest one plugin process may run: well past the ADD deadline. */
const CALL_TIMEOUT_MS = 30_000;
/** Claims per ADD: one per family of the bench's network. */
const BENCH_FAMILIES = Object.keys(BENCH_CLASSES).length;

/** One node: its install (with a running agent). */
type Node = TestPlugin;

const podId = (tag: string, node: number, pod: number) => `${tag}-n${node}-p${pod}`;

/** The libcni result cache entry of a container's attachment, as libcni writes after its ADD. */
function cacheEntry(p: Node, containerId: string): string {
  return `${p.resultsDir}/${NETWORK}-${containerId}-eth0`;
}

/** The installs' fallback counters: calls that did the work themselves. */
async function fallbacks(nodes: Node[]): Promise<number> {
  const sizes = await Promise.all(
    nodes.map((p) => Deno.stat(`${p.stateDir}/${FALLBACK_COUNTER}`).then((s) => s.size, () => 0)),
  );
  return sizes.reduce((a, b) => a + b, 0);
}

/** The claim LISTs and rows scanned of a /stats document. */
function listCost(s: Stats): { lists: number; rowsScanned: number } {
  return { lists: s.lists, rowsScanned: s.listRowsScanned };
}

/** A round's figures, and which of each node's pods succeeded. */
interface Ran {
  round: FleetRound;
  ok: boolean[][];
}

/**
 * `verb` of the pods `pods[node]` on every node at once, as runtimes booting
 * or draining their nodes would; answers the calls and Milo's counters.
 */
async function round(
  dev: MiloDev,
  nodes: Node[],
  verb: "ADD" | "DEL",
  tag: string,
  pods: number[][],
): Promise<Ran> {
  await dev.resetStats();
  const fb0 = await fallbacks(nodes);
  const t0 = performance.now();
  let last = t0;
  const results = await Promise.all(nodes.map((p, node) =>
    Promise.all(pods[node].map(async (i) => {
      const containerId = podId(tag, node, i);
      const r = await p.run({
        command: verb,
        containerId,
        podName: `web-${i}`,
        stdin: p.netConf(),
        timeoutMs: CALL_TIMEOUT_MS,
      });
      last = Math.max(last, performance.now());
      if (ok(r) && verb === "ADD") {
        const entry = { kind: "cniCacheV1", containerId, ifName: "eth0", networkName: NETWORK };
        await Deno.writeTextFile(cacheEntry(p, containerId), JSON.stringify(entry));
      }
      // libcni removes the entry after a DEL (a failed ADD left none).
      if (ok(r) && verb === "DEL") await Deno.remove(cacheEntry(p, containerId)).catch(() => {});
      return r;
    }))
  ));
  const s = await dev.stats();
  const flat = results.flat();
  const codes: Record<string, number> = {};
  for (const r of flat) codes[cniCode(r)] = (codes[cniCode(r)] ?? 0) + 1;
  const failures = flat.filter((r) => !ok(r));
  if (failures.length) {
    say(`  ${verb} ${tag}: ${failures.length} failed, e.g. ${brief(failures[0])}`);
  }
  return {
    round: {
      verb,
      calls: flat.length,
      failures: failures.length,
      codes,
      wallMs: last - t0,
      summary: summarize(flat.map((r) => r.ms)),
      fallbacks: (await fallbacks(nodes)) - fb0,
      requests: s.total,
      byMethod: s.byMethod,
      byStatus: s.byStatus,
      throttled: s.throttled,
      allocations: s.allocations,
      ...listCost(s),
    },
    ok: results.map((row) => row.map(ok)),
  };
}

/** The pods of a round that succeeded (or, with `failed`, did not), by node. */
function podsOf(r: Ran, failed = false): number[][] {
  return r.ok.map((row) => row.flatMap((good, i) => (good !== failed ? [i] : [])));
}

/** Pods 0..n-1 of every node. */
function everyPod(nodes: Node[], n: number): number[][] {
  return nodes.map(() => Array.from({ length: n }, (_, i) => i));
}

/** Installs the nodes and starts their agents; resolves once each has listed Milo. */
async function startNodes(
  dev: MiloDev,
  k: number,
  undo: (() => Promise<void>)[],
): Promise<{ nodes: Node[]; start: FleetResults["start"] }> {
  const nodes: Node[] = [];
  for (let i = 0; i < k; i++) {
    const p = await installBench(dev, { cluster: CLUSTER, node: `node-${i}`, agent: true });
    undo.push(() => p.cleanup());
    nodes.push(p);
    const agent = p.node.agent as Record<string, unknown>;
    await p.setNode({ agent: { ...agent, reconcileIntervalS: FLEET_INTERVAL_S } });
  }
  say(`fleet: ${k} installs; starting their agents (reconcile every ${FLEET_INTERVAL_S} s)`);
  await dev.resetStats();
  const t0 = performance.now();
  for (const p of nodes) await p.startAgent();
  // Each agent lists once within its first interval (from its own start).
  const until = t0 + (FLEET_INTERVAL_S + 10) * 1000;
  let s = await dev.stats();
  while ((s.listsByKind.ipclaims?.lists ?? 0) < k && performance.now() < until) {
    await new Promise((r) => setTimeout(r, 250));
    s = await dev.stats();
  }
  const waitedMs = performance.now() - t0;
  // The last lister's reconcile may still be writing its record.
  await new Promise((r) => setTimeout(r, 500));
  s = await dev.stats();
  say(`  ${s.lists} LIST(s) at start, ${s.total} request(s), ${(waitedMs / 1000).toFixed(1)} s`);
  return { nodes, start: { waitedMs, requests: s.total, ...listCost(s) } };
}

/** Reconcile runs each agent logged since `sinceMs` (epoch). */
async function reconcilesSince(nodes: Node[], sinceMs: number): Promise<number> {
  let n = 0;
  for (const p of nodes) {
    for (const line of (await text(p.logFile)).split("\n")) {
      if (!line.includes('"RECONCILE"')) continue;
      const l = JSON.parse(line);
      if (l.verb === "RECONCILE" && Date.parse(l.ts) >= sinceMs) n++;
    }
  }
  return n;
}

/** Nothing happens on the nodes for `intervals` reconcile intervals; Milo's counters over it. */
async function idleStretch(dev: MiloDev, nodes: Node[], intervals: number): Promise<FleetIdle> {
  const seconds = intervals * FLEET_INTERVAL_S + 1;
  say(`fleet idle: ${seconds} s (${intervals} reconcile interval(s) of ${nodes.length} agents)`);
  const claims = (await dev.listClaims()).length;
  await dev.resetStats();
  const since = Date.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const s = await dev.stats();
  return {
    seconds,
    reconciles: await reconcilesSince(nodes, since),
    requests: s.total,
    byMethod: s.byMethod,
    claims,
    ...listCost(s),
  };
}

/**
 * Dual-stack pods a node starts in the storm: the pace round's, or fewer
 * when their claims at the ceiling would not end within the ADD's request
 * deadline even at the budget's slowest (the last ADD at
 * {@link FLEET_LIMITS.lastAddVsIdeal}× the ideal): on a machine that spawns
 * processes slowly the pace, and so the ceiling, is low.
 */
export function stormSize(ceiling: number, nodes: number, deadlineMs: number, most: number) {
  const claims = (ceiling * deadlineMs / 1000) / FLEET_LIMITS.lastAddVsIdeal;
  return Math.max(1, Math.min(most, Math.floor(claims / (nodes * BENCH_FAMILIES))));
}

/** The claims per second a round created. */
export function rateOf(r: FleetRound): number {
  return r.allocations / (r.wallMs / 1000);
}

/** Starts the fleet, runs the pace, the storm, the idle stretch and the drain; tears it down. */
export async function fleetSection(plan: Plan): Promise<FleetResults> {
  const k = plan.fleetNodes, n = plan.fleetPods;
  const deadlineMs = PRODUCTION_TIMEOUTS.totalMs - rollbackReserveMs(PRODUCTION_TIMEOUTS.totalMs);
  const quiet = await waitForQuiet(Math.min(plan.quietWaitS, 120));
  const loadBefore = (await text("/proc/loadavg")).trim();
  const dev = await startMiloDev({ seed: BENCH_SEED, tls: true, token: BENCH_TOKEN });
  const undo: (() => Promise<void>)[] = [() => dev.stop()];
  try {
    const { nodes, start } = await startNodes(dev, k, undo);
    // One pod a node first: each install's first processes compile its bundle.
    const warm = await round(dev, nodes, "ADD", "warm", everyPod(nodes, 1));
    await round(dev, nodes, "DEL", "warm", podsOf(warm));
    say(`fleet pace: ${k} nodes × ${n} dual-stack pods at once, no ceiling`);
    const pace = await round(dev, nodes, "ADD", "pace", everyPod(nodes, n));
    if (!pace.round.allocations) throw new Error("fleet: no ADD of the pace round succeeded");
    await round(dev, nodes, "DEL", "pace", podsOf(pace));
    const ceiling = Math.max(1, Math.round(rateOf(pace.round) / 2));
    say(`  ${rateOf(pace.round).toFixed(1)} claims/s offered: ceiling ${ceiling}/s (2x)`);
    const stormPods = stormSize(ceiling, k, deadlineMs, n);
    await dev.setLimits({ allocationsPerSecond: ceiling });
    // A boot storm meets agents just started (their limiters fresh); these have a record now.
    await dev.resetStats();
    for (const p of nodes) {
      await p.stopAgent();
      await p.startAgent();
    }
    const restart = await dev.stats();
    // The ceiling's window forgets the pace round's creates.
    await new Promise((r) => setTimeout(r, 1_100));
    say(
      `fleet storm: ${k} nodes × ${stormPods} dual-stack pods at once against ${ceiling} creates/s`,
    );
    const storm = await round(dev, nodes, "ADD", "storm", everyPod(nodes, stormPods));
    const s = storm.round;
    say(
      `  last ADD ${(s.wallMs / 1000).toFixed(1)} s, ${s.byMethod.POST ?? 0} POSTs for ` +
        `${s.allocations} claims, ${s.throttled} answered 429, ${s.codes["11"] ?? 0} code 11`,
    );
    // A runtime deletes what failed; the idle stretch then sees only live pods.
    await round(dev, nodes, "DEL", "storm", podsOf(storm, true));
    const idle = await idleStretch(dev, nodes, plan.fleetIdleIntervals);
    say(`  ${idle.requests} request(s), ${idle.lists} LIST(s), ${idle.reconciles} reconcile(s)`);
    say(`fleet drain: every storm pod deleted at once`);
    const drain = (await round(dev, nodes, "DEL", "storm", podsOf(storm))).round;
    return {
      nodes: k,
      podsPerNode: n,
      stormPodsPerNode: stormPods,
      families: BENCH_FAMILIES,
      reconcileIntervalS: FLEET_INTERVAL_S,
      timeouts: PRODUCTION_TIMEOUTS,
      requestDeadlineMs: deadlineMs,
      loadBefore,
      idleBeforePct: quiet.idle * 100,
      start,
      restart: { requests: restart.total, ...listCost(restart) },
      pace: pace.round,
      ceiling,
      storm: s,
      idle,
      drain,
    };
  } finally {
    for (const u of undo.reverse()) await u().catch(() => {});
  }
}
