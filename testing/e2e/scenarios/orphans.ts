/**
 * Scenario 3: the DEL that never came: GC and the node reconcile release
 * exactly the orphans, and nothing else.
 */
import assert from "node:assert/strict";
import type { Claim } from "../milo.ts";
import { describe, newDriver } from "../kubelet.ts";
import { bridgeConf } from "../netconf.ts";
import { logLines } from "../nodes.ts";
import { sleep } from "../pool.ts";
import type { Pod } from "../runtime.ts";
import { clusterOf, type NodeName } from "../topology.ts";
import { assertLedger, printLedger, removePod, type Run } from "./run.ts";

const GRACE_S = 1;
/**
 * The killed ADDs' own deadline: GC leaves an ADD that may still run (its
 * record `adding`, its deadline not passed) and takes its claim after it.
 */
const KILLED_TIMEOUTS = { requestMs: 1_000, totalMs: 2_000 };

/** The pods of scenario 3: live ones per node, and orphans whose DEL never came. */
interface Orphans {
  live: Record<NodeName, Pod[]>;
  orphans: Record<"a1" | "a2" | "b1", Pod[]>;
}

const ids = (ps: Pod[]) => ps.map((p) => p.containerId).sort();
const holderOf = (c: Claim) => c.metadata.annotations?.["milo-ipam.io/container-id"] ?? "";
const holders = (cs: Claim[]) => cs.map(holderOf).sort();

async function onNode(run: Run, node: NodeName): Promise<Claim[]> {
  return (await run.w.milo.claims()).filter((c) =>
    c.metadata.labels?.["milo-ipam.io/node"] === node
  );
}

async function addOne(run: Run, node: NodeName): Promise<Pod> {
  const p = await run.w.rt.newPod(node);
  const r = await run.w.rt.cni("ADD", p);
  assert.ok(r.ok, describe(r));
  return p;
}

/** A pod whose netns vanished without DEL. */
async function vanished(run: Run, node: NodeName): Promise<Pod> {
  const p = await addOne(run, node);
  await run.w.rt.forgetPod(p);
  return p;
}

/** A lease whose ADD was SIGKILLed after Milo committed it, never retried. */
async function killedAdd(run: Run, node: NodeName): Promise<Pod> {
  const p = await run.w.rt.newPod(node);
  const conf = bridgeConf(clusterOf(node), KILLED_TIMEOUTS);
  const r = await run.w.rt.cni("ADD", p, { killAfterMs: 600, conf });
  assert.equal(r.ok, false, "killed ADD fails");
  await run.w.rt.forgetPod(p);
  return p;
}

/**
 * Waits until the agents have undone the ADDs whose plugin was killed: an
 * agent lets the hung POST answer, then releases the claim of a caller that is
 * gone (a DEL of its attachment, logged with its reason).
 */
async function agentUndid(run: Run, pods: Pod[]): Promise<void> {
  const deadline = performance.now() + 30_000;
  for (const p of pods) {
    const inst = run.w.installs[p.node];
    const logged = async () =>
      (await logLines(inst)).some((l) =>
        l.verb === "DEL" && l.why !== undefined && l.containerId === p.containerId
      );
    while (!(await logged())) {
      assert.ok(performance.now() < deadline, `the agent never undid ADD ${p.containerId}`);
      await sleep(200);
    }
  }
}

async function makeOrphans(run: Run): Promise<Orphans> {
  const live: Record<NodeName, Pod[]> = { a1: [], a2: [], b1: [], b2: [] };
  for (const [node, n] of [["a1", 4], ["a2", 2], ["b1", 3], ["b2", 1]] as const) {
    for (let i = 0; i < n; i++) live[node].push(await addOne(run, node));
  }
  const orphans = {
    a1: [await vanished(run, "a1"), await vanished(run, "a1"), await vanished(run, "a1")],
    a2: [await vanished(run, "a2")],
    b1: [await vanished(run, "b1"), await vanished(run, "b1")],
  };
  // POST commits, its answer hangs; the plugin is killed before it retries.
  await run.w.milo.setFaults({
    hangRate: 1,
    hangMs: 3_000,
    faultPoint: "after",
    methods: ["POST"],
  });
  const killed: Pod[] = [];
  try {
    killed.push(await killedAdd(run, "a1"), await killedAdd(run, "a1"), await killedAdd(run, "b1"));
  } finally {
    await run.w.milo.clearFaults();
  }
  if (run.mode === "agent") {
    // The agent undoes a dead caller's ADD itself: these leave no orphan.
    await agentUndid(run, killed);
    const left = (await run.w.milo.claims()).filter((c) => ids(killed).includes(holderOf(c)));
    assert.deepEqual(left, [], "the agent released the killed ADDs' claims");
  } else {
    orphans.a1.push(killed[0], killed[1]);
    orphans.b1.push(killed[2]);
    // The killed ADDs' deadlines pass: from then on they cannot be in flight.
    await sleep(KILLED_TIMEOUTS.totalMs + 600);
  }
  const before = await run.w.ledger();
  printLedger(run, "scenario 3 (orphans made)", before);
  const all = orphans.a1.length + orphans.a2.length + orphans.b1.length;
  assert.equal(before.claimsWithoutPod, all);
  return { live, orphans };
}

