/**
 * Ledger truth on the node, through the installed plugin: no release path
 * frees a live pod's lease. A plugin starved past its give-up time after
 * sending to the agent keeps what it prints; Multus-attached pods on the
 * default cache paths stay live; an emptied cache is a brake; the release
 * journal keeps every owed release past its old bound of 1,024.
 */
import assert from "node:assert/strict";
import { attachmentHash, KEYS, ownership } from "../lib/claims.ts";
import { DEFAULT_HOST_ID_FILE } from "../lib/config.ts";
import { hostId } from "../lib/host.ts";
import { Journal } from "../lib/journal.ts";
import type { IPClaim } from "../lib/milo_objects.ts";
import type { ReconcileReport } from "../lib/reconcile.ts";
import { claimBody, miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { assertOk, freePort, ipsOf, PLUGIN_SEED, TOKEN, until } from "../testing/process.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const IS_ROOT = Deno.uid() === 0;
const IN_CI = Boolean(Deno.env.get("CI"));

/** The address each claim of `containerId` leases, as a result prints it. */
async function leased(milo: MiloDev, containerId: string): Promise<string[]> {
  const claims = await milo.listClaims("tenant-a", `${KEYS.containerId}=${containerId}`);
  return claims.map((c) => {
    const [, prefix] = String(c.status.allocatedCIDR).split("/");
    return c.status.address ? `${c.status.address}/${prefix}` : c.status.allocatedCIDR!;
  }).sort();
}

/** Runs `milo-ipam reconcile` of the install; answers its exit code and report. */
async function reconcile(p: TestPlugin, ...args: string[]) {
  const r = await p.run({ command: "", args: ["reconcile", ...args] });
  return { code: r.code, report: r.json as unknown as ReconcileReport, stdout: r.stdout };
}

/**
 * A relay in front of the agent's socket: the plugin connects to `front`, its
 * bytes go on to the agent (moved to `back`) at once, and the agent's frames
 * wait until `open()`: a test can stop the plugin after it sent its request
 * and before it could read the agent's acknowledgement.
 */
function relay(front: string, back: string) {
  const sent = Promise.withResolvers<void>();
  const gate = Promise.withResolvers<void>();
  const listener = Deno.listen({ transport: "unix", path: front });
  const pipes: Promise<unknown>[] = [];
  const pipe = async (from: Deno.Conn, to: Deno.Conn, before?: Promise<void>) => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (let n = await from.read(buf); n !== null; n = await from.read(buf)) {
        if (!before) sent.resolve();
        await before;
        for (let at = 0; at < n;) at += await to.write(buf.subarray(at, n));
      }
    } catch {
      // Either side closed.
    }
    for (const c of [from, to]) {
      try {
        c.close();
      } catch {
        // Closed already.
      }
    }
  };
  const accepting = (async () => {
    for await (const plugin of listener) {
      const agent = await Deno.connect({ transport: "unix", path: back });
      pipes.push(pipe(plugin, agent), pipe(agent, plugin, gate.promise));
    }
  })().catch(() => {});
  return {
    sent: sent.promise,
    open: () => gate.resolve(),
    close: async () => {
      listener.close();
      await accepting;
      await Promise.allSettled(pipes);
    },
  };
}

