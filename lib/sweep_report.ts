/**
 * The report of one `milo-ipam sweep` run: its stable JSON shape (documented
 * in docs/architecture.md), the exit codes, and the text form for a human.
 */
import { quotaText, type QuotaUsage } from "./milo_quota.ts";
import { NODE_MONITOR_GRACE_MS, TERMINATION_GRACE_MS } from "./sweep_rules.ts";
import { printable, printableLines } from "./printable.ts";

/** Exit codes of `milo-ipam sweep`. */
export const EXIT = { done: 0, error: 1, brake: 2, partial: 3 } as const;

/**
 * How many pods a run may release the claims of: a count, or a percentage of
 * the pods with claims in the cluster (with a floor: lib/sweep.ts).
 */
export type MaxRelease = { count: number } | { percent: number };

/** Why a claim is a candidate. */
export type Reason = "pod-gone" | "node-gone" | "pod-and-node-gone";
/** What the run did with a candidate (`would-release`: a dry run's release). */
export type Action = "released" | "would-release" | "kept" | "failed";

/** One candidate of the report. */
export interface SweepRow {
  claim: string;
  uid: string | null;
  address: string | null;
  /** `namespace/name` recorded on the claim. */
  pod: string | null;
  podUid: string;
  node: string | null;
  reason: Reason;
  /** Age of the claim at the last observation. */
  ageMs: number | null;
  action: Action;
  why: string;
}

/** One observation's counts. */
export interface ObservationSummary {
  at: string;
  claims: number;
  pods: number;
  nodes: number;
  candidates: number;
}

/** The report of one run: printed as JSON with `--output json` (its fields: docs/architecture.md's SweepReport). */
export interface SweepReport {
  kind: "SweepReport";
  version: 1;
  cluster: string;
  apply: boolean;
  outcome: "done" | "brake" | "partial" | "error";
  exitCode: number;
  message: string;
  startedAt: string;
  durationMs: number;
  settings: {
    graceMs: number;
    intervalMs: number;
    /** The termination grace a pod gone from a node shown Ready is given (its own when longer). */
    terminationGraceMs: number;
    /** How long a partitioned node still shows Ready (the node controller's grace and period). */
    nodeMonitorGraceMs: number;
    maxRelease: string;
    maxReleaseLimit: number | null;
  };
  observations: ObservationSummary[];
  totals: {
    claims: number;
    foreign: number;
    withoutPodUid: number;
    /** Pods with claims in the cluster: what a `P%` `--max-release` is a share of. */
    pods: number;
    /** Pods whose claims passed every rule before the re-check: what `--max-release` bounds. */
    podsToRelease: number;
    candidates: number;
    released: number;
    wouldRelease: number;
    kept: number;
    failed: number;
  };
  rows: SweepRow[];
  /** The project's IPClaim quota as Milo counts it after the run, or why it is not known. */
  quota?: QuotaUsage;
  requests: { milo: number; kubernetes: number };
  error: { message: string; details: string } | null;
}

/** Text of a {@link MaxRelease}: `N` or `P%`. */
export function formatMaxRelease(m: MaxRelease): string {
  return "count" in m ? String(m.count) : `${m.percent}%`;
}

/** What a report states about the run before anything is observed. */
export interface ReportSettings {
  cluster: string;
  apply: boolean;
  graceMs: number;
  intervalMs: number;
  terminationGraceMs?: number;
  nodeMonitorGraceMs?: number;
  maxRelease: MaxRelease;
}

/** A report with nothing observed yet. */
export function emptyReport(
  o: ReportSettings,
  started: number,
): SweepReport {
  return {
    kind: "SweepReport",
    version: 1,
    cluster: o.cluster,
    apply: o.apply,
    outcome: "done",
    exitCode: EXIT.done,
    message: "",
    startedAt: new Date(started).toISOString(),
    durationMs: 0,
    settings: {
      graceMs: o.graceMs,
      intervalMs: o.intervalMs,
      terminationGraceMs: o.terminationGraceMs ?? TERMINATION_GRACE_MS,
      nodeMonitorGraceMs: o.nodeMonitorGraceMs ?? NODE_MONITOR_GRACE_MS,
      maxRelease: formatMaxRelease(o.maxRelease),
      maxReleaseLimit: null,
    },
    observations: [],
    totals: {
      claims: 0,
      foreign: 0,
      withoutPodUid: 0,
      pods: 0,
      podsToRelease: 0,
      candidates: 0,
      released: 0,
      wouldRelease: 0,
      kept: 0,
      failed: 0,
    },
    rows: [],
    requests: { milo: 0, kubernetes: 0 },
    error: null,
  };
}

/** A duration in the largest units that keep it exact: `10m`, `1h30m`, `500ms`. */
export function formatDuration(ms: number): string {
  if (ms < 1_000 || ms % 1_000) return `${ms}ms`;
  let s = ms / 1_000, out = "";
  for (const [unit, size] of [["h", 3_600], ["m", 60]] as const) {
    if (s >= size) out += `${Math.floor(s / size)}${unit}`;
    s %= size;
  }
  return out + (s || !out ? `${s}s` : "");
}

/** The report for a human: settings, observations, one row per candidate, totals, outcome. */
export function renderText(r: SweepReport): string {
  const s = r.settings;
  const lines = [
    `milo-ipam sweep: cluster ${r.cluster || "(unknown)"}, ${
      r.apply ? "apply" : "dry run (nothing is released; pass --apply)"
    }`,
    `grace ${formatDuration(s.graceMs)}, interval ${formatDuration(s.intervalMs)}, ` +
    `termination grace ${formatDuration(s.terminationGraceMs)}, node monitor grace ${
      formatDuration(s.nodeMonitorGraceMs)
    }, ` +
    `max-release ${s.maxRelease}${s.maxReleaseLimit === null ? "" : ` (${s.maxReleaseLimit})`}`,
    ...r.observations.map((o, i) =>
      `observation ${i + 1} at ${o.at}: ${o.claims} claims, ${o.pods} pods, ${o.nodes} nodes, ` +
      `${o.candidates} candidates`
    ),
  ];
  if (r.rows.length) {
    const head = ["CLAIM", "ADDRESS", "POD", "NODE", "REASON", "AGE", "ACTION", "WHY"];
    const cells = r.rows.map((w) =>
      [
        w.claim,
        w.address ?? "-",
        w.pod ?? "-",
        w.node ?? "-",
        w.reason,
        w.ageMs === null ? "-" : formatDuration(Math.max(0, Math.floor(w.ageMs / 1000) * 1000)),
        w.action,
        w.why,
      ].map(printable)
    );
    const width = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
    for (const c of [head, ...cells]) {
      lines.push(c.map((v, i) => i === c.length - 1 ? v : v.padEnd(width[i])).join("  "));
    }
  }
  const t = r.totals;
  lines.push(
    `totals: ${t.claims} claims (${t.withoutPodUid} without a pod UID, ${t.foreign} of another ` +
      `cluster) of ${t.pods} pods, ${t.candidates} candidates (${t.podsToRelease} pods to ` +
      `release): ${t.released} released, ${t.wouldRelease} would be released, ${t.kept} kept, ` +
      `${t.failed} failed`,
    ...(r.quota ? [quotaText(r.quota)] : []),
    `requests: Milo ${r.requests.milo}, Kubernetes ${r.requests.kubernetes}; ${r.durationMs} ms`,
    `${r.message} (exit ${r.exitCode})`,
  );
  if (r.error?.details) lines.push(`  ${r.error.details}`);
  return printableLines(lines);
}
