/**
 * Operating milo-ipam, in-process: `show` by address, pod and node against
 * milo-dev (with the holder's caches read on its own node); the agent's
 * readiness and liveness probes and the journal gauge on its metrics port,
 * and the scraper's bearer token it asks for there;
 * the log's rotation and its copy on the agent's stdout; unknown config keys
 * refused with the nearest known one; sandbox refusals in an operator's
 * words; the node state's format record.
 */
import assert from "node:assert/strict";
import { Agent } from "../lib/agent.ts";
import { READY_RETRY_MS } from "../lib/readiness.ts";
import { readNodeConfig } from "../lib/config_file.ts";
import { parseNodeConfig } from "../lib/config.ts";
import { nearestKey } from "../lib/config_fields.ts";
import { parseNetwork } from "../lib/network_config.ts";
import { CniError, sandboxText, toCniError } from "../lib/errors.ts";
import { invoke } from "../lib/invoke.ts";
import { Journal } from "../lib/journal.ts";
import { Logger, rotatedLog } from "../lib/log.ts";
import { MiloClient } from "../lib/milo.ts";
import { reconcileCli } from "../lib/reconcile_cli.ts";
import { parseQuery, show } from "../lib/show.ts";
import { formatAge, renderShow } from "../lib/_show_render.ts";
import { RELEASE } from "../lib/version.ts";
import { requireStateFormat, STATE_FORMAT, STATE_FORMAT_FILE } from "../lib/state_format.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { freePort, PLUGIN_SEED, TOKEN } from "../testing/process.ts";
import { withTempDir } from "../testing/stub_invocation.ts";

const NET = "vpc-7b3e";
const NET_CONF = {
  cniVersion: "1.1.0",
  name: NET,
  type: "bridge",
  ipam: {
    type: "milo-ipam",
    classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
    scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: NET } },
  },
};

/** A node config in `dir` against `milo` (the node `node`, this machine's host id). */
async function nodeConfig(dir: string, milo: MiloDev, node: string, extra = {}): Promise<string> {
  await Deno.writeTextFile(`${dir}/token`, TOKEN + "\n");
  await Deno.mkdir(`${dir}/state-${node}`, { recursive: true });
  await Deno.mkdir(`${dir}/results-${node}`, { recursive: true });
  const path = `${dir}/${node}.json`;
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      milo: { url: milo.url, tokenFile: `${dir}/token` },
      cluster: "cluster-a",
      node,
      log: { file: `${dir}/log-${node}/milo-ipam.log`, level: "info" },
      resultsDirs: [`${dir}/results-${node}`],
      stateDir: `${dir}/state-${node}`,
      hostIdFile: `${dir}/machine-id-${node}`,
      timeouts: { requestMs: 1_000, totalMs: 4_000 },
      allowScopes: [{ scope: NET_CONF.ipam.scope }],
      ...extra,
    }),
  );
  await Deno.writeTextFile(`${dir}/machine-id-${node}`, `${node.padEnd(32, "0").slice(0, 32)}\n`);
  return path;
}

/** One CNI call in this process, as the plugin makes it without the agent. */
async function call(config: string, command: string, id: string, pod: string) {
  const [ns, name] = pod.split("/");
  const vars: Record<string, string> = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: id,
    CNI_IFNAME: "net1",
    CNI_NETNS: "/var/run/netns/x",
    CNI_ARGS: `K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name};K8S_POD_UID=uid-${id}`,
    MILO_IPAM_CONFIG: config,
  };
  const env = (n: string) => vars[n];
  return await invoke(
    { env, stdin: new TextEncoder().encode(JSON.stringify(NET_CONF)), started: Date.now() },
    { nodeConfig: () => readNodeConfig(env), openMilo: MiloClient.open },
  );
}

/** A libcni cache entry naming container `id`, as the runtime writes it after an ADD. */
function cache(dir: string, id: string) {
  return Deno.writeTextFile(
    `${dir}/${NET}-${id}-net1`,
    JSON.stringify({ kind: "cniCacheV1", containerId: id, ifName: "net1", networkName: NET }),
  );
}

