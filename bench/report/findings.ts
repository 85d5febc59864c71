/**
 * The budgets of issue 10 (the agent, the fallback), issue 9 (the sweep) and
 * issue 20 (the fleet, judged in fleet.ts), each judged against one run as a ratio to a baseline measured in the same
 * run; and whether the run was quiet enough to publish.
 */
import { type BenchResults, find, load1, type RequestCount, type Series } from "../model.ts";
import { fleetBudgets } from "./fleet.ts";
import { fmtMs } from "./format.ts";

/** One budget, judged. */
export interface Finding {
  group: "agent" | "fallback" | "sweep" | "fleet";
  what: string;
  limit: string;
  figure: string;
  /** undefined when the run did not measure it. */
  ok: boolean | undefined;
}

/** Everything the report concludes. */
export interface Findings {
  /** The 1-minute load average before the run exceeded the core count. */
  noisy: boolean;
  load1: number;
  budgets: Finding[];
}

/**
 * The slowest call of an ADD burst through the agent may take this share of
 * the slowest of the same burst without it (issue 10: 0.4 × 4.8 s, measured
 * on one machine before the agent; reports without a same-run burst use that).
 */
export const BURST_SHARE = 0.4;
const BURST_BEFORE_AGENT_MS = 4_800;

function ratioFinding(
  group: Finding["group"],
  what: string,
  x: number | undefined,
  base: number | undefined,
  max: number,
  unit = "ms",
): Finding {
  const q = x !== undefined && base !== undefined ? x / base : NaN;
  return {
    group,
    what,
    limit: `≤ ${max}×`,
    figure: `${q.toFixed(2)}× (${fmtMs(x)} / ${fmtMs(base)} ${unit})`,
    ok: Number.isFinite(q) ? q <= max : undefined,
  };
}

/** Requests per family a verb sends on the happy path: DEL reads each claim before its DELETE. */
const PER_FAMILY: Record<string, number> = { ADD: 1, CHECK: 1, DEL: 2 };

function perFamily(group: Finding["group"], c: RequestCount | undefined, verb: string): Finding {
  const per = c ? c.totals.map((t) => t / c.families) : [];
  const want = PER_FAMILY[verb] ?? 1;
  return {
    group,
    what: `${verb}: requests per family on the happy path (every call)`,
    limit: `= ${want}`,
    figure: c ? `${per.join(", ")} (${c.methods.join("; ")}; ${c.samples} calls)` : "–",
    ok: c ? per.length === 1 && per[0] === want : undefined,
  };
}

function latencyBudgets(series: Series[], group: Finding["group"], label: string): Finding[] {
  const floor = find(series, "floor")?.summary;
  const out: Finding[] = [];
  for (const verb of ["ADD", "CHECK", "DEL"]) {
    const s = find(series, verb.toLowerCase())?.summary;
    out.push(ratioFinding(group, `${verb} p50 ${label} / floor p50`, s?.p50, floor?.p50, 1.5));
    out.push(ratioFinding(group, `${verb} p99 ${label} / floor p99`, s?.p99, floor?.p99, 2));
  }
  return out;
}

function agentBudgets(r: BenchResults): Finding[] {
  const a = r.agent;
  const out = latencyBudgets(a.series, "agent", "via the agent");
  const add = find(a.series, "add"), floor = find(a.series, "floor");
  const cpu = add ? add.cpuMs + (a.agentCpuMs.add ?? NaN) : undefined;
  out.push(
    ratioFinding("agent", "CPU per ADD (client + agent) / floor CPU", cpu, floor?.cpuMs, 1.6),
  );
  const t = a.throughput;
  const q = t.add.perSecond / t.floor.perSecond;
  out.push({
    group: "agent",
    what: `ADD throughput at ${t.add.inFlight} in flight / floor's at ${t.floor.inFlight}`,
    limit: "≥ 0.6×",
    figure: `${q.toFixed(2)}× (${t.add.perSecond.toFixed(1)} / ${t.floor.perSecond.toFixed(1)} ` +
      `per s; ${t.add.failures} failed)`,
    ok: Number.isFinite(q) ? q >= 0.6 && t.add.failures === 0 : undefined,
  });
  const s = a.steady;
  out.push({
    group: "agent",
    what: "new TLS handshakes per ADD in steady state (milo-dev counters)",
    limit: "= 0",
    figure:
      `${(s.tlsHandshakes / Math.max(1, s.adds)).toFixed(2)} (${s.tlsHandshakes} handshakes, ` +
      `${s.connections} connections over ${s.calls} calls, ${s.adds} ADDs)`,
    ok: s.calls ? s.tlsHandshakes === 0 : undefined,
  });
  const b = a.burst, ref = b.reference;
  const refMs = ref?.slowestMs ?? BURST_BEFORE_AGENT_MS;
  const limitMs = BURST_SHARE * refMs;
  const slowest = b.slowestMs ?? b.summary.max;
  out.push({
    group: "agent",
    what: `burst of ${b.n} ADDs at once: no code 11, slowest ≤ ${BURST_SHARE} × ` +
      (ref ? "the same burst's slowest without the agent" : "4.8 s"),
    limit: `0, ≤ ${fmtMs(limitMs)} ms`,
    figure: `${b.code11} code 11, ${b.failures} failed, slowest ${fmtMs(slowest)} ms` +
      (ref ? ` (without the agent: ${fmtMs(refMs)} ms, ${ref.failures} failed)` : ""),
    ok: b.n ? b.code11 === 0 && b.failures === 0 && slowest <= limitMs : undefined,
  });
  const m = a.soak;
  const growth = m.rssEndKiB / m.rssCheckpointKiB - 1;
  out.push({
    group: "agent",
    what: `agent RSS after ${m.pairs} ADD/DEL pairs vs after the first ${m.checkpoint}`,
    limit: "within 10%",
    figure: `${(growth * 100).toFixed(1)}% (${(m.rssEndKiB / 1024).toFixed(1)} / ` +
      `${(m.rssCheckpointKiB / 1024).toFixed(1)} MiB; ${m.failures} failed calls)`,
    ok: Number.isFinite(growth) ? Math.abs(growth) <= 0.1 && m.failures === 0 : undefined,
  });
  for (const verb of ["ADD", "CHECK", "DEL"]) {
    out.push(perFamily("agent", a.requests.find((c) => c.verb === verb), verb));
  }
  const x = a.restart, l = x?.ledger;
  out.push({
    group: "agent",
    what: `no ADD lost or duplicated across an agent SIGKILL + restart at ${x?.inFlight ?? "?"} ` +
      "in flight",
    limit: "ledger 0 / 0 / 0",
    figure: l
      ? `${l.duplicates} / ${l.leaked} / ${l.missing} (${x.failed} failed)`
      : "not measured",
    ok: l ? l.duplicates === 0 && l.leaked === 0 && l.missing === 0 : undefined,
  });
  return out;
}

