/**
 * The simulator finds what was found by hand: with each release-path defect
 * of issue #37 put back (testing/sim/defects.ts, as the code before 0d58c4c
 * and cbfff48 behaved, which also had no recheck of late DELETEs), one of the
 * default worlds breaks the ledger, and the same world run with that code but
 * the defect fixed does not. Each world was found by searching seeds of the
 * profile the defect lives in (`deno task simulate --defect NAME --profile P
 * --faults 2 --seeds 40`) and joined the default worlds: the later defences
 * (lib/late_deletes.ts, the doubt of a claim found gone) hide most of them
 * from seeds 1-12.
 */
import assert from "node:assert/strict";
import { type Defect, DEFECTS } from "../testing/sim/defects.ts";
import { DEFAULT_STEPS, DEFAULT_WORLDS, report } from "../testing/sim/main.ts";
import type { Profile } from "../testing/sim/script.ts";
import { simulate } from "../testing/sim/world.ts";

/** Where each defect shows: a seed of a profile, at a fault level. */
const FOUND_AT: Record<Defect, { seed: number; profile: Profile; faults: number }> = {
  "blind-delete": { seed: 23, profile: "handover", faults: 2 },
  "believe-taken": { seed: 21, profile: "takeover", faults: 2 },
  "doubt-erased": { seed: 4, profile: "agent", faults: 2 },
  "del-not-in-doubt": { seed: 4, profile: "agent", faults: 2 },
  "sweep-ready": { seed: 2, profile: "handover", faults: 1 },
};

for (const defect of Object.keys(DEFECTS) as Defect[]) {
  const at = FOUND_AT[defect];
  const world = `seed ${at.seed}, profile ${at.profile}, faults ${at.faults}`;
  const name = `sim: ${defect} (${DEFECTS[defect]}) is found (${world})`;
  Deno.test(name, async () => {
    const same = (w: (typeof DEFAULT_WORLDS)[number]) =>
      w.seed === at.seed && w.profile === at.profile && w.faults === at.faults;
    assert.ok(DEFAULT_WORLDS.some(same), `${world} is one of the default worlds`);
    const o = { seed: at.seed, steps: DEFAULT_STEPS, profile: at.profile, faults: at.faults };
    const found = await simulate({ ...o, defect });
    assert.ok(found.violation, `no violation with ${defect} in ${world}`);
    const fixed = await simulate({ ...o, recheckAfterS: 0 });
    if (fixed.violation) assert.fail(`without ${defect}:\n${report(fixed, {}).join("\n")}`);
  });
}
