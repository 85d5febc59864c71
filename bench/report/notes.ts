/** The report's prose: what the figures of one run say, and the experiments settled earlier. */
import { type BenchResults, find } from "../model.ts";
import type { Findings } from "./findings.ts";
import { fmtMs } from "./format.ts";
import { phaseMedian } from "./render_phases.ts";

function agentNotes(r: BenchResults): string[] {
  const a = r.agent;
  const floor = find(a.series, "floor"), add = find(a.series, "add");
  if (!floor || !add) return [];
  const agentCpu = a.agentCpuMs.add ?? NaN;
  const nm = find(r.startup.series, "node-module"), sf = find(r.startup.series, "floor");
  const compat = nm && sf && r.startup.entryLoadsNodeModule
    ? [
      `- About ${fmtMs(nm.summary.p50 - sf.summary.p50)} ms of that gap is Node compatibility ` +
      `(\`node:module\`) loaded by the bundle's entry path, not the socket or the agent: the ` +
      `agent's own CPU per call is ${fmtMs(agentCpu)} ms.`,
    ]
    : [];
  return [
    `- With the agent an ADD is a thin client: ${fmtMs(add.summary.p50)} ms at p50 against the ` +
    `floor's ${fmtMs(floor.summary.p50)} ms (${fmtMs(add.summary.p50 - floor.summary.p50)} ms ` +
    `for the socket round trip, the agent's work and Milo's two requests on warm connections). ` +
    `CPU: ${fmtMs(add.cpuMs)} ms in the client process and ${fmtMs(agentCpu)} ms in the agent ` +
    `against ${fmtMs(floor.cpuMs)} ms for the floor.`,
    `- At ${a.throughput.add.inFlight} in flight the agent path runs ` +
    `${a.throughput.add.perSecond.toFixed(1)} ADD/s, the floor ` +
    `${a.throughput.floor.perSecond.toFixed(1)} processes/s: both are bounded by starting Deno ` +
    `processes on ${r.machine.nproc} cores.`,
    ...compat,
  ];
}

function fallbackNotes(r: BenchResults): string[] {
  const s = r.latency.series;
  const add = find(s, "add"), client = find(s, "tls-client"), floor = find(s, "floor");
  const http = find(s, "add-http");
  const probe = (m: string) => r.probes.find((p) => p.mode === m && p.n);
  const tlsOne = probe("fetch-tls-one"), connect = probe("connect-tls");
  const out: string[] = [];
  if (add && client && floor) {
    out.push(
      `- Without the agent the plugin does the work itself: ADD ${fmtMs(add.summary.p50)} ms ` +
        `against ${fmtMs(client.summary.p50)} ms for a minimal TLS client (read the CA, two ` +
        `POSTs) and ${fmtMs(floor.summary.p50)} ms for the floor.` +
        (http ? ` Over plain HTTP the same ADD takes ${fmtMs(http.summary.p50)} ms.` : ""),
    );
  }
  if (tlsOne && connect) {
    out.push(
      `- The first TLS connection of a process costs CPU before any byte is sent: a first ` +
        `fetch over TLS ${fmtMs(tlsOne.cpuMs)} ms of CPU, \`Deno.connectTls\` alone ` +
        `${
          fmtMs(connect.cpuMs)
        } ms. It is a one-time initialisation of the crypto backend: a resident process (the ` +
        `agent) pays it once; the exec'd plugin doing the work itself starts it on a worker ` +
        `thread before loading its handlers (lib/warm.ts), so it overlaps the wall time but ` +
        `still costs the CPU.`,
    );
  }
  const pm = (k: "bundleLoad" | "libLoad" | "configParse" | "claimBodies") =>
    fmtMs(phaseMedian(r.phases.tls, k));
  if (r.phases.tls.length) {
    out.push(
      `- In the process: bundle load ${pm("bundleLoad")} ms (unbundled lib/ + zod ` +
        `${pm("libLoad")} ms), config parse ${pm("configParse")} ms, claim bodies ` +
        `${pm("claimBodies")} ms.`,
    );
  }
  return out;
}

function startupNotes(r: BenchResults): string[] {
  const dv = find(r.startup.series, "deno-version"), direct = find(r.startup.series, "deno-direct");
  const sf = find(r.startup.series, "floor"), nm = find(r.startup.series, "node-module");
  const version = find(r.startup.series, "version");
  const zodPct = (r.startup.zodBytes / r.startup.plainBytes) * 100;
  const out: string[] = [];
  if (dv && direct && sf) {
    out.push(
      `- Start-up anatomy: exec of the deno binary with \`--version\` (no JS runtime) ` +
        `${fmtMs(dv.summary.p50)} ms; \`deno run\` of an empty file without flags or sh ` +
        `${fmtMs(direct.summary.p50)} ms; in the launcher's shape ${fmtMs(sf.summary.p50)} ms. ` +
        `V8 and the runtime's bootstrap are about ` +
        `${fmtMs(direct.summary.p50 - dv.summary.p50)} ms of it.`,
    );
  }
  if (sf && nm && version) {
    out.push(
      `- A script that only imports \`node:module\` takes ${fmtMs(nm.summary.p50)} ms against ` +
        `the floor's ${fmtMs(sf.summary.p50)} ms: loading Node compatibility costs ` +
        `${fmtMs(nm.summary.p50 - sf.summary.p50)} ms per process. VERSION takes ` +
        `${fmtMs(version.summary.p50)} ms; the installed bundle's entry path ` +
        (r.startup.entryLoadsNodeModule
          ? "reaches a chunk that imports `node:module` (esbuild's `createRequire` prelude), so " +
            "every exec'd call, the thin client's included, pays it."
          : "loads no `node:module` (no CommonJS package is bundled), so no exec'd call pays it."),
    );
  }
  if (Number.isFinite(zodPct)) {
    out.push(
      `- npm:zod is ${zodPct.toFixed(0)}% of the unminified single-file bundle ` +
        `(${(r.startup.zodBytes / 1024).toFixed(0)} of ` +
        `${(r.startup.plainBytes / 1024).toFixed(0)} KiB); the installed code-split bundle ` +
        `loads it only when the plugin does the work itself.`,
    );
  }
  return out;
}