Deno.test("ledger truth: a plugin starved past its give-up time after sending keeps the lease it prints", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, agent: true });
  try {
    await p.startAgent();
    const conf = p.netConf();
    const id = "starved";
    // Another call of the attachment holds its lock: the agent's ADD, acknowledged, waits.
    await Deno.mkdir(`${p.stateDir}/locks`, { recursive: true });
    const lock = await Deno.open(
      `${p.stateDir}/locks/${
        attachmentHash({ cluster: "cluster-a", containerId: id, ifname: "eth0" }).slice(0, 3)
      }`,
      { read: true, write: true, create: true },
    );
    await lock.lock(true);
    await Deno.rename(p.socket!, `${p.socket}.agent`);
    const front = relay(p.socket!, `${p.socket}.agent`);
    let child: Deno.ChildProcess | undefined;
    const call = p.run({
      command: "ADD",
      containerId: id,
      stdin: conf,
      timeoutMs: 30_000,
      onSpawn: (c) => child = c,
    });
    try {
      await front.sent;
      // Stopped right after sending, until past its give-up time (requestMs 1000 from
      // connecting); the agent acknowledged at once, by its clock well in time, but the ack
      // reaches the plugin only after its timer ran (a node too busy to run either promptly).
      child!.kill("SIGSTOP");
      await sleep(1_500);
      child!.kill("SIGCONT");
      await sleep(200);
      front.open();
      // It fell back: its own ADD waits for the lock the agent's ADD waits for.
      await sleep(700);
    } finally {
      lock.close();
    }
    const r = await call;
    assertOk(r);
    const lines = async () => (await p.logLines()).filter((l) => l.containerId === id);
    const direct = (await lines()).find((l) => l.via === "direct");
    assert.match(
      String(direct?.fallback),
      /agent did not answer within 1000 ms/,
      `starved: ${JSON.stringify(await lines())}`,
    );
    // The agent's ADD ends (its caller gone), and any undo after it.
    await until(
      async () => (await lines()).some((l) => l.via === "agent" && l.verb === "ADD"),
      "the agent's ADD ended",
    );
    await sleep(1_000);
    const printed = ipsOf(r).map((i) => i.address).sort();
    assert.equal(printed.length, 2);
    assert.deepEqual(await leased(milo, id), printed, "Milo holds what the plugin printed");
    const undo = (await lines()).filter((l) => l.why);
    assert.deepEqual(undo, [], "the caller took the call over: nothing to undo");
    await front.close();
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});

/** Writes a libcni cache entry `<dir>/<network>-<cid>-<ifname>`; answers its path. */
async function cacheEntry(dir: string, network: string, cid: string, ifname: string) {
  await Deno.mkdir(dir, { recursive: true });
  const path = `${dir}/${network}-${cid}-${ifname}`;
  const entry = { kind: "cniCacheV1", containerId: cid, ifName: ifname, networkName: network };
  await Deno.writeTextFile(path, JSON.stringify({ ...entry, result: {} }));
  return path;
}

Deno.test({
  name: IS_ROOT || IN_CI
    ? "ledger truth: Multus-attached pods on the default cache paths stay live through reconcile"
    : "ledger truth: Multus-attached pods on the default cache paths (skipped: needs root)",
  ignore: !IS_ROOT && !IN_CI,
}, async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  // No resultsDir(s): the defaults, /var/lib/cni/results and /var/lib/cni/multus/results.
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    nodeConfig: { resultsDir: undefined },
  });
  const written: string[] = [];
  const tag = crypto.randomUUID().slice(0, 8);
  try {
    const conf = p.netConf();
    const pods = [1, 2, 3].map((i) => `multus-${tag}-${i}`);
    for (const cid of pods) {
      assertOk(await p.run({ command: "ADD", containerId: cid, ifname: "net1", stdin: conf }));
      // The runtime caches Multus itself; Multus caches its delegate under its own cache dir.
      written.push(await cacheEntry("/var/lib/cni/results", "multus-cni-network", cid, "eth0"));
      written.push(await cacheEntry("/var/lib/cni/multus/results", "vpc-7b3e", cid, "net1"));
    }
    const gone = `multus-${tag}-gone`;
    assertOk(await p.run({ command: "ADD", containerId: gone, ifname: "net1", stdin: conf }));
    const runs = [];
    for (let i = 0; i < 3; i++) runs.push(await reconcile(p, "--grace", "0"));
    for (const cid of pods) assert.equal((await leased(milo, cid)).length, 2, `${cid} kept`);
    assert.deepEqual(await leased(milo, gone), [], "the pod whose DEL never came is released");
    for (const r of runs) {
      assert.equal(r.code, 0, r.stdout);
      assert.deepEqual(r.report.caches.map((c) => c.dir), [
        "/var/lib/cni/results",
        "/var/lib/cni/multus/results",
      ]);
    }
  } finally {
    for (const path of written) await Deno.remove(path).catch(() => {});
    await p.cleanup();
    await milo.stop();
  }
});

