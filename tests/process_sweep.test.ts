/**
 * `milo-ipam sweep` as the CronJob runs it: the installed file, a kubeconfig
 * for the Kubernetes API stand-in over TLS, milo-dev holding claims made by
 * real ADDs. Dry run by default, `--apply` releases orphans only, the brakes,
 * the sandbox around the Kubernetes API and its credentials; and a cluster
 * whose LIST Milo answers in one answer of 60,000 claims.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { execCni } from "../scripts/cni_exec.ts";
import { startKubeDev } from "../testing/kube_dev.ts";
import { bulkPod, bulkSeed, scratchDir, seedPods } from "../testing/milo_bulk.ts";
import { claimBody, miloApi, nextSecond, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin } from "../testing/plugin.ts";
import { assertOk, PLUGIN_SEED, TOKEN } from "../testing/process.ts";

/**
 * Short timings the process tests can afford (the defaults: 10m grace, 30s interval, a node
 * monitor grace of 55s and a termination grace of 30s before a pod gone from a Ready node goes).
 * Kinder than the defaults on purpose: here the point is the installed sweep's sandbox, brakes
 * and scale; the timing rules run at their defaults in tests/sweep.test.ts.
 */
const FAST = [
  ...["--grace", "0s", "--interval", "1s"],
  ...["--termination-grace", "0s", "--node-monitor-grace", "0s"],
];

const b64 = (text: string) => btoa(text);

function kubeconfig(server: string, ca: string, token: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Config",
    "current-context": "test",
    clusters: [{ name: "c", cluster: { server, "certificate-authority-data": b64(ca) } }],
    users: [{ name: "u", user: { token } }],
    contexts: [{ name: "test", context: { cluster: "c", user: "u" } }],
  });
}

