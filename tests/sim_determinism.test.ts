/**
 * The simulator (testing/sim) replays a seed alike: one seed, two runs, one
 * trace (every line, in order), the same events and the same verdict.
 */
import assert from "node:assert/strict";
import { simulate } from "../testing/sim/world.ts";

Deno.test("sim: one seed, two runs, one trace", async () => {
  const o = { seed: 4242, steps: 30, faults: 2 };
  const a = await simulate(o);
  const b = await simulate(o);
  assert.ok(a.trace.length > 100, `a trace worth comparing (${a.trace.length} lines)`);
  const i = a.trace.findIndex((l, k) => l !== b.trace[k]);
  assert.equal(i, -1, `first difference at line ${i}:\n${a.trace[i]}\n${b.trace[i]}`);
  assert.equal(a.trace.length, b.trace.length);
  assert.equal(a.ticks, b.ticks);
  assert.deepEqual(a.violation, b.violation);
});
