/**
 * Scenario 9: Milo loses a namespace's claims while their pods run (Milo's
 * `DeleteCollection` routes each claim of a deleted namespace through its
 * `Delete`; a claim deleted by hand or by a tool is the same): each node's
 * reconcile finds its live attachments without their claims and makes them
 * again, pinned to the addresses the pods run on. The ledger ends clean: no
 * duplicate, no claim without its pod, no pod without its claim.
 */
import assert from "node:assert/strict";
import { describe, newDriver } from "../kubelet.ts";
import { pool } from "../pool.ts";
import type { Pod } from "../runtime.ts";
import type { NodeName } from "../topology.ts";
import { assertLedger, printLedger, removePod, type Run } from "./run.ts";

const NODES: NodeName[] = ["a1", "a2", "b1"];
const PODS_PER_NODE = 4;

/** The address each live pod was given, by container. */
async function addresses(run: Run): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const c of await run.w.milo.claims()) {
    out.set(
      c.metadata.annotations?.["milo-ipam.io/container-id"] ?? "",
      String(c.status.allocatedCIDR),
    );
  }
  return out;
}

export async function lostClaims(run: Run): Promise<void> {
  const { w } = run;
  const pods: Pod[] = [];
  for (const node of NODES) {
    for (let i = 0; i < PODS_PER_NODE; i++) {
      const p = await w.rt.newPod(node);
      const r = await w.rt.cni("ADD", p);
      assert.ok(r.ok, describe(r));
      pods.push(p);
    }
  }
  await assertLedger(run, "scenario 9 (pods running)", pods.length);
  const before = await addresses(run);
  // Milo loses every claim of the namespace (its deletion, or a tool): the pods run on.
  const claims = await w.milo.claims();
  for (const c of claims) assert.equal(await w.milo.deleteClaim(c.metadata.name), 200);
  const lost = await w.ledger();
  printLedger(run, "scenario 9 (claims lost)", lost);
  assert.equal(lost.podsWithoutClaim, pods.length, "every live pod without its claim");
  // Each node's reconcile verifies its live claims: one missing, it reads them all and makes
  // each again on its pod's address.
  for (const node of NODES) {
    const r = await w.rt.reconcile(node, { graceS: 300 });
    assert.equal(r.code, 0, JSON.stringify(r.report?.errors ?? r));
    assert.equal(r.report?.remade.length, PODS_PER_NODE, `${node}: ${JSON.stringify(r.report)}`);
    assert.deepEqual(r.report?.duplicates, []);
  }
  await assertLedger(run, "scenario 9 (claims made again)", pods.length);
  assert.deepEqual(await addresses(run), before, "every pod's claim on the address it runs on");
  const d = newDriver();
  await pool(pods, 8, (p) => removePod(run, d, p));
  await assertLedger(run, "scenario 9 teardown", 0);
}
