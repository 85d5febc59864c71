/**
 * The simulator's checker (testing/sim/checker.ts) reports a wrong ledger:
 * each plant (testing/sim/world.ts) is one, and the run it is planted in is
 * otherwise clean.
 */
import assert from "node:assert/strict";
import type { Step } from "../testing/sim/script.ts";
import { simulate } from "../testing/sim/world.ts";

/** One pod of a Deployment deleted a minute in: a sandbox that lived and is dead. */
const SCRIPT: Step[] = [{
  at: 61_000,
  do: "delete",
  cluster: "cluster-a",
  workload: "web",
  pick: 0,
}];

Deno.test("sim checker: the run without a plant is clean", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT });
  assert.equal(r.violation, undefined, r.violation?.what);
});

Deno.test("sim checker: a planted duplicate (two live sandboxes on one address) is reported", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT, plant: "duplicate" });
  assert.equal(r.violation?.kind, "duplicate", r.violation?.what);
  assert.match(r.violation!.what, /held by two live sandboxes/);
});

Deno.test("sim checker: a planted forgotten release (a dead sandbox's claim its node does not remember) is reported", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT, plant: "forgotten" });
  assert.equal(r.violation?.kind, "forgotten", r.violation?.what);
  assert.match(r.violation!.what, /neither its node's record nor its journal names it/);
});

Deno.test("sim checker: a planted leak (a dead sandbox's claim remembered, never released) is reported past its bound", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT, plant: "leak" });
  assert.equal(r.violation?.kind, "leaked", r.violation?.what);
  assert.match(r.violation!.what, /still in Milo past/);
});
