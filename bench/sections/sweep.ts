/**
 * The cluster sweep, twice. Its requests: a milo-dev of its own seeded
 * through the API with one claim per pod (the labels and annotations the
 * plugin writes), the Kubernetes stand-in with those pods on a few nodes, some
 * pods recreated under their names with new UIDs so their claims are
 * candidates (as many pods as claims); then lib/sweep.ts's `sweep()`
 * in-process, a dry run and an apply, over TLS to both with production
 * timeouts, `--grace` 0, a short `--interval` and `--max-release` above the
 * candidates. At a real cluster's size: the installed `milo-ipam sweep`, a
 * dry run, against 150,000 dual-stack pods (300,000 claims) that milo-dev
 * answers in one LIST answer as Milo's store does, every pod live; its time
 * and its peak RSS.
 */
import { type Attachment, claimName, ownership } from "../../lib/claims.ts";
import { KubeClient } from "../../lib/kube.ts";
import { MiloClient } from "../../lib/milo.ts";
import { PAGE_LIMIT } from "../../lib/milo_objects.ts";
import { sweep } from "../../lib/sweep.ts";
import { execCni } from "../../scripts/cni_exec.ts";
import { type KubeDev, startKubeDev } from "../../testing/kube_dev.ts";
import { bulkPod, bulkSeed, scratchDir, seedPods } from "../../testing/milo_bulk.ts";
import { miloApi, type MiloDev, nextSecond, startMiloDev } from "../../testing/milo_dev.ts";
import { installPlugin } from "../../testing/plugin.ts";
import { BENCH_CLASSES, BENCH_SEED, BENCH_TOKEN } from "../../testing/seeds.ts";
import type { SweepResults, SweepRun, SweepScale } from "../model.ts";
import type { Plan } from "../plan.ts";
import { pool, say, text } from "../proc.ts";
import { PRODUCTION_TIMEOUTS } from "../world.ts";

const CLUSTER = "cluster-sweep";
/**
 * The Milo client's LIST `limit` and lib/kube.ts's default `limit`. Milo answers
 * a LIST whole whatever its `limit` (milo-dev does too by default).
 */
