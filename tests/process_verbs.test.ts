/**
 * Process tests: the installed plugin exec'd with CNI env vars and stdin,
 * exactly as a runtime does, against milo-dev answering in Milo's shapes —
 * one path per verb and version, and the process behaviour around them
 * (stdin, env, sandbox, logging, faults). Everything runs twice: with the
 * plugin doing the work itself, and with the node agent answering.
 */
import assert from "node:assert/strict";
import { claimName, KEYS } from "../lib/claims.ts";
import { SUPPORTED_VERSIONS } from "../lib/cni.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type RunResult, type TestPlugin } from "../testing/plugin.ts";
import { assertCniError, assertOk, ipsOf, MODES, PLUGIN_SEED, TOKEN } from "../testing/process.ts";

async function withEnv(
  mode: (typeof MODES)[number],
  fn: (milo: MiloDev, plugin: TestPlugin) => Promise<void>,
  opts: { tls?: boolean } = {},
): Promise<void> {
  const milo = await startMiloDev({ seed: PLUGIN_SEED, tls: opts.tls });
  let plugin: TestPlugin | undefined;
  try {
    plugin = await installPlugin({
      miloUrl: milo.url,
      token: TOKEN,
      caFile: milo.caFile,
      agent: mode === "agent",
    });
    if (mode === "agent") await plugin.startAgent();
    await fn(milo, plugin);
    if (mode === "agent") {
      const lines = await plugin.logLines();
      const verbs = lines.filter((l) => typeof l.verb === "string" && l.verb !== "RECONCILE");
      assert.ok(verbs.length > 0);
      assert.ok(
        verbs.every((l) => l.via === "agent"),
        `every call answered by the agent: ${JSON.stringify(verbs.find((l) => l.via !== "agent"))}`,
      );
    }
  } finally {
    await plugin?.cleanup();
    await milo.stop();
  }
}

const holders = async (milo: MiloDev, sel: string) =>
  (await milo.listClaims("tenant-a", sel)).length;

