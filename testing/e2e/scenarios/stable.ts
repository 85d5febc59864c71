/**
 * Scenario 8: stable addresses. A StatefulSet-like pod `db-0` on a network of
 * pod identity is deleted and re-created (a new sandbox and pod UID) on the
 * same node and on another node of its cluster, and gets its address back; a
 * second sandbox of `db-0` while the first holds it gets none; a late DEL of
 * an old sandbox releases nothing; a force-deleted holder is released by its
 * node's reconcile alone; the retained address is counted as such.
 */
import assert from "node:assert/strict";
import { describe } from "../kubelet.ts";
import type { NetConf } from "../netconf.ts";
import type { Pod } from "../runtime.ts";
import { clusterOf, type NodeName } from "../topology.ts";
import { assertLedger, claimOf, type Run } from "./run.ts";
import { delNetns } from "../netns.ts";

const NAME = "db-0";

/** The pod network of cluster-a with claims named after the pod. */
const podIdentity = (run: Run): NetConf =>
  run.w.rt.bridgeConf(clusterOf("a1"), { identity: "pod" });

async function start(run: Run, node: NodeName): Promise<Pod> {
  const p = await run.w.rt.newPod(node, { name: NAME });
  const r = await run.w.rt.cni("ADD", p, { conf: podIdentity(run) });
  assert.ok(r.ok, describe(r));
  return p;
}

async function stop(run: Run, p: Pod): Promise<void> {
  const r = await run.w.rt.cni("DEL", p, { conf: podIdentity(run) });
  assert.ok(r.ok, describe(r));
  await delNetns(p.netns);
}

/** Milo deletes a claim whatever a DELETE's uid precondition says, and so does milo-dev. */
export async function stableAddresses(run: Run): Promise<void> {
  const { w } = run;
  const first = await start(run, "a1");
  const address = first.addresses![0];
  await assertLedger(run, "db-0 started", 1);

  await stop(run, first);
  const retained = await assertLedger(run, "db-0 deleted", 0);
  assert.equal(retained.retained, 1, "its address waits, retained");
  const again = await start(run, "a1");
  assert.equal(again.addresses![0], address, "re-created on the same node: its address");
  assert.notEqual(again.uid, first.uid);

  // A second sandbox of db-0 (a force-deleted pod's successor) while the first holds the name.
  const second = await w.rt.newPod("a2", { name: NAME });
  const refused = await w.rt.cni("ADD", second, { conf: podIdentity(run) });
  assert.equal(refused.ok, false, "no second holder");
  assert.equal(refused.code, 11, describe(refused));
  assert.match(refused.msg ?? "", new RegExp(`held by container ${again.containerId}`));
  assert.ok((await w.rt.cni("DEL", second, { conf: podIdentity(run) })).ok, "its DEL succeeds");
  assert.equal(claimOf(await w.milo.claims(), again)?.status?.allocatedCIDR, address);
  await delNetns(second.netns);
  await assertLedger(run, "a second sandbox refused", 1);

  await stop(run, again);
  const moved = await start(run, "a2");
  assert.equal(moved.addresses![0], address, "re-created on another node: its address");

  // The old sandbox's DEL comes again, late: it releases nothing of the new holder.
  const late = await w.rt.cni("DEL", again, { conf: podIdentity(run) });
  assert.ok(late.ok, describe(late));
  const held = claimOf(await w.milo.claims(), moved);
  assert.equal(held?.status?.allocatedCIDR, address, "the new holder keeps it");
  await assertLedger(run, "a late DEL of the old sandbox", 1);

  // Force-delete: node a2 loses db-0 without a DEL; the successor waits for a2's reconcile.
  const bystanders = [await w.rt.newPod("a2"), await w.rt.newPod("a2")];
  for (const p of bystanders) assert.ok((await w.rt.cni("ADD", p)).ok);
  await w.rt.forgetPod(moved);
  const waiting = await w.rt.newPod("a1", { name: NAME });
  const wait = await w.rt.cni("ADD", waiting, { conf: podIdentity(run) });
  assert.equal(wait.code, 11, describe(wait));
  // The runtime's DEL after the failed ADD, then a new sandbox once a2 has reconciled.
  assert.ok((await w.rt.cni("DEL", waiting, { conf: podIdentity(run) })).ok);
  await delNetns(waiting.netns);
  assert.equal(claimOf(await w.milo.claims(), moved)?.status?.allocatedCIDR, address);
  const released: string[] = [];
  for (let i = 0; i < 2; i++) {
    const r = await w.rt.reconcile("a2", { graceS: 0 });
    assert.equal(r.code, 0, r.stderr);
    released.push(...r.report!.released.map((x) => x.claim));
  }
  assert.deepEqual(released, [held!.metadata.name], "a2 released only the lost holder's claim");
  const successor = await start(run, "a1");
  assert.equal(successor.addresses![0], address, "after a2's reconcile released the lost holder");
  await assertLedger(run, "a force-deleted holder released by its node's reconcile", 3);

  for (const p of bystanders) assert.ok((await w.rt.cni("DEL", p)).ok);
  for (const p of bystanders) await delNetns(p.netns);
  await stop(run, successor);
  const after = await assertLedger(run, "stable addresses", 0);
  assert.equal(after.retained, 1);
  run.figures["stable address"] = `${address}: a1 → a1 → a2 → a1`;
}