Deno.test("show: by address, by pod and by node, with the holder's caches on its own node", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  try {
    await withTempDir(async (dir) => {
      const a1 = await nodeConfig(dir, milo, "node-a1");
      const a2 = await nodeConfig(dir, milo, "node-a2");
      const added = await call(a1, "ADD", "c-web0", "shop/web-0");
      assert.equal(added.exitCode, 0, JSON.stringify(added.stdout));
      assert.equal((await call(a2, "ADD", "c-web1", "shop/web-1")).exitCode, 0);
      const ips = (added.stdout!.ips as { address: string }[]).map((i) => i.address);
      const v4 = ips.find((a) => !a.includes(":"))!.split("/")[0];
      const v6 = ips.find((a) => a.includes(":"))!;
      await cache(`${dir}/results-node-a1`, "c-web0");
      await milo.resetStats();

      // By address, on the holder's node: its cache names the container, its record holds it.
      const byAddr = await show({ by: "address", address: v4 }, a1);
      assert.equal(byAddr.error, null, JSON.stringify(byAddr.error));
      assert.equal(byAddr.claims.length, 1);
      const row = byAddr.claims[0];
      assert.equal(row.pod, "shop/web-0");
      assert.equal(row.node, "node-a1");
      assert.equal(row.containerId, "c-web0");
      assert.equal(row.ifname, "net1");
      assert.equal(row.network, NET);
      assert.equal(row.address, `${v4}/32`);
      assert.equal(row.host, "node-a1".padEnd(32, "0"));
      assert.ok(row.ageS !== undefined && row.ageS >= 0 && row.ageS < 120, `age ${row.ageS}`);
      assert.deepEqual(row.local, {
        cachesNaming: [`${dir}/results-node-a1`],
        record: "held",
        journaled: false,
      });
      assert.equal(byAddr.labelSelector, "", "an address is not a label: one LIST of every claim");
      const stats = await milo.stats() as { lists: number };
      assert.equal(stats.lists, 1, "one LIST");
      const text = renderShow(byAddr);
      assert.match(text, /1 claim for address 10\.40\.0\.\d+ .*one LIST of every claim/);
      assert.match(text, /holder {3}pod shop\/web-0 \(uid uid-c-web0\), container c-web0/);
      assert.match(text, /on node {2}named by .*results-node-a1; record held; journal none/);

      // The IPv6 block holds its pod's address (the block's first), asked from another node.
      const byV6 = await show({ by: "address", address: v6.split("/")[0] }, a2);
      assert.deepEqual(byV6.claims.map((c) => c.pod), ["shop/web-0"]);
      assert.equal(byV6.claims[0].local, undefined, "judged only on its own node");
      assert.match(byV6.claims[0].localWhy ?? "", /held on node node-a1: run show there/);

      // By pod: both families, selected by labels in this cluster.
      const byPod = await show({ by: "pod", namespace: "shop", name: "web-1" }, a1);
      assert.deepEqual(byPod.claims.map((c) => [c.pod, c.family]), [
        ["shop/web-1", "IPv4"],
        ["shop/web-1", "IPv6"],
      ]);
      assert.match(byPod.labelSelector, /milo-ipam\.io\/pod-name=web-1/);

      // By node: on node-a2, web-1's container is named by no cache there.
      const byNode = await show({ by: "node", node: "node-a2" }, a2);
      assert.equal(byNode.claims.length, 2);
      assert.ok(byNode.claims.every((c) => c.pod === "shop/web-1"));
      assert.deepEqual(byNode.claims[0].local?.cachesNaming, []);
      assert.match(renderShow(byNode), /named by no result cache/);

      // Nothing there: no claim, no error.
      const none = await show({ by: "address", address: "10.99.0.1" }, a1);
      assert.deepEqual([none.claims.length, none.error], [0, null]);
      assert.match(renderShow(none), /^no claims for address 10\.99\.0\.1/);

      // Milo refusing the token is an error in the report, never the token.
      await Deno.writeTextFile(`${dir}/token`, "not-a-known-token\n");
      const refused = await show({ by: "node", node: "node-a1" }, a1);
      assert.match(refused.error?.message ?? "", /401|credentials|Unauthorized/i);
      assert.doesNotMatch(JSON.stringify(refused), /not-a-known-token/);
    });
  } finally {
    await milo.stop();
  }
});

