/** Number and table formatting of the Markdown report. */
import type { Machine, Series } from "../model.ts";

/** Milliseconds: whole above 100, one decimal below, "–" when unknown. */
export function fmtMs(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return "–";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1);
}

/** KiB as MiB with one decimal. */
export function fmtMiB(kib: number): string {
  return Number.isFinite(kib) ? (kib / 1024).toFixed(1) : "–";
}

/** A Markdown table; the first column left-aligned, the rest right-aligned. */
export function table(head: string[], rows: (string | number)[][]): string {
  const align = head.map((_, i) => (i === 0 ? ":--" : "--:"));
  return [head, align, ...rows].map((r) => `| ${r.join(" | ")} |`).join("\n");
}

/** The verdict cell of a budget. */
export function verdict(ok: boolean | undefined): string {
  return ok === undefined ? "n/a" : ok ? "**pass**" : "**fail**";
}

/** The latency table's header. */
export const SERIES_HEAD = [
  "series",
  "n",
  "p50",
  "p90",
  "p99",
  "max",
  "mean",
  "CPU/call",
  "failed",
];

/** One row per series, in {@link SERIES_HEAD}'s columns. */
export function seriesRows(list: Series[]): (string | number)[][] {
  return list.map((s) => [
    s.label,
    s.summary.n,
    fmtMs(s.summary.p50),
    fmtMs(s.summary.p90),
    fmtMs(s.summary.p99),
    fmtMs(s.summary.max),
    fmtMs(s.summary.mean),
    fmtMs(s.cpuMs),
    s.failures,
  ]);
}

/** The machine table's rows from CPU to load average, then `contention` as its own row. */
export function machineRows(m: Machine, contention: string): string[][] {
  return [
    ["CPU", `${m.cpu}, ${m.nproc} cores (nproc)`],
    ["memory", m.memory],
    ["kernel", m.kernel],
    ["OS", m.os],
    ["load average before / after", `${m.loadBefore} / ${m.loadAfter}`],
    ["CPU contention", contention],
  ];
}

/** A ratio with two decimals, "–" when unknown. */
export function fmtRatio(x: number): string {
  return Number.isFinite(x) ? x.toFixed(2) : "–";
}

/** Milliseconds as seconds: two decimals below 10 s, one above. */
export function fmtSeconds(ms: number): string {
  return (ms / 1000).toFixed(ms < 10_000 ? 2 : 1);
}

/** Large counts with thousands separators; small ones with up to two decimals. */
export function fmtCount(x: number): string {
  if (!Number.isFinite(x)) return "–";
  if (x >= 100) return Math.round(x).toLocaleString("en-US");
  return x >= 10 ? x.toFixed(1) : x.toFixed(2);
}
