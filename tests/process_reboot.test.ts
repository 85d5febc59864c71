/**
 * A node reboot under galactic, through the installed plugin and the master
 * stand-in (testing/galactic/master.ts), against milo-dev: `/run` is tmpfs, so
 * the token is gone until the DaemonSet's init container writes it again; the
 * runtime's teardown DELs of the old sandboxes fail (galactic swallows the
 * failure and libcni drops its cache), or never come; the pods' new sandboxes
 * ADD. Under pod identity the old sandboxes hold the pods' claims, so the new
 * ADDs are refused (11, "held by") until the node releases them. Within two
 * reconcile rounds of the token's return every pod runs again, each with its
 * address under pod identity, and no live lease is released: rounds of
 * `milo-ipam reconcile` run by hand, and the agent's own (its start and its
 * timer) once the DaemonSet's pod runs again.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { type ReconcileReport } from "../lib/reconcile.ts";
import { execCni, type ExecResult } from "../scripts/cni_exec.ts";
import { nadOf, stanza, writeNad } from "../testing/galactic/chain.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { PLUGIN_SEED, TOKEN } from "../testing/process.ts";

const CLUSTER = "cluster-galactic";
const NODE = "node-g1";
const NS = "shop";
const VPC = "7b3e";
const MASTER = new URL("../testing/galactic/master.ts", import.meta.url).pathname;
const BOOT_1 = "11111111-2222-4333-8444-555555555555";
const BOOT_2 = "66666666-7777-4888-9999-aaaaaaaaaaaa";

type Json = Record<string, unknown>;

/** The agent's reconcile interval in the agent's test: the least the node config takes. */
const INTERVAL_S = 10;

/** What a test's recovery after the reboot may do. */
interface Recovery {
  /** One `milo-ipam reconcile` run by hand. */
  reconcile(): Promise<{ code: number; stdout: string }>;
  /** The runtime's retry of every pod not running yet: true once every pod runs. */
  retry(): Promise<boolean>;
  /** The node's install (its agent, its log). */
  plugin: TestPlugin;
  /** When the token came back (ms since epoch). */
  tokenBack: number;
}

/**
 * Boot, reboot, the token's return and the new sandboxes' ADDs; then `recover`
 * brings every pod back, and every pod must run, none released live.
 */