Deno.test("show: the query of its command line", () => {
  assert.deepEqual(parseQuery(["10.40.0.6"], undefined, undefined), {
    by: "address",
    address: "10.40.0.6",
  });
  assert.deepEqual(parseQuery(["10.40.0.6/32"], undefined, undefined), {
    by: "address",
    address: "10.40.0.6",
  });
  assert.deepEqual(parseQuery([], "shop/web-0", undefined), {
    by: "pod",
    namespace: "shop",
    name: "web-0",
  });
  assert.deepEqual(parseQuery([], undefined, "node-17"), { by: "node", node: "node-17" });
  assert.match(parseQuery([], undefined, undefined) as string, /exactly one/);
  assert.match(parseQuery(["10.0.0.1"], undefined, "n") as string, /exactly one/);
  assert.match(parseQuery([], "web-0", undefined) as string, /NAMESPACE\/NAME/);
  assert.match(parseQuery(["web-0"], undefined, undefined) as string, /not an IP address/);
  assert.deepEqual([formatAge(0), formatAge(61), formatAge(3_700), formatAge(90_061)], [
    "0s",
    "1m1s",
    "1h1m",
    "1d1h",
  ]);
});

/** GET `path` on the agent's metrics port: status and body. */
async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: r.status, body: await r.text() };
}

Deno.test("agent: readiness follows Milo and the node's token, liveness its socket; the journal owed is a gauge", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  try {
    await withTempDir(async (dir) => {
      const port = freePort();
      const config = await nodeConfig(dir, milo, "node-a1", {
        agent: { socket: `${dir}/run/agent.sock`, metrics: `127.0.0.1:${port}` },
      });
      const env = (n: string) => n === "MILO_IPAM_CONFIG" ? config : undefined;
      const agent = new Agent(await readNodeConfig(env), env);
      await agent.start();
      try {
        assert.deepEqual(await get(port, "/readyz"), { status: 200, body: "ok\n" });
        const asked = await milo.stats();
        assert.equal(asked.byKind.ipclasses, undefined, "no IPClass read: a tenant sees none");
        assert.equal(asked.byKind.ipclaims, 1, "one GET of a claim, as STATUS");
        assert.deepEqual(await get(port, "/livez"), { status: 200, body: "ok\n" });
        let m = (await get(port, "/metrics")).body;
        assert.match(m, /^milo_ipam_ready 1$/m);
        assert.match(m, /^milo_ipam_release_journal_owed 0$/m);
        assert.match(m, /^milo_ipam_release_journal_max 4096$/m);
        assert.match(m, new RegExp(`^milo_ipam_build_info\\{release="${RELEASE}"\\} 1$`, "m"));

        // Two releases owed: the gauge counts them at the scrape.
        const journal = new Journal(`${dir}/state-node-a1`);
        for (const id of ["c1", "c2"]) {
          await journal.record(
            { cluster: "cluster-a", node: "node-a1", network: NET, containerId: id, ifname: "e" },
            [{ name: `pod-${id}-v4` }],
            "Milo was down",
          );
        }
        m = (await get(port, "/metrics")).body;
        assert.match(m, /^milo_ipam_release_journal_owed 2$/m);

        // The token refused: a fresh agent (no recent proof) is not ready, and says why.
        await agent.stop();
        await Deno.writeTextFile(`${dir}/token`, "not-a-known-token\n");
        const again = new Agent(await readNodeConfig(env), env);
        await again.start();
        try {
          const r = await get(port, "/readyz");
          assert.equal(r.status, 503);
          assert.match(r.body, /not usable with the node's token/);
          assert.doesNotMatch(r.body, /not-a-known-token/);
          assert.match((await get(port, "/metrics")).body, /^milo_ipam_ready 0$/m);
          // Answered again without asking Milo within READY_RETRY_MS.
          await milo.resetStats();
          assert.equal((await get(port, "/readyz")).status, 503);
          assert.equal(((await milo.stats()) as { total: number }).total, 0);
          assert.ok(READY_RETRY_MS >= 5_000);
          // The socket gone (someone removed it): liveness fails, so kubelet restarts the agent.
          await Deno.remove(`${dir}/run/agent.sock`);
          const live = await get(port, "/livez");
          assert.equal(live.status, 503);
          assert.match(live.body, /agent socket .* is gone/);
        } finally {
          await again.stop();
        }
      } finally {
        await agent.stop();
      }
    });
  } finally {
    await milo.stop();
  }
});

