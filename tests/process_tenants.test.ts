/**
 * Fail closed, third round, through the installed agent: what a namespace user
 * or a local process can do to the node's other tenants. libcni result cache
 * entries sized by a NetworkAttachmentDefinition's author do not push the
 * agent past its memory limit, connections held open on the metrics port do
 * not blind the scrapes, a network config cannot give up on Milo faster than
 * the node allows, and churned pods cannot pin a shared pool with retained
 * addresses.
 */
import assert from "node:assert/strict";
import { Holdings } from "../lib/holdings.ts";
import { stateFileOf } from "../lib/liveness.ts";
import { fakeMilo } from "../testing/fake_milo.ts";
import { fixture, reply } from "../testing/milo_fixtures.ts";
import { Journal } from "../lib/journal.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin } from "../testing/plugin.ts";
import {
  AGENT_LIMIT_MIB,
  assertCniError,
  assertOk,
  freePort,
  ipsOf,
  peakKiB,
  PLUGIN_SEED,
  TOKEN,
  until,
} from "../testing/process.ts";

/**
 * One libcni cache entry as libcni's `cacheAdd` writes it (containernetworking/cni
 * `libcni/api.go`, `cachedInfo`: kind, containerId, then the delegate's config as
 * base64, ...), its config padded by the NAD's author to make it `bytes` long.
 */
function fatEntry(containerId: string, bytes: number): string {
  const head = { kind: "cniCacheV1", containerId };
  const tail = {
    ifName: "net1",
    networkName: "fat",
    cniArgs: [["K8S_POD_NAMESPACE", "evil"], ["K8S_POD_NAME", containerId]],
    result: { cniVersion: "1.1.0", ips: [{ address: "10.40.0.9/32" }] },
  };
  const rest = bytes - JSON.stringify({ ...head, config: "", ...tail }).length;
  const config = btoa(
    JSON.stringify({ name: "fat", pad: "x".repeat(Math.floor(rest * 3 / 4) - 20) }),
  );
  return JSON.stringify({ ...head, config, ...tail });
}

/** Milo's NotFound for the claim `name` (the shared fixture, named for it). */
function notFound(name: string): Response {
  const body = fixture<{ message: string; details: Record<string, string> }>(
    "status-404-not-found.json",
  );
  return reply(404, {
    ...body,
    message: `ipclaims.ipam.miloapis.com "${name}" not found`,
    details: { ...body.details, name },
  });
}

Deno.test("agent: 200 libcni cache entries of 1 MiB each keep the agent's peak RSS well under its limit", async () => {
  const fake = await fakeMilo((_req, seen) => notFound(seen.path.split("/").pop()!));
  const p = await installPlugin({ miloUrl: fake.url, token: TOKEN, agent: true });
  try {
    const entries = 200;
    for (let i = 0; i < entries; i++) {
      const id = `fat-${String(i).padStart(4, "0")}`;
      await Deno.writeTextFile(`${p.resultsDir}/fat-${id}-net1`, fatEntry(id, 1024 * 1024));
    }
    // The node's record: three attachments the fat entries keep live, five whose containers
    // no entry names, absent for long (each re-checked, then found gone from Milo).
    const holdings = new Holdings(p.stateDir);
    const at = Date.now() - 3_600_000;
    const a = (containerId: string) => ({
      cluster: "cluster-a",
      node: "node-a1",
      network: "fat",
      containerId,
      ifname: "net1",
    });
    const live = ["fat-0000", "fat-0100", "fat-0199"];
    const gone = ["gone-1", "gone-2", "gone-3", "gone-4", "gone-5"];
    const absent: Record<string, { firstAbsent: number; uid: string }> = {};
    for (const id of [...live, ...gone]) {
      holdings.held(a(id), `add-${id}`, [{ name: `claim-${id}`, uid: `uid-${id}` }], at);
      if (gone.includes(id)) absent[`claim-${id}`] = { firstAbsent: at, uid: `uid-${id}` };
    }
    holdings.markListed();
    const stateFile = stateFileOf({ stateDir: p.stateDir } as Parameters<typeof stateFileOf>[0]);
    await Deno.writeTextFile(stateFile, JSON.stringify({ absent }));

    await p.startAgent();
    const pid = p.agentPid()!;
    await until(
      async () => (await p.logLines()).some((l) => l.verb === "RECONCILE"),
      "the agent's first reconcile",
      120_000,
    );
    const peak = await peakKiB(pid);
    const line = (await p.logLines()).find((l) => l.verb === "RECONCILE")!;
    console.log(`agent peak RSS ${(peak / 1024).toFixed(1)} MiB; reconcile ${line.durationMs} ms`);
    assert.deepEqual(line.errors, [], JSON.stringify(line));
    const left = holdings.all().map((r) => r.h.containerId).sort();
    assert.deepEqual(left, live, "the fat entries' containers are live; the others were judged");
    assert.ok(
      peak < (AGENT_LIMIT_MIB / 2) * 1024,
      `peak RSS ${(peak / 1024).toFixed(1)} MiB, not under half the ${AGENT_LIMIT_MIB} MiB limit`,
    );
  } finally {
    await p.cleanup();
    await fake.close();
  }
});

