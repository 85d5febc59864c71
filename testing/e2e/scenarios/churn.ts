/**
 * Scenario 2: churn with faults: lifecycles under injected errors, latency,
 * hangs, milo-dev SIGKILLed and restarted, plugins SIGKILLed mid-ADD.
 */
import assert from "node:assert/strict";
import { addrsOf, delNetns } from "../netns.ts";
import { checkPod, delPod, describe, newDriver, startPod } from "../kubelet.ts";
import { pool, sleep } from "../pool.ts";
import { NODE_NAMES } from "../topology.ts";
import { assertLedger, INFLIGHT, type Run, timed } from "./run.ts";

/** milo-dev's faults while a churn runs (scenario 7's churn injects the same). */
export const CHURN_FAULTS = {
  errorRate: 0.2,
  errorStatuses: [503, 429],
  retryAfterSeconds: 1,
  latencyJitterMs: 20,
  hangRate: 0.003,
  hangMs: 2_500,
};

/**
 * milo-dev's chaos while the churn runs: SIGKILL and restart at 30 % and 65 %
 * of the lifecycles, latency spikes every 8 s. Runs until `progress.finished`.
 */
export async function chaos(
  run: Run,
  churn: number,
  progress: { done: number; finished: boolean },
): Promise<{ restarts: number[]; spikes: number }> {
  const { milo } = run.w;
  const restarts: number[] = [];
  let spikes = 0;
  const deadline = performance.now() + 45 * 60_000;
  const killAt = [Math.floor(churn * 0.3), Math.floor(churn * 0.65)];
  let nextSpike = performance.now() + 5_000;
  while (!progress.finished && performance.now() < deadline) {
    if (killAt.length && progress.done >= killAt[0]) {
      killAt.shift();
      const t0 = performance.now();
      await milo.kill();
      await sleep(1_000);
      await milo.start();
      await milo.setFaults(CHURN_FAULTS);
      restarts.push(Math.round(performance.now() - t0));
    } else if (performance.now() >= nextSpike) {
      spikes++;
      await milo.setFaults({ ...CHURN_FAULTS, latencyMs: 700, latencyJitterMs: 700 });
      await sleep(1_500);
      if (!progress.finished) await milo.setFaults(CHURN_FAULTS);
      nextSpike = performance.now() + 8_000;
    }
    await sleep(100);
  }
  return { restarts, spikes };
}

/** Longer than milo-dev holds a request it will still handle (a spike: 700 ms + 700 ms jitter). */
export const HELD_MS = 3_000;

/**
 * Creates that landed after their DEL: an ADD's plugin killed while milo-dev
 * still held its POST. Each must be owed by an in-doubt entry of its node's
 * journal, and one reconcile per node releases exactly them; a second, with
 * no grace, ends the entries whose creates never came (once the last killed
 * ADD's deadline, where its doubt begins, has passed). Answers how many landed.
 */
async function lateCreates(run: Run): Promise<number> {
  const { w } = run;
  assert.equal(w.rt.live.size, 0, "every lifecycle ended with its DEL");
  await sleep(HELD_MS);
  const late = (await w.milo.claims()).map((c) => c.metadata.name).sort();
  const reconcile = async (graceS: number, dryRun = false) => {
    const reports = [];
    for (const node of NODE_NAMES) {
      const r = await w.rt.reconcile(node, { graceS, dryRun });
      assert.equal(r.code, 0, `reconcile on ${node}: ${r.stdout}${r.stderr}`);
      reports.push(r.report!);
    }
    return reports;
  };
  const owed = (await reconcile(600, true)).flatMap((r) => r.journal.flatMap((j) => j.claims));
  assert.deepEqual(late.filter((c) => !owed.includes(c)), [], "every late claim is journaled");
  const released = (await reconcile(600)).flatMap((r) => r.released);
  assert.deepEqual(
    released.map((x) => `${x.via}:${x.claim}`).sort(),
    late.map((c) => `journal:${c}`),
    "reconcile releases exactly the late claims, from the journal",
  );
  let ended = await reconcile(0);
  // An ADD killed near the end is in doubt until its deadline: once it passed, nothing is.
  const until = ended.flatMap((r) => r.kept).map((k) => /in doubt until (\S+)$/.exec(k.reason));
  const last = Math.max(0, ...until.map((m) => m ? Date.parse(m[1]) : 0));
  if (last > Date.now()) {
    await sleep(last - Date.now() + 100);
    ended = await reconcile(0);
  }
  const left = (await reconcile(0, true)).flatMap((r) => r.journal);
  const why = ended.flatMap((r) => [...r.kept, ...r.journal]);
  assert.deepEqual(left, [], `no journal entry is left (${JSON.stringify(why)})`);
  return late.length;
}

export async function churnWithFaults(run: Run, churn: number): Promise<void> {
  const { w } = run;
  const d = newDriver();
  await w.milo.setFaults(CHURN_FAULTS);
  const progress = { done: 0, finished: false };
  const notOnEth0: string[] = [];
  const checkFailures: string[] = [];
  const chaosDone = chaos(run, churn, progress);
  const kill = (attempt: number) =>
    attempt === 1 && Math.random() < 0.04 ? 50 + Math.random() * 700 : undefined;
  const lifecycle = async (i: number) => {
    const pod = await w.rt.newPod(NODE_NAMES[i % 4]);
    try {
      if (!(await startPod(w.rt, d, pod, kill))) return;
      if (i % 10 === 0) {
        const on = await addrsOf(pod.netns, "eth0");
        if (!on.includes(pod.addresses![0])) notOnEth0.push(`${pod.netns}: ${on}`);
      }
      const c = await checkPod(w.rt, d, pod);
      if (!c.ok) checkFailures.push(`${pod.containerId}: ${describe(c)}`);
      await delPod(w.rt, d, pod);
    } finally {
      await delNetns(pod.netns);
      progress.done++;
    }
  };
  const items = Array.from({ length: churn }, (_, i) => i);
  let chaosFigures: { restarts: number[]; spikes: number };
  try {
    await timed(run, "scenario 2 churn", () => pool(items, INFLIGHT, lifecycle));
  } finally {
    progress.finished = true;
    chaosFigures = await chaosDone;
  }
  await w.milo.clearFaults();
  const stats = await w.milo.stats();
  Object.assign(run.figures, {
    "scenario2:lifecycles": churn,
    "scenario2:ADD calls": d.addCalls,
    "scenario2:ADD failures by code": d.addFailures,
    "scenario2:plugins SIGKILLed mid-ADD": d.killed,
    "scenario2:CHECK calls (retries on 11)": `${d.checkCalls} (${d.checkRetries})`,
    "scenario2:DEL calls (retries)": `${d.delCalls} (${d.delRetries})`,
    "scenario2:milo-dev SIGKILL+restart ms": chaosFigures.restarts,
    "scenario2:latency spikes": chaosFigures.spikes,
    "scenario2:milo-dev faults (since last restart)": stats.faults,
  });
  assert.deepEqual(d.gaveUp, [], "every lifecycle completes within the bounded retries");
  assert.deepEqual(checkFailures, [], "CHECK agrees with Milo");
  assert.deepEqual(notOnEth0, [], "sampled pods have their address on eth0");
  assert.equal(chaosFigures.restarts.length, 2, "milo-dev killed and restarted twice");
  assert.ok(d.killed > 0, "some plugins were SIGKILLed mid-ADD");
  run.figures["scenario2:creates landed after their DEL (released by reconcile)"] =
    await lateCreates(run);
  await assertLedger(run, "scenario 2", 0);
}
