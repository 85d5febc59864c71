/**
 * End to end under the runtime kubelet talks to: Debian's containerd 1.6 with
 * its CRI plugin, driven over CRI gRPC as kubelet drives it (RunPodSandbox,
 * PodSandboxStatus, ListPodSandbox, StopPodSandbox, RemovePodSandbox), on a
 * bridge network whose IPAM is the installed milo-ipam, against milo-dev on
 * loopback; once with the plugin working alone and once with `milo-ipam agent`.
 * Needs root, containerd, podman, runc, busybox-static and
 * containernetworking-plugins; skips with the reason elsewhere and fails
 * instead when CI is set. See docs/e2e.md.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import type { IPClaim } from "../lib/milo_objects.ts";
import { execCni, type ExecResult } from "../scripts/cni_exec.ts";
import { CriError } from "../testing/cri/client.ts";
import {
  buildPauseImage,
  Containerd,
  criMissing,
  LIBCNI_RESULTS,
} from "../testing/cri/containerd.ts";
import { CRI_CLASS, CRI_PROJECT, CRI_SEED, CRI_TOKEN } from "../testing/cri/seed.ts";
import {
  computeLedger,
  type LedgerAttachment,
  ledgerLine,
  normCidr,
} from "../testing/e2e/ledger.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { MODES, waitFor } from "../testing/process.ts";
import { runCmd } from "../testing/podman.ts";

type Mode = typeof MODES[number];

const MISSING = await criMissing();
const IN_CI = Boolean(Deno.env.get("CI"));
/** E2E_MODE=direct or agent runs one mode; both by default. */
const RUN_MODES: readonly Mode[] = (() => {
  const m = Deno.env.get("E2E_MODE");
  if (!m) return MODES;
  if (m !== "direct" && m !== "agent") throw new Error(`E2E_MODE=${m}: direct or agent`);
  return [m];
})();
const SANDBOXES = 6;
/** Sandboxes stopped and removed in step c; the rest stay live until the end. */
const REMOVED_FIRST = 4;
const NETWORK = "micri-e2e";
const BRIDGE = "micri0";
const IMAGE = "localhost/micri-pause:1";
const CLUSTER = "cluster-c";
const NODE = "node-c1";
const POD_NAMESPACE = "shop";
/** kubelet hands each sandbox its pod's cgroup; this run's parent is removed at the end. */
const CGROUP_PARENT = `/micri-e2e-${Deno.pid}`;
/** The label that selects one mode's sandboxes in ListPodSandbox. */
const RUN_LABEL = "micri-e2e.milo-ipam.io/mode";

if (MISSING && !IN_CI) console.warn(`containerd e2e skipped: ${MISSING} (see docs/e2e.md)`);

/** The bridge network containerd loads from its conf dir; its IPAM is milo-ipam. */
const IPAM = {
  type: "milo-ipam",
  classes: { ipv4: CRI_CLASS },
  scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: NETWORK } },
};
const BRIDGE_PLUGIN = {
  type: "bridge",
  bridge: BRIDGE,
  isGateway: false,
  ipMasq: false,
  hairpinMode: false,
  ipam: IPAM,
};
const CONFLIST = { cniVersion: "1.0.0", name: NETWORK, plugins: [BRIDGE_PLUGIN] };

/** One pod as kubelet would describe its sandbox. */
interface Pod {
  name: string;
  uid: string;
  id?: string;
  ip?: string;
}

function sandboxConfig(mode: Mode, pod: Pod, logRoot: string) {
  return {
    metadata: { name: pod.name, uid: pod.uid, namespace: POD_NAMESPACE, attempt: 0 },
    hostname: pod.name,
    logDirectory: `${logRoot}/${POD_NAMESPACE}_${pod.name}_${pod.uid}`,
    labels: {
      "io.kubernetes.pod.name": pod.name,
      "io.kubernetes.pod.namespace": POD_NAMESPACE,
      "io.kubernetes.pod.uid": pod.uid,
      [RUN_LABEL]: mode,
    },
    annotations: { "kubernetes.io/config.source": "api" },
    linux: {
      cgroupParent: `${CGROUP_PARENT}/pod${pod.uid}`,
      securityContext: {
        namespaceOptions: {
          network: "POD" as const,
          pid: "CONTAINER" as const,
          ipc: "POD" as const,
        },
      },
    },
  };
}

