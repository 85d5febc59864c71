/**
 * End to end under podman: Debian's podman 4.3 (CNI backend, libcni) runs
 * containers with `runc` on a bridge network whose IPAM is the installed
 * milo-ipam, against milo-dev on loopback. Every DELETE then answers 503 while
 * the containers are removed: podman logs the failed CNI DEL and removes them
 * anyway, milo-ipam's release journal keeps the 8 owed releases, and one
 * `milo-ipam reconcile` returns them all. Needs root, podman, runc,
 * busybox-static and containernetworking-plugins; skips with the reason
 * elsewhere and fails instead when CI is set. See docs/e2e.md.
 */
import assert from "node:assert/strict";
import { dirname } from "node:path";
import { KEYS } from "../lib/claims.ts";
import { execCni, type ExecResult } from "../scripts/cni_exec.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import {
  computeLedger,
  type LedgerAttachment,
  ledgerLine,
  normCidr,
} from "../testing/e2e/ledger.ts";
import {
  CNI_PLUGINS,
  LIBCNI_RESULTS,
  Podman,
  PODMAN_CLASS,
  PODMAN_SEED,
  PODMAN_TOKEN,
  podmanMissing,
  runCmd,
} from "../testing/podman.ts";
import { waitFor } from "../testing/process.ts";

const MISSING = await podmanMissing();
const IN_CI = Boolean(Deno.env.get("CI"));
const PODS = 8;
const NETWORK = "mipod-e2e";
/** The network's address space, which the node config grants it. */
const SCOPE = {
  network: { apiGroup: "networking.datumapis.com", kind: "Network", name: NETWORK },
};
const BRIDGE = "mipod0";
const IMAGE = "localhost/mi-busybox";
const CLUSTER = "cluster-p";
const NODE = "node-p1";

if (MISSING && !IN_CI) console.warn(`podman e2e skipped: ${MISSING} (see docs/e2e.md)`);

/** The journal entry files of the plugin's state dir. */
async function journalEntries(plugin: TestPlugin): Promise<{ containerId: string }[]> {
  const dir = `${plugin.stateDir}/journal`;
  const names = (await Array.fromAsync(Deno.readDir(dir)).catch(() => []))
    .filter((e) => e.isFile && e.name.endsWith(".json")).map((e) => e.name);
  return await Promise.all(
    names.map(async (n) => JSON.parse(await Deno.readTextFile(`${dir}/${n}`))),
  );
}

/** One `milo-ipam reconcile` of the installed binary with the install's node config. */
function reconcileRun(plugin: TestPlugin, args: string[] = []): Promise<ExecResult> {
  return execCni(plugin.installed.path, {
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    args: ["reconcile", "--config", plugin.nodeConfig, ...args],
    timeoutMs: 60_000,
  });
}

/** Removes what an interrupted earlier run may have left: the bridge and its cache entries. */
async function removeLeftovers(): Promise<void> {
  if (await Deno.stat(`/sys/class/net/${BRIDGE}`).then(() => true, () => false)) {
    await runCmd("ip", ["link", "del", BRIDGE]);
  }
  for (const e of await Array.fromAsync(Deno.readDir(LIBCNI_RESULTS)).catch(() => [])) {
    if (e.name.startsWith(`${NETWORK}-`)) await Deno.remove(`${LIBCNI_RESULTS}/${e.name}`);
  }
}

