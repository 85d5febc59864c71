/**
 * The cluster sweep against the e2e's real leases: cluster-a with 50 pods on
 * each of a1 and a2; a2 dies (no DEL ever runs, its pods and Node vanish from
 * the API); a pod on a1 is force-deleted behind a partition; a static pod on
 * a1 is seen through its mirror pod; an ADD is in flight on a1 while the sweep
 * runs; cluster-b has pods of its own. After `sweep --apply` exactly the dead
 * node's and the force-deleted pod's leases are gone. Then one scenario per
 * brake: nothing released.
 */
import assert from "node:assert/strict";
import type { PodInput } from "../../kube_store.ts";
import { ClusterApi, podInput, stateOf, type SweepRun } from "../kube_api.ts";
import { describe, newDriver, startPod } from "../kubelet.ts";
import type { Claim } from "../milo.ts";
import { delNetns } from "../netns.ts";
import { pool, sleep } from "../pool.ts";
import type { Pod } from "../runtime.ts";
import type { NodeName } from "../topology.ts";
import { assertLedger, removePod, type Run, timed } from "./run.ts";

const PODS_PER_NODE = 50;
const B_PODS = 4;
/**
 * A grace and interval the scenario can afford (the defaults are 10m and 30s), and no wait for a
 * pod gone from a Ready node (the defaults: a node monitor grace of 55s, then its termination
 * grace): the scenario's pods are deleted by the test, whose runtime DELs them at once; the
 * timing rules run at their defaults in tests/sweep.test.ts.
 */
const TIMING = [
  ...["--grace", "1s", "--interval", "2s"],
  ...["--termination-grace", "0s", "--node-monitor-grace", "0s"],
];

const holderOf = (c: Claim) => c.metadata.annotations?.["milo-ipam.io/container-id"] ?? "";
const byHolder = async (run: Run) => {
  const m = new Map<string, Claim[]>();
  for (const c of await run.w.milo.claims()) m.set(holderOf(c), [...(m.get(holderOf(c)) ?? []), c]);
  return m;
};

async function startPods(run: Run, node: NodeName, n: number): Promise<Pod[]> {
  const pods: Pod[] = [];
  for (let i = 0; i < n; i++) pods.push(await run.w.rt.newPod(node));
  const d = newDriver();
  await pool(pods, 16, async (p) => {
    assert.ok(await startPod(run.w.rt, d, p), `ADD ${p.containerId}: ${d.lastFailure}`);
  });
  return pods;
}

/** Nothing released: every claim before the run is still there, with the same uid. */
async function assertNothingReleased(run: Run, before: Map<string, Claim[]>, what: string) {
  const after = await byHolder(run);
  const uids = (m: Map<string, Claim[]>) =>
    [...m.values()].flat().map((c) => c.metadata.uid).sort();
  assert.deepEqual(uids(after), uids(before), `${what}: nothing released`);
}

function assertBrake(r: SweepRun, reason: RegExp, what: string): void {
  assert.equal(r.code, 2, `${what}: exit 2 (${r.report.message}) ${r.stderr}`);
  assert.equal(r.report.outcome, "brake", what);
  assert.match(r.report.message, reason, `${what}: ${r.report.message}`);
  assert.equal(r.report.totals.released, 0, what);
}

/** The brakes, each on the world as it is before the real sweep: nothing released. */
async function brakes(run: Run, api: ClusterApi, pods: PodInput[], nodes: string[]) {
  const before = await byHolder(run);
  await api.set(stateOf(pods, nodes, { emptyLists: true }));
  assertBrake(await api.sweep("a1", [...TIMING, "--apply"]), /pod list is empty/, "empty pods");
  await api.set(stateOf(pods, nodes));
  // Every claim due: older than --grace (1 s) on Milo's whole-second clock, and made before the
  // run's second (the pods were just started: some claims were not, and the count varied).
  await sleep(2_000);
  const tooMany = await api.sweep("a1", [...TIMING, "--apply", "--max-release", "10"]);
  assertBrake(tooMany, /of 51 pods would be released, more than --max-release 10/, "too many pods");
  const during = api.sweep("a1", [...TIMING, "--apply", "--max-release", "100%"]);
  await sleep(1_000); // inside the interval: the second observation meets the outage
  await run.w.milo.setFaults({ errorRate: 1, errorStatuses: [503] });
  try {
    assertBrake(await during, /Milo LIST .* failed/, "Milo 503 during the run");
  } finally {
    await run.w.milo.clearFaults();
  }
  await assertNothingReleased(run, before, "brakes");
  run.figures["sweep:brakes"] = `empty pod list; ${tooMany.report.message}; Milo 503: 0 released`;
}

