/**
 * Scenario 7: pods attached through Multus, as galactic attaches them with
 * NetworkAttachmentDefinitions. Multus runs its delegate (bridge + milo-ipam,
 * on the pod's `net1`) through libcni with its own cache dir, so the
 * delegate's result is in `<multus cniDir>/results/`, and the runtime's own
 * cache holds only `multus-cni-network-<containerID>-eth0`. The node
 * reconcile must keep every such lease (the node config names both caches in
 * `resultsDirs`) and still release the lease of a Multus pod whose DEL never
 * came; then churn with faults (and, in agent mode, an agent restart) and the
 * ledger with the Multus pods still live.
 */
import assert from "node:assert/strict";
import { checkPod, delPod, describe, type Driver, newDriver, startPod } from "../kubelet.ts";
import type { Claim } from "../milo.ts";
import { MULTUS_IFNAME, MULTUS_NETWORK, NET_MULTUS } from "../netconf.ts";
import { addrsOf, delNetns } from "../netns.ts";
import { pool, sleep } from "../pool.ts";
import type { Pod } from "../runtime.ts";
import { NODE_NAMES, type NodeName } from "../topology.ts";
import { chaos, CHURN_FAULTS, HELD_MS } from "./churn.ts";
import { assertLedger, claimOf, INFLIGHT, printLedger, removePod, type Run, timed } from "./run.ts";

/** Multus pods that stay live through the whole scenario, per node. */
const LIVE_PER_NODE = 4;
/** `milo-ipam reconcile --grace 0` runs on every node, before the churn and after it. */
const ROUNDS = 3;
/** The node whose agent is SIGKILLed and restarted mid-churn (agent mode), and the forgotten pod's. */
const RESTART_NODE: NodeName = "a1";

/** One claim a reconcile run released, with the node it ran on. */
interface Released {
  node: NodeName;
  claim: string;
  via: string;
  containerId?: string;
}

const holderOf = (c: Claim) => c.metadata.annotations?.["milo-ipam.io/container-id"] ?? "";
const show = (xs: Released[]) => xs.map((x) => `${x.node}:${x.containerId}:${x.claim}:${x.via}`);

/** `milo-ipam reconcile --grace 0` on every node at once (each has its own state file). */
async function reconcileAll(run: Run): Promise<Released[]> {
  const runs = await Promise.all(
    NODE_NAMES.map(async (node) => ({ node, r: await run.w.rt.reconcile(node, { graceS: 0 }) })),
  );
  const out: Released[] = [];
  for (const { node, r } of runs) {
    assert.equal(r.code, 0, `reconcile on ${node}: ${r.stdout}${r.stderr}`);
    assert.ok(r.report, `reconcile on ${node} printed no report: ${r.stdout}${r.stderr}`);
    for (const x of r.report.released) out.push({ node, ...x });
  }
  return out;
}

/** The runtime's cache and Multus's hold exactly Multus's layout for this pod. */
async function assertLayout(run: Run, p: Pod, claims: Claim[]): Promise<void> {
  const { w } = run;
  const mine = (files: string[]) => files.filter((f) => f.includes(p.containerId));
  assert.deepEqual(
    mine(await w.cache.files(p.node)),
    [`${MULTUS_NETWORK}-${p.containerId}-eth0`],
    "the runtime's cache holds only Multus's entry",
  );
  const entry = await w.cache.read(w.rt.multusRef(p));
  assert.equal(entry?.networkName, MULTUS_NETWORK);
  assert.equal(entry?.ifName, "eth0");
  assert.deepEqual(
    mine(await w.multus!.files(p.node)),
    [`${NET_MULTUS}-${p.containerId}-${MULTUS_IFNAME}`],
    "Multus's cache holds the delegate's result",
  );
  const delegate = await w.multus!.read(p);
  assert.equal(delegate?.networkName, NET_MULTUS);
  assert.equal(delegate?.ifName, MULTUS_IFNAME);
  assert.deepEqual(delegate?.result.ips?.map((i) => i.address), p.addresses);
  const claim = claimOf(claims, p);
  assert.equal(claim?.metadata.annotations?.["milo-ipam.io/ifname"], MULTUS_IFNAME);
  assert.equal(claim?.status?.allocatedCIDR, p.addresses?.[0]);
  const on = await addrsOf(p.netns, MULTUS_IFNAME);
  assert.ok(on.includes(p.addresses![0]), `${p.netns}: ${on} lacks ${p.addresses}`);
}

/**
 * 16 Multus pods live and one whose DEL never came: three reconcile runs with
 * no grace on every node release exactly the forgotten one (at the second
 * observation) and no live pod's claim.
 */