for (const mode of MODES) {
  Deno.test(`[${mode}] every verb in every version against milo-dev`, async (t) => {
    await withEnv(mode, async (milo, plugin) => {
      const conf = plugin.netConf();

      await t.step("VERSION lists every supported version", async () => {
        const r = await plugin.run({ command: "VERSION", stdin: { cniVersion: "1.0.0" } });
        assertOk(r);
        assert.deepEqual(r.json, {
          cniVersion: "1.0.0",
          supportedVersions: [...SUPPORTED_VERSIONS],
        });
      });

      await t.step("ADD leases one address per family, encoded in each CNI version", async () => {
        for (const [i, v] of SUPPORTED_VERSIONS.entries()) {
          const r = await plugin.run({
            command: "ADD",
            containerId: `ver-${i}`,
            stdin: { ...conf, cniVersion: v },
          });
          assertOk(r);
          assert.equal(r.json!.cniVersion, v);
          const ips = ipsOf(r);
          assert.equal(ips.length, 2);
          assert.match(ips[0].address, /^10\.40\.0\.\d+\/32$/);
          assert.match(ips[1].address, /^fd20:[0-9a-f:]+\/96$/);
          assert.equal(ips[0].gateway, "169.254.1.1");
          assert.deepEqual(r.json!.routes, [{ dst: "0.0.0.0/0" }, { dst: "::/0" }]);
          if (v.startsWith("0.")) assert.deepEqual(ips.map((ip) => ip.version), ["4", "6"]);
          else assert.ok(ips.every((ip) => ip.version === undefined));
        }
        const addresses = (await milo.listClaims("tenant-a")).map((c) => c.status.allocatedCIDR);
        assert.equal(new Set(addresses).size, addresses.length, "no duplicate address");
      });

      await t.step("claims carry cluster, node, pod, container, interface", async () => {
        const id = "9f0c1e6a4b2d48e7a1c3b5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";
        assertOk(
          await plugin.run({ command: "ADD", containerId: id, stdin: conf, podName: "web-7" }),
        );
        const name = await claimName(
          { cluster: "cluster-a", containerId: id, ifname: "eth0" },
          "ipv4",
        );
        const [claim] = await milo.listClaims(
          "tenant-a",
          `${KEYS.podName}=web-7,${KEYS.family}=ipv4`,
        );
        assert.equal(claim.metadata.name, name);
        const l = claim.metadata.labels, a = claim.metadata.annotations;
        assert.equal(l[KEYS.cluster], "cluster-a");
        assert.equal(l[KEYS.node], "node-a1");
        assert.equal(l[KEYS.vpc], "vpc-7b3e");
        assert.equal(a[KEYS.containerId], id);
        assert.equal(a[KEYS.pod], "shop/web-7");
        assert.equal(a[KEYS.podUid], `uid-${id}`);
        assert.equal(claim.spec.scope.network.name, "vpc-7b3e");
      });

      await t.step("ADD retried for the same attachment returns the same lease", async () => {
        const first = await plugin.run({ command: "ADD", containerId: "idem", stdin: conf });
        const again = await plugin.run({ command: "ADD", containerId: "idem", stdin: conf });
        assertOk(first);
        assertOk(again);
        assert.deepEqual(ipsOf(again), ipsOf(first));
        assert.equal(await holders(milo, `${KEYS.containerId}=idem`), 2);
      });

      await t.step("a failing second family rolls the first back", async () => {
        const broken = plugin.netConf({ classes: { ipv4: "vpc-pods-ipv4", ipv6: "no-such" } });
        const r = await plugin.run({ command: "ADD", containerId: "half", stdin: broken });
        assertCniError(r, 102, /no-such.*rollback: IPv4 claim pod-[0-9a-f]+-v4 released/);
        assert.equal(await holders(milo, `${KEYS.containerId}=half`), 0);
      });

      await t.step("CHECK passes for a live lease and reports a changed address", async () => {
        const add = await plugin.run({ command: "ADD", containerId: "chk", stdin: conf });
        assertOk(add);
        const prevResult = add.json;
        assertOk(
          await plugin.run({
            command: "CHECK",
            containerId: "chk",
            stdin: { ...conf, prevResult },
          }),
        );
        const wrong = { ...prevResult, ips: [{ address: "10.40.0.250/32" }, ipsOf(add)[1]] };
        const r = await plugin.run({
          command: "CHECK",
          containerId: "chk",
          stdin: { ...conf, prevResult: wrong },
        });
        assertCniError(r, 104, /10\.40\.0\.250\/32/);
      });

      await t.step("DEL releases both claims; twice is fine, without netns", async () => {
        assertOk(await plugin.run({ command: "ADD", containerId: "del-me", stdin: conf }));
        for (let i = 0; i < 2; i++) {
          const r = await plugin.run({
            command: "DEL",
            containerId: "del-me",
            stdin: conf,
            env: { CNI_NETNS: undefined },
          });
          assertOk(r);
          assert.equal(r.stdout, "");
        }
        assert.equal(await holders(milo, `${KEYS.containerId}=del-me`), 0);
      });

      await t.step("STATUS succeeds silently; a missing class is code 50", async () => {
        const r = await plugin.run({ command: "STATUS", stdin: conf });
        assertOk(r);
        assert.equal(r.stdout, "");
        const missing = plugin.netConf({ classes: { ipv4: "vpc-pods-ipv4", ipv6: "nope-v6" } });
        assertCniError(await plugin.run({ command: "STATUS", stdin: missing }), 50, /nope-v6/);
      });

      await t.step("GC releases exactly the claims missing from valid-attachments", async () => {
        const gcConf = plugin.netConf({}, { name: "gc-net" });
        for (const id of ["gc-keep", "gc-drop-1", "gc-drop-2"]) {
          assertOk(await plugin.run({ command: "ADD", containerId: id, stdin: gcConf }));
        }
        const before = await milo.listClaims("tenant-a");
        const r = await plugin.run({
          command: "GC",
          stdin: {
            ...gcConf,
            "cni.dev/valid-attachments": [{ containerID: "gc-keep", ifname: "eth0" }],
          },
        });
        assertOk(r);
        assert.equal(r.stdout, "");
        const after = await milo.listClaims("tenant-a");
        assert.equal(before.length - after.length, 4, "only this network's orphans went");
        assert.equal(await holders(milo, `${KEYS.containerId}=gc-keep`), 2);
      });

      await t.step("token is re-read every call: rotation takes effect", async () => {
        await Deno.writeTextFile(plugin.tokenFile, "revoked-token\n");
        assertCniError(
          await plugin.run({ command: "ADD", containerId: "rot", stdin: conf }),
          101,
          /401/,
        );
        await Deno.writeTextFile(plugin.tokenFile, TOKEN);
        assertOk(await plugin.run({ command: "ADD", containerId: "rot", stdin: conf }));
      });

      await t.step("transient 503s end in code 11 within the deadline; DEL journals", async () => {
        await milo.setFaults({ errorRate: 1, errorStatuses: [503], retryAfterSeconds: 0 });
        try {
          const fast = plugin.netConf({ timeouts: { requestMs: 300, totalMs: 1500 } });
          assertCniError(
            await plugin.run({ command: "ADD", containerId: "busy", stdin: fast }),
            11,
            /503/,
          );
          const d = await plugin.run({ command: "DEL", containerId: "idem", stdin: fast });
          assertCniError(d, 11, /503.*journaled for release/);
        } finally {
          await milo.clearFaults();
        }
        const journal = [...Deno.readDirSync(`${plugin.stateDir}/journal`)];
        assert.equal(journal.length, 1, "one journal entry for the failed DEL");
        assertOk(await plugin.run({ command: "DEL", containerId: "idem", stdin: conf }));
        assert.equal([...Deno.readDirSync(`${plugin.stateDir}/journal`)].length, 0);
      });

      await t.step("Milo down: ADD and DEL fail with 11, STATUS with 50", async () => {
        const fast = plugin.netConf({ timeouts: { requestMs: 300, totalMs: 1200 } });
        await milo.setFaults({ down: true });
        try {
          for (const command of ["ADD", "DEL"]) {
            const r = await plugin.run({ command, containerId: "down", stdin: fast });
            assertCniError(r, 11, /Connection refused|connect/i);
          }
          assertCniError(await plugin.run({ command: "STATUS", stdin: fast }), 50);
        } finally {
          await milo.clearFaults();
        }
      });

      await t.step("a Milo host the install did not grant is refused (106)", async () => {
        const other = new URL(milo.adminUrl);
        await plugin.setNode({ milo: { url: other.origin, tokenFile: plugin.tokenFile } });
        try {
          const r = await plugin.run({ command: "ADD", containerId: "sbx", stdin: conf });
          assertCniError(r, 106, new RegExp(other.host.replace(/\./g, "\\.")));
        } finally {
          await plugin.setNode({});
        }
      });

      await t.step("every invocation logs one JSON line, never the token", async () => {
        const text = await Deno.readTextFile(plugin.logFile);
        assert.ok(!text.includes(TOKEN));
        const del = (await plugin.logLines()).find((l) =>
          l.verb === "DEL" && l.containerId === "del-me"
        );
        assert.ok(del);
        assert.equal(del.outcome, "ok");
        assert.equal(typeof del.durationMs, "number");
        assert.equal((del.claims as string[]).length, 2);
      });
    });
  });

  Deno.test(`[${mode}] bad input gets a clear CNI error and leases nothing`, async (t) => {
    await withEnv(mode, async (milo, plugin) => {
      const conf = plugin.netConf();
      const cases: [string, Parameters<TestPlugin["run"]>[0], number, RegExp][] = [
        ["stdin not JSON", { command: "ADD", containerId: "b1", stdin: "{not json" }, 6, /JSON/],
        ["stdin empty", { command: "ADD", containerId: "b1", stdin: "" }, 6, /JSON/],
        [
          "stdin of 10 MiB",
          { command: "ADD", containerId: "b1", stdin: "x".repeat(10 * 1024 * 1024) },
          6,
          /exceeds/,
        ],
        [
          "stdin not UTF-8",
          { command: "ADD", containerId: "b1", stdin: new Uint8Array([0x7b, 0xff, 0x7d]) },
          6,
          /UTF-8/,
        ],
        [
          "wrong types",
          { command: "ADD", containerId: "b1", stdin: plugin.netConf({ classes: "v4" }) },
          7,
          /ipam\.classes/,
        ],
        [
          "a node setting in the ipam block",
          {
            command: "ADD",
            containerId: "b1",
            stdin: plugin.netConf({ milo: { url: "https://evil.example" } }),
          },
          7,
          /ipam\.milo.*node/,
        ],
        ["missing CNI_COMMAND", { command: "", stdin: conf }, 4, /CNI_COMMAND/],
        ["unknown CNI_COMMAND", { command: "FROB", stdin: conf }, 4, /FROB/],
        ["missing CNI_CONTAINERID", { command: "ADD", stdin: conf }, 4, /CNI_CONTAINERID/],
        [
          "missing CNI_NETNS on ADD",
          { command: "ADD", containerId: "b1", stdin: conf, env: { CNI_NETNS: undefined } },
          4,
          /CNI_NETNS/,
        ],
        [
          "unsupported cniVersion",
          { command: "ADD", containerId: "b1", stdin: { ...conf, cniVersion: "0.2.0" } },
          1,
          /0\.2\.0/,
        ],
        [
          "GC on a 1.0.0 config",
          { command: "GC", stdin: { ...conf, cniVersion: "1.0.0" } },
          1,
          /GC/,
        ],
        [
          "MILO_IPAM_CONFIG names a missing file",
          {
            command: "ADD",
            containerId: "b1",
            stdin: conf,
            env: { MILO_IPAM_CONFIG: "/nonexistent/x" },
          },
          4,
          /nonexistent/,
        ],
      ];
      for (const [name, run, code, pattern] of cases) {
        await t.step(name, async () => assertCniError(await plugin.run(run), code, pattern));
      }
      assert.equal((await milo.listClaims("tenant-a")).length, 0, "nothing leased");
    });
  });

  Deno.test(`[${mode}] over HTTPS: caFile adds trust, and without it TLS is verified`, async (t) => {
    await withEnv(mode, async (milo, plugin) => {
      await t.step("ADD then DEL over TLS", async () => {
        const conf = plugin.netConf();
        const add: RunResult = await plugin.run({
          command: "ADD",
          containerId: "tls-1",
          stdin: conf,
        });
        assertOk(add);
        assert.equal(ipsOf(add).length, 2);
        assertOk(await plugin.run({ command: "DEL", containerId: "tls-1", stdin: conf }));
      });
      await t.step("without caFile the server's certificate is rejected", async () => {
        await plugin.setNode({ milo: { url: milo.url, tokenFile: plugin.tokenFile } });
        try {
          const r = await plugin.run({
            command: "ADD",
            containerId: "tls-2",
            stdin: plugin.netConf(),
          });
          assertCniError(r, 7, /TLS/);
        } finally {
          await plugin.setNode({});
        }
      });
    }, { tls: true });
  });
}