/**
 * Another local process holding `n` connections to `port` that never finish
 * their request head, opening another as soon as one is closed; it says how
 * many it has opened on each line of its stdout.
 */
function holdConnections(port: number, n: number) {
  const code = `
    let opened = 0;
    const slot = async () => {
      for (;;) {
        let c;
        try {
          c = await Deno.connect({ hostname: "127.0.0.1", port: ${port} });
        } catch {
          await new Promise((r) => setTimeout(r, 10));
          continue;
        }
        if (++opened % 64 === 0) console.log(opened);
        try {
          await c.write(new TextEncoder().encode("GET /metr"));
          while ((await c.read(new Uint8Array(64))) !== null) {}
        } catch {}
        try { c.close(); } catch {}
      }
    };
    for (let i = 0; i < ${n}; i++) slot();
  `;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["eval", code],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let opened = 0;
  (async () => {
    for (;;) {
      const { value, done } = await lines.read().catch(() => ({ value: "", done: true }));
      if (done) return;
      const last = value.trim().split("\n").pop();
      if (last) opened = Number(last);
    }
  })();
  return {
    opened: () => opened,
    async stop() {
      child.kill("SIGKILL");
      await child.status;
      await lines.cancel().catch(() => {});
    },
  };
}

Deno.test("agent metrics: connections held open and re-opened as they close do not blind the scrapes", async () => {
  const fake = await fakeMilo((_req, seen) => notFound(seen.path.split("/").pop()!));
  const port = freePort();
  const p = await installPlugin({
    miloUrl: fake.url,
    token: TOKEN,
    agent: true,
    agentMetrics: `127.0.0.1:${port}`,
  });
  try {
    await p.startAgent();
    const holders = holdConnections(port, 128);
    try {
      await until(() => Promise.resolve(holders.opened() >= 128), "128 connections held");
      let answered = 0;
      const failures: string[] = [];
      for (let i = 0; i < 10; i++) {
        try {
          const res = await fetch(`http://127.0.0.1:${port}/metrics`, {
            signal: AbortSignal.timeout(10_000),
          });
          const text = await res.text();
          if (res.ok && text.includes("milo_ipam_calls_total")) answered++;
          else failures.push(`HTTP ${res.status}`);
        } catch (err) {
          failures.push(String(err).slice(0, 120));
        }
      }
      assert.equal(answered, 10, `scrapes answered while connections are held: ${failures}`);
    } finally {
      await holders.stop();
    }
  } finally {
    await p.cleanup();
    await fake.close();
  }
});

Deno.test("a network config's requestMs of 50 against creates answered after 80 ms is refused (7) before any request", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED, tls: true });
  const plugin = await installPlugin({ miloUrl: milo.url, token: TOKEN, caFile: milo.caFile });
  try {
    await milo.setFaults({ latencyMs: 80, methods: ["POST"] });
    const conf = plugin.netConf({ timeouts: { requestMs: 50 } });
    await milo.resetStats();
    const add = await plugin.run({ command: "ADD", containerId: "hasty", stdin: conf });
    assertCniError(add, 7, /ipam\.timeouts\.requestMs: must be at least 1000, the node's floor/);
    assert.equal((await milo.stats()).total, 0, "nothing sent to Milo");
    const del = await plugin.run({ command: "DEL", containerId: "hasty", stdin: conf });
    assert.equal(del.code, 0, `a DEL is held to the floor, not refused: ${del.stdout}`);
    assert.deepEqual(await new Journal(plugin.stateDir).list(), [], "no release owed");
  } finally {
    await plugin.cleanup();
    await milo.stop();
  }
});