/** GET /metrics on the agent's port with `authorization` (if any): status, body, challenge. */
async function scrape(port: number, authorization?: string) {
  const r = await fetch(`http://127.0.0.1:${port}/metrics`, {
    headers: authorization ? { authorization } : {},
  });
  return { status: r.status, body: await r.text(), challenge: r.headers.get("www-authenticate") };
}

Deno.test("agent: metrics on the node's addresses only for the scraper's bearer token, read at each scrape; probes open; refused to start without agent.metricsTokenFile", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  try {
    await withTempDir(async (dir) => {
      const port = freePort();
      const socket = `${dir}/run/agent.sock`;
      const agentWith = async (agent: Record<string, unknown>) => {
        const config = await nodeConfig(dir, milo, "node-a1", { agent: { socket, ...agent } });
        const env = (n: string) => n === "MILO_IPAM_CONFIG" ? config : undefined;
        return new Agent(await readNodeConfig(env), env);
      };

      // Every address of the node and no token: any pod could read them, so the agent refuses.
      const open = await agentWith({ metrics: `0.0.0.0:${port}` });
      await assert.rejects(
        open.start(),
        (e: CniError) =>
          e.outcome === "config" &&
          /agent\.metrics: 0\.0\.0\.0:\d+ listens on every address .* without agent\.metricsTokenFile/
            .test(e.message) &&
          /or listen on a loopback address/.test(e.details),
      );
      await assert.rejects(Deno.lstat(socket), Deno.errors.NotFound, "nothing bound");
      await assert.rejects(fetch(`http://127.0.0.1:${port}/livez`), TypeError, "nothing listens");

      const tokenFile = `${dir}/metrics-token`;
      await Deno.writeTextFile(tokenFile, "scraper-token-1\n", { mode: 0o600 });
      const agent = await agentWith({ metrics: `0.0.0.0:${port}`, metricsTokenFile: tokenFile });
      await agent.start();
      try {
        for (
          const refused of [
            undefined,
            "Bearer scraper-token-2",
            "Bearer scraper-token-1x",
            "Basic scraper-token-1",
            "Bearer",
          ]
        ) {
          const r = await scrape(port, refused);
          assert.equal(r.status, 401, `${refused}`);
          assert.equal(r.challenge, 'Bearer realm="milo-ipam"');
          assert.doesNotMatch(r.body, /milo_ipam_/, "no metric to whoever lacks the token");
        }
        for (const good of ["Bearer scraper-token-1", "bearer   scraper-token-1"]) {
          const r = await scrape(port, good);
          assert.equal(r.status, 200, good);
          assert.match(
            r.body,
            new RegExp(`^milo_ipam_build_info\\{release="${RELEASE}"\\} 1$`, "m"),
          );
        }
        // The kubelet's probes carry no credentials: open.
        assert.deepEqual(await get(port, "/livez"), { status: 200, body: "ok\n" });
        assert.deepEqual(await get(port, "/readyz"), { status: 200, body: "ok\n" });

        // A rotated Secret counts at the next scrape: the old token is refused at once.
        await Deno.writeTextFile(tokenFile, "scraper-token-2\n");
        assert.equal((await scrape(port, "Bearer scraper-token-1")).status, 401);
        assert.equal((await scrape(port, "Bearer scraper-token-2")).status, 200);

        // No token to read (the Secret missing, or not one token): every scrape is refused and
        // the agent says why, once; the probes go on.
        for (const text of [null, "", "two words\n"]) {
          if (text === null) await Deno.remove(tokenFile);
          else await Deno.writeTextFile(tokenFile, text);
          for (const t of ["Bearer scraper-token-2", "Bearer ", "Bearer two"]) {
            assert.equal((await scrape(port, t)).status, 401, `${JSON.stringify(text)}: ${t}`);
          }
          assert.equal((await get(port, "/livez")).status, 200);
        }
        const log = await Deno.readTextFile(`${dir}/log-node-a1/milo-ipam.log`);
        const warned = log.split("\n").filter((l) => l.includes("agent.metricsTokenFile"));
        assert.equal(warned.length, 2, `once per cause:\n${warned.join("\n")}`);
        assert.match(warned[0], /"level":"warn".*metrics-token: NotFound.*refused \(401\)/);
        assert.match(warned[1], /metrics-token: it does not hold one token/);
        assert.doesNotMatch(log, /scraper-token|two words/, "no token in the log");
        await Deno.writeTextFile(tokenFile, "scraper-token-3\n");
        assert.equal((await scrape(port, "Bearer scraper-token-3")).status, 200);
      } finally {
        await agent.stop();
      }
    });
  } finally {
    await milo.stop();
  }
});

