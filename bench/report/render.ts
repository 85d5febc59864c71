/** Renders a run's results and findings as the Markdown report `bench/results/<date>.md`. */
import { type BenchResults, find, type RequestCount, type Summary } from "../model.ts";
import { type Findings, findings } from "./findings.ts";
import { fmtMiB, fmtMs, machineRows, SERIES_HEAD, seriesRows, table, verdict } from "./format.ts";
import { notes, RECORDED_EXPERIMENTS } from "./notes.ts";
import { agentSection, sweepSection } from "./render_agent.ts";
import { renderFleet } from "./render_fleet.ts";
import { phaseSection } from "./render_phases.ts";

function header(r: BenchResults, f: Findings, svgName: string): string[] {
  const title = `# milo-ipam benchmark, ${r.date}${
    r.quick ? " (quick smoke run: too few samples to judge)" : ""
  }`;
  const noisy = f.noisy
    ? [
      `> **Noisy run, not publishable**: the 1-minute load average before the run was ` +
      `${f.load1} on ${r.machine.nproc} cores. The figures below are inflated by other work.`,
      "",
    ]
    : [];
  const a = r.agent, s = r.sweep;
  const sizes = r.quick
    ? [
      `Quick sizes: ${a.series[0]?.summary.n ?? 0} rounds per latency loop, throughput ` +
      `${a.throughput.add.n} at ${a.throughput.add.inFlight} in flight, a burst of ${a.burst.n}, ` +
      `${a.soak.pairs} soak pairs (RSS base after ${a.soak.checkpoint}), a sweep of ${s.claims} ` +
      `claims; the full run uses 200 rounds, 32 in flight, 64, 10,000 (1,000) and 10,000.`,
      "",
    ]
    : [];
  return [title, "", ...noisy, ...sizes, `![latency percentiles and throughput](${svgName})`, ""];
}

function machineSection(r: BenchResults): string {
  const m = r.machine, c = r.contention;
  return table(["", ""], [
    ...machineRows(
      m,
      `${c.idleBeforePct.toFixed(0)}% idle at the start (after waiting ${c.waitedS.toFixed(0)} ` +
        `s); ${c.busyPct.toFixed(0)}% busy during the run, ${c.ownPct.toFixed(0)}% of that the ` +
        `benchmark's own processes`,
    ),
    ["Deno", `${r.deno.version} (V8 ${r.deno.v8}, TypeScript ${r.deno.typescript})`],
    [
      "install",
      `${r.install.kind}; code-split bundle ${(r.install.bundleBytes / 1024).toFixed(0)} KiB`,
    ],
    ["host-local", r.hostLocal ? `${r.hostLocal.path} (${r.hostLocal.version})` : "not installed"],
    ["run", `${r.durationS.toFixed(0)} s, \`deno task bench${r.quick ? " --quick" : ""}\``],
  ]);
}

const METHOD = [
  "- Every sample is one process, timed from spawn to exit by the parent (stdin written,",
  "  stdout/stderr read to the end), as `testing/plugin.ts` runs the plugin; series compared",
  "  with each other alternate in one loop so that machine noise hits them alike.",
  "- Order: the two latency loops (one call in flight, without and then with the agent) run",
  "  first, each before any load: load leaves the machine slower for a while, and a call that",
  "  waits on the agent and milo-dev more than the floor. The agent's own load runs follow its",
  "  loop; start-up, anatomy, probes, the concurrency sweep, RSS and the sweep come after, then",
  "  the fleet (its own milo-dev and installs, after the rest is torn down).",
  "- The burst: all its ADDs started at once by the install without an agent (each call does",
  "  the work itself, the design before the agent), then the same through the agent; the",
  "  budget compares their slowest calls, failed ones included.",
  "- The plugin is installed by `scripts/install.ts` four times into temp dirs: two clusters",
  "  and the agent's install on TLS milo-dev (a throw-away CA in `caFile`), one on a plain-HTTP",
  "  twin. Every ADD is dual-stack (two claims in parallel). Production timeouts (2 s per",
  "  request, 10 s total).",
  "- The floor is the launcher's own shape (`#!/bin/sh` + `exec deno run` with the install's",
  "  flags) running an empty file; the agent's floor uses the agent install's flags. The",
  "  minimal TLS client is a script in the same shape with the same flags: read the CA and the",
  "  token, POST two claims in parallel on one new client.",
  "- Requests: milo-dev's admin `/stats` is reset before and read after every single plugin",
  "  call of the latency loops; with the agent also its `connections` and `tlsHandshakes`.",
  "- Agent CPU: `/proc/PID/stat` of the agent before and after each call; client CPU from the",
  "  parent's reaped-children times.",
];

