/**
 * Scenario 5: bounded failure: with milo-dev down or hanging every call
 * ends with code 11 within totalMs + 1 s and nothing is allocated or released.
 */
import assert from "node:assert/strict";
import { addrsOf } from "../netns.ts";
import { describe, newDriver, TRANSIENT } from "../kubelet.ts";
import type { Pod } from "../runtime.ts";
import { clusterOf } from "../topology.ts";
import { assertLedger, claimOf, removePod, type Run } from "./run.ts";

export async function boundedFailure(run: Run): Promise<void> {
  const { w } = run;
  const d = newDriver();
  const fast = { requestMs: 1_000, totalMs: 3_000 };
  const limit = fast.totalMs + 1_000;
  const conf = (p: Pod) => w.rt.bridgeConf(clusterOf(p.node), { timeouts: fast });
  const held = [await w.rt.newPod("a1"), await w.rt.newPod("b2")];
  for (const p of held) assert.ok((await w.rt.cni("ADD", p)).ok);
  const heldClaims = (await w.milo.claims()).length;
  const results: Record<string, number[]> = {};
  const faults = [["down", { down: true }], ["hang", { hangRate: 1, hangMs: 20_000 }]] as const;
  for (const [mode, f] of faults) {
    await w.milo.setFaults(f);
    const fresh = [await w.rt.newPod("a1"), await w.rt.newPod("a2"), await w.rt.newPod("b1")];
    const calls = await Promise.all([
      ...fresh.map(async (p) => ["ADD", p, await w.rt.cni("ADD", p, { conf: conf(p) })] as const),
      ...held.map(async (p) => ["DEL", p, await w.rt.cni("DEL", p, { conf: conf(p) })] as const),
    ]);
    await w.milo.clearFaults();
    results[mode] = calls.map(([, , c]) => Math.round(c.ms));
    for (const [verb, p, c] of calls) {
      assert.equal(c.ok, false, `${mode} ${verb} must fail`);
      assert.equal(c.code, TRANSIENT, `${mode} ${verb}: ${describe(c)}`);
      assert.ok(c.ms <= limit, `${mode} ${verb} took ${Math.round(c.ms)} ms > ${limit}`);
      if (verb === "ADD") assert.deepEqual(await addrsOf(p.netns, "eth0"), []);
    }
    const claims = await w.milo.claims();
    assert.equal(claims.length, heldClaims, `${mode}: nothing allocated, nothing released`);
    for (const p of fresh) {
      assert.equal(claimOf(claims, p), undefined);
      await removePod(run, d, p);
    }
    await assertLedger(run, `scenario 5 (${mode})`, held.length);
  }
  run.figures["scenario5:call ms (limit)"] = { ...results, limit };
  for (const p of held) await removePod(run, d, p);
  await assertLedger(run, "scenario 5", 0);
}