Deno.test("log: records name the pod; the file rotates at its cap; the agent's copy goes to stdout", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  try {
    await withTempDir(async (dir) => {
      const config = await nodeConfig(dir, milo, "node-a1");
      const r = await call(config, "ADD", "c-log", "shop/web-7");
      assert.equal(r.exitCode, 0);
      assert.equal(r.record.pod, "shop/web-7", "the record names the pod");
      assert.equal(r.record.containerId, "c-log");
    });
  } finally {
    await milo.stop();
  }
  await withTempDir(async (dir) => {
    await Deno.mkdir(`${dir}/log`, { mode: 0o700 });
    const file = `${dir}/log/milo-ipam.log`;
    const log = new Logger(file, "info", { rotateBytes: 400 });
    for (let i = 0; i < 12; i++) {
      await log.write("info", { msg: `record ${i}`, pad: "x".repeat(60) });
    }
    const size = (p: string) => Deno.statSync(p).size;
    const read = (p: string) => {
      try {
        return Deno.readTextFileSync(p);
      } catch {
        return ""; // just rotated
      }
    };
    assert.ok(read(file).length < 400, `the file stays under its cap (${read(file).length})`);
    assert.ok(size(rotatedLog(file)) >= 400, "the rotated file holds the lines before");
    assert.ok(size(rotatedLog(file)) < 400 + 120, "rotated as soon as it passed the cap");
    const lines = [rotatedLog(file), file].flatMap((p) => read(p).split("\n").filter(Boolean));
    const kept = lines.map((l) => JSON.parse(l).msg);
    assert.equal(kept.at(-1), "record 11", "the newest line is in the file");
    for (let i = 1; i < kept.length; i++) {
      assert.ok(Number(kept[i].split(" ")[1]) > Number(kept[i - 1].split(" ")[1]), "in order");
    }
  });
  // The agent's logger writes the same line to stdout (a child process, to read it).
  await withTempDir(async (dir) => {
    await Deno.mkdir(`${dir}/log`, { mode: 0o700 });
    const code = `import { Logger } from "${new URL("../lib/log.ts", import.meta.url).href}";
      await new Logger("${dir}/log/a.log", "info", { stdout: true }).write("info", { msg: "hi" });`;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", code],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const line = new TextDecoder().decode(out.stdout).trim();
    assert.equal(JSON.parse(line).msg, "hi", new TextDecoder().decode(out.stderr));
    assert.equal(Deno.readTextFileSync(`${dir}/log/a.log`).trim(), line);
  });
});

