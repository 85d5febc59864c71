/**
 * Delegation contract with galactic's master plugins: the stand-in of
 * testing/galactic/master.ts (galactic-veth and galactic-tap as they treat
 * their IPAM delegate) runs as a CNI plugin and delegates to the installed
 * milo-ipam, against milo-dev, with failures injected into Milo and into the
 * master. What each case shows is what galactic's own code paths do with
 * milo-ipam's answers: the result it prints, the CHECK it forwards (the tap's
 * /25), the DEL its rollback makes, the DEL failure it swallows, the verbs it
 * never delegates. After every case, the ledger: Milo's claims of the test's
 * cluster against the attachments the master reported live. Both modes: the
 * plugin working alone, and the node agent answering.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { Journal } from "../lib/journal.ts";
import { execCni, type ExecResult } from "../scripts/cni_exec.ts";
import {
  computeLedger,
  type LedgerAttachment,
  ledgerLine,
  normCidr,
} from "../testing/e2e/ledger.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { freePort, MODES, PLUGIN_SEED, TOKEN, until } from "../testing/process.ts";

const CLUSTER = "cluster-galactic";
const NODE = "node-g1";
const NETWORK = "vpc7b3e";
const VPC = "vpc7b3e";
const MASTER = new URL("../testing/galactic/master.ts", import.meta.url).pathname;

type Master = "galactic-veth" | "galactic-tap";
type Json = Record<string, unknown>;
type Ip = { address: string; gateway?: string; interface?: number };

/** The master stand-in's wrappers, as a runtime finds them in CNI_PATH. */
async function installMasters(dir: string): Promise<string> {
  const bin = `${dir}/bin`;
  await Deno.mkdir(bin, { recursive: true });
  for (const name of ["galactic-veth", "galactic-tap"]) {
    await Deno.writeTextFile(
      `${bin}/${name}`,
      `#!/bin/sh\nexec '${Deno.execPath()}' run --allow-all --no-config --no-lock '${MASTER}' "$@"\n`,
      { mode: 0o755 },
    );
  }
  return bin;
}

interface World {
  milo: MiloDev;
  plugin: TestPlugin;
  masterLog: string;
  /** Runs a master as a runtime does: its CNI_PATH holds the masters and milo-ipam. */
  run(o: {
    master: Master;
    command: string;
    containerId?: string;
    stdin: unknown;
    env?: Record<string, string>;
  }): Promise<ExecResult>;
}