/** The sweep scenario (direct mode: the sweep runs off the nodes). */
export async function clusterSweep(run: Run): Promise<void> {
  const { rt } = run.w;
  const api = new ClusterApi(run.w);
  try {
    const a1 = await timed(run, "sweep: 100 pods on a1 and a2", async () => {
      const a1 = await startPods(run, "a1", PODS_PER_NODE);
      await startPods(run, "a2", PODS_PER_NODE);
      await startPods(run, "b1", B_PODS);
      await startPods(run, "b2", B_PODS);
      return a1;
    });
    const a2 = [...rt.live.values()].filter((p) => p.node === "a2");
    const [forced, statik, ...rest] = a1;
    // The mirror pod its node's kubelet made for the static pod (annotation and node owner).
    const mirror = podInput(statik, { uid: crypto.randomUUID(), staticUid: statik.uid });
    const live = [...rest.map((p) => podInput(p)), mirror];
    await api.start(stateOf([...live, podInput(forced), ...a2.map((p) => podInput(p))], [
      "a1",
      "a2",
    ]));
    await assertLedger(run, "sweep (100 pods on cluster-a)");

    // a2 dies: its runtime stops, no DEL runs; its pods and Node leave the API. The pod
    // `forced` is force-deleted while a1 is cut off: gone from the API, still on a1.
    for (const p of a2) await rt.forgetPod(p);
    await brakes(run, api, live, ["a1"]);

    const before = await byHolder(run);
    const inflight = await rt.newPod("a1");
    const sweeping = api.sweep("a1", [...TIMING, "--apply", "--max-release", "60%"]);
    await sleep(500);
    const add = await rt.cni("ADD", inflight);
    assert.ok(add.ok, describe(add));
    const r = await sweeping;
    await api.set(stateOf([...live, podInput(inflight)], ["a1"]));
    assert.equal(r.code, 0, `${r.report.message} ${r.stderr}`);
    const after = await byHolder(run);
    const gone = [...a2, forced].map((p) => p.containerId).sort();
    assert.deepEqual(
      [...before.keys()].filter((h) => !after.has(h)).sort(),
      gone,
      "exactly a2's pods and the force-deleted pod lost their leases",
    );
    const released = r.report.rows.filter((x) => x.action === "released");
    assert.equal(released.length, [...gone].reduce((n, id) => n + before.get(id)!.length, 0));
    for (const p of [...rest, statik, inflight]) {
      assert.ok(after.has(p.containerId), `live lease of ${p.name} kept`);
    }
    for (const [h, cs] of before) {
      if (cs[0].metadata.labels?.["milo-ipam.io/cluster"] === "cluster-b") {
        assert.deepEqual(after.get(h)?.map((c) => c.metadata.uid), cs.map((c) => c.metadata.uid));
      }
    }
    run.figures["sweep:released"] = {
      claims: released.length,
      pods: gone.length,
      ms: Math.round(r.ms),
      requests: r.report.requests,
    };
    console.log(`[${run.mode}] sweep report: ${r.report.message}; requests`, r.report.requests);

    // The partition heals: the kubelet kills the force-deleted pod; its DEL finds no lease.
    const d = newDriver();
    await removePod(run, d, forced);
    await assertLedger(run, "sweep (a2 dead, one pod force-deleted)");
    for (const p of [...rt.live.values()]) await removePod(run, d, p);
    for (const p of a2) await delNetns(p.netns).catch(() => {});
    await assertLedger(run, "sweep (all removed)", 0);
  } finally {
    await api.stop();
  }
}