Deno.test("reconcile releases only claims absent from the result cache twice, grace apart", async () => {
  await withEnv("direct", async (milo, plugin) => {
    const conf = plugin.netConf();
    for (const id of ["live-1", "orphan-1"]) {
      assertOk(await plugin.run({ command: "ADD", containerId: id, stdin: conf }));
    }
    await Deno.writeTextFile(
      `${plugin.resultsDir}/vpc-7b3e-live-1-eth0`,
      JSON.stringify({
        kind: "cniCacheV1",
        containerId: "live-1",
        ifName: "eth0",
        networkName: "vpc-7b3e",
        result: {},
      }),
    );
    const reconcile = async (...extra: string[]) => {
      const r = await plugin.run({ command: "", args: ["reconcile", "--grace", "1", ...extra] });
      assertOk(r);
      return r.json as { released: { containerId: string }[]; kept: unknown[] };
    };
    const owners = async () =>
      (await milo.listClaims("tenant-a")).map((c) => c.metadata.annotations[KEYS.containerId])
        .sort();
    const dry = await reconcile("--dry-run");
    assert.deepEqual(dry.released, [], "one observation never releases");
    assert.equal(dry.kept.length, 4);
    await new Promise((r) => setTimeout(r, 1200));
    const dry2 = await reconcile("--dry-run");
    assert.deepEqual(
      dry2.released.map((x) => x.containerId),
      ["orphan-1", "orphan-1"],
      "the first dry run's observation counts",
    );
    assert.deepEqual(await owners(), ["live-1", "live-1", "orphan-1", "orphan-1"]);
    const real = await reconcile();
    assert.deepEqual(real.released.map((x) => x.containerId), ["orphan-1", "orphan-1"]);
    assert.deepEqual(await owners(), ["live-1", "live-1"]);
    assert.deepEqual((await reconcile()).released, []);
  });
});