function budgetSection(f: Findings): string {
  return table(
    ["", "budget", "limit", "this run", "verdict"],
    f.budgets.map((b) => [b.group, b.what, b.limit, b.figure, verdict(b.ok)]),
  );
}

function latencySection(r: BenchResults): string {
  const s = r.latency.series;
  const ratio = (x: string, y: string, q: keyof Summary) => {
    const a = find(s, x)?.summary, b = find(s, y)?.summary;
    return a && b ? `${(a[q] / b[q]).toFixed(1)}×` : "–";
  };
  const qs: (keyof Summary)[] = ["p50", "p90", "p99"];
  return [
    table(SERIES_HEAD, seriesRows(s)),
    "",
    "milo-ipam (no agent) against host-local (same rounds):",
    "",
    table(["ratio", "p50", "p90", "p99"], [
      ["ADD milo-ipam / host-local", ...qs.map((q) => ratio("add", "hl-add", q))],
      ["DEL milo-ipam / host-local", ...qs.map((q) => ratio("del", "hl-del", q))],
    ]),
  ].join("\n");
}

function requestsSection(r: BenchResults): string {
  const rows = (path: string, list: RequestCount[]) =>
    list.map((c) => [
      path,
      c.verb,
      c.samples,
      c.families,
      c.totals.join(", "),
      c.methods.join("; "),
    ]);
  return table(["path", "verb", "calls", "families", "requests per call", "by method"], [
    ...rows("agent", r.agent.requests),
    ...rows("no agent", r.latency.requests),
  ]);
}

function concurrencySection(r: BenchResults): string {
  const rows = r.concurrency.map((p) => [
    p.clusters === 1 ? "one" : "two",
    p.inFlight,
    p.verb,
    p.n,
    p.failures,
    (p.wallMs / 1000).toFixed(1),
    p.perSecond.toFixed(1),
    fmtMs(p.summary.p50),
    fmtMs(p.summary.p99),
    fmtMs(p.summary.max),
    fmtMs(p.clientCpuMs),
    fmtMs(p.serverCpuMs),
  ]);
  const head = ["clusters", "in flight", "verb", "n", "failed", "wall s", "per s", "p50", "p99"];
  return [
    table([...head, "max", "plugin CPU/call", "milo-dev CPU/call"], rows),
    ...(r.skipped.length ? ["", `Skipped for the time budget: ${r.skipped.join(", ")}.`] : []),
  ].join("\n");
}

function rssSection(r: BenchResults): string {
  if (!r.rss.length) return "_not measured: install Debian's `time` package_";
  return table(
    ["process", "samples", "median MiB", "max MiB"],
    r.rss.map((x) => [x.label, x.samples, fmtMiB(x.medianKiB), fmtMiB(x.maxKiB)]),
  );
}

/** The whole report. */
export function renderReport(r: BenchResults, svgName: string): string {
  const f = findings(r);
  const section = (title: string, ...body: string[]) => [`## ${title}`, "", ...body, ""];
  return [
    ...header(r, f, svgName),
    ...section("Machine", machineSection(r)),
    ...section(
      "Method",
      ...METHOD,
      "",
      "Permission flags of the install:",
      "",
      "```",
      ...r.install.flags,
      "```",
    ),
    ...section("Budgets", "Ratios to baselines measured in this run.", "", budgetSection(f)),
    ...section("With the agent", agentSection(r)),
    ...section("Without the agent, one call in flight (ms)", latencySection(r)),
    ...section("Start-up (ms)", table(SERIES_HEAD, seriesRows(r.startup.series))),
    ...section("Where one ADD spends its time without the agent", phaseSection(r)),
    ...section(
      "One-step probes",
      "Each probe is a fresh `deno run` timing one first-time step inside itself",
      "(`bench/probe.ts`; medians; CPU = user + system of all threads during the step).",
      "",
      table(
        ["step", "n", "wall ms", "CPU ms"],
        r.probes.map((p) => [p.label, p.n, fmtMs(p.wallMs), fmtMs(p.cpuMs)]),
      ),
    ),
    ...section("Requests per invocation, counted at the server", requestsSection(r)),
    ...section("Concurrency without the agent (processes; ms)", concurrencySection(r)),
    ...section("Peak RSS of one process", rssSection(r)),
    ...section("Cluster sweep", sweepSection(r)),
    ...(r.fleet ? section("Fleet against one Milo", renderFleet(r.fleet, r.machine)) : []),
    ...section("What the figures say", notes(r, f)),
    ...section("Experiments settled earlier (not run)", RECORDED_EXPERIMENTS),
  ].join("\n");
}