async function liveAndForgotten(run: Run): Promise<Pod[]> {
  const { w } = run;
  const d = newDriver();
  const live: Pod[] = [];
  for (const node of NODE_NAMES) {
    for (let i = 0; i < LIVE_PER_NODE; i++) live.push(await w.rt.newPod(node, { multus: true }));
  }
  const forgotten = await w.rt.newPod(RESTART_NODE, { multus: true, name: "forgotten" });
  await pool([...live, forgotten], INFLIGHT, async (p) => {
    assert.ok(await startPod(w.rt, d, p), `ADD ${p.containerId}: ${d.lastFailure}`);
  });
  const claims = await w.milo.claims();
  for (const p of [...live, forgotten]) await assertLayout(run, p, claims);
  await assertLedger(run, "scenario 7 (Multus pods attached)", live.length + 1);
  await w.rt.forgetPod(forgotten);
  assert.deepEqual(
    [...await w.cache.files(forgotten.node), ...await w.multus!.files(forgotten.node)]
      .filter((f) => f.includes(forgotten.containerId)),
    [],
    "the forgotten pod's entries are gone from both caches",
  );
  const rounds: Released[][] = [];
  for (let i = 0; i < ROUNDS; i++) rounds.push(await reconcileAll(run));
  printLedger(run, `scenario 7 (reconcile ×${ROUNDS}, grace 0)`, await w.ledger());
  const liveIds = new Set(live.map((p) => p.containerId));
  assert.deepEqual(
    show(rounds.flat().filter((x) => liveIds.has(x.containerId ?? ""))),
    [],
    "reconcile released no claim of a live Multus pod",
  );
  assert.deepEqual(
    rounds.map(show),
    [[], show([{ node: forgotten.node, ...released(claims, forgotten) }]), []],
    "reconcile released the forgotten pod's claim at the second observation, and nothing else",
  );
  run.figures["scenario7:reconcile released per run"] = rounds.map((r) => r.length);
  await assertLedger(run, "scenario 7 (forgotten pod released)", live.length);
  return live;
}

/** How reconcile reports the orphan release of a pod's claim. */
function released(claims: Claim[], p: Pod): Omit<Released, "node"> {
  return { claim: claimOf(claims, p)!.metadata.name, via: "orphan", containerId: p.containerId };
}

/** The agent of the restart node SIGKILLed and started again once half the lifecycles are done. */
async function restartMidChurn(
  run: Run,
  churn: number,
  progress: { started: number; done: number; finished: boolean },
): Promise<Record<string, number> | undefined> {
  while (!progress.finished && progress.done < churn / 2) await sleep(50);
  if (progress.finished) return undefined;
  const agent = run.w.agent(RESTART_NODE);
  const atLifecycle = progress.done;
  const inflight = progress.started - progress.done;
  const t0 = performance.now();
  await agent.kill("SIGKILL");
  await agent.start();
  return { atLifecycle, inflight, restartMs: Math.round(performance.now() - t0) };
}

/**
 * Multus lifecycles (ADD, CHECK, DEL) under milo-dev's chaos with plugins
 * SIGKILLed mid-ADD, beside the live Multus pods; in agent mode one agent is
 * SIGKILLed and restarted halfway.
 */
async function churnBeside(run: Run, churn: number): Promise<void> {
  const { w } = run;
  const d = newDriver();
  const notOnNet1: string[] = [];
  const checkFailures: string[] = [];
  await w.milo.setFaults(CHURN_FAULTS);
  const progress = { started: 0, done: 0, finished: false };
  const chaosDone = chaos(run, churn, progress);
  const restartDone = run.mode === "agent" ? restartMidChurn(run, churn, progress) : undefined;
  const lifecycle = async (i: number) => {
    progress.started++;
    const pod = await w.rt.newPod(NODE_NAMES[i % 4], { multus: true });
    // 4 % of first attempts are SIGKILLed after 50-750 ms, as in scenario 2.
    const kill = (attempt: number) =>
      attempt === 1 && i % 25 === 12 ? 50 + Math.random() * 700 : undefined;
    try {
      if (!(await startPod(w.rt, d, pod, kill))) return;
      if (i % 10 === 0) {
        const on = await addrsOf(pod.netns, MULTUS_IFNAME);
        if (!on.includes(pod.addresses![0])) notOnNet1.push(`${pod.netns}: ${on}`);
      }
      const c = await checkPod(w.rt, d, pod);
      if (!c.ok) checkFailures.push(`${pod.containerId}: ${describe(c)}`);
      await delPod(w.rt, d, pod);
    } finally {
      await delNetns(pod.netns);
      progress.done++;
    }
  };
  let chaosFigures: { restarts: number[]; spikes: number };
  let restart: Record<string, number> | undefined;
  try {
    await timed(
      run,
      "scenario 7 churn",
      () => pool(Array.from({ length: churn }, (_, i) => i), INFLIGHT, lifecycle),
    );
  } finally {
    progress.finished = true;
    chaosFigures = await chaosDone;
    restart = await restartDone;
  }
  await w.milo.clearFaults();
  Object.assign(run.figures, {
    "scenario7:lifecycles": churn,
    "scenario7:ADD calls": d.addCalls,
    "scenario7:ADD failures by code": d.addFailures,
    "scenario7:plugins SIGKILLed mid-ADD": d.killed,
    "scenario7:CHECK calls (retries on 11)": `${d.checkCalls} (${d.checkRetries})`,
    "scenario7:DEL calls (retries)": `${d.delCalls} (${d.delRetries})`,
    "scenario7:milo-dev SIGKILL+restart ms": chaosFigures.restarts,
    ...(restart ? { "scenario7:agent restart": restart } : {}),
  });
  assert.deepEqual(d.gaveUp, [], "every lifecycle completes within the bounded retries");
  assert.deepEqual(checkFailures, [], "CHECK agrees with Milo");
  assert.deepEqual(notOnNet1, [], "sampled pods have their address on net1");
  assert.equal(chaosFigures.restarts.length, 2, "milo-dev killed and restarted twice");
  assert.ok(d.killed > 0, "some plugins were SIGKILLed mid-ADD");
  if (run.mode === "agent") assert.ok(restart, "the agent was restarted mid-churn");
}