Deno.test("ledger truth: an emptied cache is a brake for reconcile and the agent; --force releases", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const metrics = `127.0.0.1:${freePort()}`;
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    agent: true,
    agentMetrics: metrics,
    nodeConfig: { reconcile: { graceS: 0 } },
  });
  try {
    const conf = p.netConf();
    const pods = ["e1", "e2", "e3", "e4"];
    for (const cid of pods) {
      assertOk(await p.run({ command: "ADD", containerId: cid, stdin: conf }));
      await cacheEntry(p.resultsDir, "vpc-7b3e", cid, "eth0");
    }
    const clean = await reconcile(p);
    assert.equal(clean.code, 0, clean.stdout);
    assert.equal(clean.report.live, 4);
    for (const e of Deno.readDirSync(p.resultsDir)) Deno.removeSync(`${p.resultsDir}/${e.name}`);
    await reconcile(p, "--grace", "0");
    const braked = await reconcile(p, "--grace", "0");
    assert.equal(braked.code, 2, braked.stdout);
    assert.equal(braked.report.brake?.reason, "empty");
    assert.deepEqual(braked.report.released, []);
    for (const cid of pods) assert.equal((await leased(milo, cid)).length, 2, `${cid} kept`);

    await p.startAgent();
    const text = async () => await (await fetch(`http://${metrics}/metrics`)).text();
    await until(
      async () => /milo_ipam_reconcile_brakes_total\{reason="empty"\} 1/.test(await text()),
      "the agent's reconcile at start braked",
    );
    // The agent counts the brake, then writes its log line.
    const reconciled = async () => (await p.logLines()).find((l) => l.verb === "RECONCILE");
    await until(async () => !!(await reconciled()), "the agent's reconcile logged");
    const line = await reconciled();
    assert.equal(line?.level, "warn");
    assert.equal((line?.brake as { reason?: string })?.reason, "empty");
    await p.stopAgent();
    for (const cid of pods) assert.equal((await leased(milo, cid)).length, 2, `${cid} kept`);

    const forced = await reconcile(p, "--grace", "0", "--force");
    assert.equal(forced.code, 0, forced.stdout);
    assert.equal(forced.report.released.length, 8, "an operator's forced run releases");
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});

Deno.test("ledger truth: the journal keeps every owed release past 1,024 entries; reconcile makes them", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN });
  try {
    const journal = new Journal(p.stateDir);
    const owed = 1_100;
    // The host the install's plugin records on its claims.
    const host = hostId({ hostIdFile: DEFAULT_HOST_ID_FILE, stateDir: p.stateDir });
    const make = async (i: number) => {
      const name = `owed-${i}`;
      const a = {
        cluster: "cluster-a",
        node: "node-a1",
        host,
        network: "vpc-7b3e",
        containerId: name,
        ifname: "eth0",
      };
      // Each claim as the plugin made it: its holder recorded, as the failed DEL read it.
      const r = await miloApi<IPClaim>(milo, "POST", "/namespaces/default/ipclaims", {
        body: claimBody(name, {
          className: "vpc-pods-ipv6",
          ipFamily: "IPv6",
          ...ownership(a, "ipv6"),
        }),
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      await journal.record(a, [{ name, uid: r.body.metadata.uid }], "Milo answered 503", 1_000 + i);
    };
    for (let i = 0; i < owed; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, owed - i) }, (_, j) => make(i + j)));
    }
    const conf = p.netConf();
    assertOk(await p.run({ command: "ADD", containerId: "last", stdin: conf }));
    await milo.setFaults({ errorRate: 1, errorStatuses: [503], methods: ["DELETE"] });
    const del = await p.run({ command: "DEL", containerId: "last", stdin: conf });
    await milo.clearFaults();
    assert.equal(del.json?.code, 11, del.stdout);
    assert.equal((await journal.list()).length, owed + 1, "no entry dropped");
    const r = await reconcile(p);
    assert.equal(r.code, 0, r.stdout.slice(0, 2_000));
    assert.equal(r.report.released.filter((x) => x.via === "journal").length, owed + 2);
    assert.deepEqual(await journal.list(), []);
    assert.deepEqual(await milo.listClaims("tenant-a"), [], "every owed release made");
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});