function fallbackBudgets(r: BenchResults): Finding[] {
  const s = r.latency.series;
  const p50 = (key: string) => find(s, key)?.summary.p50;
  return [
    ratioFinding(
      "fallback",
      "ADD p50, no agent / minimal TLS client p50",
      p50("add"),
      p50("tls-client"),
      1.15,
    ),
    ratioFinding("fallback", "VERSION p50 / floor p50", p50("version"), p50("floor"), 1.3),
    ...["ADD", "CHECK", "DEL"].map((v) =>
      perFamily("fallback", r.latency.requests.find((c) => c.verb === v), v)
    ),
  ];
}

/** Issue 29: a dry run over a real cluster's claims, answered in one LIST answer, fits 256 MiB. */
export const SWEEP_SCALE_RSS_MIB = 256;

function sweepBudgets(r: BenchResults): Finding[] {
  const sw = r.sweep, sc = sw.scale;
  const scale: Finding[] = !sc ? [] : [{
    group: "sweep",
    what: `dry run over ${sc.claims} claims in one Milo answer, every pod live: every claim ` +
      `counted, nothing released, peak RSS ≤ ${SWEEP_SCALE_RSS_MIB} MiB`,
    limit: `${sc.claims} counted, 0 candidates, ≤ ${SWEEP_SCALE_RSS_MIB} MiB`,
    figure: `${sc.counted} counted, ${sc.candidates} candidates, ${sc.peakRssMiB.toFixed(0)} MiB ` +
      `in ${(sc.wallMs / 1000).toFixed(1)} s (${sc.outcome})`,
    ok: sc.outcome === "done" && sc.counted === sc.claims && sc.candidates === 0 &&
      sc.peakRssMiB <= SWEEP_SCALE_RSS_MIB,
  }];
  return [
    ...scale,
    ...sw.runs.flatMap((run): Finding[] => {
      const mode = run.apply ? "apply" : "dry run";
      const gets = run.milo.byMethod.GET ?? 0;
      const getsAllowed = run.milo.expected - (run.apply ? run.candidates : 0);
      const acted = run.apply ? run.released : run.wouldRelease;
      return [{
        group: "sweep",
        what: `${mode}: each object fetched at most once per observation, plus the re-check`,
        limit: `Milo GET ≤ ${getsAllowed}, Kubernetes ≤ ${run.kube.expected}`,
        figure: `Milo ${gets} GET (${run.milo.total} in all), Kubernetes ${run.kube.total} ` +
          `(${run.kube.lists} list pages, ${run.kube.gets} pod GETs)`,
        ok: gets <= getsAllowed && run.milo.total <= run.milo.expected &&
          run.kube.total <= run.kube.expected,
      }, {
        group: "sweep",
        what: `${mode}: exactly the ${sw.orphans} orphaned claims ${
          run.apply ? "released" : "would go"
        }`,
        limit: `= ${sw.orphans}`,
        figure: `${acted} of ${run.candidates} candidates (${run.outcome}; ${run.failed} failed)`,
        ok: acted === sw.orphans && run.candidates === sw.orphans && run.outcome === "done",
      }];
    }),
  ];
}

/** Judges every budget of the run. */
export function findings(r: BenchResults): Findings {
  const l = load1(r.machine.loadBefore);
  return {
    noisy: !(l <= r.machine.nproc),
    load1: l,
    budgets: [
      ...agentBudgets(r),
      ...fallbackBudgets(r),
      ...sweepBudgets(r),
      ...(r.fleet ? fleetBudgets(r.fleet) : []),
    ],
  };
}
