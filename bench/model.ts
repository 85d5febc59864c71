/** The benchmark's result document (written as JSON beside the report) and its statistics. */

import type { PhaseSample } from "./phases.ts";

/** Percentiles of one series of samples (ms). */
export interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/** One latency series: what ran, how, and its timings. */
export interface Series {
  key: string;
  label: string;
  summary: Summary;
  /** Non-zero exits among the measured samples. */
  failures: number;
  /** Mean CPU time (user + system, all threads) per process, from the parent's children times. */
  cpuMs: number;
}

/** Requests counted at milo-dev's admin /stats for each single invocation of a verb. */
export interface RequestCount {
  verb: string;
  samples: number;
  families: number;
  /** Distinct totals seen per invocation, e.g. [2]. */
  totals: number[];
  /** Distinct per-method counts seen, e.g. ["POST=2"]. */
  methods: string[];
}

/** N calls with at most K in flight. */
export interface LoadPoint {
  n: number;
  inFlight: number;
  failures: number;
  wallMs: number;
  /** Successful calls per second of wall time. */
  perSecond: number;
  summary: Summary;
}

/** One point of the process concurrency sweep (plugin without the agent). */
export interface ConcurrencyPoint extends LoadPoint {
  clusters: number;
  verb: "ADD" | "DEL";
  /** Plugin processes' CPU time per call (ms). */
  clientCpuMs: number;
  /** milo-dev's CPU time per call (ms). */
  serverCpuMs: number;
}

/** Peak resident set sizes (KiB) of single processes. */
export interface RssRow {
  label: string;
  samples: number;
  medianKiB: number;
  maxKiB: number;
}

/** The machine and its load. */
export interface Machine {
  nproc: number;
  memory: string;
  kernel: string;
  cpu: string;
  os: string;
  /** /proc/loadavg before and after the run. */
  loadBefore: string;
  loadAfter: string;
}

/** The plugin without the agent, one call in flight, beside the floor and a minimal TLS client. */
export interface LatencyResults {
  series: Series[];
  requests: RequestCount[];
}

/** Start-up anatomy and the bundle's make-up. */
export interface StartupResults {
  series: Series[];
  /** Bytes of main.ts bundled unminified, and the part of it that is npm:zod. */
  plainBytes: number;
  zodBytes: number;
  /** Whether the installed bundle's entry (main.js and the chunks it imports) loads `node:module`. */
  entryLoadsNodeModule: boolean;
}

/** One-step probe medians. */
export interface ProbeRow {
  mode: string;
  label: string;
  n: number;
  wallMs: number;
  cpuMs: number;
}

/** ADDs started at once: the load point of those that succeeded, every outcome's code, the slowest call of all. */
export type Burst = LoadPoint & {
  code11: number;
  codes: Record<string, number>;
  /** The slowest call, failed ones included (absent in older reports). */
  slowestMs?: number;
};

/** The node agent: latency, CPU, connections, load, burst and memory. */
export interface AgentResults {
  /** The floor (the agent install's flags) and the thin client's ADD, CHECK, DEL, interleaved. */
  series: Series[];
  /** Mean CPU time (ms) of the agent process per call, by series key. */
  agentCpuMs: Record<string, number>;
  requests: RequestCount[];
  /** Connections and TLS handshakes milo-dev saw during the measured calls (after a warm-up). */
  steady: { calls: number; adds: number; connections: number; tlsHandshakes: number };
  /** The floor and ADD/DEL through the agent at the same concurrency. */
  throughput: { floor: LoadPoint; add: LoadPoint; del: LoadPoint };
  /** All ADDs started at once through the agent; `reference` without it (absent in older reports). */
  burst: Burst & { reference?: Burst };
  /** ADD/DEL pairs sent in-process over the socket; the agent's RSS along the way. */
  soak: {
    pairs: number;
    checkpoint: number;
    inFlight: number;
    failures: number;
    wallMs: number;
    rssStartKiB: number;
    rssCheckpointKiB: number;
    rssEndKiB: number;
    /** RSS after each tenth of the pairs past the checkpoint (absent in older reports). */
    rssTraceKiB?: number[];
  };
  /** Plugin calls that fell back to doing the work themselves (the install's counter). */
  fallbacks: number;
  /** ADDs in flight while the agent is SIGKILLed and restarted (absent in older reports). */
  restart?: {
    n: number;
    inFlight: number;
    killedAfter: number;
    /** From the kill to the restarted agent listening. */
    downMs: number;
    /** ADDs that failed (and were DELed as a runtime would). */
    failed: number;
    /** Addresses leased twice, claims no result holds, results without a claim: all 0. */
    ledger: { duplicates: number; leaked: number; missing: number };
  };
}

