/**
 * `deno task simulate`: the deterministic simulator of the ledger
 * (docs/simulator.md). Runs seeds of the simulated world and reports the
 * first violation of each, with the shortest trace that shows it; exits 1
 * when any seed found one.
 *
 *   deno task simulate                      the default seeds
 *   deno task simulate --seeds 200          seeds 1..200
 *   deno task simulate --seeds 5,9,40-60    those seeds
 *   deno task simulate --seed 42            one seed, its whole trace
 *   deno task simulate --steps 150 --faults 2 --defect blind-delete
 */
import { parseArgs } from "node:util";
import { clock } from "./checker.ts";
import { type Defect, defectOf, DEFECTS } from "./defects.ts";
import { describe, type Profile, profileOf, PROFILES } from "./script.ts";
import { shrink } from "./shrink.ts";
import { type SimOptions, type SimResult, simulate } from "./world.ts";

/** One world: a seed, with the profile and fault level it runs under (its own profile, 1). */
export interface World {
  seed: number;
  profile?: Profile;
  faults?: number;
}

/**
 * The worlds `deno task test` runs (tests/sim_seeds.test.ts) and `deno task
 * simulate` by default: seeds 1-12 as each draws, and the worlds each defect
 * of issue #37 shows in (tests/sim_defects.test.ts).
 */
export const DEFAULT_WORLDS: World[] = [
  ...Array.from({ length: 12 }, (_, i) => ({ seed: i + 1 })),
  { seed: 23, profile: "handover", faults: 2 },
  { seed: 4, profile: "agent", faults: 2 },
  { seed: 2, profile: "handover", faults: 1 },
  { seed: 21, profile: "takeover", faults: 2 },
];
/** Steps of each default run. */
export const DEFAULT_STEPS = 80;

const USAGE = `usage: deno task simulate [--seeds N|LIST] [--seed N] [--steps N] [--faults X]
                              [--defect NAME] [--no-shrink] [--trace]
  --seeds   how many seeds (1..N), or a list: 3,7,10-20 (default: ${DEFAULT_WORLDS.length} worlds,
            seeds 1-12 and the worlds the defects show in)
  --seed    replay one seed and print its whole trace
  --steps   steps of each seed's script (default ${DEFAULT_STEPS})
  --faults  how hard on the world: 0 none, 1 default, 2 twice as many faults
  --defect  put back one of issue #37's defects: ${Object.keys(DEFECTS).join(", ")}
  --profile what every seed's world goes through (default: each seed draws one):
            ${Object.keys(PROFILES).join(", ")}
  --no-shrink  report a violation's trace unshrunk
  --trace   print every seed's whole trace`;

/** Seeds named by `--seeds`: a count, or a comma list of seeds and ranges. */
export function parseSeeds(s: string): number[] {
  if (/^\d+$/.test(s)) return Array.from({ length: Number(s) }, (_, i) => i + 1);
  return s.split(",").flatMap((part) => {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
    if (!m) throw new Error(`--seeds: ${part} is not a seed or a range`);
    const [a, b] = [Number(m[1]), Number(m[2] ?? m[1])];
    return Array.from({ length: b - a + 1 }, (_, i) => a + i);
  });
}

/** The lines that report a violation: seed, step, the shrunk script and the trace lines about it. */
export function report(
  r: SimResult,
  o: { unshrunk?: SimResult; defect?: Defect; profile?: Profile; faults?: number },
): string[] {
  const v = r.violation!;
  const world = (o.profile && o.profile !== profileOf(r.seed) ? ` --profile ${o.profile}` : "") +
    (o.faults !== undefined && o.faults !== 1 ? ` --faults ${o.faults}` : "");
  const out = [
    `seed ${r.seed}: VIOLATION ${v.kind} at ${clock(v.at)}, step ${v.step}, event ${v.tick}` +
    (o.defect ? ` (defect ${o.defect})` : ""),
    `  ${v.what}`,
    `  replay: deno task simulate --seed ${r.seed}${world}${
      o.defect ? ` --defect ${o.defect}` : ""
    }` +
    (o.unshrunk
      ? ` (unshrunk: ${o.unshrunk.script.length} steps, violation at step ${
        o.unshrunk.violation!.step
      })`
      : ""),
    `  shortest script found (${r.script.length} steps):`,
    ...r.script.map((s, i) =>
      `    ${String(i).padStart(3)} ${clock(s.at + Date.UTC(2027, 0, 4))} ${describe(s)}`
    ),
    `  the trace about it:`,
    ...r.trace.filter((l) =>
      /step \d+:|VIOLATION|agent killed|partitioned|NotReady|Ready$/.test(l) ||
      v.about.some((a) => mentions(l, a))
    )
      .map((l) => `    ${l}`),
  ];
  return out;
}