/** Copies a directory tree (a state directory carried by a disk image). */
async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    if (e.isDirectory) await copyTree(`${from}/${e.name}`, `${to}/${e.name}`);
    else if (e.isFile) await Deno.copyFile(`${from}/${e.name}`, `${to}/${e.name}`);
  }
}

/**
 * The original's ADDs of `pods`, then its records copied into the clone's
 * state directory (a disk image): each pod's addresses, as the original holds them.
 */
async function inherited(
  original: TestPlugin,
  clone: TestPlugin,
  pods: string[],
  conf: Record<string, unknown>,
): Promise<Map<string, string[]>> {
  const before = new Map<string, string[]>();
  for (const cid of pods) {
    const r = await original.run({ command: "ADD", containerId: cid, stdin: conf });
    assertOk(r);
    before.set(cid, ipsOf(r).map((i) => i.address).sort());
  }
  await copyTree(`${original.stateDir}/holdings`, `${clone.stateDir}/holdings`);
  return before;
}

Deno.test("ledger truth: a cloned machine's DEL of a sandbox it inherited leaves the original's live lease, directly and through its journal", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const etc = await Deno.makeTempDir({ prefix: "milo-ipam-clone-" });
  const original = await installPlugin({ miloUrl: milo.url, token: TOKEN, node: "node-a1" });
  await Deno.writeTextFile(`${etc}/machine-id`, "c10e0c10e0c10e0c10e0c10e0c10e0c1\n");
  // The clone: its own machine-id and node name, as the README asks, and the original's disk.
  const clone = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    node: "node-b1",
    nodeConfig: { hostIdFile: `${etc}/machine-id` },
  });
  try {
    const conf = original.netConf();
    const pods = ["inherited-1", "inherited-2"];
    const before = await inherited(original, clone, pods, conf);

    // The clone's runtime tears the first inherited sandbox down: its DEL succeeds, leaving it.
    const direct = await clone.run({ command: "DEL", containerId: pods[0], stdin: conf });
    assertOk(direct);
    const line = (await clone.logLines()).find((l) => l.verb === "DEL");
    assert.match(String(line?.skipped), /recorded for host [0-9a-f]{32}, not this one/);

    // The second's DEL meets Milo down: journaled; the clone's reconcile leaves it too.
    await milo.setFaults({ errorRate: 1, errorStatuses: [503] });
    const failed = await clone.run({ command: "DEL", containerId: pods[1], stdin: conf });
    await milo.clearFaults();
    assert.equal(failed.json?.code, 11, failed.stdout);
    assert.equal((await new Journal(clone.stateDir).list()).length, 1);
    const r = await reconcile(clone);
    assert.deepEqual(r.report.released, [], r.stdout);
    assert.ok(
      r.report.kept.some((k) => /recorded for host [0-9a-f]{32}, not this one/.test(k.reason)),
      r.stdout,
    );
    assert.deepEqual(await new Journal(clone.stateDir).list(), []);

    for (const cid of pods) {
      assert.deepEqual(await leased(milo, cid), before.get(cid), `${cid}: the original keeps it`);
    }
  } finally {
    await clone.cleanup();
    await original.cleanup();
    await milo.stop();
    await Deno.remove(etc, { recursive: true });
  }
});