Deno.test({
  name: MISSING && !IN_CI
    ? `e2e podman: release journal under podman (skipped: ${MISSING})`
    : `e2e podman: ${PODS} containers, DELETE answering 503 on removal, one reconcile releases all`,
  ignore: Boolean(MISSING) && !IN_CI,
  sanitizeOps: false,
  sanitizeResources: false,
}, async (t) => {
  if (MISSING) {
    throw new Error(`CI is set but the podman e2e prerequisites are missing: ${MISSING}`);
  }
  const started = performance.now();
  let milo: MiloDev | undefined;
  let plugin: TestPlugin | undefined;
  let podman: Podman | undefined;
  const ids: string[] = [];
  try {
    await removeLeftovers();
    milo = await startMiloDev({ seed: PODMAN_SEED });
    plugin = await installPlugin({
      miloUrl: milo.url,
      token: PODMAN_TOKEN,
      cluster: CLUSTER,
      node: NODE,
      classes: { ipv4: PODMAN_CLASS },
      // podman 4.3 keeps libcni's cache in its default place; reconcile must read that one.
      nodeConfig: {
        resultsDir: LIBCNI_RESULTS,
        timeouts: { requestMs: 1000, totalMs: 3000 },
        // podman's pods have no Kubernetes namespace: the grant names none.
        allowScopes: [{ network: NETWORK, scope: SCOPE }],
      },
    });
    podman = await Podman.create({ pluginDirs: [dirname(plugin.installed.path), CNI_PLUGINS] });
    await podman.importBusybox(IMAGE);
    await podman.writeNetwork({
      cniVersion: "1.0.0",
      name: NETWORK,
      plugins: [{
        type: "bridge",
        bridge: BRIDGE,
        isGateway: false,
        ipMasq: false,
        hairpinMode: false,
        ipam: {
          type: "milo-ipam",
          classes: { ipv4: PODMAN_CLASS },
          scope: SCOPE,
        },
      }],
    });
    const pm = podman, dev = milo, plug = plugin;
    const claims = () => dev.listClaims("tenant-p");
    const livePods = async (): Promise<LedgerAttachment[]> => {
      const running = (await pm.ok(["ps", "-q", "--no-trunc"])).split("\n").filter(Boolean);
      return (await pm.inspect(running)).flatMap((c) => {
        const n = c.NetworkSettings.Networks?.[NETWORK];
        return n?.IPAddress
          ? [{
            cluster: CLUSTER,
            node: NODE,
            containerId: c.Id,
            ifname: "eth0",
            addresses: [normCidr(`${n.IPAddress}/${n.IPPrefixLen}`)],
          }]
          : [];
      });
    };
    const ledger = async (scenario: string) => {
      const l = computeLedger(await claims(), await livePods());
      console.log(ledgerLine("direct", scenario, l));
      return l;
    };

    await t.step(`${PODS} containers on the milo-ipam network each hold a lease`, async () => {
      for (let i = 0; i < PODS; i++) {
        ids.push(await pm.runDetached(IMAGE, NETWORK, `mipod-${i}`, ["sleep", "3600"]));
      }
      const inspected = await waitFor("all containers running", async () => {
        const all = await pm.inspect(ids);
        return all.every((c) => c.State.Running) ? all : undefined;
      });
      const held = await claims();
      assert.equal(held.length, PODS, `claims in milo-dev: ${held.map((c) => c.metadata.name)}`);
      for (const c of inspected) {
        const net = c.NetworkSettings.Networks?.[NETWORK];
        assert.ok(net?.IPAddress, `podman reports an address for ${c.Name}`);
        const claim = held.find((x) => x.metadata.annotations?.[KEYS.containerId] === c.Id);
        assert.ok(claim, `a claim for container ${c.Name} (${c.Id})`);
        assert.equal(claim.status.allocatedCIDR, `${net.IPAddress}/32`);
        assert.equal(net.IPPrefixLen, 32);
        assert.equal(claim.metadata.labels?.[KEYS.node], NODE);
        assert.equal(claim.metadata.labels?.[KEYS.network], NETWORK);
        assert.equal(claim.metadata.annotations?.[KEYS.ifname], "eth0");
        // podman passes the container's name as K8S_POD_NAME in CNI_ARGS.
        assert.equal(claim.metadata.labels?.[KEYS.podName], c.Name);
        // The kernel inside the container carries the lease on eth0.
        const addr = await pm.ok(["exec", c.Id, "ip", "-4", "-o", "addr", "show", "dev", "eth0"]);
        assert.match(addr, new RegExp(`inet ${net.IPAddress.replaceAll(".", "\\.")}/32 `));
      }
      const cache = (await Array.fromAsync(Deno.readDir(LIBCNI_RESULTS)))
        .filter((e) => e.name.startsWith(`${NETWORK}-`));
      assert.equal(cache.length, PODS, "libcni cached one result per container");
      // reconcile reads podman's libcni cache: every claim is a live attachment.
      const dry = await reconcileRun(plug, ["--dry-run"]);
      assert.equal(dry.code, 0, `reconcile --dry-run: ${dry.stdout} ${dry.stderr}`);
      const kept = (dry.json as { kept: { reason: string }[] }).kept;
      assert.equal(kept.length, PODS, dry.stdout);
      assert.ok(
        kept.every((k) => k.reason === "live: a result cache names its container"),
        dry.stdout,
      );
      const l = await ledger(`${PODS} podman containers`);
      assert.deepEqual([l.claims, l.live, l.duplicates, l.claimsWithoutPod, l.podsWithoutClaim], [
        PODS,
        PODS,
        0,
        0,
        0,
      ], l.details.join("; "));
    });

    await t.step(
      "every DELETE answers 503: podman rm -f removes them, the journal keeps 8",
      async () => {
        await dev.setFaults({
          errorRate: 1,
          errorStatuses: [503],
          methods: ["DELETE"],
          kinds: ["ipclaims"],
          retryAfterSeconds: 1,
        });
        await dev.resetStats();
        const rmStarted = performance.now();
        const rm = await pm.run(["rm", "-f", "-t", "0", ...ids], 180_000);
        const rmMs = performance.now() - rmStarted;
        const left = (await pm.ok(["ps", "-a", "-q", "--no-trunc"])).split("\n").filter(Boolean);
        assert.deepEqual(left.filter((id) => ids.includes(id)), [], `podman rm: ${rm.stderr}`);
        // podman logs a failed CNI DEL (milo-ipam's error through bridge) and removes anyway. The
        // DEL of a container killed by rm may instead run in conmon's `podman container cleanup`,
        // whose log is not rm's: rm's stderr carries some of the 8, the journal all of them.
        const failed = rm.stderr.split("\n").filter((x) => /Unable to clean up network/.test(x));
        assert.ok(failed.length >= 1 && failed.length <= PODS, `podman rm -f: ${rm.stderr}`);
        assert.ok(
          failed.every((x) =>
            /Milo answered 503.*journaled for release by milo-ipam reconcile/.test(x)
          ),
          rm.stderr,
        );
        const stats = await dev.stats();
        assert.ok((stats.byStatus["503"] ?? 0) >= PODS, `503s answered: ${JSON.stringify(stats)}`);
        assert.equal((await claims()).length, PODS, "no claim was released");
        const entries = await journalEntries(plug);
        assert.equal(entries.length, PODS, "one release journal entry per container");
        assert.deepEqual(entries.map((e) => e.containerId).sort(), [...ids].sort());
        const dels = (await plug.logLines()).filter((x) => x.verb === "DEL");
        assert.ok(dels.every((x) => x.code === 11), JSON.stringify(dels));
        assert.deepEqual([...new Set(dels.map((x) => x.containerId))].sort(), [...ids].sort());
        console.log(
          `podman rm -f of ${PODS}: exit ${rm.code} in ${(rmMs / 1000).toFixed(1)} s; ` +
            `${dels.length} DEL calls, all code 11; rm logged ${failed.length} of them: ` +
            (failed[0]?.match(/cni plugin bridge failed: (release of claim [^:]+ failed)/)?.[1] ??
              ""),
        );
        const l = await ledger("podman rm -f with DELETE answering 503");
        assert.deepEqual([l.claims, l.live, l.claimsWithoutPod], [PODS, 0, PODS]);
      },
    );

    await t.step(
      "faults cleared, one milo-ipam reconcile releases every journaled claim",
      async () => {
        await dev.clearFaults();
        // libcni keeps the cache entry of a failed DEL, though podman removed the netns it names:
        // to reconcile's orphan path these containers look live; only the journal releases them.
        const staleEntries = await Promise.all(
          (await Array.fromAsync(Deno.readDir(LIBCNI_RESULTS)))
            .filter((e) => e.name.startsWith(`${NETWORK}-`))
            .map(async (e) => JSON.parse(await Deno.readTextFile(`${LIBCNI_RESULTS}/${e.name}`))),
        );
        const stale = staleEntries.length;
        assert.equal(stale, PODS, "libcni kept the result cache entries of the failed DELs");
        for (const e of staleEntries) {
          const sandboxes = (e.result?.interfaces ?? []).map((i: { sandbox?: string }) => i.sandbox)
            .filter(Boolean) as string[];
          assert.ok(sandboxes.length, `cache entry names its netns: ${JSON.stringify(e.result)}`);
          for (const ns of sandboxes) {
            assert.ok(!await Deno.stat(ns).then(() => true, () => false), `${ns} is gone`);
          }
        }
        const r = await reconcileRun(plug);
        assert.equal(r.code, 0, `reconcile: ${r.stdout} ${r.stderr}`);
        const report = r.json as {
          released: { claim: string; via: string; containerId?: string }[];
          journal: unknown[];
          errors: unknown[];
          live: number;
        };
        console.log(
          `milo-ipam reconcile: released ${report.released.length} via journal ` +
            `(result cache: ${report.live} entries, ${stale} of them stale from the failed DELs)`,
        );
        assert.ok(report.live >= stale, r.stdout);
        assert.equal(report.released.length, PODS, r.stdout);
        assert.ok(report.released.every((x) => x.via === "journal"), r.stdout);
        assert.deepEqual(report.released.map((x) => x.containerId).sort(), [...ids].sort());
        assert.deepEqual(report.journal, []);
        assert.deepEqual(report.errors, []);
        assert.equal((await claims()).length, 0, "no claim left in milo-dev");
        assert.equal((await journalEntries(plug)).length, 0, "release journal empty");
        const l = await ledger("milo-ipam reconcile");
        assert.deepEqual([l.claims, l.live, l.duplicates, l.claimsWithoutPod, l.podsWithoutClaim], [
          0,
          0,
          0,
          0,
          0,
        ], l.details.join("; "));
      },
    );
  } finally {
    await milo?.clearFaults().catch(() => {});
    const problems = (await podman?.cleanup()) ?? [];
    await removeLeftovers().catch((err) => problems.push(`leftovers: ${err}`));
    await plugin?.cleanup().catch((err) => problems.push(`plugin cleanup: ${err}`));
    await milo?.stop().catch((err) => problems.push(`milo-dev stop: ${err}`));
    if (problems.length) console.warn(`podman e2e teardown: ${problems.join("; ")}`);
    console.log(`podman e2e took ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
});