const PAGE = { milo: PAGE_LIMIT, kube: 250 };
const INTERVAL_MS = 200;
const NETWORK = { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" };

/** Creates pod `i` in the stand-in and its IPv4 claim in milo-dev. */
async function seedOne(dev: MiloDev, kube: KubeDev, i: number, nodes: number): Promise<void> {
  const node = `node-${i % nodes}`;
  const pod = kube.store.addPod({ namespace: "shop", name: `web-${i}`, nodeName: node });
  const a: Attachment = {
    cluster: CLUSTER,
    node,
    network: NETWORK.name,
    containerId: `ctr-${i}`,
    ifname: "eth0",
    podNamespace: "shop",
    podName: `web-${i}`,
    podUid: String(pod.metadata.uid),
  };
  const body = {
    apiVersion: "ipam.miloapis.com/v1alpha1",
    kind: "IPClaim",
    metadata: {
      name: claimName(a, "ipv4"),
      namespace: "default",
      ...ownership(a, "ipv4"),
    },
    spec: {
      className: BENCH_CLASSES.ipv4,
      ipFamily: "IPv4",
      scope: { network: NETWORK },
      reclaimPolicy: "Delete",
    },
  };
  const r = await miloApi(dev, "POST", "/namespaces/default/ipclaims", { body });
  if (r.status !== 201) {
    throw new Error(`seeding claim ${i}: ${r.status} ${JSON.stringify(r.body)}`);
  }
}

/** `ceil(n / limit)`, at least one page. */
function pages(n: number, limit: number): number {
  return Math.max(1, Math.ceil(n / limit));
}

async function run(dev: MiloDev, kube: KubeDev, apply: boolean, claims: number, pods: number) {
  const nodes = kube.store.nodes().length;
  const [milo, k8s] = await clients(dev, kube);
  await dev.resetStats();
  const kube0 = kube.api.log.length;
  const t0 = performance.now();
  const report = await sweep({
    cluster: CLUSTER,
    milo,
    kube: k8s,
    apply,
    graceMs: 0,
    intervalMs: INTERVAL_MS,
    // Timed here: reading and judging. The waits for a pod gone from a Ready node (a node
    // monitor grace between the observations, then its termination grace) are the rules'
    // own, whatever the cluster's size.
    nodeMonitorGraceMs: 0,
    terminationGraceMs: 0,
    maxRelease: { count: claims },
    operationMs: PRODUCTION_TIMEOUTS.totalMs,
  });
  const wallMs = performance.now() - t0;
  milo.close();
  k8s.close();
  const stats = await dev.stats();
  const log = kube.api.log.slice(kube0);
  const c = report.totals.candidates;
  const out: SweepRun = {
    apply,
    wallMs,
    outcome: report.outcome,
    message: report.message,
    candidates: c,
    released: report.totals.released,
    wouldRelease: report.totals.wouldRelease,
    kept: report.totals.kept,
    failed: report.totals.failed,
    milo: {
      total: stats.total,
      byMethod: stats.byMethod,
      client: report.requests.milo,
      // Two LISTs (one answer each), then per candidate its fresh GET (and its DELETE when applying).
      expected: 2 + c * (apply ? 2 : 1),
    },
    kube: {
      total: log.length,
      lists: log.filter((r) => r.path === "/api/v1/pods" || r.path === "/api/v1/nodes").length,
      gets: log.filter((r) => r.path.startsWith("/api/v1/namespaces/")).length,
      client: report.requests.kubernetes,
      expected: 2 * (pages(pods, PAGE.kube) + pages(nodes, PAGE.kube)) + c,
    },
  };
  return out;
}

async function clients(dev: MiloDev, kube: KubeDev): Promise<[MiloClient, KubeClient]> {
  const caCerts = [await Deno.readTextFile(dev.caFile!)];
  const milo = new MiloClient({
    baseUrl: dev.url,
    namespace: "default",
    token: BENCH_TOKEN,
    requestMs: PRODUCTION_TIMEOUTS.requestMs,
    deadline: Date.now() + PRODUCTION_TIMEOUTS.totalMs,
    client: Deno.createHttpClient({ caCerts }),
  });
  const ca = await Deno.readTextFile(kube.caFile!);
  const k8s = KubeClient.open({ server: kube.url, token: kube.token, ca, source: "bench" });
  return [milo, k8s];
}

/** The requests of a dry run and an apply, then the sweep at a real cluster's size. */
export async function sweepSection(plan: Plan): Promise<SweepResults> {
  const requests = await sweepRequests(plan);
  return { ...requests, scale: await sweepAtScale(plan) };
}

/** Seeds both sides, recreates the orphans' pods (new UIDs), runs a dry run and an apply. */
async function sweepRequests(plan: Plan): Promise<Omit<SweepResults, "scale">> {
  const n = plan.sweepClaims, nodes = plan.sweepNodes;
  const dev = await startMiloDev({ seed: BENCH_SEED, tls: true, token: BENCH_TOKEN });
  const kube = await startKubeDev({ tls: true });
  try {
    for (let i = 0; i < nodes; i++) kube.store.addNode(`node-${i}`);
    say(`sweep: seeding ${n} claims and pods on ${nodes} nodes`);
    const t0 = performance.now();
    await pool(n, 16, (i) => seedOne(dev, kube, i, nodes));
    const seedMs = performance.now() - t0;
    const every = Math.floor(n / plan.sweepOrphans);
    for (let j = 0; j < plan.sweepOrphans; j++) {
      const old = kube.store.pod("shop", `web-${j * every}`)!;
      const spec = old.spec as { nodeName?: string };
      kube.store.addPod({ namespace: "shop", name: `web-${j * every}`, nodeName: spec.nodeName });
    }
    const pods = kube.store.pods().length;
    await nextSecond(2);
    const runs: SweepRun[] = [];
    for (const apply of [false, true]) {
      const r = await run(dev, kube, apply, n, pods);
      say(`  sweep ${apply ? "apply" : "dry run"}: ${r.message} in ${r.wallMs.toFixed(0)} ms`);
      runs.push(r);
    }
    return {
      claims: n,
      pods,
      nodes,
      orphans: plan.sweepOrphans,
      pageLimits: PAGE,
      miloListWhole: true,
      intervalMs: INTERVAL_MS,
      seedMs,
      runs,
    };
  } finally {
    await kube.close();
    await dev.stop();
  }
}

/**
 * The timeouts of the scale run's node config: a `totalMs` that holds
 * milo-dev's whole-tenant answer, and the longest `requestMs` lib/config.ts
 * allows (a gap in the answer on a loaded machine is no failure of the sweep).
 */
const SCALE_TIMEOUTS = { requestMs: 60_000, totalMs: 300_000 };

/** The largest resident set (VmHWM, KiB) of a running process so far. */
async function peakKiB(pid: number): Promise<number> {
  try {
    return Number(/VmHWM:\s+(\d+)/.exec(await text(`/proc/${pid}/status`))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/**
 * The installed `milo-ipam sweep` (a dry run, as the CronJob runs it with
 * `--kubeconfig`) against `plan.sweepScalePods` dual-stack pods whose claims
 * milo-dev answers in one LIST answer, every pod live.
 */
export async function sweepAtScale(plan: Plan): Promise<SweepScale> {
  const pods = plan.sweepScalePods, nodes = plan.sweepScaleNodes, claims = 2 * pods;
  const project = "bench-scale", token = "bench-scale-token", cluster = "cluster-scale";
  // The database on tmpfs; the files the sandboxed sweep reads (CA, kubeconfig) in the temp dir.
  const db = await scratchDir("milo-ipam-sweep-scale-");
  const etc = await Deno.makeTempDir({ prefix: "milo-ipam-sweep-scale-" });
  const undo: (() => Promise<unknown>)[] = [
    () => Deno.remove(db, { recursive: true }),
    () => Deno.remove(etc, { recursive: true }),
  ];
  try {
    say(`sweep at scale: writing ${claims} claims of ${pods} pods into milo-dev's database`);
    const t0 = performance.now();
    const dbPath = `${db}/milo.db`;
    seedPods(dbPath, project, token, cluster, pods, nodes);
    const seedMs = performance.now() - t0;
    const dev = await startMiloDev({
      seed: bulkSeed(project, token),
      dir: etc,
      dbPath,
      token,
      tls: true,
    });
    undo.push(() => dev.stop());
    await dev.setLimits({ pagedLists: false });
    const kube = await startKubeDev({ tls: true });
    undo.push(() => kube.close());
    for (let i = 0; i < nodes; i++) kube.store.addNode(`node-${i}`);
    for (let i = 0; i < pods; i++) {
      const p = bulkPod(i, nodes);
      kube.store.addPod({ ...p, nodeName: p.node });
    }
    const kcfg = `${etc}/kubeconfig`;
    const ca = await Deno.readTextFile(kube.caFile!);
    await Deno.writeTextFile(kcfg, kubeconfig(kube.url, ca, kube.token));
    const p = await installPlugin({
      miloUrl: dev.url,
      token,
      caFile: dev.caFile,
      cluster,
      kube: kcfg,
      nodeConfig: { timeouts: SCALE_TIMEOUTS },
    });
    undo.push(() => p.cleanup());
    const answer = await dev.fetch(
      `${dev.url}/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims`,
      { headers: { authorization: `Bearer ${token}` } },
    );
    let answerBytes = 0;
    for await (const chunk of answer.body!) answerBytes += chunk.length;
    await nextSecond();
    const loadBefore = (await text("/proc/loadavg")).trim();
    let peak = 0, running = true;
    const watch = async (pid: number) => {
      while (running) {
        peak = Math.max(peak, await peakKiB(pid));
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    let watching: Promise<void> = Promise.resolve();
    const r = await execCni(p.installed.path, {
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
      args: ["sweep", "--kubeconfig", kcfg, "--output", "json"],
      timeoutMs: 2 * SCALE_TIMEOUTS.totalMs,
      onSpawn: (child) => void (watching = watch(child.pid)),
    });
    running = false;
    await watching;
    const loadAfter = (await text("/proc/loadavg")).trim();
    let report;
    try {
      report = JSON.parse(r.stdout);
    } catch {
      throw new Error(`sweep at scale: no report (exit ${r.code}): ${r.stderr.slice(-2_000)}`);
    }
    const out: SweepScale = {
      pods,
      claims,
      nodes,
      answerBytes,
      seedMs,
      timeouts: SCALE_TIMEOUTS,
      wallMs: r.ms,
      peakRssMiB: peak / 1024,
      outcome: report.outcome,
      exitCode: r.code,
      message: report.message,
      counted: report.totals.claims,
      candidates: report.totals.candidates,
      wouldRelease: report.totals.wouldRelease,
      requests: report.requests,
      loadBefore,
      loadAfter,
    };
    say(
      `  sweep of ${out.counted} claims in one answer: ${out.message} in ` +
        `${(out.wallMs / 1000).toFixed(1)} s, peak RSS ${out.peakRssMiB.toFixed(0)} MiB`,
    );
    return out;
  } finally {
    for (const u of undo.reverse()) await u().catch(() => {});
  }
}

/** A kubeconfig for the stand-in: its server, CA and token. */
function kubeconfig(server: string, ca: string, token: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    "current-context": "bench",
    clusters: [{ name: "c", cluster: { server, "certificate-authority-data": btoa(ca) } }],
    users: [{ name: "u", user: { token } }],
    contexts: [{ name: "bench", context: { cluster: "c", user: "u" } }],
  });
}