/** GC on a1, then a2, with each node's valid attachments (from its result cache). */
async function gcStep(run: Run, o: Orphans): Promise<void> {
  const { rt } = run.w;
  const valid = await rt.validAttachments("a1");
  assert.equal(valid.length, o.live.a1.length);
  const gcA1 = await rt.gc("a1", valid);
  assert.ok(gcA1.ok, describe(gcA1));
  assert.equal(gcA1.stdout.trim(), "", "GC prints nothing on success");
  assert.deepEqual(holders(await onNode(run, "a1")), ids(o.live.a1), "a1 keeps its live pods");
  assert.deepEqual(holders(await onNode(run, "a2")), ids([...o.live.a2, ...o.orphans.a2]));
  assert.deepEqual(
    holders(await onNode(run, "b1")),
    ids([...o.live.b1, ...o.orphans.b1]),
    "B untouched",
  );
  const gcA2 = await rt.gc("a2", await rt.validAttachments("a2"));
  assert.ok(gcA2.ok, describe(gcA2));
  assert.deepEqual(holders(await onNode(run, "a2")), ids(o.live.a2));
  run.figures["scenario3:GC released"] = { a1: o.orphans.a1.length, a2: o.orphans.a2.length };
}

const released = (r: { report?: { released: { containerId?: string }[] } }) =>
  (r.report?.released ?? []).map((x) => x.containerId ?? "").sort();

/** Node reconcile on b1 from its result cache: dry-run, two observations, grace. */
async function reconcileStep(run: Run, o: Orphans): Promise<Pod> {
  const { rt } = run.w;
  const ok = (r: { code: number; stdout: string; stderr: string }) =>
    assert.equal(r.code, 0, r.stdout + r.stderr);
  const dry1 = await rt.reconcile("b1", { graceS: GRACE_S, dryRun: true });
  ok(dry1);
  assert.deepEqual(released(dry1), [], "first observation releases nothing");
  const run1 = await rt.reconcile("b1", { graceS: GRACE_S });
  ok(run1);
  assert.deepEqual(released(run1), []);
  assert.equal(run1.report?.live, o.live.b1.length);
  const late = await vanished(run, "b1"); // absent from now on: one observation only
  await sleep(GRACE_S * 1000 + 300);
  const dry2 = await rt.reconcile("b1", { graceS: GRACE_S, dryRun: true });
  ok(dry2);
  assert.deepEqual(released(dry2), ids(o.orphans.b1), "dry-run names exactly the orphans");
  assert.deepEqual(
    holders(await onNode(run, "b1")),
    ids([...o.live.b1, ...o.orphans.b1, late]),
    "dry-run holds",
  );
  const run2 = await rt.reconcile("b1", { graceS: GRACE_S });
  ok(run2);
  assert.deepEqual(released(run2), ids(o.orphans.b1));
  assert.deepEqual(holders(await onNode(run, "b1")), ids([...o.live.b1, late]), "late kept");
  console.log(`[${run.mode}] reconcile report (run 2):`, JSON.stringify(run2.report));
  await sleep(GRACE_S * 1000 + 300);
  const run3 = await rt.reconcile("b1", { graceS: GRACE_S });
  assert.deepEqual(released(run3), [late.containerId]);
  assert.deepEqual(holders(await onNode(run, "b1")), ids(o.live.b1));
  assert.deepEqual(holders(await onNode(run, "b2")), ids(o.live.b2), "b2 untouched");
  run.figures["scenario3:reconcile released"] = {
    run1: released(run1).length,
    run2: released(run2).length,
    run3: released(run3).length,
  };
  return late;
}

export async function delNeverCame(run: Run): Promise<void> {
  const o = await makeOrphans(run);
  await gcStep(run, o);
  await reconcileStep(run, o);
  const live = Object.values(o.live).flat();
  await assertLedger(run, "scenario 3", live.length);
  const d = newDriver();
  for (const p of live) await removePod(run, d, p);
  await assertLedger(run, "scenario 3 teardown", 0);
}
