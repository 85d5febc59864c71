/**
 * milo-ipam benchmark: the installed plugin as a runtime experiences it.
 *
 *   deno task bench            full run, writes bench/results/<date>.{md,svg,json}
 *   deno task bench --quick    CI smoke: every section at a tiny size, writes .tmp/bench/
 *                              (asserts nothing about timing; fails only when a section breaks)
 *   deno task bench --out DIR  write the report elsewhere
 *   deno task bench --only fleet   the fleet section alone: writes <date>-fleet.{md,json}
 *
 * Everything runs on 127.0.0.1 (see world.ts). Each section lives in
 * sections/ and returns its part of the results; report/ judges the budgets
 * (findings.ts) apart from rendering them.
 */
import { parseCommandLine, usageError } from "../lib/cli.ts";
import { join } from "node:path";
import { contention, cpuSnap, machine, waitForQuiet } from "./machine.ts";
import { type BenchResults, load1 } from "./model.ts";
import { FULL, LEVELS, QUICK } from "./plan.ts";
import { say, text } from "./proc.ts";
import { writeFleetReport, writeReport } from "./report.ts";
import { agentSection } from "./sections/agent.ts";
import { anatomySection } from "./sections/anatomy.ts";
import { concurrencySection } from "./sections/concurrency.ts";
import { fleetSection } from "./sections/fleet.ts";
import { latencySection } from "./sections/latency.ts";
import { probesSection } from "./sections/probes.ts";
import { rssSection } from "./sections/rss.ts";
import { startupSection } from "./sections/startup.ts";
import { sweepSection } from "./sections/sweep.ts";
import { makeWorld } from "./world.ts";

const ROOT = new URL("../", import.meta.url).pathname;

type Measured = Omit<BenchResults, "date" | "quick" | "machine" | "deno" | "contention">;
type OneWorld = Omit<Measured, "fleet">;

/** Runs every section; the world is torn down before the fleet, which brings its own Milo. */
async function measure(plan: typeof FULL, began: number): Promise<Measured> {
  const measured = await measureWorld(plan, began);
  return { ...measured, fleet: await fleetSection(plan) };
}

/** Runs the sections of one world; the world is torn down before returning. */
async function measureWorld(plan: typeof FULL, began: number): Promise<OneWorld> {
  const overBudget = () => (performance.now() - began) / 1000 > plan.budgetS;
  const w = await makeWorld();
  try {
    // The one-call-in-flight loops come before the load sections, which leave the machine slower
    // for a while: the floor slows too, but a call through the agent waits on two more processes
    // and slows more (ADD via the agent measured 1.44x the floor in a fresh world, 1.50x right
    // after the concurrency sweep).
    const latency = await latencySection(w, plan);
    const agent = await agentSection(w, plan);
    const startup = await startupSection(w, plan);
    const phases = await anatomySection(w, plan);
    const probes = await probesSection(w, plan);
    const levels = plan.quick ? LEVELS.slice(0, 2) : LEVELS;
    const cc = await concurrencySection(w, plan, levels, overBudget);
    const rss = await rssSection(w, plan);
    const sweep = await sweepSection(plan);
    return {
      install: {
        kind: w.a.installed.kind,
        flags: w.a.installed.flags,
        agentFlags: w.g.installed.flags,
        bundleBytes: w.bundleBytes,
      },
      hostLocal: w.hostLocal,
      warmup: plan.warmup,
      durationS: 0,
      latency,
      startup,
      phases,
      probes,
      concurrency: cc.points,
      skipped: cc.skipped,
      rss,
      agent,
      sweep,
    };
  } finally {
    await w.close();
  }
}

const USAGE = `usage: deno task bench [--quick] [--out DIR] [--no-wait] [--only fleet]

The installed plugin as a runtime experiences it, against milo-dev on 127.0.0.1.

  --quick        every section at a tiny size, into .tmp/bench/ (CI's smoke test)
  --out DIR      write the report there (default bench/results/)
  --no-wait      start without waiting for a quiet machine
  --only fleet   the fleet section alone`;

async function main(): Promise<void> {
  const p = parseCommandLine("bench", Deno.args, {
    usage: USAGE,
    options: {
      quick: { type: "boolean", default: false },
      out: { type: "string" },
      "no-wait": { type: "boolean", default: false },
      only: { type: "string" },
    },
  });
  if ("exit" in p) Deno.exit(p.exit);
  const values = p.values as { quick: boolean; out?: string; "no-wait": boolean; only?: string };
  if (values.only !== undefined && values.only !== "fleet") {
    const why = `--only: unknown section ${JSON.stringify(values.only)} (known: fleet)`;
    Deno.exit(usageError("bench", why, USAGE).exit);
  }
  const plan = values.quick ? QUICK : FULL;
  const began = performance.now();
  const date = new Date().toISOString().slice(0, 10);
  const outDir = values.out ?? join(ROOT, plan.quick ? ".tmp/bench" : "bench/results");
  const quiet = await waitForQuiet(values["no-wait"] ? 0 : plan.quietWaitS);
  const host = await machine();
  const noisy = load1(host.loadBefore) > host.nproc;
  say(`${plan.quick ? "quick" : "full"} run; load ${host.loadBefore}${noisy ? " (noisy)" : ""}`);
  const cpu0 = await cpuSnap();
  const fleetOnly = values.only === "fleet";
  const measured = fleetOnly ? { fleet: await fleetSection(plan) } : await measure(plan, began);
  const common = {
    date,
    quick: plan.quick,
    machine: { ...host, loadAfter: (await text("/proc/loadavg")).trim() },
    deno: { version: Deno.version.deno, v8: Deno.version.v8, typescript: Deno.version.typescript },
    durationS: (performance.now() - began) / 1000,
    contention: {
      idleBeforePct: quiet.idle * 100,
      waitedS: quiet.waitedS,
      ...contention(cpu0, await cpuSnap()),
    },
  };
  await Deno.mkdir(outDir, { recursive: true });
  const base = join(outDir, `${date}${plan.quick ? "-quick" : ""}${fleetOnly ? "-fleet" : ""}`);
  if ("latency" in measured) {
    await writeReport(base, { ...measured, ...common });
    say(`wrote ${base}.md, .svg, .json in ${common.durationS.toFixed(0)} s`);
  } else {
    await writeFleetReport(base, { ...common, only: "fleet", fleet: measured.fleet });
    say(`wrote ${base}.md, .json in ${common.durationS.toFixed(0)} s`);
  }
}

if (import.meta.main) await main();
