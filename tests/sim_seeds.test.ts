/**
 * The deterministic simulator of the ledger (testing/sim, docs/simulator.md)
 * over its default worlds: today's code keeps the ledger true in each. A
 * failure prints the seed, the step and the trace about it, and the command
 * that replays it (`deno task simulate --seed N ...`; `--trace` for the whole
 * shrunk run).
 */
import { DEFAULT_STEPS, DEFAULT_WORLDS, report } from "../testing/sim/main.ts";
import { profileOf } from "../testing/sim/script.ts";
import { simulate } from "../testing/sim/world.ts";

Deno.test("sim: the default worlds keep the ledger true", async () => {
  const failed: string[] = [];
  for (const w of DEFAULT_WORLDS) {
    const o = { profile: w.profile ?? profileOf(w.seed), faults: w.faults ?? 1 };
    const r = await simulate({ seed: w.seed, steps: DEFAULT_STEPS, ...o });
    if (r.violation) failed.push(...report(r, o));
  }
  if (failed.length) throw new Error(failed.join("\n"));
});