/** One `sweep()` run over the seeded cluster. */
export interface SweepRun {
  apply: boolean;
  wallMs: number;
  outcome: string;
  message: string;
  candidates: number;
  released: number;
  wouldRelease: number;
  kept: number;
  failed: number;
  /** Requests as the server saw them, and what the rule allows. */
  milo: { total: number; byMethod: Record<string, number>; client: number; expected: number };
  kube: { total: number; lists: number; gets: number; client: number; expected: number };
}

/** The cluster sweep against 10,000 claims and pods (fewer in --quick). */
export interface SweepResults {
  claims: number;
  pods: number;
  nodes: number;
  /** Pods removed before the run, so their claims are candidates. */
  orphans: number;
  pageLimits: { milo: number; kube: number };
  /** Milo answered each LIST whole: the allowance counts one LIST per observation. */
  miloListWhole?: boolean;
  intervalMs: number;
  /** Time to create the claims through the API. */
  seedMs: number;
  runs: SweepRun[];
  /** Absent in reports made before it was measured. */
  scale?: SweepScale;
}

/**
 * The installed `milo-ipam sweep`, a dry run, against a cluster of real size
 * whose claims Milo answers in one LIST answer (milo-dev `pagedLists: false`),
 * every pod live.
 */
export interface SweepScale {
  pods: number;
  claims: number;
  nodes: number;
  /** Bytes of Milo's one LIST answer. */
  answerBytes: number;
  /** Time to write the claims into milo-dev's database (milo-dev's own create path). */
  seedMs: number;
  /** The sweep's node config `timeouts`. */
  timeouts: { requestMs: number; totalMs: number };
  wallMs: number;
  /** Largest resident set of the sweep process (VmHWM), MiB. */
  peakRssMiB: number;
  outcome: string;
  exitCode: number;
  message: string;
  /** Claims the report counted, candidates, and claims it would release. */
  counted: number;
  candidates: number;
  wouldRelease: number;
  requests: { milo: number; kubernetes: number };
  /** /proc/loadavg when the run started and when it ended. */
  loadBefore: string;
  loadAfter: string;
}

/** One round of CNI calls started at once on every node of the fleet, and what Milo saw. */
export interface FleetRound {
  verb: "ADD" | "DEL";
  /** Calls started (nodes × pods a node). */
  calls: number;
  failures: number;
  /** Outcomes by CNI code ("0": success). */
  codes: Record<string, number>;
  /** From the first spawn to the last exit. */
  wallMs: number;
  /** Every call's spawn → exit time, failed ones included. */
  summary: Summary;
  /** Calls the installed plugin did itself because its agent did not answer. */
  fallbacks: number;
  /** milo-dev's counters over the round: every request, by method and by status. */
  requests: number;
  byMethod: Record<string, number>;
  byStatus: Record<string, number>;
  /** Creates answered 429 by the allocation ceiling, and claims created. */
  throttled: number;
  allocations: number;
  lists: number;
  rowsScanned: number;
}

/** What Milo saw while nothing happened on the nodes. */
export interface FleetIdle {
  seconds: number;
  /** Reconcile runs the agents logged in the stretch. */
  reconciles: number;
  requests: number;
  byMethod: Record<string, number>;
  lists: number;
  rowsScanned: number;
  /** Claims in the tenant during the stretch (what one LIST would scan). */
  claims: number;
}