Deno.test("config: unknown keys are refused with code 7, naming the key and the nearest known one", () => {
  const node = parseNodeConfig(
    { milo: { url: "https://milo.example.com", tokenFile: "/t" }, cluster: "c", node: "n" },
    "/etc/milo-ipam/node.json",
  );
  const ipam = { type: "milo-ipam", classes: { ipv4: "vpc-pods-ipv4" } };
  const refusal = (over: Record<string, unknown>) => {
    try {
      parseNetwork({ ...ipam, ...over }, node);
    } catch (err) {
      assert.ok(err instanceof CniError);
      assert.equal(err.code, 7);
      return err;
    }
    assert.fail(`accepted ${JSON.stringify(over)}`);
  };
  const refused = (over: Record<string, unknown>) => refusal(over).message;
  assert.equal(
    refused({ gateway: { ipv4: "169.254.1.1" } }),
    "field ipam.gateway: unknown key; the nearest known key is gateways",
  );
  // The keys a network config may set, not the node's (refused by value when set).
  assert.equal(
    refusal({ gateway: {} }).details,
    "known keys of ipam: type, classes, scope, gateways, prefixLengths, timeouts, " +
      "reclaimPolicy, identity",
  );
  assert.match(refused({ clustr: "c" }), /nearest known key is classes$/);
  assert.match(refused({ classes: { ipv4: "a", ipv66: "b" } }), /ipam\.classes\.ipv66.*ipv6$/);
  assert.match(refused({ prefixLength: { ipv6: 96 } }), /ipam\.prefixLength: .*prefixLengths$/);
  assert.match(
    refused({ scope: { network: { apiGroup: "g", kind: "Network", nme: "x" } } }),
    /ipam\.scope\.network\.nme: .*name$/,
  );
  assert.match(refused({ reclaimpolicy: "Delete" }), /ipam\.reclaimpolicy: .*reclaimPolicy$/);
  // Every known key still passes; scope roles are free names (what an ADD may claim in is the
  // node's grant, lib/scope_grant.ts).
  const scope = { network: { apiGroup: "g", kind: "Network", name: "x", uid: "u" } };
  const pinned = parseNodeConfig(
    {
      milo: { url: "https://milo.example.com", tokenFile: "/t" },
      cluster: "c",
      node: "n",
      allowScopes: [{ scope }],
    },
    "/etc/milo-ipam/node.json",
  );
  parseNetwork({
    ...ipam,
    scope,
    gateways: { ipv4: "169.254.1.1" },
    prefixLengths: { ipv4: 32 },
    timeouts: { requestMs: 1_000, totalMs: 2_000 },
    reclaimPolicy: "Delete",
    identity: "attachment",
  }, pinned);

  const nodeRefused = (v: Record<string, unknown>) => {
    try {
      parseNodeConfig(
        { milo: { url: "https://m.example", tokenFile: "/t" }, cluster: "c", ...v },
        "/n.json",
      );
    } catch (err) {
      assert.ok(err instanceof CniError);
      assert.equal(err.code, 7);
      return err.message;
    }
    assert.fail(`accepted ${JSON.stringify(v)}`);
  };
  assert.match(
    nodeRefused({ stateDirectory: "/x" }),
    /^node config \/n\.json: field stateDirectory: .*stateDir$/,
  );
  assert.match(
    nodeRefused({ agent: { metric: "127.0.0.1:9" } }),
    /field agent\.metric: .*metrics$/,
  );
  assert.match(
    nodeRefused({ gateways: { ipv4: "1.1.1.1", ipv5: "x" } }),
    /gateways\.ipv5: .*ipv4$/,
  );
  assert.equal(nearestKey("gateway", ["classes", "gateways", "scope"]), "gateways");
});