Deno.test("ledger truth: a clone that kept the machine-id under its own node name releases none of the original's leases: DEL, journal, reboot rule", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const etc = await Deno.makeTempDir({ prefix: "milo-ipam-clone-" });
  const hostIdFile = `${etc}/machine-id`;
  await Deno.writeTextFile(hostIdFile, "c10e0c10e0c10e0c10e0c10e0c10e0c1\n");
  await Deno.writeTextFile(`${etc}/boot-a`, "11111111-2222-4333-8444-555555555555\n");
  await Deno.writeTextFile(`${etc}/boot-b`, "66666666-7777-4888-9999-aaaaaaaaaaaa\n");
  const original = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    node: "node-a1",
    nodeConfig: { hostIdFile, bootIdFile: `${etc}/boot-a` },
  });
  // The clone: the original's disk and machine-id, its own kernel (boot) and node name.
  const clone = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    node: "node-b1",
    nodeConfig: { hostIdFile, bootIdFile: `${etc}/boot-b` },
  });
  try {
    const conf = original.netConf();
    const pods = ["inherited-1", "inherited-2", "inherited-3"];
    const before = await inherited(original, clone, pods, conf);

    // The clone's runtime tears the first inherited sandbox down: its DEL succeeds, leaving it.
    const direct = await clone.run({ command: "DEL", containerId: pods[0], stdin: conf });
    assertOk(direct);
    const line = (await clone.logLines()).find((l) => l.verb === "DEL");
    assert.match(
      String(line?.skipped),
      /recorded for node node-a1 under this host's machine-id, not for this node \(node-b1\)/,
    );
    // The second's DEL meets Milo down: journaled.
    await milo.setFaults({ errorRate: 1, errorStatuses: [503] });
    const failed = await clone.run({ command: "DEL", containerId: pods[1], stdin: conf });
    await milo.clearFaults();
    assert.equal(failed.json?.code, 11, failed.stdout);
    // The clone's reconcile: the journal leaves the second, and the third's record (of another
    // boot, its container in no cache of the clone) is node-a1's, not a dead sandbox of this one.
    for (let i = 0; i < 2; i++) {
      const r = await reconcile(clone, "--grace", "0");
      assert.deepEqual(r.report.released, [], r.stdout);
      assert.equal(r.report.boot, "66666666-7777-4888-9999-aaaaaaaaaaaa");
      if (i === 0) {
        assert.ok(
          r.report.kept.some((k) =>
            /^journal entry: claim recorded for node node-a1/.test(k.reason)
          ),
          r.stdout,
        );
      }
      assert.ok(
        r.report.kept.some((k) => /^recorded by node node-a1 under this host's/.test(k.reason)),
        r.stdout,
      );
    }
    assert.deepEqual(await new Journal(clone.stateDir).list(), []);
    for (const cid of pods) {
      assert.deepEqual(await leased(milo, cid), before.get(cid), `${cid}: the original keeps it`);
    }
  } finally {
    await clone.cleanup();
    await original.cleanup();
    await milo.stop();
    await Deno.remove(etc, { recursive: true });
  }
});

