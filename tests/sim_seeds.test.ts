/**
 * The deterministic simulator of the ledger (testing/sim, docs/simulator.md)
 * over its default seeds: today's code keeps the ledger true in each. A
 * failure prints the seed, the step and the trace about it; replay it with
 * `deno task simulate --seed N` (`--trace` for the whole shrunk run).
 */
import { DEFAULT_SEEDS, DEFAULT_STEPS, report } from "../testing/sim/main.ts";
import { simulate } from "../testing/sim/world.ts";

Deno.test("sim: the default seeds keep the ledger true", async () => {
  const failed: string[] = [];
  for (const seed of DEFAULT_SEEDS) {
    const r = await simulate({ seed, steps: DEFAULT_STEPS });
    if (r.violation) failed.push(...report(r, {}));
  }
  if (failed.length) throw new Error(failed.join("\n"));
});