Deno.test("errors: a sandbox refusal says what an operator does, never Deno's --allow flag advice", () => {
  const deno =
    'Requires read access to "/etc/other/node.json", run again with the --allow-read flag';
  assert.equal(
    sandboxText(`NotCapable: ${deno}`),
    'NotCapable: the installed sandbox grants no read access to "/etc/other/node.json"',
  );
  const e = toCniError(new Deno.errors.NotCapable(deno));
  assert.equal(e.code, 106);
  assert.doesNotMatch(`${e.message} ${e.details}`, /run again|--allow-/);
  assert.match(e.details, /install again with the node config/);
  assert.match(e.details, /installed with --kube/);
});

Deno.test("state format: a newer format is refused naming its release; none gets this release's", async () => {
  await withTempDir(async (dir) => {
    requireStateFormat(dir);
    assert.deepEqual(JSON.parse(await Deno.readTextFile(`${dir}/${STATE_FORMAT_FILE}`)), {
      format: STATE_FORMAT,
      release: RELEASE,
    });
  });
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(
      `${dir}/${STATE_FORMAT_FILE}`,
      JSON.stringify({ format: STATE_FORMAT + 1, release: "9.0.0" }),
    );
    assert.throws(() => requireStateFormat(dir), (err: unknown) => {
      assert.ok(err instanceof CniError);
      assert.equal(err.code, 7);
      assert.match(
        err.message,
        new RegExp(`format ${STATE_FORMAT + 1}, written by milo-ipam 9\\.0\\.0`),
      );
      assert.match(err.details, /roll forward/);
      return true;
    });
  });
});

Deno.test("state format: reconcile refuses a newer format before it opens Milo", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/token`, TOKEN + "\n");
    await Deno.mkdir(`${dir}/state`);
    await Deno.writeTextFile(
      `${dir}/state/${STATE_FORMAT_FILE}`,
      JSON.stringify({ format: STATE_FORMAT + 1, release: "9.0.0" }),
    );
    const config = `${dir}/node.json`;
    await Deno.writeTextFile(
      config,
      JSON.stringify({
        milo: { url: `http://127.0.0.1:${freePort()}`, tokenFile: `${dir}/token` },
        cluster: "cluster-a",
        node: "node-a1",
        log: { file: `${dir}/log/milo-ipam.log` },
        stateDir: `${dir}/state`,
        resultsDirs: [`${dir}/results`],
      }),
    );
    await assert.rejects(reconcileCli(["--config", config]), (err: unknown) => {
      assert.ok(err instanceof CniError);
      assert.equal(err.code, 7);
      assert.match(err.message, /written by milo-ipam 9\.0\.0/);
      return true;
    });
  });
});

Deno.test("show --pools: each IPPool with the utilisation Milo reports", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  try {
    await withTempDir(async (dir) => {
      const a1 = await nodeConfig(dir, milo, "node-a1");
      const pool = async () => {
        const r = await show({ by: "pools" }, a1);
        assert.equal(r.error, null, JSON.stringify(r.error));
        assert.equal(r.requests, 1);
        const v4 = r.pools!.find((p) => p.classes.includes("vpc-pods-ipv4"))!;
        assert.ok(v4, JSON.stringify(r.pools));
        return { r, v4 };
      };
      const before = (await pool()).v4;
      assert.equal((await call(a1, "ADD", "c-web0", "shop/web-0")).exitCode, 0);
      const { r, v4 } = await pool();
      assert.equal(Number(v4.allocated), Number(before.allocated) + 1, "the ADD's address");
      assert.equal(Number(v4.total), Number(v4.allocated) + Number(v4.available));
      assert.ok(v4.utilizationPercent! > 0, JSON.stringify(v4));
      const text = renderShow(r);
      assert.match(text, /^\d+ IPPools? Milo shows this token/);
      assert.match(text, /\nPOOL +CLASSES +CIDR +ALLOCATED +TOTAL +AVAILABLE +USED\n/);
      assert.match(text, new RegExp(`\\n${v4.pool} +vpc-pods-ipv4 +${v4.cidr} +${v4.allocated} +`));
      assert.deepEqual(parseQuery([], undefined, undefined, false, true), { by: "pools" });
    });
  } finally {
    await milo.stop();
  }
});