Deno.test("churned pods of a network asking for pod identity pin nothing: only the node grants it", async () => {
  // One 14-address pool, shared by every namespace.
  const seed = structuredClone(PLUGIN_SEED) as typeof PLUGIN_SEED;
  seed.projects[0].ipPools[0].spec.cidr = "10.40.0.0/28";
  const milo = await startMiloDev({ seed, tls: true });
  const plugin = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    caFile: milo.caFile,
    // Root grants pod identity to the namespace of a StatefulSet alone.
    nodeConfig: { allowIdentities: [{ namespace: "db", identity: "pod" }] },
  });
  try {
    const v4 = { classes: { ipv4: "vpc-pods-ipv4" } };
    const stable = plugin.netConf({ ...v4, identity: "pod" });
    // A Deployment in namespace web churns 14 pods, each under a new name.
    for (let i = 0; i < 14; i++) {
      const pod = { containerId: `web-${i}`, podNamespace: "web", podName: `web-7d9f-${i}` };
      const add = await plugin.run({ command: "ADD", ...pod, stdin: stable });
      assertCniError(add, 7, /field ipam\.identity: "pod" is the node's to grant.*namespace web/);
      assert.match(add.json?.details as string, /allowIdentities/);
      assertOk(await plugin.run({ command: "DEL", ...pod, stdin: stable }));
    }
    // The StatefulSet's db-0, granted, returns under its name 14 times: one address, re-bound.
    const seen = new Set<string>();
    for (let i = 0; i < 14; i++) {
      const pod = { containerId: `db-${i}`, podNamespace: "db", podName: "db-0" };
      const add = await plugin.run({ command: "ADD", ...pod, stdin: stable });
      assertOk(add);
      seen.add(ipsOf(add)[0].address);
      assertOk(await plugin.run({ command: "DEL", ...pod, stdin: stable }));
    }
    assert.equal(seen.size, 1, `db-0's address each time: ${[...seen]}`);
    assert.equal((await milo.stats()).retained, 1, "one address retained, db-0's");
    const shop = await plugin.run({
      command: "ADD",
      containerId: "shop-1",
      podNamespace: "shop",
      stdin: plugin.netConf(v4),
    });
    assertOk(shop);
  } finally {
    await plugin.cleanup();
    await milo.stop();
  }
});

Deno.test("two namespaces name one network's scope, with and without its uid: shop's claims land in the space root pinned, attacker's are refused", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED, tls: true });
  const ref = { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" };
  const pinned = { network: { ...ref, uid: "0b6f7c1e-52d4-4b7e-9a41-3f0c8d2e6a19" } };
  const plugin = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    caFile: milo.caFile,
    // Root pins shop's network to the Network's space, its uid included; nobody else's.
    nodeConfig: {
      allowScopes: [{
        namespace: "shop",
        network: "vpc-7b3e",
        scope: pinned,
        classes: ["vpc-pods-ipv4"],
      }],
    },
  });
  try {
    const v4 = { classes: { ipv4: "vpc-pods-ipv4" } };
    // shop's NADs: the README's (the scope without its uid), one with the uid, one naming none.
    const shop = [
      { containerId: "web-0", ipam: { ...v4, scope: { network: ref } } },
      { containerId: "web-1", ipam: { ...v4, scope: pinned } },
      { containerId: "web-2", ipam: { ...v4, scope: undefined } },
    ];
    for (const p of shop) {
      assertOk(
        await plugin.run({
          command: "ADD",
          containerId: p.containerId,
          podNamespace: "shop",
          podName: p.containerId,
          stdin: plugin.netConf(p.ipam),
        }),
      );
    }
    // Namespace attacker's NAD names shop's network and scope, without the uid and with it.
    for (const [i, scope] of [{ network: ref }, pinned].entries()) {
      const r = await plugin.run({
        command: "ADD",
        containerId: `evil-${i}`,
        podNamespace: "attacker",
        podName: `evil-${i}`,
        stdin: plugin.netConf({ ...v4, scope }),
      });
      assertCniError(
        r,
        7,
        /field ipam\.scope: node config .* grants no address space to network "vpc-7b3e" of namespace attacker/,
      );
      assert.match(r.json?.details as string, /root adds \{"namespace":"attacker".*allowScopes/);
    }
    const claims = await milo.listClaims();
    assert.equal(claims.length, 3, "shop's three claims, no other");
    const holders = new Map<string, number>();
    for (const c of claims) {
      assert.deepEqual(c.spec.scope, pinned, `${c.metadata.name}: the space root pinned`);
      const at = c.status.allocatedCIDR!;
      holders.set(at, (holders.get(at) ?? 0) + 1);
    }
    assert.deepEqual([...holders.values()], [1, 1, 1], "each address held once");

    // Root withdraws the grant: the pods' DELs release their claims all the same.
    await plugin.setNode({ allowScopes: [] });
    for (const p of shop) {
      assertOk(
        await plugin.run({
          command: "DEL",
          containerId: p.containerId,
          podNamespace: "shop",
          podName: p.containerId,
          stdin: plugin.netConf(p.ipam),
        }),
      );
    }
    assert.deepEqual(await milo.listClaims(), [], "released without the grant");
  } finally {
    await plugin.cleanup();
    await milo.stop();
  }
});
