/** The report's "where one ADD spends its time" section (no agent: the work in the process). */
import { type BenchResults, find, median } from "../model.ts";
import type { PhaseSample } from "../phases.ts";
import { fmtMs, table } from "./format.ts";

const PHASES: [keyof PhaseSample, string][] = [
  ["bundleLoad", "module load: `import()` of the bundle's main.js and every chunk"],
  ["stdinRead", "stdin read"],
  ["nodeConfigRead", "node config file read"],
  ["configParse", "config parse and validation (zod, first call)"],
  ["envAndIdentity", "CNI env parse and attachment identity"],
  ["tokenRead", "token file read"],
  ["tlsClientCreate", "caFile read + `Deno.createHttpClient` (TLS client creation)"],
  ["claimBodies", "claim bodies: SHA-256 names, labels (until the first request leaves)"],
  ["clientNetwork", "requests, client side: connect, TLS handshake, HTTP, loopback"],
  ["miloHandling", "requests, Milo's own handling (Server-Timing, slower of the pair)"],
  ["parseAndEncode", "response validation (zod) and result encoding"],
  ["resultWrite", "result JSON write"],
  ["logWrite", "log line append"],
];

const EXTRA: [keyof PhaseSample, string][] = [
  ["runtimeStart", "runtime start until the first line of user code (`performance.now()` there)"],
  ["libLoad", "`import()` of the unbundled lib/ + npm:zod instead of the bundle"],
  ["warmRequest", "a second request on the open connection (client wall)"],
  ["warmRequestMilo", "… of which Milo's handling"],
  ["bundleLoadCpu", "CPU time of the bundle's `import()`"],
  ["handlerCpu", "CPU time of the ADD handler (bodies, both requests, parse, encode)"],
  ["totalCpu", "CPU time of the whole harness process until the log line"],
  ["requests", "requests sent by the ADD"],
];

/** The median of one phase over the samples. */
export function phaseMedian(xs: PhaseSample[], k: keyof PhaseSample): number {
  return median(xs.map((x) => x[k]).filter(Number.isFinite));
}

/** The phase table and the extra figures of the same processes. */
export function phaseSection(r: BenchResults): string {
  const { tls, http } = r.phases;
  if (!tls.length) return "_not measured_";
  const s = r.latency.series;
  const floor = find(s, "floor")?.summary.p50;
  const add = find(s, "add")?.summary.p50, addHttp = find(s, "add-http")?.summary.p50;
  const rows: (string | number)[][] = [[
    "process exec, Deno runtime start and exit (bare `deno run` floor, p50)",
    fmtMs(floor),
    fmtMs(floor),
    "floor series",
  ]];
  let sumT = floor ?? 0, sumH = floor ?? 0;
  for (const [k, label] of PHASES) {
    const t = phaseMedian(tls, k), h = phaseMedian(http, k);
    sumT += t;
    sumH += h;
    rows.push([label, fmtMs(t), fmtMs(h), "phases.ts"]);
  }
  rows.push(
    ["**sum of the parts**", `**${fmtMs(sumT)}**`, `**${fmtMs(sumH)}**`, ""],
    ["measured ADD p50 (whole process, no agent)", fmtMs(add), fmtMs(addHttp), "latency series"],
    [
      "unaccounted (scheduling, event-loop turns between phases, exit)",
      fmtMs((add ?? NaN) - sumT),
      fmtMs((addHttp ?? NaN) - sumH),
      "difference",
    ],
  );
  const extra = EXTRA.map(([k, label]) => [
    label,
    fmtMs(phaseMedian(tls, k)),
    fmtMs(phaseMedian(http, k)),
  ]);
  return [
    `Medians of ${tls.length} fresh processes each (\`bench/phases.ts\`: the steps of the`,
    "plugin's own path through the same lib/ modules, each timed once, cold, in a new process;",
    "the two families' requests run in parallel as in the plugin). Milliseconds.",
    "",
    table(["phase of one dual-stack ADD", "TLS", "HTTP", "source"], rows),
    "",
    table(["in the same fresh process", "TLS", "HTTP"], extra),
  ].join("\n");
}
