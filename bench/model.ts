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

/** One point of the concurrency sweep. */
export interface SweepPoint {
  clusters: number;
  inFlight: number;
  verb: "ADD" | "DEL";
  n: number;
  failures: number;
  wallMs: number;
  perSecond: number;
  summary: Summary;
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

/** Everything one `deno task bench` run measured. */
export interface BenchResults {
  date: string;
  quick: boolean;
  machine: {
    nproc: number;
    memory: string;
    kernel: string;
    cpu: string;
    os: string;
    loadBefore: string;
    loadAfter: string;
  };
  deno: { version: string; v8: string; typescript: string };
  install: {
    kind: string;
    flags: string[];
    bundleBytes: number;
    /** Size of the same bundle unminified, and the part of it that is npm:zod. */
    plainBytes: number;
    zodBytes: number;
  };
  /** One-step probes in fresh processes (medians). */
  probes: { mode: string; label: string; n: number; wallMs: number; cpuMs: number }[];
  hostLocal: { path: string; version: string } | null;
  warmup: number;
  durationS: number;
  latency: Series[];
  startup: Series[];
  requests: RequestCount[];
  phases: { tls: PhaseSample[]; http: PhaseSample[] };
  sweep: SweepPoint[];
  /** Sweep points left out because the run's time budget ran out (quick runs). */
  skipped: string[];
  rss: RssRow[];
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
