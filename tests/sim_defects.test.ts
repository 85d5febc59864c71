/**
 * The simulator finds what was found by hand: with each release-path defect
 * of issue #37 put back (testing/sim/defects.ts, as the code before 0d58c4c
 * and cbfff48 behaved), one of the default seeds reports a violation, where
 * today's code reports none (tests/sim_seeds.test.ts).
 */
import assert from "node:assert/strict";
import { type Defect, DEFECTS } from "../testing/sim/defects.ts";
import { DEFAULT_SEEDS, DEFAULT_STEPS } from "../testing/sim/main.ts";
import { simulate } from "../testing/sim/world.ts";

for (const defect of Object.keys(DEFECTS) as Defect[]) {
  Deno.test(`sim: ${defect} (${DEFECTS[defect]}) is found within the default seeds`, async () => {
    const tried: number[] = [];
    for (const seed of DEFAULT_SEEDS) {
      tried.push(seed);
      const r = await simulate({ seed, steps: DEFAULT_STEPS, defect });
      if (r.violation) return;
    }
    assert.fail(`no violation with ${defect} in seeds ${tried.join(", ")}`);
  });
}