function otherNotes(r: BenchResults): string[] {
  const out: string[] = [];
  const s = r.latency.series;
  const add = find(s, "add"), hl = find(s, "hl-add");
  const agentAdd = find(r.agent.series, "add");
  if (add && hl && agentAdd) {
    out.push(
      `- host-local (Go, no network) takes ${fmtMs(hl.summary.p50)} ms per ADD at p50: ` +
        `milo-ipam is ${(agentAdd.summary.p50 / hl.summary.p50).toFixed(1)}× that with the ` +
        `agent and ${(add.summary.p50 / hl.summary.p50).toFixed(1)}× without.`,
    );
  }
  const c64 = r.concurrency.find((p) => p.verb === "ADD" && p.inFlight === 64 && p.clusters === 1);
  if (c64?.failures) {
    out.push(
      `- Without the agent, ${c64.failures} of ${c64.n} ADDs at 64 in flight failed (code 11: ` +
        `the processes do not get the CPU to finish within the timeouts). Clean CNI errors.`,
    );
  }
  for (const run of r.sweep.runs) {
    out.push(
      `- Sweep ${run.apply ? "apply" : "dry run"} over ${r.sweep.claims} claims and ` +
        `${r.sweep.pods} pods: ${(run.wallMs / 1000).toFixed(2)} s including the ` +
        `${r.sweep.intervalMs} ms interval, ${run.milo.total} Milo and ${run.kube.total} ` +
        `Kubernetes requests.`,
    );
  }
  const sc = r.sweep.scale;
  if (sc) {
    out.push(
      `- Sweep dry run over ${sc.counted} claims in one Milo answer of ` +
        `${(sc.answerBytes / 1e6).toFixed(0)} MB and ${sc.pods} pods: ` +
        `${(sc.wallMs / 1000).toFixed(1)} s, peak RSS ${sc.peakRssMiB.toFixed(0)} MiB.`,
    );
  }
  return out;
}

/** What the figures say. */
export function notes(r: BenchResults, f: Findings): string {
  const failed = f.budgets.filter((b) => b.ok === false).map((b) => `${b.group}: ${b.what}`);
  const out = [failed.length ? `Budgets failed: ${failed.join("; ")}.` : "Every budget passes."];
  const foreign = 100 - r.contention.ownPct;
  if (foreign > 10) {
    out.push(
      `- Noise: other processes used about ${foreign.toFixed(0)}% of the CPU time spent during ` +
        `this run; every figure is inflated by that, the interleaved ratios less so.`,
    );
  }
  out.push(...agentNotes(r), ...fallbackNotes(r), ...startupNotes(r), ...otherNotes(r));
  return out.join("\n");
}

/** Experiments that left the main run, with the verdict they reached. */
export const RECORDED_EXPERIMENTS = [
  "- `--no-code-cache` on the launcher (V8 without its code cache): a start-up loop on a busy",
  "  machine showed VERSION 135 vs 149 ms, so it went in; the next full bench measured it",
  "  slower (start-up 1.71× vs 1.57× the bare floor, ADD p50 195 vs 176 ms, 5.6 vs 6.9 ADD/s at",
  "  32 in flight) and it was reverted. Verdict: not used.",
  "- `--v8-flags=--single-threaded`: VERSION p50 147 vs 149 ms as installed, CPU 149 vs 160 ms",
  "  (2026-12-02, same loop). Verdict: no faster, not used.",
  "- V8 heap flags for the resident agent (2026-12-04; soaks of 10,000 in-process ADD/DEL pairs,",
  "  8 in flight, as the agent section runs them; RSS after 1,000 → after 10,000 pairs; agent CPU",
  "  per pair): V8's defaults 126 → 173 MiB, 3.5 ms (about 10 MiB live; the rest is heap and",
  "  native buffers held by garbage not yet collected); `--max-semi-space-size=2` 103 → 109–133",
  "  MiB (old space still creeps);",
  "  `--optimize-for-size` 73 → 75 MiB but 5.7 ms per pair; `--max-semi-space-size=1",
  "  --heap-growing-percent=50` 82 → 86–87 MiB, 3.7–3.9 ms. The last is in the install's runtime",
  "  flags; an exec'd ADD with it against without: CPU 1.00×, wall 1.02× (no change). `--no-lazy`",
  "  (every function compiled, so V8's code cache holds them all): the exec'd ADD 1.09× slower.",
  "- `deno compile`: not measured where it cannot download `denort`; the installer falls back to",
  "  the launcher, which is what these figures are.",
].join("\n");
