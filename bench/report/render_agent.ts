/** The report's agent and cluster-sweep sections. */
import {
  type AgentResults,
  type BenchResults,
  find,
  type LoadPoint,
  type SweepScale,
} from "../model.ts";
import { fmtMiB, fmtMs, SERIES_HEAD, seriesRows, table } from "./format.ts";

function loadRow(what: string, p: LoadPoint): (string | number)[] {
  return [
    what,
    p.n,
    p.inFlight,
    p.failures,
    (p.wallMs / 1000).toFixed(2),
    p.perSecond.toFixed(1),
    fmtMs(p.summary.p50),
    fmtMs(p.summary.p99),
    fmtMs(p.summary.max),
  ];
}

/** The agent: latency and CPU, throughput, burst, memory. */
export function agentSection(r: BenchResults): string {
  const a = r.agent;
  const cpuRows = ["add", "check", "del"].map((k) => {
    const s = find(a.series, k);
    const agent = a.agentCpuMs[k];
    return [s?.label ?? k, fmtMs(s?.cpuMs), fmtMs(agent), fmtMs((s?.cpuMs ?? NaN) + agent)];
  });
  const floor = find(a.series, "floor");
  const t = a.throughput, b = a.burst, m = a.soak;
  const outcomes = (codes: Record<string, number>) =>
    Object.entries(codes).map(([c, n]) => `${n}× ${c === "0" ? "ok" : `code ${c}`}`).join(", ");
  return [
    "One call in flight, the thin client's process (spawn to exit) beside the bare floor with",
    "the agent install's flags, alternating (ms):",
    "",
    table(SERIES_HEAD, seriesRows(a.series)),
    "",
    "CPU per call (ms): the client process from the parent's reaped-children times, the agent's",
    "share from `/proc/PID/stat` before and after each call (10 ms ticks, averaged):",
    "",
    table(["call", "client", "agent", "total"], [
      ...cpuRows,
      [floor?.label ?? "floor", fmtMs(floor?.cpuMs), "–", fmtMs(floor?.cpuMs)],
    ]),
    "",
    `Load (each call a process; floor run the same way):`,
    "",
    table(["run", "n", "in flight", "failed", "wall s", "per s", "p50", "p99", "max"], [
      loadRow("bare floor", t.floor),
      loadRow("ADD via the agent", t.add),
      loadRow("DEL via the agent", t.del),
      ...(b.reference ? [loadRow(`burst without the agent: ${b.n} at once`, b.reference)] : []),
      loadRow(`burst: ${b.n} ADDs at once`, b),
    ]),
    "",
    `Burst outcomes: ${outcomes(b.codes)}` +
    (b.reference ? `; without the agent: ${outcomes(b.reference.codes)}.` : "."),
    "",
    `Memory: ${m.pairs} ADD/DEL pairs sent in-process over the socket (${m.inFlight} in flight, ` +
    `${(m.wallMs / 1000).toFixed(0)} s, ${m.failures} failed calls): agent RSS ` +
    `${fmtMiB(m.rssStartKiB)} MiB after the warm-up, ${fmtMiB(m.rssCheckpointKiB)} MiB after ` +
    `${m.checkpoint} pairs, ${fmtMiB(m.rssEndKiB)} MiB after ${m.pairs}` +
    (m.rssTraceKiB?.length
      ? `; after each tenth past the checkpoint: ${m.rssTraceKiB.map(fmtMiB).join(", ")} MiB.`
      : "."),
    "",
    `Connections at milo-dev during the ${a.steady.calls} measured calls (after ` +
    `${r.warmup} warm-up rounds and 15 in-process pairs): ${a.steady.connections} new ` +
    `connections, ${a.steady.tlsHandshakes} TLS handshakes. Fallbacks counted by the install: ` +
    `${a.fallbacks}.`,
    "",
    restartLine(a.restart),
  ].join("\n");
}