Deno.test("ledger truth: a DELETE whose answer is lost is not sent again blind; the pod's new sandbox on another node keeps its claim", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const etc = await Deno.makeTempDir({ prefix: "milo-ipam-moved-" });
  await Deno.writeTextFile(`${etc}/machine-id`, "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0\n");
  // A StatefulSet pod's network names its claims after the pod (Retain: re-bound by name).
  const grant = { allowIdentities: [{ namespace: "shop", identity: "pod" }] };
  // A long request timeout: the test makes node B's ADD while node A's DELETE hangs.
  const slow = { timeouts: { requestMs: 4_000, totalMs: 16_000 } };
  const a = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    node: "node-a1",
    nodeConfig: { ...grant, ...slow },
  });
  const b = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    node: "node-b1",
    nodeConfig: { ...grant, hostIdFile: `${etc}/machine-id` },
  });
  try {
    const pod = { podName: "db-0", podNamespace: "shop" };
    assertOk(
      await a.run({
        command: "ADD",
        containerId: "old",
        stdin: a.netConf({ identity: "pod" }),
        ...pod,
      }),
    );
    const [claim] = await milo.listClaims("tenant-a", `${KEYS.containerId}=old`);
    // Milo runs node A's DELETE, then holds its answer until the request times out.
    await milo.setFaults({
      methods: ["DELETE"],
      kinds: ["ipclaims"],
      faultPoint: "after",
      hangRate: 1,
      hangMs: 30_000,
    });
    const del = a.run({
      command: "DEL",
      containerId: "old",
      stdin: a.netConf({ identity: "pod" }),
      ...pod,
    });
    await until(
      async () => {
        const r = await miloApi(milo, "GET", `/namespaces/default/ipclaims/${claim.metadata.name}`);
        return r.status === 404;
      },
      "node A's DELETE ran",
      4_000,
    );
    await milo.clearFaults();
    // The pod's new sandbox on node B makes the name again: Milo re-binds its retained address.
    const moved = await b.run({
      command: "ADD",
      containerId: "new",
      stdin: b.netConf({ identity: "pod" }),
      ...pod,
    });
    assertOk(moved);
    // Milo overloaded for creates from then on: a claim removed now could not be made again.
    await milo.setFaults({ methods: ["POST"], errorRate: 1, errorStatuses: [503] });
    const r = await del;
    assertOk(r);
    await milo.clearFaults();
    const [now] = await milo.listClaims("tenant-a", `${KEYS.containerId}=new`);
    assert.equal(now?.metadata.annotations?.[KEYS.containerId], "new", "node B's claim stays");
    assert.deepEqual(ipsOf(moved).map((i) => i.address), await leased(milo, "new"));
  } finally {
    await milo.clearFaults().catch(() => {});
    await a.cleanup();
    await b.cleanup();
    await milo.stop();
    await Deno.remove(etc, { recursive: true });
  }
});

Deno.test({
  name:
    "ledger truth: the agent killed with its creates in flight, the plugin's fallback ADD refused: the DEL journals in doubt, reconcile releases the late claims",
  sanitizeResources: false,
  sanitizeOps: false,
}, async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, agent: true });
  try {
    const conf = p.netConf();
    // The node has listed its claims once already: reconcile judges only its own record from now.
    assert.equal((await reconcile(p)).code, 0);
    await p.startAgent();
    await milo.resetStats();
    // Milo holds the agent's creates for 6 s before it makes them.
    await milo.setFaults({ methods: ["POST"], kinds: ["ipclaims"], latencyMs: 6_000 });
    const add = p.run({ command: "ADD", containerId: "doubt", stdin: conf, timeoutMs: 30_000 });
    await until(
      async () => ((await milo.stats()).byMethod.POST ?? 0) >= 2,
      "the agent's creates sent",
    );
    // From now on Milo refuses creates at once (its pool full): the plugin's fallback ADD is
    // answered, and settles.
    await milo.setFaults({
      methods: ["POST"],
      kinds: ["ipclaims"],
      errorRate: 1,
      errorStatuses: [507],
    });
    await p.stopAgent("SIGKILL");
    const added = await add;
    assert.equal(added.json?.code, 100, added.stdout);
    // The runtime's DEL after the failed ADD: nothing there yet.
    assertOk(await p.run({ command: "DEL", containerId: "doubt", stdin: conf }));
    const [entry] = await new Journal(p.stateDir).list();
    assert.equal(entry?.entry?.inDoubt, true, "the killed agent's creates are owed in doubt");
    // The agent's creates land, after the DEL.
    await milo.clearFaults();
    await until(
      async () => (await leased(milo, "doubt")).length === 2,
      "the late creates landed",
      15_000,
    );
    const r = await reconcile(p);
    assert.deepEqual(r.report.released.map((x) => x.via), ["journal", "journal"], r.stdout);
    assert.deepEqual(await leased(milo, "doubt"), [], "no lease without a holder");
  } finally {
    await milo.clearFaults().catch(() => {});
    await p.cleanup();
    await milo.stop();
  }
});
