/**
 * Releasing leases by hand through the installed plugin, against milo-dev:
 * `milo-ipam decommission` of a deleted cluster (no Kubernetes API), its dry
 * run first, refused while the cluster shows activity or when --apply is not
 * the dry run's count; `milo-ipam release ADDRESS`, refused while its holder
 * lives (the cluster's API, the Kubernetes stand-in, still has the pod), when
 * --holder names another pod, or when the holder's node still makes claims,
 * and done once the pod is gone.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import type { DecommissionReport } from "../lib/decommission.ts";
import type { ReleaseReport } from "../lib/release.ts";
import { startKubeDev } from "../testing/kube_dev.ts";
import { nextSecond, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { assertOk, ipsOf, PLUGIN_SEED, TOKEN, until } from "../testing/process.ts";

/** ADDs pod `name` (container `c-NAME`) through `p`; answers its addresses. */
async function addPod(p: TestPlugin, name: string): Promise<string[]> {
  const r = await p.run({
    command: "ADD",
    containerId: `c-${name}`,
    podNamespace: "shop",
    podName: name,
    stdin: p.netConf(),
  });
  assertOk(r);
  return ipsOf(r).map((i) => i.address);
}

Deno.test("process: decommission of a deleted cluster: dry run first, refused while it shows activity, then every lease released", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  // The operator's install names the project's Milo; cluster-b's nodes are gone.
  const operator = await installPlugin({ miloUrl: milo.url, token: TOKEN, cluster: "cluster-a" });
  const b = await installPlugin({ miloUrl: milo.url, token: TOKEN, cluster: "cluster-b" });
  const claimsOf = async (cluster: string) =>
    (await milo.listClaims("tenant-a", `${KEYS.cluster}=${cluster}`)).length;
  const run = async (...args: string[]) => {
    const r = await operator.run({
      command: "",
      args: ["decommission", "--cluster", "cluster-b", "--output", "json", ...args],
      timeoutMs: 30_000,
    });
    return { code: r.code, report: r.json as unknown as DecommissionReport, stderr: r.stderr };
  };
  try {
    await addPod(operator, "live-a");
    await addPod(b, "b-0");
    await addPod(b, "b-1");
    assert.equal(await claimsOf("cluster-b"), 4);

    // Its claims were made a moment ago: the cluster still runs, by the default --quiet.
    const recent = await run("--interval", "0s");
    assert.equal(recent.code, 2, JSON.stringify(recent.report));
    assert.equal(recent.report.outcome, "refused");
    assert.match(
      recent.report.message,
      /the cluster still runs: claim pod-\w+-v[46] .* within --quiet/,
    );
    assert.equal(await claimsOf("cluster-b"), 4);

    await nextSecond(2);
    const dry = await run("--quiet", "1s", "--interval", "0s");
    assert.equal(dry.code, 0, JSON.stringify(dry.report));
    assert.deepEqual(dry.report.totals, {
      claims: 4,
      released: 0,
      wouldRelease: 4,
      gone: 0,
      failed: 0,
    });
    assert.deepEqual(dry.report.nodes, { "node-a1": 4 });
    assert.match(dry.report.message, /--apply --expect 4$/);
    assert.equal(await claimsOf("cluster-b"), 4, "a dry run releases nothing");

    // --apply needs the dry run's count, and refuses any other.
    const bare = await run("--quiet", "1s", "--apply");
    assert.equal(bare.code, 2);
    assert.match(bare.stderr, /--apply needs --expect N/);
    const wrong = await run("--quiet", "1s", "--interval", "0s", "--apply", "--expect", "3");
    assert.equal(wrong.code, 2);
    assert.match(wrong.report.message, /--expect 3 but the cluster has 4 claim\(s\) now/);

    // A node of it still adds a pod between the two LISTs: refused. The ADD starts once the first
    // LIST is made and ends within its totalMs + 1 s (5 s), before the second.
    await milo.resetStats();
    const during = run("--quiet", "1s", "--interval", "10s");
    await until(async () => ((await milo.stats()).listsByKind.ipclaims?.lists ?? 0) > 0, "LIST 1");
    await addPod(b, "b-2");
    const active = await during;
    assert.equal(active.code, 2, JSON.stringify(active.report));
    assert.match(active.report.message, /between the two LISTs claim pod-\w+-v[46] .* appeared/);
    assert.equal(await claimsOf("cluster-b"), 6);

    await nextSecond(2);
    const done = await run("--quiet", "1s", "--interval", "0s", "--apply", "--expect", "6");
    assert.equal(done.code, 0, JSON.stringify(done.report));
    assert.equal(done.report.totals.released, 6);
    assert.equal(await claimsOf("cluster-b"), 0);
    assert.equal(await claimsOf("cluster-a"), 2, "another cluster's leases stay");
    const text = await operator.run({
      command: "",
      args: ["decommission", "--cluster", "cluster-b", "--quiet", "1s", "--interval", "0s"],
    });
    assert.equal(text.code, 0);
    assert.match(text.stdout, /dry run: would release 0 claim\(s\) of cluster cluster-b/);
  } finally {
    await operator.cleanup();
    await b.cleanup();
    await milo.stop();
  }
});

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