/** Whether a trace line names `a`: an address, a claim, or a container id (its first 8 digits). */
function mentions(line: string, a: string): boolean {
  const key = /^[0-9a-f]{64}$/.test(a) ? a.slice(0, 8) : a;
  const i = line.indexOf(key);
  if (i < 0) return false;
  const after = line[i + key.length] ?? " ";
  return !/[0-9a-f.:]/.test(after) || /^[0-9a-f]{64}$/.test(a);
}

/** Runs one seed; answers its result (shrunk when it found a violation and `shrinking`). */
export async function runSeed(
  o: SimOptions,
  shrinking: boolean,
): Promise<{ result: SimResult; unshrunk?: SimResult }> {
  const result = await simulate(o);
  if (!result.violation || !shrinking) return { result };
  return { result: await shrink(o, result), unshrunk: result };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      seeds: { type: "string" },
      seed: { type: "string" },
      steps: { type: "string" },
      faults: { type: "string" },
      defect: { type: "string" },
      profile: { type: "string" },
      "no-shrink": { type: "boolean", default: false },
      trace: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const steps = values.steps === undefined ? DEFAULT_STEPS : Number(values.steps);
  const faultsSaid = values.faults === undefined ? undefined : Number(values.faults);
  const defect = values.defect === undefined ? undefined : defectOf(values.defect);
  const one = values.seed !== undefined;
  const worlds: World[] = one
    ? [{ seed: Number(values.seed) }]
    : values.seeds
    ? parseSeeds(values.seeds).map((seed) => ({ seed }))
    : DEFAULT_WORLDS;
  if (
    !Number.isInteger(steps) || steps < 0 ||
    (faultsSaid !== undefined && !Number.isFinite(faultsSaid)) ||
    worlds.some((w) => !Number.isInteger(w.seed))
  ) {
    console.error(USAGE);
    Deno.exit(2);
  }
  let failed = 0;
  const started = performance.now();
  for (const w of worlds) {
    const t = performance.now();
    const seed = w.seed;
    const profile = values.profile as Profile | undefined ?? w.profile ?? profileOf(seed);
    const faults = faultsSaid ?? w.faults ?? 1;
    const o: SimOptions = {
      seed,
      steps,
      faults,
      defect,
      profile,
      onLine: one || values.trace ? (l) => console.log(l) : undefined,
    };
    const { result, unshrunk } = await runSeed({ ...o }, !values["no-shrink"]);
    const secs = ((performance.now() - t) / 1000).toFixed(1);
    if (result.violation) {
      failed++;
      for (const l of report(result, { unshrunk, defect, profile, faults })) console.log(l);
      if (values.trace && unshrunk) {
        console.log(`  the shortest script's whole trace:`);
        for (const l of result.trace) console.log(`    ${l}`);
      }
    } else {
      console.log(
        `seed ${seed}: ok (${profile}, ${result.stepsRun} steps, ${
          Math.round(result.simMs / 60_000)
        } simulated min, ` +
          `${result.ticks} events, ${secs} s)`,
      );
    }
  }
  const secs = ((performance.now() - started) / 1000).toFixed(1);
  console.log(`${worlds.length} world(s), ${failed} with a violation, ${secs} s`);
  Deno.exit(failed ? 1 : 0);
}
