/**
 * Scenario 1: two clusters, one pool of 200 addresses, 64 ADDs in flight,
 * labels, CHECK, a lease deleted behind the plugin's back, exhaustion.
 */
import assert from "node:assert/strict";
import { claimName } from "../../../lib/claims.ts";
import { addrsOf, delNetns, reaches } from "../netns.ts";
import { delPod, describe, type Driver, newDriver, startPod } from "../kubelet.ts";
import { normCidr } from "../ledger.ts";
import { POOL_SIZE } from "../netconf.ts";
import { metricValue } from "../node_agent.ts";
import { pool } from "../pool.ts";
import type { Pod } from "../runtime.ts";
import { clusterOf, NODE_NAMES } from "../topology.ts";
import { assertLedger, claimOf, INFLIGHT, removePod, type Run, timed } from "./run.ts";

/** 200 pods over the four nodes, 64 in flight: distinct addresses, on eth0, reachable. */
async function addPool(run: Run, d: Driver): Promise<Pod[]> {
  const { w } = run;
  const pods: Pod[] = [];
  for (let i = 0; i < POOL_SIZE; i++) pods.push(await w.rt.newPod(NODE_NAMES[i % 4]));
  await timed(
    run,
    "scenario 1 ADD x200",
    () => pool(pods, INFLIGHT, async (p) => void await startPod(w.rt, d, p)),
  );
  run.figures["scenario1:ADD calls (failures by code)"] = `${d.addCalls} ${
    JSON.stringify(d.addFailures)
  }`;
  assert.deepEqual(d.gaveUp, [], "every pod starts (kubelet-style bounded retries)");
  const addrs = pods.map((p) => p.addresses?.[0] ?? "none");
  assert.equal(new Set(addrs).size, POOL_SIZE, "distinct addresses");
  for (const a of addrs) assert.match(a, /^10\.244\.0\.\d+\/32$/);

  const notOnEth0: string[] = [];
  await pool(pods, 16, async (p) => {
    const onEth0 = await addrsOf(p.netns, "eth0");
    if (!onEth0.includes(p.addresses![0])) notOnEth0.push(`${p.netns}: ${onEth0}`);
  });
  assert.deepEqual(notOnEth0, [], "returned address is on the pod's eth0");
  // Pods on one node reach each other (on-link default route, ARP on the node's bridge).
  for (const node of NODE_NAMES) {
    const [x, y] = pods.filter((p) => p.node === node);
    const to = y.addresses![0].split("/")[0];
    assert.ok(await reaches(x.netns, y.netns, to), `${x.netns} reaches ${to} on ${node}`);
  }
  return pods;
}

/** Milo shows 200 claims, each labelled with its cluster, node and pod. */
async function assertClaimsLabelled(run: Run, pods: Pod[]): Promise<void> {
  const claims = await run.w.milo.claims();
  assert.equal(claims.length, POOL_SIZE);
  for (const p of pods) {
    const c = claimOf(claims, p);
    assert.ok(c, `claim of ${p.containerId}`);
    const l = c.metadata.labels ?? {};
    assert.equal(l["milo-ipam.io/cluster"], clusterOf(p.node));
    assert.equal(l["milo-ipam.io/node"], p.node);
    assert.equal(l["milo-ipam.io/pod-name"], p.name);
    assert.equal(l["milo-ipam.io/pod-namespace"], p.namespace);
    assert.equal(c.metadata.annotations?.["milo-ipam.io/pod-uid"], p.uid);
    assert.equal(normCidr(c.status.allocatedCIDR ?? ""), normCidr(p.addresses![0]));
  }
  const perCluster = Object.groupBy(
    claims,
    (c) => c.metadata.labels?.["milo-ipam.io/cluster"] ?? "none",
  );
  run.figures["scenario1:claims per cluster"] = Object.fromEntries(
    Object.entries(perCluster).map(([k, v]) => [k, v?.length]),
  );
  run.figures["scenario1:pool capacity"] = (await run.w.milo.poolStatus())?.capacity;
}