/**
 * After the churn: reconcile runs with no grace on every node release only
 * claims nobody holds (creates that landed after their DEL), never a live
 * Multus pod's; then the ledger is 0 / 0 / 0 with the live pods, and their
 * CHECK (prevResult from Multus's cache) agrees with Milo.
 */
async function reconcileAfterChurn(run: Run, live: Pod[], d: Driver): Promise<void> {
  const { w } = run;
  await sleep(HELD_MS); // milo-dev lets go of every held request
  assert.equal(w.rt.live.size, live.length, "every churn lifecycle ended with its DEL");
  const liveIds = new Set(live.map((p) => p.containerId));
  const before = await w.ledger();
  printLedger(run, "scenario 7 (churn done)", before);
  const unheld = (await w.milo.claims()).filter((c) => !liveIds.has(holderOf(c)))
    .map((c) => c.metadata.name);
  const rounds: Released[] = [];
  for (let i = 0; i < ROUNDS; i++) rounds.push(...await reconcileAll(run));
  printLedger(run, `scenario 7 (churn done, reconcile ×${ROUNDS})`, await w.ledger());
  assert.deepEqual(
    show(rounds.filter((x) => liveIds.has(x.containerId ?? ""))),
    [],
    "reconcile released no claim of a live Multus pod",
  );
  assert.deepEqual(
    show(rounds.filter((x) => !unheld.includes(x.claim))),
    [],
    "reconcile released only claims nobody held",
  );
  run.figures["scenario7:claims nobody held after the churn (released by reconcile)"] =
    `${unheld.length} (${rounds.length})`;
  const checks = await Promise.all(live.map(async (p) => [p, await checkPod(w.rt, d, p)] as const));
  assert.deepEqual(
    checks.filter(([, c]) => !c.ok).map(([p, c]) => `${p.containerId}: ${describe(c)}`),
    [],
    "CHECK of every live Multus pod agrees with Milo",
  );
  const claims = await w.milo.claims();
  for (const p of live) await assertLayout(run, p, claims);
  await assertLedger(run, "scenario 7", live.length);
}

export async function multusAttachments(run: Run, churn: number): Promise<void> {
  const { w } = run;
  assert.ok(w.multus, "the world has Multus caches");
  const live = await timed(run, "scenario 7 live + forgotten", () => liveAndForgotten(run));
  await churnBeside(run, churn);
  const d = newDriver();
  await timed(run, "scenario 7 reconcile after churn", () => reconcileAfterChurn(run, live, d));
  await pool(live, INFLIGHT, (p) => removePod(run, d, p));
  for (const node of NODE_NAMES) {
    assert.deepEqual(await w.cache.files(node), [], `${node}: the runtime's cache is empty`);
    assert.deepEqual(await w.multus!.files(node), [], `${node}: Multus's results are empty`);
    const scratch: string[] = (await Array.fromAsync(Deno.readDir(w.multus!.base(node))))
      .filter((e) => e.isFile).map((e) => e.name);
    assert.deepEqual(scratch, [], `${node}: Multus's scratch files are gone`);
  }
  await assertLedger(run, "scenario 7 teardown", 0);
  assert.equal((await w.milo.claims()).length, 0);
}
