/**
 * Process tests: the installed plugin exec'd with CNI env vars and stdin,
 * exactly as a runtime does, against milo-dev over HTTPS — one path per verb
 * and CNI version, and what only a process shows: stdin and environment
 * handling, the permission sandbox, TLS trust, the token re-read per call, a
 * bounded exit when Milo is down, the log line and the reconcile CLI. Every
 * branch of the handlers is tested in-process (tests/<verb>.test.ts).
 * Everything runs twice: with the plugin doing the work itself, and with the
 * node agent answering.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { SUPPORTED_VERSIONS } from "../lib/cni.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import {
  assertCniError,
  assertOk,
  ipsOf,
  MODES,
  PLUGIN_SEED,
  TOKEN,
  until,
} from "../testing/process.ts";

async function withEnv(
  mode: (typeof MODES)[number],
  fn: (milo: MiloDev, plugin: TestPlugin) => Promise<void>,
): Promise<void> {
  const milo = await startMiloDev({ seed: PLUGIN_SEED, tls: true });
  let plugin: TestPlugin | undefined;
  try {
    plugin = await installPlugin({
      miloUrl: milo.url,
      token: TOKEN,
      caFile: milo.caFile,
      agent: mode === "agent",
      // Steps that need fast failures lower their network's timeouts: the node allows it.
      nodeConfig: {
        timeouts: { requestMs: 1000, totalMs: 4000, minRequestMs: 200, minTotalMs: 600 },
      },
    });
    if (mode === "agent") await plugin.startAgent();
    await fn(milo, plugin);
    if (mode === "agent") {
      const lines = await plugin.logLines();
      // The runtime's DEL of "held" waits in the agent's lane behind a held ADD: past
      // requestMs it falls back, as designed.
      const verbs = lines.filter((l) =>
        typeof l.verb === "string" && l.verb !== "RECONCILE" && l.containerId !== "held"
      );
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

const owners = async (milo: MiloDev) =>
  (await milo.listClaims("tenant-a")).map((c) => c.metadata.annotations?.[KEYS.containerId]).sort();

for (const mode of MODES) {
  Deno.test(`[${mode}] every verb in every version against milo-dev over HTTPS`, async (t) => {
    await withEnv(mode, async (milo, plugin) => {
      const conf = plugin.netConf();
      let lease: Record<string, unknown> | undefined;

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
          lease = r.json;
        }
        const addresses = (await milo.listClaims("tenant-a")).map((c) => c.status.allocatedCIDR);
        assert.equal(addresses.length, 2 * SUPPORTED_VERSIONS.length);
        assert.equal(new Set(addresses).size, addresses.length, "no duplicate address");
      });

      const last = `ver-${SUPPORTED_VERSIONS.length - 1}`;
      await t.step("CHECK passes for a live lease", async () => {
        const r = await plugin.run({
          command: "CHECK",
          containerId: last,
          stdin: { ...conf, prevResult: lease },
        });
        assertOk(r);
        assert.equal(r.stdout, "");
      });

      await t.step("DEL releases both claims, without CNI_NETNS", async () => {
        const r = await plugin.run({
          command: "DEL",
          containerId: last,
          stdin: conf,
          env: { CNI_NETNS: undefined },
        });
        assertOk(r);
        assert.equal(r.stdout, "");
        assert.ok(!(await owners(milo)).includes(last));
      });

      await t.step("STATUS succeeds silently", async () => {
        const r = await plugin.run({ command: "STATUS", stdin: conf });
        assertOk(r);
        assert.equal(r.stdout, "");
      });

      await t.step("GC releases the claims missing from valid-attachments", async () => {
        const r = await plugin.run({
          command: "GC",
          stdin: {
            ...conf,
            "cni.dev/valid-attachments": [{ containerID: "ver-0", ifname: "eth0" }],
          },
        });
        assertOk(r);
        assert.equal(r.stdout, "");
        assert.deepEqual(await owners(milo), ["ver-0", "ver-0"]);
      });

      await t.step("the token is re-read every call: rotation takes effect", async () => {
        await Deno.writeTextFile(plugin.tokenFile, "revoked-token\n");
        assertCniError(
          await plugin.run({ command: "ADD", containerId: "rot", stdin: conf }),
          101,
          /401/,
        );
        await Deno.writeTextFile(plugin.tokenFile, TOKEN);
        assertOk(await plugin.run({ command: "ADD", containerId: "rot", stdin: conf }));
      });

      await t.step("Milo down: ADD exits with 11 within totalMs", async () => {
        const fast = plugin.netConf({ timeouts: { requestMs: 200, totalMs: 600 } });
        await milo.setFaults({ down: true });
        try {
          const started = performance.now();
          const r = await plugin.run({ command: "ADD", containerId: "down", stdin: fast });
          assertCniError(r, 11, /Connection refused|connect/i);
          assert.ok(performance.now() - started < 600 + 1_000, "bounded by totalMs + 1 s");
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

      await t.step("without caFile the server's certificate is rejected (7)", async () => {
        await plugin.setNode({ milo: { url: milo.url, tokenFile: plugin.tokenFile } });
        try {
          const r = await plugin.run({ command: "ADD", containerId: "tls-2", stdin: conf });
          assertCniError(r, 7, /TLS/);
        } finally {
          await plugin.setNode({});
        }
      });

      await t.step("bad stdin and environment get a clear CNI error, lease nothing", async (t) => {
        const before = await owners(milo);
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
          ["missing CNI_COMMAND", { command: "", stdin: conf }, 4, /CNI_COMMAND/],
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
        assert.deepEqual(await owners(milo), before, "nothing leased");
      });

      await t.step("every invocation logs one JSON line, never the token", async () => {
        const text = await Deno.readTextFile(plugin.logFile);
        assert.ok(!text.includes(TOKEN));
        const del = (await plugin.logLines()).find((l) =>
          l.verb === "DEL" && l.containerId === last
        );
        assert.ok(del);
        assert.equal(del.outcome, "ok");
        assert.equal(typeof del.durationMs, "number");
        assert.equal((del.claims as string[]).length, 2);
      });

      if (mode === "direct") {
        await t.step("reconcile releases what is absent from the result cache", async () => {
          await Deno.writeTextFile(
            `${plugin.resultsDir}/vpc-7b3e-ver-0-eth0`,
            JSON.stringify({
              kind: "cniCacheV1",
              containerId: "ver-0",
              ifName: "eth0",
              networkName: "vpc-7b3e",
              result: {},
            }),
          );
          const reconcile = async () => {
            const r = await plugin.run({ command: "", args: ["reconcile", "--grace", "0"] });
            assertOk(r);
            return r.json as { released: { containerId: string }[] };
          };
          assert.deepEqual((await reconcile()).released, [], "one observation never releases");
          const second = await reconcile();
          assert.deepEqual(second.released.map((x) => x.containerId), ["rot", "rot"]);
          assert.deepEqual(await owners(milo), ["ver-0", "ver-0"]);
        });
      }

      await t.step(
        "an ADD killed while Milo holds its creates: DEL, then reconcile, leave no lease",
        async () => {
          const posts = async () => (await milo.stats()).byMethod.POST ?? 0;
          const sent = await posts();
          const held = () => milo.listClaims("tenant-a", `${KEYS.containerId}=held`);
          // Milo handles each POST 2 s after it arrived; the plugin dies once both arrived.
          await milo.setFaults({ latencyMs: 2_000, methods: ["POST"] });
          let add;
          try {
            const arrived = until(async () => await posts() >= sent + 2, "both POSTs at Milo");
            add = await plugin.run({
              command: "ADD",
              containerId: "held",
              stdin: conf,
              killOn: arrived,
            });
          } finally {
            await milo.clearFaults();
          }
          assert.notEqual(add.code, 0, "the killed ADD did not succeed");
          assertOk(await plugin.run({ command: "DEL", containerId: "held", stdin: conf }));
          if (mode === "agent") {
            // The agent waited for the creates' answers and undid them; the DEL found them gone.
            const undone = async () =>
              (await plugin.logLines()).some((l) =>
                l.containerId === "held" && l.verb === "DEL" &&
                l.why === "undo: the ADD's caller is gone"
              );
            await until(undone, "the agent's undo of the ADD");
            assert.deepEqual(await held(), []);
            return;
          }
          await until(async () => (await held()).length === 2, "the creates landing after DEL");
          const late = (await held()).map((c) => `journal:${c.metadata.name}`).sort();
          const r = await plugin.run({ command: "", args: ["reconcile", "--grace", "60"] });
          assertOk(r);
          const report = r.json as { released: { claim: string; via: string }[] };
          assert.deepEqual(
            report.released.map((x) => `${x.via}:${x.claim}`).sort(),
            late,
            "the in-doubt journal entry names exactly the late claims",
          );
          assert.deepEqual(await held(), []);
        },
      );
    });
  });
}