Deno.test("sweep: dry run, apply, brakes and sandbox through the installed file", async (t) => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const kube = await startKubeDev({ tls: true });
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-sweep-" });
  const kcfg = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    kcfg,
    kubeconfig(kube.url, await Deno.readTextFile(kube.caFile!), kube.token),
  );
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, kube: kcfg });
  const conf = p.netConf({}, {});
  const sweep = (...args: string[]) =>
    p.run({ command: "", args: ["sweep", "--kubeconfig", kcfg, ...args], timeoutMs: 30_000 });
  const claimsOf = async (cid: string) =>
    (await milo.listClaims("tenant-a", `${KEYS.containerId}=${cid}`)).length;
  const json = (r: { stdout: string }) => JSON.parse(r.stdout);
  try {
    kube.store.addNode("node-a1");
    for (const cid of ["live-1", "live-2", "gone-1", "gone-2"]) {
      assertOk(await p.run({ command: "ADD", containerId: cid, podName: cid, stdin: conf }));
      if (cid.startsWith("live")) {
        kube.store.addPod({ namespace: "shop", name: cid, uid: `uid-${cid}`, nodeName: "node-a1" });
      }
    }
    const foreign = await miloApi(milo, "POST", "/namespaces/default/ipclaims", {
      project: "tenant-a",
      body: claimBody("foreign-1", {
        labels: { [KEYS.cluster]: "cluster-b" },
        annotations: { [KEYS.podUid]: "uid-elsewhere", [KEYS.pod]: "shop/x" },
      }),
    });
    assert.equal(foreign.status, 201);
    await nextSecond(2);
    const base = [...FAST, "--max-release", "100%"];

    await t.step("dry run by default: reports would-release, releases nothing", async () => {
      const r = await sweep(...base);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /dry run \(nothing is released; pass --apply\)/);
      assert.match(r.stdout, /dry run: would release 4 of 4 candidate\(s\) \(exit 0\)/);
      for (const cid of ["gone-1", "gone-2"]) assert.equal(await claimsOf(cid), 2);
      assert.ok(!r.stdout.includes(kube.token) && !r.stdout.includes(TOKEN));
    });

    await t.step(
      "a brake: the claims of more pods than --max-release, exit 2, nothing released",
      async () => {
        const r = await sweep(
          ...[...FAST, "--max-release", "1"],
          ...["--apply", "--output", "json"],
        );
        assert.equal(r.code, 2, r.stdout + r.stderr);
        const report = json(r);
        assert.equal(report.outcome, "brake");
        assert.equal(report.settings.maxReleaseLimit, 1);
        assert.deepEqual([report.totals.pods, report.totals.podsToRelease], [4, 2]);
        for (const cid of ["gone-1", "gone-2"]) assert.equal(await claimsOf(cid), 2);
      },
    );

    await t.step(
      "the default --max-release: 2 of 4 pods in a small cluster is no brake",
      async () => {
        const r = await sweep(...FAST, "--output", "json");
        assert.equal(r.code, 0, r.stdout + r.stderr);
        assert.equal(json(r).settings.maxReleaseLimit, 2, "25% of 4 pods, the floor of 2");
      },
    );

    await t.step("a brake: an empty pod list", async () => {
      kube.api.faults.emptyLists = true;
      try {
        const r = await sweep(...base, "--apply", "--output", "json");
        assert.equal(r.code, 2, r.stdout);
        assert.match(json(r).message, /pod list is empty while the cluster has 8 claim/);
      } finally {
        kube.api.faults.emptyLists = false;
      }
      assert.equal(await claimsOf("gone-1"), 2);
    });

    await t.step("--apply releases the orphans' claims only", async () => {
      const r = await sweep(...base, "--apply", "--output", "json");
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const report = json(r);
      assert.equal(report.kind, "SweepReport");
      assert.equal(report.totals.released, 4);
      assert.equal(report.totals.foreign, 0, "the LIST selects this cluster only");
      assert.deepEqual(
        report.rows.map((x: { pod: string; action: string }) => [x.pod, x.action]).sort(),
        [
          ["shop/gone-1", "released"],
          ["shop/gone-1", "released"],
          ["shop/gone-2", "released"],
          ["shop/gone-2", "released"],
        ],
      );
      for (const cid of ["gone-1", "gone-2"]) assert.equal(await claimsOf(cid), 0);
      for (const cid of ["live-1", "live-2"]) assert.equal(await claimsOf(cid), 2);
      const left = await miloApi(milo, "GET", "/namespaces/default/ipclaims/foreign-1", {
        project: "tenant-a",
      });
      assert.equal(left.status, 200, "another cluster's claim is untouched");
    });

    await t.step(
      "Milo answering the whole list at once (its store ignores limit): over 1 MiB read",
      async () => {
        // A live pod's claims, each with another party's annotation, as real claims carry some.
        const holder = {
          [KEYS.cluster]: "cluster-a",
          [KEYS.podUid]: "uid-live-1",
          [KEYS.pod]: "shop/live-1",
          "example.com/note": "n".repeat(600),
        };
        for (let i = 0; i < 1_200; i += 100) {
          const made = await Promise.all(
            Array.from(
              { length: 100 },
              (_, j) =>
                miloApi(milo, "POST", "/namespaces/default/ipclaims", {
                  project: "tenant-a",
                  body: claimBody(`bulk-${i + j}`, {
                    className: "vpc-pods-ipv6",
                    labels: { [KEYS.cluster]: "cluster-a" },
                    annotations: holder,
                  }),
                }),
            ),
          );
          assert.deepEqual(made.filter((r) => r.status !== 201), []);
        }
        await milo.setLimits({ pagedLists: false });
        try {
          const whole = await miloApi(milo, "GET", "/namespaces/default/ipclaims?limit=500", {
            project: "tenant-a",
          });
          assert.ok(JSON.stringify(whole.body).length > 1024 * 1024, "one answer over 1 MiB");
          const r = await sweep(...base, "--output", "json");
          assert.equal(r.code, 0, r.stdout + r.stderr);
          assert.equal(json(r).totals.claims, 1_204, JSON.stringify(json(r).totals));
        } finally {
          await milo.setLimits({});
        }
      },
    );

    await t.step("the sandbox: only the installed kubeconfig and its API host", async () => {
      const other = `${dir}/other-kubeconfig`;
      await Deno.writeTextFile(other, await Deno.readTextFile(kcfg));
      const r = await p.run({
        command: "",
        args: ["sweep", "--kubeconfig", other, "--output", "json"],
      });
      assert.equal(r.code, 1);
      assert.match(json(r).error.message, /permission sandbox refused reading kubeconfig/);
      const port = Number(new URL(kube.url).port);
      const elsewhere = kubeconfig(`https://127.0.0.1:${port === 65535 ? 1 : port + 1}`, "", "t");
      const original = await Deno.readTextFile(kcfg);
      await Deno.writeTextFile(kcfg, elsewhere.replace(`"certificate-authority-data":""`, ""));
      try {
        const s = await sweep("--output", "json");
        assert.equal(s.code, 2, s.stdout);
        assert.match(json(s).message, /^brake: .*permission sandbox refused connecting to 127/);
      } finally {
        await Deno.writeTextFile(kcfg, original);
      }
    });
  } finally {
    await p.cleanup();
    await kube.close();
    await milo.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

/** The largest resident set a process reached, in MiB, from GNU time's `-v` report. */
function maxRssMiB(timeReport: string): number | undefined {
  const kb = /Maximum resident set size \(kbytes\): (\d+)/.exec(timeReport)?.[1];
  return kb === undefined ? undefined : Number(kb) / 1024;
}

Deno.test("sweep: Milo's one-answer LIST of 60,000 claims, every one counted, in bounded memory", async () => {
  // 30,000 dual-stack pods on 100 nodes, their claims as the plugin writes them: ~1.5 KB each
  // in a LIST, one answer of some 90 MB.
  const PODS = 30_000, NODES = 100, project = "tenant-big", token = "big-token";
  // The database on tmpfs; the files the sandboxed sweep reads in the temp dir.
  const dir = await scratchDir("milo-ipam-sweep-big-");
  const etc = await Deno.makeTempDir({ prefix: "milo-ipam-sweep-" });
  seedPods(`${dir}/milo.db`, project, token, "cluster-a", PODS, NODES);
  const milo = await startMiloDev({
    seed: bulkSeed(project, token),
    dir: etc,
    dbPath: `${dir}/milo.db`,
    token,
  });
  const kube = await startKubeDev({ tls: true });
  const kcfg = `${etc}/kubeconfig`;
  await Deno.writeTextFile(
    kcfg,
    kubeconfig(kube.url, await Deno.readTextFile(kube.caFile!), kube.token),
  );
  const p = await installPlugin({ miloUrl: milo.url, token, kube: kcfg });
  try {
    // Milo's store answers every LIST whole, ignoring limit and continue (milo-dev/README.md).
    await milo.setLimits({ pagedLists: false });
    // A sweep of a large tenant gives its LIST time (README "Cluster sweep"): Milo scans the
    // whole tenant before it answers; deploy/sweep-node.json's requestMs.
    await p.setNode({ timeouts: { requestMs: 5_000, totalMs: 120_000 } });
    for (let n = 0; n < NODES; n++) kube.store.addNode(`node-${n}`);
    for (let i = 0; i < PODS; i++) {
      const pod = bulkPod(i, NODES);
      if (i !== 4_321) kube.store.addPod({ ...pod, nodeName: pod.node });
    }
    await nextSecond(2);
    const time = "/usr/bin/time";
    const timed = await Deno.stat(time).then(() => true, () => false);
    const args = [
      ...["sweep", "--kubeconfig", kcfg, ...FAST],
      ...["--output", "json"],
    ];
    const r = await execCni(timed ? time : p.installed.path, {
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
      args: timed ? ["-v", p.installed.path, ...args] : args,
      timeoutMs: 300_000,
    });
    assert.equal(r.code, 0, r.stdout.slice(0, 2_000) + r.stderr.slice(-2_000));
    const report = JSON.parse(r.stdout);
    assert.equal(report.totals.claims, 2 * PODS, JSON.stringify(report.totals));
    assert.deepEqual(report.observations.map((o: { claims: number }) => o.claims), [
      2 * PODS,
      2 * PODS,
    ]);
    assert.equal(report.totals.pods, PODS);
    assert.deepEqual(
      report.rows.map((x: { pod: string; action: string }) => [x.pod, x.action]),
      [["shop/web-4321", "would-release"], ["shop/web-4321", "would-release"]],
      "the one pod gone, and no other",
    );
    assert.equal(report.requests.milo, 2 + 2, "one LIST answer an observation, a GET a candidate");
    if (timed) {
      const rss = maxRssMiB(r.stderr);
      assert.ok(rss !== undefined, `no maximum RSS in GNU time's report: ${r.stderr.slice(-500)}`);
      console.log(
        `sweep of ${2 * PODS} claims: max RSS ${rss.toFixed(1)} MiB, ${Math.round(r.ms)} ms`,
      );
      assert.ok(rss < 256, `max RSS ${rss.toFixed(1)} MiB`);
    }
  } finally {
    await p.cleanup();
    await kube.close();
    await milo.stop();
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(etc, { recursive: true });
  }
});