async function withWorld(
  mode: (typeof MODES)[number],
  fn: (w: World) => Promise<void>,
): Promise<void> {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const dir = await Deno.makeTempDir({ prefix: "galactic-master-" });
  let plugin: TestPlugin | undefined;
  try {
    plugin = await installPlugin({
      miloUrl: milo.url,
      token: TOKEN,
      cluster: CLUSTER,
      node: NODE,
      agent: mode === "agent",
      // Steps that need fast failures lower their network's timeouts: the node allows it.
      nodeConfig: {
        timeouts: { requestMs: 1000, totalMs: 4000, minRequestMs: 300, minTotalMs: 1000 },
      },
    });
    if (mode === "agent") await plugin.startAgent();
    const bin = await installMasters(dir);
    const masterLog = `${dir}/galactic.log`;
    const p = plugin;
    const run: World["run"] = (o) =>
      execCni(`${bin}/${o.master}`, {
        env: {
          PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
          CNI_COMMAND: o.command,
          CNI_CONTAINERID: o.containerId ?? "none",
          CNI_IFNAME: "eth0",
          CNI_NETNS: `/var/run/netns/${o.containerId ?? "none"}`,
          CNI_PATH: `${bin}:${p.dir}/bin`,
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=vm-${o.containerId};` +
            `K8S_POD_UID=uid-${o.containerId}`,
          GALACTIC_CNI_NODE_NAME: NODE,
          GALACTIC_CNI_LOG_FILE: masterLog,
          ...o.env,
        },
        stdin: o.stdin,
        timeoutMs: 20_000,
      });
    await fn({ milo, plugin, masterLog, run });
    if (mode === "agent") {
      const calls = (await plugin.logLines()).filter((l) =>
        typeof l.verb === "string" && l.verb !== "RECONCILE"
      );
      assert.ok(calls.length > 0);
      assert.ok(
        calls.every((l) => l.via === "agent"),
        `every delegated call answered by the agent: ${
          JSON.stringify(calls.find((l) => l.via !== "agent"))
        }`,
      );
    }
  } finally {
    await plugin?.cleanup();
    await milo.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

for (const mode of MODES) {
  Deno.test(`[${mode}] galactic's masters delegate to milo-ipam: ADD, CHECK, DEL, rollback, swallowed DEL, GC/STATUS`, async (t) => {
    await withWorld(mode, async ({ milo, plugin, masterLog, run }) => {
      const ipam = plugin.netConf().ipam as Json;
      const conf = (master: Master, vpcattachment: string, over: Json = {}): Json => ({
        cniVersion: "1.1.0",
        name: NETWORK,
        type: master,
        vpc: VPC,
        vpcattachment,
        mtu: 1450,
        ipam,
        ...over,
      });
      const claims = () => milo.listClaims("tenant-a", `${KEYS.cluster}=${CLUSTER}`);
      const claimsOf = async (cid: string) =>
        (await claims()).filter((c) => c.metadata.annotations?.[KEYS.containerId] === cid);
      const pluginLines = async (cid: string) =>
        (await plugin.logLines()).filter((l) => l.containerId === cid);
      const verbsOf = async (cid: string) => (await pluginLines(cid)).map((l) => l.verb);
      /** Waits for the plugin's log to show exactly `verbs` for `cid` (the agent logs after it answers). */
      const logged = async (cid: string, verbs: string[]) => {
        await until(
          async () => (await verbsOf(cid)).length >= verbs.length,
          `${cid}: log lines ${verbs}`,
        );
        assert.deepEqual(await verbsOf(cid), verbs, `${cid}: the plugin's log`);
      };

      // The attachments the master reported live (ADD succeeded, no DEL yet), and the libcni
      // cache entry the runtime writes for each (reconcile judges liveness by it).
      const live = new Map<string, { conf: Json; master: Master; result: Json }>();
      const cache = (cid: string) => `${plugin.resultsDir}/${NETWORK}-${cid}-eth0`;
      const added = async (cid: string, master: Master, c: Json, result: Json) => {
        live.set(cid, { conf: c, master, result });
        await Deno.writeTextFile(
          cache(cid),
          JSON.stringify({
            kind: "cniCacheV1",
            containerId: cid,
            ifName: "eth0",
            networkName: NETWORK,
            result,
          }),
        );
      };
      const removed = async (cid: string) => {
        live.delete(cid);
        await Deno.remove(cache(cid)).catch(() => {});
      };
      // galactic keeps only the IPv4 address of an IPAM result (cniipam.ResultToIPAMResult) and
      // re-masks it (/32 veth, /25 tap): the lease it reports is that address; IPv6 is the block.
      const leasesOf = (result: Json) =>
        ((result.ips ?? []) as Ip[]).map((ip) =>
          ip.address.includes(":") ? normCidr(ip.address) : `${ip.address.split("/")[0]}/32`
        );
      const ledger = async (after: string, claimsWithoutLive = 0) => {
        const attachments: LedgerAttachment[] = [...live.entries()].map(([cid, l]) => ({
          cluster: CLUSTER,
          node: NODE,
          containerId: cid,
          ifname: "eth0",
          addresses: leasesOf(l.result),
        }));
        const l = computeLedger(await claims(), attachments);
        console.log(ledgerLine(mode, after, l));
        assert.deepEqual(
          [l.live, l.duplicates, l.claimsWithoutPod, l.podsWithoutClaim],
          [live.size, 0, claimsWithoutLive, 0],
          l.details.join("; "),
        );
      };
      const addOk = async (master: Master, cid: string, att: string) => {
        const c = conf(master, att);
        const r = await run({ master, command: "ADD", containerId: cid, stdin: c });
        assert.equal(r.code, 0, `ADD ${cid}: ${r.stdout} ${r.stderr}`);
        await added(cid, master, c, r.json!);
        return r.json!;
      };
      /** Runs a master while milo-dev answers with `faults`; they are cleared after. */
      const whileMiloFails = async (
        faults: Record<string, unknown>,
        o: Parameters<typeof run>[0],
      ): Promise<ExecResult> => {
        await milo.setFaults(faults);
        try {
          return await run(o);
        } finally {
          await milo.clearFaults();
        }
      };
      const delOk = async (cid: string) => {
        const l = live.get(cid)!;
        const r = await run({ master: l.master, command: "DEL", containerId: cid, stdin: l.conf });
        assert.equal(r.code, 0, `DEL ${cid}: ${r.stdout} ${r.stderr}`);
        await removed(cid);
        return r;
      };

      await t.step("ADD through galactic-veth: gateways, IPv4 /32, the IPv6 block", async () => {
        const result = await addOk("galactic-veth", "gv-add", "att1");
        assert.equal(result.cniVersion, "1.1.0");
        const ips = result.ips as Ip[];
        assert.equal(ips.length, 2, JSON.stringify(result));
        // cnimaster.AppendIPConfigs: IPv6 first, both on the guest interface (index 1).
        assert.match(ips[0].address, /^fd20:[0-9a-f:]+\/96$/);
        assert.equal(ips[0].gateway, "fe80::1");
        assert.match(ips[1].address, /^10\.40\.0\.\d+\/32$/);
        assert.equal(ips[1].gateway, "169.254.1.1");
        assert.ok(ips.every((ip) => ip.interface === 1));
        const held = await claimsOf("gv-add");
        assert.equal(held.length, 2);
        for (const c of held) {
          assert.equal(c.metadata.annotations?.[KEYS.vpc], VPC);
          assert.equal(c.metadata.annotations?.[KEYS.vpcattachment], "att1");
          assert.equal(c.metadata.annotations?.[KEYS.network], NETWORK);
        }
        assert.deepEqual(
          held.map((c) => normCidr(String(c.status.allocatedCIDR))).sort(),
          leasesOf(result).sort(),
          "Milo holds what the master printed",
        );
        await logged("gv-add", ["ADD"]);
        await ledger("ADD through galactic-veth");
      });

      await t.step("CHECK through galactic-tap with its /25 prevResult passes", async () => {
        const result = await addOk("galactic-tap", "gt-add", "att2");
        const ips = result.ips as Ip[];
        assert.match(ips[1].address, /^10\.40\.0\.\d+\/25$/, "galactic-tap reports IPv4 as /25");
        assert.ok(ips.every((ip) => ip.gateway && ip.interface === 0));
        const c = { ...conf("galactic-tap", "att2"), prevResult: result };
        const r = await run({
          master: "galactic-tap",
          command: "CHECK",
          containerId: "gt-add",
          stdin: c,
        });
        assert.equal(r.code, 0, `CHECK: ${r.stdout} ${r.stderr}`);
        assert.equal(r.stdout, "");
        // And galactic-veth's /32, as printed.
        const v = live.get("gv-add")!;
        const rv = await run({
          master: "galactic-veth",
          command: "CHECK",
          containerId: "gv-add",
          stdin: { ...v.conf, prevResult: v.result },
        });
        assert.equal(rv.code, 0, `CHECK veth: ${rv.stdout} ${rv.stderr}`);
        // A lease that differs: the master prints milo-ipam's own error (skel's errors.As).
        const other = {
          ...result,
          ips: [ips[0], { ...ips[1], address: "10.40.0.250/25" }],
        };
        const bad = await run({
          master: "galactic-tap",
          command: "CHECK",
          containerId: "gt-add",
          stdin: { ...c, prevResult: other },
        });
        assert.equal(bad.code, 1, bad.stdout);
        assert.equal(bad.json?.code, 104, bad.stdout);
        assert.match(
          String(bad.json?.msg),
          /IPv4 address differs: prevResult has 10\.40\.0\.250\/25/,
        );
        await logged("gt-add", ["ADD", "CHECK", "CHECK"]);
        await ledger("CHECK through galactic-tap");
      });

      await t.step(
        "a failed ADD after IPAM ran: the master's rollback DELs, Milo holds nothing",
        async () => {
          const c = conf("galactic-veth", "att3");
          const fail = { GALACTIC_MASTER_TEST_FAIL_AT: "after-ipam" };
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-late",
            stdin: c,
            env: fail,
          });
          assert.equal(r.code, 1, r.stdout);
          assert.equal(r.json?.code, 999, r.stdout);
          assert.match(String(r.json?.msg), /configure host gateway/);
          await logged("gv-late", ["ADD", "DEL"]);
          assert.ok((await pluginLines("gv-late")).every((l) => l.outcome === "ok"));
          assert.deepEqual(await claimsOf("gv-late"), []);
          // The runtime's DEL after the failed ADD: nothing left to release.
          const d = await run({
            master: "galactic-veth",
            command: "DEL",
            containerId: "gv-late",
            stdin: c,
          });
          assert.equal(d.code, 0, d.stdout);
          await logged("gv-late", ["ADD", "DEL", "DEL"]);
          await ledger("ADD failed after IPAM");
        },
      );

      await t.step(
        "a failed ADD before IPAM ran: the rollback's DEL finds nothing, succeeds",
        async () => {
          const c = conf("galactic-veth", "att4");
          const fail = { GALACTIC_MASTER_TEST_FAIL_AT: "before-ipam" };
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-early",
            stdin: c,
            env: fail,
          });
          assert.equal(r.json?.code, 999, r.stdout);
          assert.match(String(r.json?.msg), /add VRF/);
          await logged("gv-early", ["DEL"]);
          assert.equal((await pluginLines("gv-early"))[0].outcome, "ok");
          assert.deepEqual(await claimsOf("gv-early"), []);
          await ledger("ADD failed before IPAM");
        },
      );

      await t.step(
        "a base62 refusal: IPAM never runs; the runtime's DEL succeeds, leaves nothing",
        async () => {
          for (const [field, value] of [["vpc", "vpc-7b3e"], ["vpcattachment", "att_5"]]) {
            const c = conf("galactic-veth", "att5", { [field]: value });
            const r = await run({
              master: "galactic-veth",
              command: "ADD",
              containerId: "gv-b62",
              stdin: c,
            });
            assert.equal(r.code, 1, r.stdout);
            assert.equal(r.json?.code, 7, r.stdout);
            assert.match(
              String(r.json?.msg),
              new RegExp(`invalid base62 value for field '${field}'`),
            );
            // galactic's DEL skips all cleanup for a config it cannot parse, IPAM DEL included.
            const d = await run({
              master: "galactic-veth",
              command: "DEL",
              containerId: "gv-b62",
              stdin: c,
            });
            assert.equal(d.code, 0, d.stdout);
            assert.deepEqual(d.json, { cniVersion: "1.0.0" });
          }
          // Also refused before delegating: a chain-completeness failure (before the tracker).
          const chain = { GALACTIC_MASTER_TEST_FAIL_AT: "chain-check" };
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-b62",
            stdin: conf("galactic-veth", "att5"),
            env: chain,
          });
          assert.equal(r.json?.code, 7, r.stdout);
          assert.deepEqual(await verbsOf("gv-b62"), [], "milo-ipam was never called");
          assert.deepEqual(await claimsOf("gv-b62"), []);
          await ledger("base62 refusal");
        },
      );

      await t.step(
        "cniVersion: 0.4.0 fails after IPAM (result parsed as 1.x) and rolls back; 0.5.0 is refused",
        async () => {
          const c = conf("galactic-veth", "att6", { cniVersion: "0.4.0" });
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-040",
            stdin: c,
          });
          assert.equal(r.json?.code, 999, r.stdout);
          assert.match(String(r.json?.msg), /convert IPAM result: .*"0\.4\.0"/);
          await logged("gv-040", ["ADD", "DEL"]);
          assert.deepEqual(await claimsOf("gv-040"), []);
          const c2 = conf("galactic-veth", "att7", { cniVersion: "0.5.0" });
          const r2 = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-050",
            stdin: c2,
          });
          assert.equal(r2.json?.code, 1, r2.stdout);
          assert.deepEqual(await verbsOf("gv-050"), []);
          await ledger("cniVersion 0.4.0 and 0.5.0");
        },
      );

      await t.step(
        "DEL while Milo answers 503: the master swallows it, the release is journaled, reconcile makes it",
        async () => {
          await addOk("galactic-veth", "gv-503", "att8");
          const held = (await claimsOf("gv-503")).map((c) => c.metadata.name).sort();
          assert.equal(held.length, 2);
          const l = live.get("gv-503")!;
          // Short deadlines for this DEL (the network config may lower the node's).
          const c = { ...l.conf, ipam: { ...ipam, timeouts: { requestMs: 300, totalMs: 1_200 } } };
          const d = await whileMiloFails(
            { errorRate: 1, errorStatuses: [503], methods: ["DELETE"] },
            { master: "galactic-veth", command: "DEL", containerId: "gv-503", stdin: c },
          );
          assert.equal(d.code, 0, `the master swallows the IPAM DEL failure: ${d.stdout}`);
          await removed("gv-503"); // the runtime saw DEL succeed: the attachment is gone
          const warned = (await Deno.readTextFile(masterLog)).split("\n").filter(Boolean)
            .map((x) => JSON.parse(x))
            .find((x) =>
              x.msg?.startsWith("DEL: IPAM delegation failed") && x.containerID === "gv-503"
            );
          assert.equal(warned?.level, "WARN");
          assert.equal(warned?.err?.code, 11, JSON.stringify(warned));
          await logged("gv-503", ["ADD", "DEL"]);
          assert.equal((await pluginLines("gv-503"))[1].code, 11);
          const journal = new Journal(plugin.stateDir);
          const entries = (await journal.list()).map((e) => e.entry);
          assert.equal(entries.length, 1, `one entry under ${journal.dir}`);
          assert.equal(entries[0]?.containerId, "gv-503");
          assert.deepEqual(entries[0]?.claims.map((x) => x.name).sort(), held);
          await ledger("DEL swallowed (Milo 503)", 2);

          const rec = await plugin.run({ command: "", args: ["reconcile"] });
          assert.equal(rec.code, 0, rec.stdout);
          const report = rec.json as { released: { claim: string; via: string }[] };
          assert.deepEqual(
            report.released.map((x) => `${x.via}:${x.claim}`).sort(),
            held.map((n) => `journal:${n}`),
          );
          assert.deepEqual(await journal.list(), []);
          assert.deepEqual(await claimsOf("gv-503"), []);
          await ledger("reconcile after the swallowed DEL");
        },
      );

      await t.step(
        "Milo fails the ADD (creates land, answers 503 to the deadline): 11 through the master, its rollback DEL releases both",
        async () => {
          const c = conf("galactic-veth", "att9", {
            ipam: { ...ipam, timeouts: { requestMs: 300, totalMs: 1_500 } },
          });
          const r = await whileMiloFails(
            { errorRate: 1, errorStatuses: [503], methods: ["POST"], faultPoint: "after" },
            { master: "galactic-veth", command: "ADD", containerId: "gv-milo", stdin: c },
          );
          assert.equal(r.code, 1, r.stdout);
          assert.equal(r.json?.code, 11, `milo-ipam's error, as galactic prints it: ${r.stdout}`);
          await logged("gv-milo", ["ADD", "DEL"]);
          const [add, del] = await pluginLines("gv-milo");
          assert.equal(add.code, 11);
          assert.equal(del.outcome, "ok", "the master's rollback DEL releases what landed");
          assert.deepEqual(await claimsOf("gv-milo"), []);
          await ledger("Milo failed the ADD");
        },
      );

      await t.step("GC and STATUS never reach the delegate; other verbs are refused", async () => {
        const before = (await claims()).length;
        // An empty valid-attachments list: had it reached milo-ipam, its GC would release all.
        const gc = await run({
          master: "galactic-veth",
          command: "GC",
          stdin: { ...conf("galactic-veth", "att1"), "cni.dev/valid-attachments": [] },
        });
        assert.equal(gc.code, 0, gc.stdout);
        assert.equal(gc.stdout, "", "GC is not registered: skel answers success, nothing printed");
        const status = await run({
          master: "galactic-tap",
          command: "STATUS",
          stdin: conf("galactic-tap", "att2"),
        });
        assert.equal(status.code, 0, status.stdout);
        const probed = await run({
          master: "galactic-tap",
          command: "STATUS",
          stdin: conf("galactic-tap", "att2"),
          env: { GALACTIC_MASTER_TEST_APISERVER: milo.adminUrl },
        });
        assert.equal(probed.code, 0, probed.stdout);
        const down = await run({
          master: "galactic-tap",
          command: "STATUS",
          stdin: conf("galactic-tap", "att2"),
          env: { GALACTIC_MASTER_TEST_APISERVER: `http://127.0.0.1:${freePort()}` },
        });
        assert.equal(down.json?.code, 50, down.stdout);
        const old = await run({
          master: "galactic-veth",
          command: "GC",
          stdin: conf("galactic-veth", "att1", { cniVersion: "1.0.0" }),
        });
        assert.equal(old.json?.code, 1, old.stdout);
        const other = await run({
          master: "galactic-veth",
          command: "FOO",
          stdin: conf("galactic-veth", "att1"),
        });
        assert.equal(other.json?.code, 4, other.stdout);
        const verbs = (await plugin.logLines()).map((l) => l.verb);
        assert.ok(!verbs.includes("GC") && !verbs.includes("STATUS"), `plugin log verbs: ${verbs}`);
        assert.equal((await claims()).length, before, "nothing released");
        await ledger("GC and STATUS");
      });

      await t.step("DEL of every live attachment through its master: Milo holds none", async () => {
        for (const cid of [...live.keys()]) {
          await delOk(cid);
          await until(async () => (await verbsOf(cid)).at(-1) === "DEL", `${cid}: DEL logged`);
        }
        assert.deepEqual(await claims(), []);
        await ledger("every attachment removed");
      });
    });
  });
}