/**
 * CHECK through the master: bridge runs the delegate's CHECK first, then its own
 * validation of the interface (which, in plugins 1.1.1, expects a subnet route
 * that a /32 does not have). A lease deleted behind the plugin's back is caught
 * (104) and the runtime replaces the pod.
 */
async function checkAndReplace(run: Run, d: Driver, pods: Pod[]): Promise<void> {
  const { w } = run;
  const probe = pods[0];
  const viaBridge = await w.rt.cni("CHECK", probe);
  run.figures["scenario1:bridge CHECK on a /32"] = viaBridge.ok ? "ok" : viaBridge.msg;
  const direct = await w.rt.ipamCheck(probe);
  assert.ok(direct.ok, describe(direct));
  const victim = pods[1];
  const gone = claimOf(await w.milo.claims(), victim);
  assert.ok(gone, `claim of ${victim.containerId}`);
  assert.equal(await w.milo.deleteClaim(gone.metadata.name), 200);
  const caught = await w.rt.cni("CHECK", victim);
  assert.equal(caught.code, 104, describe(caught));
  run.figures["scenario1:CHECK after claim deleted behind the back"] = `code ${caught.code}`;
  assert.ok(await delPod(w.rt, d, victim));
  victim.containerId = `${victim.containerId}n`; // a new sandbox of the same pod
  assert.ok(await startPod(w.rt, d, victim));
  const fresh = pods.map((p) => p.addresses?.[0] ?? "none");
  assert.equal(new Set(fresh).size, POOL_SIZE, "distinct addresses after the replacement");
  assert.equal((await w.milo.claims()).length, POOL_SIZE);
}

/** The 201st ADD: exhaustion code 100, no lease anywhere. */
async function exhaustion(run: Run): Promise<void> {
  const { w } = run;
  const extra = await w.rt.newPod("b2", { name: "web-201st" });
  const r = await w.rt.cni("ADD", extra);
  assert.equal(r.ok, false);
  assert.equal(r.code, 100, describe(r));
  run.figures["scenario1:201st ADD"] = `code ${r.code}: ${r.msg}`;
  const after = await w.milo.claims();
  assert.equal(after.length, POOL_SIZE);
  assert.equal(claimOf(after, extra), undefined);
  const name = claimName(
    { cluster: "cluster-b", containerId: extra.containerId, ifname: "eth0" },
    "ipv4",
  );
  assert.ok(!after.some((c) => c.metadata.name === name));
  assert.deepEqual(await addrsOf(extra.netns, "eth0"), [], "no address on the 201st pod");
  assert.ok((await w.rt.cni("DEL", extra)).ok, "runtime teardown of the failed sandbox");
  await delNetns(extra.netns);
}

/** The agent of a1 counted its calls by verb (agent mode, metrics port configured). */
async function assertAgentMetrics(run: Run): Promise<void> {
  const text = await run.w.agent("a1").metrics();
  const calls = (verb: string) =>
    metricValue(text, `milo_ipam_calls_total{verb="${verb}",code="0"}`);
  const figures = {
    ADD: calls("ADD"),
    DEL: calls("DEL"),
    fallbacks: metricValue(text, "milo_ipam_fallbacks_total"),
  };
  run.figures["scenario1:a1 agent /metrics calls"] = figures;
  assert.ok((figures.ADD ?? 0) > 0, `ADDs counted: ${text.slice(0, 2000)}`);
  assert.ok((figures.DEL ?? 0) > 0, `DELs counted: ${text.slice(0, 2000)}`);
}

export async function twoClustersOnePool(run: Run): Promise<void> {
  const d = newDriver();
  const pods = await addPool(run, d);
  await assertClaimsLabelled(run, pods);
  await checkAndReplace(run, d, pods);
  await exhaustion(run);
  await assertLedger(run, "scenario 1", POOL_SIZE);
  await timed(run, "scenario 1 DEL x200", () => pool(pods, INFLIGHT, (p) => removePod(run, d, p)));
  run.figures["scenario1:DEL calls (retries)"] = `${d.delCalls} (${d.delRetries})`;
  await assertLedger(run, "scenario 1 teardown", 0);
  assert.equal((await run.w.milo.claims()).length, 0);
  if (run.mode === "agent") await assertAgentMetrics(run);
}
