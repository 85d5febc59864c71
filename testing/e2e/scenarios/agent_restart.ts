/**
 * Scenario 6 (agent mode): the node agent SIGKILLed and started again while
 * ADDs are in flight on its node.
 */
import assert from "node:assert/strict";
import { describe, newDriver } from "../kubelet.ts";
import { logLines } from "../nodes.ts";
import { pool } from "../pool.ts";
import type { Pod } from "../runtime.ts";
import type { NodeName } from "../topology.ts";
import { assertLedger, removePod, type Run } from "./run.ts";

/** ADDs in flight on one node while its agent is SIGKILLed and started again. */
const RESTART_INFLIGHT = 32;

/** How the plugin log says each of these containers' ADD was answered. */
async function answeredBy(run: Run, node: NodeName, pods: Pod[]): Promise<Record<string, number>> {
  const ids = new Set(pods.map((p) => p.containerId));
  const lines = (await logLines(run.w.installs[node])).filter((l) =>
    l.verb === "ADD" && ids.has(String(l.containerId))
  );
  const by: Record<string, number> = {};
  for (const l of lines) {
    const how = l.via === "agent" ? "agent" : `direct: ${String(l.fallback ?? "no fallback")}`;
    const k = how.replace(/ \d+ ms$/, "").replace(/agent socket \S+: /, "agent socket: ");
    by[k] = (by[k] ?? 0) + 1;
  }
  return by;
}

/**
 * 32 ADDs in flight on a1 while its agent is SIGKILLed and started again: every
 * call succeeds (falling back or through the new agent), the ledger holds, and
 * DEL of all leaves no claim.
 */
export async function agentRestart(run: Run): Promise<void> {
  const { w } = run;
  const agent = w.agent("a1");
  const pods: Pod[] = [];
  for (let i = 0; i < RESTART_INFLIGHT; i++) pods.push(await w.rt.newPod("a1"));
  let done = 0;
  const { promise: someDone, resolve } = Promise.withResolvers<void>();
  const calls = Promise.all(pods.map(async (p) => {
    const r = await w.rt.cni("ADD", p);
    if (++done >= 4) resolve();
    return r;
  }));
  await Promise.race([someDone, calls]);
  const inflight = RESTART_INFLIGHT - done;
  const t0 = performance.now();
  await agent.kill("SIGKILL");
  await agent.start();
  const restartMs = Math.round(performance.now() - t0);
  const results = await calls;
  const failed = results.map((r, i) => [pods[i], r] as const).filter(([, r]) => !r.ok);
  const by = await answeredBy(run, "a1", pods);
  run.figures["scenario6:agent restart"] = {
    inflightAtKill: inflight,
    restartMs,
    answeredBy: by,
    failed: failed.length,
  };
  console.log(
    `[${run.mode}] agent restart:`,
    JSON.stringify(run.figures["scenario6:agent restart"]),
  );
  assert.deepEqual(failed.map(([p, r]) => `${p.containerId}: ${describe(r)}`), []);
  assert.ok(inflight > 0, "the agent was killed with ADDs in flight");
  await assertLedger(run, "scenario 6 (agent restart)", RESTART_INFLIGHT);
  const d = newDriver();
  await pool(pods, RESTART_INFLIGHT, (p) => removePod(run, d, p));
  await assertLedger(run, "scenario 6 teardown", 0);
  assert.equal((await w.milo.claims()).length, 0);
}