/** A libcni cache entry (the fields the test reads). */
interface CacheEntry {
  kind: string;
  containerId: string;
  ifName: string;
  networkName: string;
  cniArgs?: [string, string][];
  result?: { ips?: { address: string }[]; interfaces?: { name: string; sandbox?: string }[] };
}

async function readCache(name: string): Promise<CacheEntry | undefined> {
  const text = await Deno.readTextFile(`${LIBCNI_RESULTS}/${name}`).catch(() => undefined);
  return text === undefined ? undefined : JSON.parse(text);
}

/** One `milo-ipam reconcile` of the installed binary with the install's node config. */
function reconcileRun(plugin: TestPlugin, args: string[] = []): Promise<ExecResult> {
  return execCni(plugin.installed.path, {
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    args: ["reconcile", "--config", plugin.nodeConfig, ...args],
    timeoutMs: 60_000,
  });
}

interface ReconcileReport {
  released: { claim: string; via: string; containerId?: string }[];
  kept: { claim: string; reason: string }[];
  errors: unknown[];
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

for (const mode of RUN_MODES) {
  Deno.test({
    name: MISSING && !IN_CI
      ? `e2e cri [${mode}]: milo-ipam under containerd's CRI (skipped: ${MISSING})`
      : `e2e cri [${mode}]: ${SANDBOXES} pod sandboxes through containerd 1.6 CRI, ` +
        "reconcile keeps them, Stop/Remove releases them",
    ignore: Boolean(MISSING) && !IN_CI,
    sanitizeOps: false,
    sanitizeResources: false,
  }, async (t) => {
    if (MISSING) {
      throw new Error(`CI is set but the containerd e2e prerequisites are missing: ${MISSING}`);
    }
    const started = performance.now();
    const figures: Record<string, string> = {};
    const timed = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      try {
        return await f();
      } finally {
        figures[what] = `${((performance.now() - t0) / 1000).toFixed(1)} s`;
      }
    };
    let milo: MiloDev | undefined;
    let plugin: TestPlugin | undefined;
    let ctd: Containerd | undefined;
    try {
      const setup = await timed("setup", async () => {
        await removeLeftovers();
        const dev = milo = await startMiloDev({ seed: CRI_SEED });
        const plug = plugin = await installPlugin({
          miloUrl: dev.url,
          token: CRI_TOKEN,
          cluster: CLUSTER,
          node: NODE,
          classes: { ipv4: CRI_CLASS },
          agent: mode === "agent",
          nodeConfig: {
            // containerd's CRI (go-cni) keeps libcni's default cache dir; reconcile must read it.
            resultsDir: LIBCNI_RESULTS,
            // The agent's reconcile (run at its start) treats absent claims as the CLI's --grace 0.
            reconcile: { graceS: 0 },
            timeouts: { requestMs: 2000, totalMs: 10_000 },
            allowScopes: [{ scope: IPAM.scope }],
          },
        });
        if (mode === "agent") await plug.startAgent();
        const c = ctd = await Containerd.start({
          network: CONFLIST,
          plugins: { "milo-ipam": plug.installed.path },
          sandboxImage: IMAGE,
          prefix: `micri-${mode}-`,
        });
        const archive = `${c.dir}/pause.tar`;
        await buildPauseImage(IMAGE, archive);
        await c.importImage(archive, IMAGE);
        await c.waitReady();
        const v = await c.cri.version();
        figures.runtime = `${v.runtimeName} ${v.runtimeVersion} (CRI ${v.runtimeApiVersion})`;
        return { dev, plug, c };
      });
      const { dev, plug, c } = setup;
      const claims = (): Promise<IPClaim[]> => dev.listClaims(CRI_PROJECT);
      const pods: Pod[] = Array.from({ length: SANDBOXES }, (_, i) => ({
        name: `web-${mode}-${i}`,
        uid: crypto.randomUUID(),
      }));
      const claimOf = (all: IPClaim[], id: string) =>
        all.filter((x) => x.metadata.annotations?.[KEYS.containerId] === id);
      const live = async (): Promise<LedgerAttachment[]> => {
        const items = await c.cri.listPodSandbox({
          state: { state: "SANDBOX_READY" },
          labelSelector: { [RUN_LABEL]: mode },
        });
        return await Promise.all(items.map(async (s) => {
          const st = (await c.cri.podSandboxStatus(s.id)).status;
          return {
            cluster: CLUSTER,
            node: NODE,
            containerId: s.id,
            ifname: "eth0",
            addresses: st.network?.ip ? [normCidr(`${st.network.ip}/32`)] : [],
          };
        }));
      };
      const ledger = async (after: string, want: number) => {
        const l = computeLedger(await claims(), await live());
        console.log(ledgerLine(mode, after, l));
        assert.deepEqual(
          [l.claims, l.live, l.duplicates, l.claimsWithoutPod, l.podsWithoutClaim],
          [want, want, 0, 0, 0],
          l.details.join("; "),
        );
      };
      const logOf = async (verb: string, ids: string[]) =>
        (await plug.logLines()).filter((l) =>
          l.verb === verb && ids.includes(String(l.containerId))
        );

      await t.step(
        `a. ${SANDBOXES} RunPodSandbox at once: each sandbox holds the address of its claim`,
        () =>
          timed("a: RunPodSandbox", async () => {
            await Promise.all(pods.map(async (p) => {
              p.id = await c.runPodSandbox(sandboxConfig(mode, p, `${c.dir}/pod-logs`));
            }));
            const held = await claims();
            assert.equal(held.length, SANDBOXES, `claims: ${held.map((x) => x.metadata.name)}`);
            const argsSeen = new Set<string>();
            for (const p of pods) {
              const id = p.id!;
              const { status, info } = await c.cri.podSandboxStatus(id, true);
              assert.equal(status.state, "SANDBOX_READY");
              assert.deepEqual(
                [status.metadata.name, status.metadata.uid, status.metadata.namespace],
                [p.name, p.uid, POD_NAMESPACE],
              );
              p.ip = status.network?.ip;
              assert.ok(p.ip, `PodSandboxStatus of ${p.name} carries an IP`);
              const mine = claimOf(held, id);
              assert.equal(mine.length, 1, `one claim for sandbox ${id}`);
              const claim = mine[0];
              assert.equal(claim.status.allocatedCIDR, `${p.ip}/32`, "Milo's lease = CRI's IP");
              const ann = claim.metadata.annotations ?? {}, lab = claim.metadata.labels ?? {};
              // containerd passes the sandbox id as CNI_CONTAINERID and the pod from its metadata.
              assert.equal(ann[KEYS.containerId], id);
              assert.equal(ann[KEYS.podUid], p.uid);
              assert.equal(ann[KEYS.pod], `${POD_NAMESPACE}/${p.name}`);
              assert.equal(ann[KEYS.ifname], "eth0");
              assert.equal(lab[KEYS.podNamespace], POD_NAMESPACE);
              assert.equal(lab[KEYS.podName], p.name);
              assert.equal(lab[KEYS.node], NODE);
              assert.equal(lab[KEYS.cluster], CLUSTER);
              assert.equal(lab[KEYS.network], NETWORK);
              // libcni's cache entry, where reconcile looks for live attachments.
              const entry = await readCache(`${NETWORK}-${id}-eth0`);
              assert.ok(entry, `${LIBCNI_RESULTS}/${NETWORK}-${id}-eth0 exists`);
              assert.deepEqual([entry.kind, entry.containerId, entry.ifName, entry.networkName], [
                "cniCacheV1",
                id,
                "eth0",
                NETWORK,
              ]);
              assert.equal(entry.result?.ips?.[0]?.address, `${p.ip}/32`);
              const args = Object.fromEntries(entry.cniArgs ?? []);
              for (const k of Object.keys(args)) argsSeen.add(k);
              assert.deepEqual(
                [args.K8S_POD_NAMESPACE, args.K8S_POD_NAME, args.K8S_POD_UID],
                [POD_NAMESPACE, p.name, p.uid],
              );
              assert.equal(args.K8S_POD_INFRA_CONTAINER_ID, id);
              // The kernel: eth0 in the sandbox's network namespace carries the lease.
              const spec = JSON.parse(info.info ?? "{}").runtimeSpec;
              const netns = (spec?.linux?.namespaces ?? [])
                .find((n: { type: string }) => n.type === "network")?.path as string | undefined;
              assert.ok(netns?.startsWith(`${c.state}/`), `netns under the state dir: ${netns}`);
              const eth0 = entry.result?.interfaces?.find((i) => i.name === "eth0");
              assert.equal(eth0?.sandbox, netns, "the cache entry names the sandbox's netns");
              const addr = await runCmd("nsenter", [
                `--net=${netns}`,
                "ip",
                "-4",
                "-o",
                "addr",
                "show",
                "dev",
                "eth0",
              ]);
              assert.match(addr.stdout, new RegExp(`inet ${p.ip.replaceAll(".", "\\.")}/32 `));
            }
            const ids = pods.map((p) => p.id!);
            const adds = await waitFor("the plugin log of every ADD", async () => {
              const l = await logOf("ADD", ids);
              return l.length >= SANDBOXES ? l : undefined;
            });
            assert.equal(adds.length, SANDBOXES, "one ADD per sandbox, no retry");
            assert.ok(adds.every((l) => l.outcome === "ok"), JSON.stringify(adds));
            assert.ok(adds.every((l) => l.via === (mode === "agent" ? "agent" : "direct")));
            const listed = await c.cri.listPodSandbox({ labelSelector: { [RUN_LABEL]: mode } });
            assert.deepEqual(listed.map((s) => s.id).sort(), [...ids].sort());
            const entries = await c.cacheEntries();
            console.log(
              `[${mode}] containerd's CNI_ARGS: ${[...argsSeen].sort().join(", ")}; ` +
                `CNI_CONTAINERID = the sandbox id; libcni cache ${LIBCNI_RESULTS}: ` +
                `${entries.length} entries (${NETWORK}-<id>-eth0 and cni-loopback-<id>-lo)`,
            );
            assert.equal(entries.length, 2 * SANDBOXES, entries.join(", "));
            await ledger(`${SANDBOXES} sandboxes`, SANDBOXES);
          }),
      );

      await t.step(
        "b. reconcile --grace 0, three times, keeps every live sandbox's lease",
        () =>
          timed("b: reconcile", async () => {
            const ids = pods.map((p) => p.id!);
            const before = new Map((await claims()).map((x) => [x.metadata.name, x.metadata.uid]));
            // A control: a lease whose holder is in no result cache is released by the same runs.
            const orphanId = `micri-orphan-${mode}`;
            const add = await plug.run({
              command: "ADD",
              containerId: orphanId,
              podName: "orphan",
              podNamespace: POD_NAMESPACE,
              stdin: { cniVersion: "1.0.0", name: NETWORK, ...BRIDGE_PLUGIN },
            });
            assert.equal(add.code, 0, `orphan ADD: ${add.stdout} ${add.stderr}`);
            const orphan = claimOf(await claims(), orphanId)[0];
            assert.ok(orphan, "the orphan's claim");
            const released: string[] = [];
            for (let run = 1; run <= 3; run++) {
              const r = await reconcileRun(plug, ["--grace", "0"]);
              assert.equal(r.code, 0, `reconcile ${run}: ${r.stdout} ${r.stderr}`);
              const report = r.json as unknown as ReconcileReport;
              assert.deepEqual(report.errors, [], r.stdout);
              if (run === 1) assert.deepEqual(report.released, [], "one observation releases none");
              released.push(...report.released.map((x) => x.claim));
              for (const name of before.keys()) {
                assert.ok(
                  report.kept.some((k) => k.claim === name),
                  `reconcile ${run} keeps ${name}: ${r.stdout}`,
                );
              }
            }
            assert.deepEqual(released, [orphan.metadata.name], "exactly the orphan is released");
            if (mode === "agent") {
              // The agent reconciles when it starts (then every reconcileIntervalS): restart it
              // twice, so the second run has the first one's observation.
              for (let restart = 1; restart <= 2; restart++) {
                const seen = (await plug.logLines()).filter((l) => l.verb === "RECONCILE").length;
                await plug.stopAgent();
                await plug.startAgent();
                const line = await waitFor(`the agent's reconcile ${restart}`, async () => {
                  const all = (await plug.logLines()).filter((l) => l.verb === "RECONCILE");
                  return all.length > seen ? all[all.length - 1] : undefined;
                });
                assert.deepEqual(line.released, [], JSON.stringify(line));
                assert.deepEqual(line.errors, [], JSON.stringify(line));
                assert.ok(Number(line.kept) >= SANDBOXES, JSON.stringify(line));
              }
            }
            const after = new Map((await claims()).map((x) => [x.metadata.name, x.metadata.uid]));
            assert.deepEqual([...after].sort(), [...before].sort(), "every claim kept, same uid");
            assert.equal(claimOf(await claims(), orphanId).length, 0);
            for (const id of ids) assert.equal(claimOf(await claims(), id).length, 1);
            await ledger("reconcile", SANDBOXES);
          }),
      );

      await t.step(
        `c. StopPodSandbox releases ${REMOVED_FIRST} claims; Stop again and Remove are harmless`,
        () =>
          timed("c: Stop/Remove", async () => {
            const ids = pods.slice(0, REMOVED_FIRST).map((p) => p.id!);
            // Every Stop and Remove execs one CNI DEL (also when the network is gone already).
            const dels = (n: number) =>
              waitFor(`${n} DELs in the plugin log`, async () => {
                const l = await logOf("DEL", ids);
                return l.length >= n ? l : undefined;
              });
            await Promise.all(ids.map((id) => c.cri.stopPodSandbox(id)));
            // StopPodSandbox reclaims the network: the claims are gone before any Remove.
            let held = await claims();
            for (const id of ids) assert.equal(claimOf(held, id).length, 0, `claim of ${id} gone`);
            assert.equal(held.length, SANDBOXES - REMOVED_FIRST);
            for (const id of ids) {
              assert.equal(await readCache(`${NETWORK}-${id}-eth0`), undefined, "cache entry gone");
              const st = (await c.cri.podSandboxStatus(id)).status;
              assert.equal(st.state, "SANDBOX_NOTREADY");
            }
            assert.equal((await dels(REMOVED_FIRST)).length, REMOVED_FIRST, "one DEL per Stop");
            // kubelet may stop a sandbox again: idempotent, the DEL finds nothing to release.
            await Promise.all(ids.map((id) => c.cri.stopPodSandbox(id)));
            assert.equal((await dels(2 * REMOVED_FIRST)).length, 2 * REMOVED_FIRST);
            await Promise.all(ids.map((id) => c.cri.removePodSandbox(id)));
            const all = await dels(3 * REMOVED_FIRST);
            assert.equal(all.length, 3 * REMOVED_FIRST, "one DEL per Remove too");
            assert.ok(all.every((l) => l.outcome === "ok"), JSON.stringify(all));
            for (const id of ids) {
              await assert.rejects(
                () => c.cri.podSandboxStatus(id),
                (e) => e instanceof CriError && e.code === 5, // NOT_FOUND
              );
            }
            held = await claims();
            assert.equal(held.length, SANDBOXES - REMOVED_FIRST);
            console.log(
              `[${mode}] ${REMOVED_FIRST} sandboxes: Stop, Stop again, Remove: ` +
                `${all.length} DEL calls, all ok (each call one DEL)`,
            );
            await ledger(`Stop/Remove of ${REMOVED_FIRST}`, SANDBOXES - REMOVED_FIRST);
          }),
      );

      await t.step(
        "d. the rest removed: Milo holds no claim, the ledger is empty",
        () =>
          timed("d: final", async () => {
            const rest = pods.slice(REMOVED_FIRST).map((p) => p.id!);
            for (const id of rest) {
              await c.cri.stopPodSandbox(id);
              await c.cri.removePodSandbox(id);
            }
            assert.deepEqual(
              await c.cri.listPodSandbox({ labelSelector: { [RUN_LABEL]: mode } }),
              [],
            );
            assert.deepEqual(await c.cacheEntries(), [], "no cache entry of the run is left");
            assert.deepEqual((await claims()).map((x) => x.metadata.name), []);
            await ledger("all removed", 0);
          }),
      );
    } finally {
      const problems = (await ctd?.cleanup(CGROUP_PARENT)) ?? [];
      await removeLeftovers().catch((err) => problems.push(`leftovers: ${err}`));
      await plugin?.stopAgent().catch((err) => problems.push(`agent stop: ${err}`));
      await plugin?.cleanup().catch((err) => problems.push(`plugin cleanup: ${err}`));
      await milo?.stop().catch((err) => problems.push(`milo-dev stop: ${err}`));
      if (problems.length) {
        console.warn(`containerd e2e teardown [${mode}]: ${problems.join("; ")}`);
      }
      figures.total = `${((performance.now() - started) / 1000).toFixed(1)} s`;
      console.log(`e2e cri figures [${mode}]: ${JSON.stringify(figures)}`);
    }
  });
}