async function rebootThen(o: { agent: boolean }, recover: (w: Recovery) => Promise<void>) {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-reboot-" });
  const bootFile = `${dir}/boot_id`;
  await Deno.writeTextFile(bootFile, `${BOOT_1}\n`);
  const plugin = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    cluster: CLUSTER,
    node: NODE,
    nodeConfig: { bootIdFile: bootFile, allowIdentities: [{ namespace: NS }] },
    agent: o.agent,
  });
  try {
    if (o.agent) {
      await plugin.setNode({
        agent: { ...plugin.node.agent as Json, reconcileIntervalS: INTERVAL_S },
      });
    }
    const bin = `${dir}/bin`;
    const nads = `${dir}/nads`;
    await Deno.mkdir(bin);
    await Deno.writeTextFile(
      `${bin}/galactic-veth`,
      `#!/bin/sh\nexec '${Deno.execPath()}' run --allow-all --no-config --no-lock '${MASTER}' ` +
        `--flavour galactic-veth "$@"\n`,
      { mode: 0o755 },
    );
    const ipam = plugin.netConf().ipam as Json;
    /** A NAD per identity, one VPC attachment each: the master's stanza, as libcni builds it. */
    const conf = async (identity: string, att: string): Promise<Json> => {
      const conflist = {
        cniVersion: "1.1.0",
        name: `net-${att}`,
        plugins: [
          { type: "galactic-veth", vpc: VPC, vpcattachment: att, ipam: { ...ipam, identity } },
          { type: "galactic-bgp", vpc: VPC, vpcattachment: att },
        ],
      };
      await writeNad(nads, nadOf(NS, conflist));
      return stanza(conflist, 0);
    };
    const master = (command: string, cid: string, pod: string, c: Json): Promise<ExecResult> =>
      execCni(`${bin}/galactic-veth`, {
        env: {
          PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
          CNI_COMMAND: command,
          CNI_CONTAINERID: cid,
          CNI_IFNAME: "eth0",
          CNI_NETNS: `/var/run/netns/${cid}`,
          CNI_PATH: `${bin}:${plugin.dir}/bin`,
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${pod};` +
            `K8S_POD_UID=uid-${pod}`,
          GALACTIC_CNI_NODE_NAME: NODE,
          GALACTIC_CNI_LOG_FILE: `${dir}/galactic.log`,
          GALACTIC_MASTER_TEST_NADS: nads,
        },
        stdin: c,
        timeoutMs: 20_000,
      });
    const cache = (cid: string, c: Json) => `${plugin.resultsDir}/${c.name}-${cid}-eth0`;
    /** The libcni cache entry the runtime writes after a successful ADD. */
    const cached = (cid: string, c: Json, result: Json) =>
      Deno.writeTextFile(
        cache(cid, c),
        JSON.stringify({
          kind: "cniCacheV1",
          containerId: cid,
          ifName: "eth0",
          networkName: c.name,
          result,
        }),
      );
    const v4 = (r: ExecResult) =>
      ((r.json?.ips ?? []) as { address: string }[]).find((i) => !i.address.includes(":"))
        ?.address;
    const reconcile = async () => {
      const r = await plugin.run({ command: "", args: ["reconcile"] });
      return { code: r.code, report: r.json as unknown as ReconcileReport, stdout: r.stdout };
    };

    // Boot 1: three pods on a pod-identity network, two on an attachment-identity one.
    const byPod = await conf("pod", "a1");
    const byAttachment = await conf("attachment", "a2");
    const pods = [
      { pod: "db-0", c: byPod },
      { pod: "db-1", c: byPod },
      { pod: "db-2", c: byPod },
      { pod: "web-0", c: byAttachment },
      { pod: "web-1", c: byAttachment },
    ].map((p) => ({ ...p, old: `old-${p.pod}`, now: `new-${p.pod}`, address: "" }));
    for (const p of pods) {
      const r = await master("ADD", p.old, p.pod, p.c);
      assert.equal(r.code, 0, `${p.pod}: ${r.stdout}`);
      p.address = v4(r)!;
      await cached(p.old, p.c, r.json!);
    }
    assert.equal((await reconcile()).code, 0, "a clean run before the reboot");

    // The reboot: the kernel's boot id changes, /run is empty (no token), every sandbox died.
    await Deno.writeTextFile(bootFile, `${BOOT_2}\n`);
    await Deno.remove(plugin.tokenFile);
    // The runtime tears down the old sandboxes it knows of (db-2's state was lost: no DEL):
    // milo-ipam fails, galactic swallows it, libcni drops its cache entry.
    for (const p of pods) {
      if (p.pod !== "db-2") {
        const r = await master("DEL", p.old, p.pod, p.c);
        assert.equal(r.code, 0, `galactic's DEL succeeds: ${r.stdout}`);
      }
      await Deno.remove(cache(p.old, p.c));
    }
    const dels = (await plugin.logLines()).filter((l) => l.verb === "DEL");
    assert.deepEqual(dels.map((l) => l.code), [7, 7, 7, 7], "no token: every DEL failed");

    // The init container writes the token again; the pods' new sandboxes ADD.
    await Deno.writeTextFile(plugin.tokenFile, TOKEN + "\n");
    const tokenBack = Date.now();
    const addNew = async (p: (typeof pods)[number]) => {
      const r = await master("ADD", p.now, p.pod, p.c);
      if (r.code === 0) await cached(p.now, p.c, r.json!);
      return r;
    };
    const running = new Map<string, string>();
    for (const p of pods) {
      const r = await addNew(p);
      if (r.code === 0) running.set(p.pod, v4(r)!);
      else {
        assert.equal(r.json?.code, 11, r.stdout);
        assert.match(String(r.json?.msg), /held by container old-db-\d/);
      }
    }
    assert.deepEqual([...running.keys()], ["web-0", "web-1"], "new names: no one holds them");

    await recover({
      reconcile,
      retry: async () => {
        for (const p of pods.filter((p) => !running.has(p.pod))) {
          const again = await addNew(p);
          if (again.code === 0) running.set(p.pod, v4(again)!);
        }
        return running.size === pods.length;
      },
      plugin,
      tokenBack,
    });
    assert.equal(running.size, pods.length, `every pod runs again: ${[...running.keys()]}`);
    for (const p of pods.filter((p) => p.c.ipam && (p.c.ipam as Json).identity === "pod")) {
      assert.equal(running.get(p.pod), p.address, `${p.pod} has its address again`);
    }

    for (const l of dels) {
      assert.match(String(l.details), /journaled for release by milo-ipam reconcile/);
    }

    // Nothing live was released, and nothing of the old sandboxes is left.
    const after = await reconcile();
    assert.deepEqual(after.report.released, [], after.stdout);
    const claims = await milo.listClaims("tenant-a", `${KEYS.cluster}=${CLUSTER}`);
    const holders = claims.map((c) => c.metadata.annotations?.[KEYS.containerId]).sort();
    assert.deepEqual(
      [...new Set(holders)],
      pods.map((p) => p.now).sort(),
      "Milo's claims are the new sandboxes', every one",
    );
    const addresses = [...running.values()];
    assert.equal(new Set(addresses).size, addresses.length, "one pod per address");
    for (const [pod, address] of running) {
      const mine = claims.filter((c) =>
        c.metadata.annotations?.[KEYS.containerId] === `new-${pod}`
      );
      assert.ok(
        mine.some((c) => c.status.address === address.split("/")[0]),
        `${pod} runs on ${address}, its claim in Milo`,
      );
    }
  } finally {
    await plugin.cleanup();
    await milo.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a node reboot under galactic: every pod runs again within two reconcile rounds of the token's return, none released live", async () => {
  await rebootThen({ agent: false }, async ({ reconcile, retry }) => {
    for (let round = 1; round <= 2; round++) {
      const r = await reconcile();
      assert.notEqual(r.code, 1, r.stdout);
      await retry();
    }
  });
});

Deno.test("a node reboot under galactic, the agent back with the token: every pod runs again within two of its reconcile intervals", async () => {
  await rebootThen({ agent: true }, async ({ retry, plugin, tokenBack }) => {
    // No reconcile by hand: the agent's run at its start and its timer's. The kubelet retries
    // each failed sandbox (every second here) until all run or two intervals have passed.
    await plugin.startAgent();
    while (!await retry() && Date.now() - tokenBack < 2 * INTERVAL_S * 1000) {
      await new Promise((r) => setTimeout(r, 1_000));
    }
    const runs = (await plugin.logLines()).filter((l) => l.verb === "RECONCILE");
    assert.ok(runs.length > 0, "the agent reconciled");
    const released = runs.flatMap((l) => Array.isArray(l.released) ? l.released : []);
    assert.equal(released.length, 10, "the five old sandboxes' claims, released by the agent");
  });
});