/** Node agents against one milo-dev with a scaled-down allocation ceiling (issue 20). */
export interface FleetResults {
  nodes: number;
  podsPerNode: number;
  /** Pods a node starts in the storm: fewer than `podsPerNode` when those would not fit the deadline. */
  stormPodsPerNode: number;
  /** Claims per ADD (dual-stack: 2). */
  families: number;
  reconcileIntervalS: number;
  timeouts: { requestMs: number; totalMs: number };
  /** An ADD's requests end this long after its process starts (totalMs less the rollback reserve). */
  requestDeadlineMs: number;
  /** The 1-minute load average and CPU idle share when the section began. */
  loadBefore: string;
  idleBeforePct: number;
  /** The agents' start: each without a record lists Milo once, at a random moment of its first interval. */
  start: { waitedMs: number; requests: number; lists: number; rowsScanned: number };
  /** Milo's counters over the agents' restart before the storm (each with its record). */
  restart: { requests: number; lists: number; rowsScanned: number };
  /** The same ADDs against no ceiling: the fleet's own pace (their DELs are not counted). */
  pace: FleetRound;
  /** Creates per second the ceiling admitted in the storm: half the pace. */
  ceiling: number;
  storm: FleetRound;
  idle: FleetIdle;
  /** The storm's pods deleted, all at once. */
  drain: FleetRound;
}

/** Everything one `deno task bench` run measured. */
export interface BenchResults {
  date: string;
  quick: boolean;
  machine: Machine;
  deno: { version: string; v8: string; typescript: string };
  install: { kind: string; flags: string[]; agentFlags: string[]; bundleBytes: number };
  hostLocal: { path: string; version: string } | null;
  warmup: number;
  durationS: number;
  latency: LatencyResults;
  startup: StartupResults;
  phases: { tls: PhaseSample[]; http: PhaseSample[] };
  probes: ProbeRow[];
  concurrency: ConcurrencyPoint[];
  /** Concurrency points left out because the run's time budget ran out (quick runs). */
  skipped: string[];
  rss: RssRow[];
  agent: AgentResults;
  sweep: SweepResults;
  /** Absent in reports before issue 20's fleet section. */
  fleet?: FleetResults;
  /** How busy the machine was: other work skews every figure. */
  contention: {
    /** CPU idle share just before measuring (%). */
    idleBeforePct: number;
    /** Time spent waiting for that idle share (s). */
    waitedS: number;
    /** Machine-wide CPU busy share over the run (%). */
    busyPct: number;
    /** Share of that busy time used by the benchmark's own process tree (%). */
    ownPct: number;
  };
}

/** A run of the fleet section alone (`deno task bench --only fleet`). */
export type FleetRun =
  & Pick<BenchResults, "date" | "quick" | "machine" | "deno" | "durationS" | "contention">
  & { only: "fleet"; fleet: FleetResults };

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: number[], q: number): number {
  if (!sorted.length) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

/** p50/p90/p99/max/mean of a list of samples. */
export function summarize(values: number[]): Summary {
  const s = [...values].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / (s.length || 1);
  return {
    n: s.length,
    p50: percentile(s, 0.5),
    p90: percentile(s, 0.9),
    p99: percentile(s, 0.99),
    max: s.length ? s[s.length - 1] : NaN,
    mean,
  };
}

/** The median of a list (NaN when empty). */
export function median(values: number[]): number {
  return percentile([...values].sort((a, b) => a - b), 0.5);
}

/** The series `key` when it has samples. */
export function find(list: Series[], key: string): Series | undefined {
  const s = list.find((x) => x.key === key);
  return s && s.summary.n ? s : undefined;
}

/** The 1-minute load average of a /proc/loadavg line. */
export function load1(loadavg: string): number {
  return Number(loadavg.split(/\s+/)[0]);
}