Deno.test("process: release ADDRESS is refused while its holder lives, and releases it once the pod is gone", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const kube = await startKubeDev({ tls: true });
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-release-" });
  const kcfg = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    kcfg,
    kubeconfig(kube.url, await Deno.readTextFile(kube.caFile!), kube.token),
  );
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, kube: kcfg });
  const release = async (...args: string[]) => {
    const r = await p.run({
      command: "",
      args: ["release", ...args, "--output", "json"],
      timeoutMs: 30_000,
    });
    return { code: r.code, report: r.json as unknown as ReleaseReport, stderr: r.stderr };
  };
  // Kinder than the defaults (30s, 55s, 30s) so the test runs in seconds: the rules are the
  // sweep's, at their defaults in tests/sweep.test.ts.
  const fast = ["--interval", "0s", "--node-monitor-grace", "0s", "--termination-grace", "0s"];
  try {
    kube.store.addNode("node-a1");
    const [v4] = await addPod(p, "web-0");
    const address = v4.split("/")[0];
    kube.store.addPod({
      namespace: "shop",
      name: "web-0",
      uid: "uid-c-web-0",
      nodeName: "node-a1",
    });
    const held = async () =>
      (await milo.listClaims("tenant-a", `${KEYS.containerId}=c-web-0`)).length;

    const lives = await release(address, "--kubeconfig", kcfg, ...fast, "--apply");
    assert.equal(lives.code, 2, JSON.stringify(lives.report));
    assert.match(lives.report.message, /its holder lives: pod shop\/web-0 of UID uid-c-web-0/);
    assert.equal(await held(), 2);

    // Your word must name the pod the claim records, on a node that no longer starts pods.
    const other = await release(address, "--holder", "uid-someone-else", "--apply");
    assert.equal(other.code, 2);
    assert.match(other.report.message, /not --holder uid-someone-else/);
    const busy = await release(address, "--holder", "uid-c-web-0", "--apply");
    assert.equal(busy.code, 2);
    assert.match(busy.report.message, /node node-a1 of cluster cluster-a made a claim .* --quiet/);
    const none = await release(address, "--apply");
    assert.equal(none.code, 2, "no proof named: a wrong command line");
    assert.match(none.stderr, /prove the holder gone one way/);
    assert.equal(await held(), 2);

    // The pod is deleted (its node Ready): a dry run says so, --apply releases its address only.
    kube.store.removePod("shop", "web-0");
    const dry = await release(address, "--kubeconfig", kcfg, ...fast);
    assert.equal(dry.code, 0, JSON.stringify(dry.report));
    assert.equal(dry.report.outcome, "would-release");
    assert.equal(await held(), 2);
    const done = await release(address, "--kubeconfig", kcfg, ...fast, "--apply");
    assert.equal(done.code, 0, JSON.stringify(done.report));
    assert.equal(done.report.outcome, "released");
    assert.equal(done.report.claim?.pod, "shop/web-0");
    assert.equal(await held(), 1, "the IPv6 claim of its other address stays");
    const again = await release(address, "--kubeconfig", kcfg, ...fast, "--apply");
    assert.equal(again.code, 2);
    assert.match(again.report.message, /no claim holds/);
  } finally {
    await p.cleanup();
    await kube.close();
    await milo.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