function restartLine(x: AgentResults["restart"]): string {
  if (!x) return "Agent restart under load: not measured in this run.";
  const l = x.ledger;
  return `Agent restart: ${x.n} ADDs at ${x.inFlight} in flight, the agent SIGKILLed after ` +
    `${x.killedAfter} and listening again ${fmtMs(x.downMs)} ms later; ${x.failed} ADDs failed ` +
    `(DELed as a runtime would). Ledger of their claims: ${l.duplicates} addresses leased twice, ` +
    `${l.leaked} claims no result holds, ${l.missing} results without a claim.`;
}

/** The cluster sweep: seeding, then one row per run. */
export function sweepSection(r: BenchResults): string {
  const s = r.sweep;
  const rows = s.runs.map((x) => [
    x.apply ? "apply" : "dry run",
    (x.wallMs / 1000).toFixed(2),
    x.candidates,
    x.apply ? x.released : x.wouldRelease,
    x.kept + x.failed,
    `${x.milo.total} (${
      Object.entries(x.milo.byMethod).sort().map(([k, v]) => `${k} ${v}`).join(", ")
    })`,
    x.milo.expected,
    `${x.kube.total} (${x.kube.lists} pages, ${x.kube.gets} GET)`,
    x.kube.expected,
  ]);
  return [
    `${s.claims} claims of one cluster in milo-dev (created through the API in ` +
    `${(s.seedMs / 1000).toFixed(1)} s, 16 at once), ${s.pods} pods on ${s.nodes} nodes in the`,
    `Kubernetes stand-in (\`testing/kube_dev.ts\`, TLS), ${s.orphans} of them recreated under their`,
    `names with new UIDs, so the old claims are candidates. \`sweep()\` of lib/sweep.ts in-process, \`--grace 0\`,`,
    `\`--interval ${s.intervalMs}ms\`, \`--max-release ${s.claims}\`;`,
    s.miloListWhole
      ? `Milo answers each LIST whole, Kubernetes in pages of ${s.pageLimits.kube}. Allowed: two observations, ` +
        "each one Milo LIST and ceil(n / limit) pages of each Kubernetes list,"
      : `pages of ${s.pageLimits.milo} (Milo) and ${s.pageLimits.kube} (Kubernetes). Allowed: two ` +
        "observations of ceil(n / limit) pages per list,",
    "then per candidate one GET of its pod and one of its claim (and the DELETE when applying).",
    "",
    table(
      [
        "run",
        "wall s",
        "candidates",
        "released / would",
        "kept or failed",
        "Milo requests",
        "allowed",
        "Kubernetes requests",
        "allowed",
      ],
      rows,
    ),
    ...(s.scale ? ["", scaleText(s.scale)] : []),
  ].join("\n");
}

/** The sweep at a real cluster's size: the installed binary, one Milo answer. */
function scaleText(c: SweepScale): string {
  const mb = (c.answerBytes / 1e6).toFixed(0);
  return [
    `**At a real cluster's size.** ${c.pods} dual-stack pods on ${c.nodes} nodes: ${c.claims} ` +
    `claims as the plugin writes them (written into milo-dev's database through its own create ` +
    `path in ${(c.seedMs / 1000).toFixed(0)} s), answered by milo-dev in one LIST answer of ` +
    `${mb} MB (\`pagedLists: false\`, as Milo's store), every pod live in the stand-in. The ` +
    `installed \`milo-ipam sweep --output json\` (a dry run; node config requestMs ` +
    `${c.timeouts.requestMs}, totalMs ${c.timeouts.totalMs}):`,
    "",
    table(["claims counted", "candidates", "would release", "wall s", "peak RSS MiB", "load"], [[
      c.counted,
      c.candidates,
      c.wouldRelease,
      (c.wallMs / 1000).toFixed(1),
      c.peakRssMiB.toFixed(0),
      `${c.loadBefore.split(" ")[0]} → ${c.loadAfter.split(" ")[0]}`,
    ]]),
    "",
    `${c.message} (exit ${c.exitCode}); ${c.requests.milo} Milo and ${c.requests.kubernetes} ` +
    "Kubernetes requests.",
  ].join("\n");
}
