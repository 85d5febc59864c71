/**
 * Delegation contract with galactic's master plugins: the stand-in of
 * testing/galactic/ (galactic-veth and galactic-tap as they treat their IPAM
 * delegate) runs as a CNI plugin and delegates to the installed milo-ipam,
 * against milo-dev, with failures injected into Milo and into the master.
 * Each master reads its chain from the pod's NetworkAttachmentDefinition, as
 * galactic does; the documented example NAD is read from docs/galactic.md and run.
 * What each case shows is what galactic's code paths do with milo-ipam's
 * answers: the chain it refuses, the result it prints, the CHECK it forwards
 * (the tap's /25) or fails (veth's IPv6-only check), the DEL its rollback
 * makes, the DEL failure it swallows, the verbs it never delegates, the slots
 * of two namespaces, the address Milo holds while galactic may still
 * announce it, a Deployment's rolling update on the documented attachment, a
 * NAD without gateways, one attachment spelled two ways, a VM whose runtime
 * keeps no result cache. Each ADD and DEL runs the chain as libcni does, the
 * master then galactic-bgp (testing/galactic/bgp.ts). After every case, the
 * ledger: Milo's claims of the test's cluster (and its retained addresses)
 * against the attachments the chain reported live, and what galactic
 * announces: no address for two attachments, each live one's for its own.
 * Both modes: the plugin working alone, and the node agent answering.
 */
import assert from "node:assert/strict";
import { load as parseYaml } from "js-yaml";
import { KEYS } from "../lib/claims.ts";
import { Journal } from "../lib/journal.ts";
import { execCni, type ExecResult } from "../scripts/cni_exec.ts";
import {
  computeLedger,
  type LedgerAttachment,
  ledgerLine,
  normCidr,
} from "../testing/e2e/ledger.ts";
import { advertisementName, advertisements, routerGc } from "../testing/galactic/bgp.ts";
import {
  chainProblems,
  HOST_INTERFACE_ANNOTATION,
  interfaceName,
  nadOf,
  nadPath,
  stanza,
  writeNad,
} from "../testing/galactic/chain.ts";
import { miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { freePort, MODES, PLUGIN_SEED, TOKEN, until } from "../testing/process.ts";

const CLUSTER = "cluster-galactic";
const NODE = "node-g1";
const VPC = "7b3e";
const NS = "shop";
const MASTER = new URL("../testing/galactic/master.ts", import.meta.url).pathname;
const BGP = new URL("../testing/galactic/bgp.ts", import.meta.url).pathname;
/** The page with the NetworkAttachmentDefinition a reader copies (the README links it). */
const NAD_PAGE = new URL("../docs/galactic.md", import.meta.url);
/** The classes' retention lease: Milo holds a retained address lease + min(lease, 24h). */
const LEASE = "5m";

type Master = "galactic-veth" | "galactic-tap";
type Plugin = Master | "galactic-bgp";
type Json = Record<string, unknown>;
type Ip = { address: string; gateway?: string; interface?: number };

/** An IPv4 CIDR's address as a number, for first-fit order. */
const ipv4Number = (cidr: string) =>
  cidr.split("/")[0].split(".").reduce((n, o) => n * 256 + Number(o), 0);

/**
 * The plugin seed with the vpc classes' `retentionLease` (the platform's hold, see
 * docs/galactic.md) and the lease sweeper run by hand only.
 */
function seed() {
  const s = structuredClone(PLUGIN_SEED) as typeof PLUGIN_SEED & { retention?: Json };
  for (const c of s.projects[0].ipClasses as { metadata: { name: string }; spec: Json }[]) {
    if (c.metadata.name.startsWith("vpc-pods-")) c.spec.retentionLease = LEASE;
  }
  s.retention = { sweepInterval: "0s" };
  return s;
}

/** The documented galactic NetworkAttachmentDefinition (docs/galactic.md), as a reader copies it. */
async function readmeNad(): Promise<{ nad: Json; conflist: Json; text: string }> {
  const text = await Deno.readTextFile(NAD_PAGE);
  const section = text.slice(
    text.indexOf("\n## A NAD galactic accepts, and what galactic calls\n"),
  );
  const block = /```yaml\n([\s\S]*?)```/.exec(section.slice(0, section.indexOf("\n## ", 5)));
  assert.ok(block, "docs/galactic.md's first section holds a yaml NetworkAttachmentDefinition");
  const nad = parseYaml(block[1]) as Json;
  const conflist = JSON.parse((nad.spec as { config: string }).config) as Json;
  return { nad, conflist, text: section };
}

/** The stand-ins' wrappers, one per binary, as a runtime finds them in CNI_PATH. */
async function installMasters(dir: string): Promise<string> {
  const bin = `${dir}/bin`;
  await Deno.mkdir(bin, { recursive: true });
  const run = `#!/bin/sh\nexec '${Deno.execPath()}' run --allow-all --no-config --no-lock`;
  for (const name of ["galactic-veth", "galactic-tap"]) {
    await Deno.writeTextFile(`${bin}/${name}`, `${run} '${MASTER}' --flavour ${name} "$@"\n`, {
      mode: 0o755,
    });
  }
  await Deno.writeTextFile(`${bin}/galactic-bgp`, `${run} '${BGP}' "$@"\n`, { mode: 0o755 });
  return bin;
}

/** A directory holding a `milo-ipam` that runs `script` (with $REAL the installed one). */
async function delegateWrapper(dir: string, name: string, real: string, script: string) {
  const d = `${dir}/${name}`;
  await Deno.mkdir(d, { recursive: true });
  await Deno.writeTextFile(`${d}/milo-ipam`, `#!/bin/sh\nREAL='${real}'\n${script}\n`, {
    mode: 0o755,
  });
  return d;
}

interface World {
  milo: MiloDev;
  plugin: TestPlugin;
  dir: string;
  masterLog: string;
  nads: string;
  /** The directory standing for /var/run/netns: a file per live sandbox (testing/galactic/bgp.ts). */
  netns: string;
  /** Runs a plugin of the chain as a runtime does: its CNI_PATH holds the stand-ins and milo-ipam. */
  run(o: {
    master: Plugin;
    command: string;
    containerId?: string;
    stdin: unknown;
    ns?: string;
    pod?: string;
    ifname?: string;
    env?: Record<string, string>;
    /** Directories searched before milo-ipam's own. */
    path?: string[];
  }): Promise<ExecResult>;
}

async function withWorld(
  mode: (typeof MODES)[number],
  fn: (w: World) => Promise<void>,
): Promise<void> {
  const milo = await startMiloDev({ seed: seed() });
  const dir = await Deno.makeTempDir({ prefix: "galactic-master-" });
  const readmeIpam = ((await readmeNad()).conflist.plugins as Json[])[0].ipam as Json;
  let plugin: TestPlugin | undefined;
  try {
    plugin = await installPlugin({
      miloUrl: milo.url,
      token: TOKEN,
      cluster: CLUSTER,
      node: NODE,
      agent: mode === "agent",
      nodeConfig: {
        // Steps that need fast failures lower their network's timeouts: the node allows it.
        timeouts: { requestMs: 1000, totalMs: 4000, minRequestMs: 300, minTotalMs: 1000 },
        // As the documented Galactic section grants the identities to the platform's NADs; and
        // the documented network's space to every chain here (the platform's NADs, not a user's).
        allowIdentities: [{ identity: "pod" }, { identity: "network" }],
        allowScopes: [{ scope: readmeIpam.scope }],
      },
    });
    if (mode === "agent") await plugin.startAgent();
    const bin = await installMasters(dir);
    const masterLog = `${dir}/galactic.log`;
    const nads = `${dir}/nads`;
    const netns = `${dir}/netns`;
    await Deno.mkdir(netns);
    const p = plugin;
    const run: World["run"] = (o) => {
      const cid = o.containerId ?? "none";
      return execCni(`${bin}/${o.master}`, {
        env: {
          PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
          CNI_COMMAND: o.command,
          CNI_CONTAINERID: cid,
          CNI_IFNAME: o.ifname ?? "eth0",
          CNI_NETNS: `/var/run/netns/${cid}`,
          CNI_PATH: [bin, ...(o.path ?? []), `${p.dir}/bin`].join(":"),
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${o.ns ?? NS};` +
            `K8S_POD_NAME=${o.pod ?? `vm-${cid}`};K8S_POD_UID=uid-${cid}`,
          GALACTIC_CNI_NODE_NAME: NODE,
          GALACTIC_CNI_LOG_FILE: masterLog,
          GALACTIC_MASTER_TEST_NADS: nads,
          GALACTIC_MASTER_TEST_NETNS: netns,
          ...o.env,
        },
        stdin: o.stdin,
        timeoutMs: 20_000,
      });
    };
    await fn({ milo, plugin, dir, masterLog, nads, netns, run });
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
  Deno.test(`[${mode}] galactic's masters delegate to milo-ipam: the documented NAD, the chain, ADD, CHECK, DEL, rollback, slots, the hold`, async (t) => {
    await withWorld(mode, async ({ milo, plugin, dir, masterLog, nads, netns, run }) => {
      // One network, one address space: Milo's uniqueness is per address space (scope included,
      // `internal/scope/scope.go` CanonicalAddressSpace), so every chain here joins the documented.
      const readmeIpam = ((await readmeNad()).conflist.plugins as Json[])[0].ipam as Json;
      const ipam = { ...(plugin.netConf().ipam as Json), scope: readmeIpam.scope };
      /** An attachment's conflist: the master, then galactic-bgp with its vpc and attachment. */
      const chain = (
        master: Master,
        att: string,
        o: { ipam?: Json; name?: string; vpc?: string; bgp?: boolean; top?: Json } = {},
      ): Json => {
        const vpc = o.vpc ?? VPC;
        return {
          cniVersion: "1.1.0",
          name: o.name ?? `net-${att}`,
          plugins: [
            { type: master, vpc, vpcattachment: att, mtu: 1450, ipam: { ...ipam, ...o.ipam } },
            ...(o.bgp === false ? [] : [{ type: "galactic-bgp", vpc, vpcattachment: att }]),
          ],
          ...o.top,
        };
      };
      /** Writes the conflist's NAD in `ns`; answers the master's stdin, as libcni builds it. */
      const attach = async (conflist: Json, ns = NS) => {
        await writeNad(nads, nadOf(ns, conflist));
        return stanza(conflist, 0);
      };
      const claims = () => milo.listClaims("tenant-a", `${KEYS.cluster}=${CLUSTER}`);
      const claimsOf = async (cid: string) =>
        (await claims()).filter((c) => c.metadata.annotations?.[KEYS.containerId] === cid);
      /**
       * The addresses Milo holds retained: allocations bound to no claim (Milo clears
       * `spec.claimRef`, `internal/registry/ipam/ipclaim/storage.go` unbindAllocation; its
       * address is `status.allocatedCIDR`, milo-dev's `spec.cidr`).
       */
      const retained = async () => {
        const r = await miloApi<{ items: { spec: Json; status: Json }[] }>(
          milo,
          "GET",
          "/namespaces/default/ipallocations",
        );
        return r.body.items.filter((a) => !a.spec.claimRef)
          .map((a) => normCidr(String(a.status.allocatedCIDR ?? a.spec.cidr)));
      };
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
      const masterLines = async () =>
        (await Deno.readTextFile(masterLog).catch(() => "")).split("\n").filter(Boolean)
          .map((x) => JSON.parse(x) as Json);

      // The attachments the chain reported live (ADD succeeded, no DEL yet), the network
      // namespace the runtime made for each, and the libcni cache entry the runtime writes for
      // each (reconcile judges liveness by it; a runtime that keeps none writes none).
      const live = new Map<
        string,
        { conf: Json; master: Master; result: Json; ns: string; pod?: string; ifname: string }
      >();
      const cache = (cid: string) => `${plugin.resultsDir}/net-${cid}-eth0`;
      const removed = async (cid: string) => {
        live.delete(cid);
        await Deno.remove(cache(cid)).catch(() => {});
        await Deno.remove(`${netns}/${cid}`).catch(() => {});
      };
      /** The galactic-bgp stanza of a master's conflist, as libcni builds it (chain() and the documented). */
      const bgpStanza = (conf: Json, prevResult?: Json): Json => ({
        type: "galactic-bgp",
        vpc: conf.vpc,
        vpcattachment: conf.vpcattachment,
        name: conf.name,
        cniVersion: conf.cniVersion,
        ...(prevResult ? { prevResult } : {}),
      });
      // galactic keeps only the IPv4 address of an IPAM result (cniipam.ResultToIPAMResult) and
      // re-masks it (/32 veth, /25 tap): the lease it reports is that address; IPv6 is the block.
      const leasesOf = (result: Json) =>
        ((result.ips ?? []) as Ip[]).map((ip) =>
          ip.address.includes(":") ? normCidr(ip.address) : `${ip.address.split("/")[0]}/32`
        );
      const v4Of = (result: Json) => leasesOf(result).find((a) => !a.includes(":"))!;
      /** Each announced address and the attachments' BGPAdvertisements announcing it. */
      const announced = () => {
        const by = new Map<string, string[]>();
        for (const adv of advertisements(nads)) {
          for (const p of adv.prefixes) {
            by.set(normCidr(p), [...(by.get(normCidr(p)) ?? []), adv.name]);
          }
        }
        return by;
      };
      const ledger = async (after: string, claimsWithoutLive = 0) => {
        const attachments: LedgerAttachment[] = [...live.entries()].map(([cid, l]) => ({
          cluster: CLUSTER,
          node: NODE,
          containerId: cid,
          ifname: l.ifname,
          addresses: leasesOf(l.result),
        }));
        const l = computeLedger(await claims(), attachments, await retained());
        console.log(ledgerLine(mode, after, l));
        assert.deepEqual(
          [l.live, l.duplicates, l.claimsWithoutPod, l.podsWithoutClaim],
          [live.size, 0, claimsWithoutLive, 0],
          l.details.join("; "),
        );
        // galactic's side (testing/galactic/bgp.ts): no address is announced for two attachments,
        // each live one's addresses are announced for its own, and each has a gateway, through
        // which galactic routes it (internal/hostgw/hostgw.go skips a family without one).
        const by = announced();
        assert.deepEqual(
          [...by].filter(([, names]) => names.length > 1),
          [],
          `${after}: an address announced for two attachments`,
        );
        for (const [cid, a] of live) {
          const own = advertisementName(String(a.conf.vpc), String(a.conf.vpcattachment));
          for (const lease of leasesOf(a.result)) {
            assert.deepEqual(by.get(lease), [own], `${after}: ${cid}'s ${lease} announced for it`);
          }
          for (const ip of a.result.ips as Ip[]) assert.ok(ip.gateway, `${cid}: ${ip.address}`);
        }
      };
      /**
       * ADD through the chain, as libcni runs it: the sandbox's network namespace exists first,
       * then the master, then galactic-bgp with the master's result; the runtime caches the
       * result (`cache: false`: a runtime that keeps no libcni cache).
       */
      const addOk = async (
        master: Master,
        cid: string,
        conf: Json,
        o: { ns?: string; pod?: string; ifname?: string; cache?: boolean } = {},
      ) => {
        await Deno.writeTextFile(`${netns}/${cid}`, "");
        const call = { containerId: cid, ns: o.ns, pod: o.pod, ifname: o.ifname };
        const r = await run({ master, command: "ADD", stdin: conf, ...call });
        assert.equal(r.code, 0, `ADD ${cid}: ${r.stdout} ${r.stderr}`);
        const b = await run({
          master: "galactic-bgp",
          command: "ADD",
          stdin: bgpStanza(conf, r.json!),
          ...call,
        });
        assert.equal(b.code, 0, `galactic-bgp ADD ${cid}: ${b.stdout} ${b.stderr}`);
        assert.deepEqual(b.json, r.json, "galactic-bgp passes the master's result on");
        live.set(cid, {
          conf,
          master,
          result: r.json!,
          ns: o.ns ?? NS,
          pod: o.pod,
          ifname: o.ifname ?? "eth0",
        });
        if (o.cache === false) return r.json!;
        await Deno.writeTextFile(
          cache(cid),
          JSON.stringify({
            kind: "cniCacheV1",
            containerId: cid,
            ifName: o.ifname ?? "eth0",
            networkName: conf.name,
            result: r.json,
          }),
        );
        return r.json!;
      };
      /** DEL through the chain, in libcni's order (galactic-bgp, then the master); the sandbox goes. */
      const delOk = async (cid: string) => {
        const l = live.get(cid)!;
        const call = { containerId: cid, ns: l.ns, pod: l.pod, ifname: l.ifname };
        const b = await run({
          master: "galactic-bgp",
          command: "DEL",
          stdin: bgpStanza(l.conf),
          ...call,
        });
        assert.equal(b.code, 0, `galactic-bgp DEL ${cid}: ${b.stdout} ${b.stderr}`);
        const r = await run({ master: l.master, command: "DEL", stdin: l.conf, ...call });
        assert.equal(r.code, 0, `DEL ${cid}: ${r.stdout} ${r.stderr}`);
        await removed(cid);
        return r;
      };
      /** Runs a master while milo-dev answers with `faults`; they are cleared after. */
      const whileMiloFails = async (
        faults: Json,
        o: Parameters<typeof run>[0],
      ): Promise<ExecResult> => {
        await milo.setFaults(faults);
        try {
          return await run(o);
        } finally {
          await milo.clearFaults();
        }
      };

      await t.step(
        "the documented NetworkAttachmentDefinition: a chain galactic accepts, run as written",
        async () => {
          const { nad, conflist, text } = await readmeNad();
          const meta = nad.metadata as { name: string; namespace: string };
          assert.deepEqual(
            chainProblems(conflist, meta.name),
            [],
            "a chain galactic runs as meant",
          );
          const master = (conflist.plugins as Json[])[0];
          const host = interfaceName(String(master.vpc), String(master.vpcattachment), "H");
          assert.ok(
            text.includes(`\`${host}\``),
            `docs/galactic.md names its host interface, ${host}`,
          );
          await writeNad(nads, nad);
          const conf = stanza(conflist, 0);
          const cid = "readme-0";
          const result = await addOk(master.type as Master, cid, conf, { ns: meta.namespace });
          const ips = result.ips as Ip[];
          assert.equal(ips.length, 2, JSON.stringify(result));
          assert.match(ips[0].address, /^fd20:[0-9a-f:]+\/96$/);
          assert.match(ips[1].address, /^10\.40\.0\.\d+\/32$/);
          assert.ok(ips.every((ip) => ip.gateway), "a gateway for each family");
          const held = await claimsOf(cid);
          assert.deepEqual(
            held.map((c) => [c.metadata.name.replace(/[0-9a-f]{20}/, "H"), c.spec.reclaimPolicy])
              .sort(),
            [["podid-H-v4", "Retain"], ["podid-H-v6", "Retain"]],
            "the documented pod identity: a claim per family, named by the pod",
          );
          const annotated = JSON.parse(
            await Deno.readTextFile(nadPath(nads, meta.namespace, meta.name)),
          );
          assert.equal(annotated.metadata.annotations[HOST_INTERFACE_ANNOTATION], host);
          await ledger("the documented NAD");
        },
      );

      await t.step(
        "the documented attachment through a Deployment's rolling update: the surge pod gets its own address while the old one lives, and the rollout completes",
        async () => {
          const { nad, conflist } = await readmeNad();
          const ns = (nad.metadata as { namespace: string }).namespace;
          const conf = stanza(conflist, 0);
          const master = conf.type as Master;
          // A single-replica Deployment (galactic's lab, deploy/containerlab/docs/tenants.md): its
          // pod, then the new ReplicaSet's, made while the old one lives (maxSurge 1,
          // maxUnavailable 0); the old one goes only once the new one is Ready.
          const old = leasesOf(
            await addOk(master, "web-old", conf, { ns, pod: "web-5d8f9-q2x7k" }),
          );
          const surge = await addOk(master, "web-new", conf, { ns, pod: "web-6b7c8-m4n8p" });
          assert.ok(
            leasesOf(surge).every((a) => !old.includes(a)),
            `the surge pod's own addresses: ${leasesOf(surge)} beside ${old}`,
          );
          await ledger("a surge pod beside the first");
          await delOk("web-old");
          // Its addresses are held while galactic still announces them (internal/cnibgp/ops_del.go
          // leaves the advertisement; the new pod lives, so galactic-router's GC keeps it too).
          const name = advertisementName(String(conf.vpc), String(conf.vpcattachment));
          for (const a of old) {
            assert.deepEqual(announced().get(a), [name], `${a} still announced`);
            assert.ok((await retained()).includes(a), `${a} held in Milo`);
          }
          await ledger("the rollout completed");
          // The Deployment goes (and the documented pod): once none of the attachment's sandboxes
          // lives, galactic-router's GC drops its advertisement (internal/gc/gc.go).
          await delOk("web-new");
          await delOk("readme-0");
          assert.ok(routerGc(nads, netns).includes(name));
          assert.ok(old.every((a) => !announced().has(a)));
          await ledger("the Deployment removed");
        },
      );

      await t.step(
        "a chain without galactic-bgp is refused with 7; milo-ipam is never called",
        async () => {
          const conf = await attach(chain("galactic-veth", "b1", { bgp: false }));
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-nobgp",
            stdin: conf,
          });
          assert.equal(r.code, 1, r.stdout);
          assert.equal(r.json?.code, 7, r.stdout);
          assert.match(
            String(r.json?.msg),
            /chain completeness check: .*missing required plugin "galactic-bgp"/,
          );
          // No NAD of that name in the pod's namespace: 7 too; no API at all: 999.
          const other = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-nobgp",
            stdin: conf,
            ns: "elsewhere",
          });
          assert.equal(other.json?.code, 7, other.stdout);
          assert.match(
            String(other.json?.msg),
            /get NetworkAttachmentDefinition elsewhere\/net-b1: .*not found/,
          );
          const noApi = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-nobgp",
            stdin: conf,
            env: { GALACTIC_MASTER_TEST_NADS: "" },
          });
          assert.equal(noApi.json?.code, 999, noApi.stdout);
          assert.match(String(noApi.json?.msg), /^create k8s client/);
          // Today's README example before this contract, refused the same way.
          const old = await attach({
            cniVersion: "1.0.0",
            name: "vpc7b3e",
            plugins: [{ type: "galactic-veth", vpc: "vpc7b3e", vpcattachment: "att1", ipam }],
          }, "old");
          const oldRun = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-nobgp",
            stdin: old,
            ns: "old",
          });
          assert.equal(oldRun.json?.code, 7, oldRun.stdout);
          assert.deepEqual(await verbsOf("gv-nobgp"), [], "milo-ipam was never called");
          assert.deepEqual(await claimsOf("gv-nobgp"), []);
          await ledger("chain refused");
        },
      );

      await t.step("ADD through galactic-veth: gateways, IPv4 /32, the IPv6 block", async () => {
        const result = await addOk(
          "galactic-veth",
          "gv-add",
          await attach(chain("galactic-veth", "b2")),
        );
        assert.equal(result.cniVersion, "1.1.0");
        const ips = result.ips as Ip[];
        assert.equal(ips.length, 2, JSON.stringify(result));
        // cnimaster.AppendIPConfigs: IPv6 first, both on the guest interface (index 1).
        assert.match(ips[0].address, /^fd20:[0-9a-f:]+\/96$/);
        assert.equal(ips[0].gateway, "fe80::1");
        assert.match(ips[1].address, /^10\.40\.0\.\d+\/32$/);
        assert.equal(ips[1].gateway, "169.254.1.1");
        assert.ok(ips.every((ip) => ip.interface === 1));
        assert.equal((result.interfaces as Json[])[0].name, interfaceName(VPC, "b2", "H"));
        const held = await claimsOf("gv-add");
        assert.equal(held.length, 2);
        for (const c of held) {
          assert.equal(c.metadata.annotations?.[KEYS.vpc], VPC);
          assert.equal(c.metadata.annotations?.[KEYS.vpcattachment], "b2");
        }
        assert.deepEqual(
          held.map((c) => normCidr(String(c.status.allocatedCIDR))).sort(),
          leasesOf(result).sort(),
          "Milo holds what the master printed",
        );
        await logged("gv-add", ["ADD"]);
        await ledger("ADD through galactic-veth");
      });

      await t.step(
        "a galactic NAD without a gateway for a family it leases: milo-ipam refuses it with 7 naming the key; nothing is leased",
        async () => {
          // galactic routes an address only through its gateway and skips a family without one
          // (internal/hostgw/hostgw.go), while galactic-bgp would announce it: a blackhole.
          const cases: [string, Json, string][] = [
            ["bf", { gateways: {} }, "ipv4"],
            ["bg", { gateways: { ipv4: "169.254.1.1" } }, "ipv6"],
          ];
          for (const [att, over, family] of cases) {
            const cid = `gv-nogw-${att}`;
            const r = await run({
              master: "galactic-veth",
              command: "ADD",
              containerId: cid,
              stdin: await attach(chain("galactic-veth", att, { ipam: over })),
            });
            assert.equal(r.code, 1, r.stdout);
            assert.equal(
              r.json?.code,
              7,
              `milo-ipam's refusal, as galactic prints it: ${r.stdout}`,
            );
            assert.match(String(r.json?.msg), new RegExp(`^field ipam\\.gateways\\.${family}: `));
            await logged(cid, ["ADD", "DEL"]);
            assert.deepEqual(await claimsOf(cid), [], "nothing leased");
          }
          await ledger("NADs without gateways");
        },
      );

      await t.step(
        "CHECK: galactic-tap's /25 passes; galactic-veth's fails on IPv4 whatever milo-ipam says",
        async () => {
          const conf = await attach(chain("galactic-tap", "b3"));
          const result = await addOk("galactic-tap", "gt-add", conf);
          const ips = result.ips as Ip[];
          assert.match(ips[1].address, /^10\.40\.0\.\d+\/25$/, "galactic-tap reports IPv4 as /25");
          assert.ok(ips.every((ip) => ip.gateway && ip.interface === 0));
          assert.deepEqual((result.interfaces as Json[]).map((i) => i.name), [
            interfaceName(VPC, "b3", "H"),
          ]);
          const c = { ...conf, prevResult: result };
          const r = await run({
            master: "galactic-tap",
            command: "CHECK",
            containerId: "gt-add",
            stdin: c,
          });
          assert.equal(r.code, 0, `CHECK: ${r.stdout} ${r.stderr}`);
          assert.equal(r.stdout, "");
          // galactic-veth lists the guest's IPv6 addresses only: its IPv4 /32 is never found.
          const v = live.get("gv-add")!;
          const rv = await run({
            master: "galactic-veth",
            command: "CHECK",
            containerId: "gv-add",
            stdin: { ...v.conf, prevResult: v.result },
          });
          assert.equal(rv.json?.code, 999, rv.stdout);
          assert.match(
            String(rv.json?.msg),
            /^CHECK failed: prevResult validation: ip 10\.40\.0\.\d+\/32 on "eth0" \(guest\): .* not assigned/,
          );
          // A lease that differs: the master prints milo-ipam's own error (skel's errors.As).
          const other = { ...result, ips: [ips[0], { ...ips[1], address: "10.40.0.250/25" }] };
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
          await logged("gv-add", ["ADD", "CHECK"]);
          await ledger("CHECK");
        },
      );

      await t.step(
        "a failed ADD after IPAM ran: the master's rollback DELs, Milo holds nothing",
        async () => {
          const c = await attach(chain("galactic-veth", "b4"));
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
        "a failed ADD before IPAM ran (a host interface name past 15 bytes): the rollback's DEL finds nothing",
        async () => {
          const c = await attach(chain("galactic-veth", "h31", { vpc: "1234567890a" }));
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-early",
            stdin: c,
          });
          assert.equal(r.json?.code, 999, r.stdout);
          assert.match(String(r.json?.msg), /^add veth: create veth pair G1234567890ah31H\//);
          await logged("gv-early", ["DEL"]);
          assert.equal((await pluginLines("gv-early"))[0].outcome, "ok");
          assert.deepEqual(await claimsOf("gv-early"), []);
          await ledger("ADD failed before IPAM");
        },
      );

      await t.step(
        "base62 and skel's format checks refuse before IPAM; galactic's DEL of an unparsable config skips IPAM",
        async () => {
          for (const [field, value] of [["vpc", "vpc-7b3e"], ["vpcattachment", "att_5"]]) {
            const c = { ...stanza(chain("galactic-veth", "b5"), 0), [field]: value };
            const r = await run({
              master: "galactic-veth",
              command: "ADD",
              containerId: "gv-b62",
              stdin: c,
            });
            assert.equal(r.json?.code, 7, r.stdout);
            assert.match(
              String(r.json?.msg),
              new RegExp(`invalid base62 value for field '${field}'`),
            );
            const d = await run({
              master: "galactic-veth",
              command: "DEL",
              containerId: "gv-b62",
              stdin: c,
            });
            assert.equal(d.code, 0, d.stdout);
            assert.deepEqual(d.json, { cniVersion: "1.0.0", dns: {} });
          }
          const c = await attach(chain("galactic-veth", "b5"));
          const refused: [Partial<Parameters<typeof run>[0]>, number, RegExp][] = [
            [{ containerId: "gv b62" }, 4, /invalid characters in containerID/],
            [{ ifname: "eth0-far-too-long" }, 4, /interface name is too long/],
            [{ stdin: { ...c, name: "net b5" } }, 7, /invalid characters found in network name/],
          ];
          for (const [over, code, msg] of refused) {
            const r = await run({
              master: "galactic-veth",
              command: "ADD",
              containerId: "gv-b62",
              stdin: c,
              ...over,
            });
            assert.equal(r.json?.code, code, r.stdout);
            assert.match(String(r.json?.msg), msg);
            const d = await run({
              master: "galactic-veth",
              command: "DEL",
              containerId: "gv-b62",
              stdin: c,
              ...over,
            });
            assert.equal(d.json?.code, code, `skel refuses DEL the same way: ${d.stdout}`);
          }
          assert.deepEqual(await verbsOf("gv-b62"), [], "milo-ipam was never called");
          assert.deepEqual(await claimsOf("gv-b62"), []);
          await ledger("base62 and format refusals");
        },
      );

      await t.step(
        "cniVersion: 0.4.0 fails after IPAM (result parsed as 1.x) and rolls back; 0.5.0 is refused",
        async () => {
          const c = await attach(chain("galactic-veth", "b6", { top: { cniVersion: "0.4.0" } }));
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-040",
            stdin: c,
          });
          assert.equal(r.json?.code, 999, r.stdout);
          assert.match(String(r.json?.msg), /convert IPAM result: parse IPAM result: .*"0\.4\.0"/);
          await logged("gv-040", ["ADD", "DEL"]);
          assert.deepEqual(await claimsOf("gv-040"), []);
          const c2 = await attach(chain("galactic-veth", "b7", { top: { cniVersion: "0.5.0" } }));
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
        "galactic reads the result strictly: an address without its mask fails the ADD, the rollback releases it",
        async () => {
          // A delegate whose ADD answers milo-ipam's result with the IPv4 mask cut off.
          const cut = await delegateWrapper(
            dir,
            "cut",
            plugin.installed.path,
            'out=$("$REAL"); rc=$?\n' +
              'if [ "$CNI_COMMAND" = ADD ] && [ $rc = 0 ]; then printf %s "$out" | sed \'s#/32"#"#\'; ' +
              'else printf %s "$out"; fi\nexit $rc',
          );
          const c = await attach(chain("galactic-veth", "b8"));
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-strict",
            stdin: c,
            path: [cut],
          });
          assert.equal(r.json?.code, 999, r.stdout);
          assert.match(
            String(r.json?.msg),
            /^configure IPAM: delegate to milo-ipam ADD: invalid CIDR address: 10\.40\.0\.\d+$/,
          );
          await logged("gv-strict", ["ADD", "DEL"]);
          assert.deepEqual(
            await claimsOf("gv-strict"),
            [],
            "the master's rollback released what was leased",
          );
          await ledger("a result galactic cannot read");
        },
      );

      await t.step(
        "the delegate's environment: NODE_NAME and KUBECONFIG; galactic-tap adds CNI_NETNS_OVERRIDE",
        async () => {
          const rec = await delegateWrapper(
            dir,
            "rec",
            plugin.installed.path,
            `env > '${dir}'/env-"$CNI_CONTAINERID"-"$CNI_COMMAND"\nexec "$REAL"`,
          );
          for (const master of ["galactic-veth", "galactic-tap"] as const) {
            const cid = `${master}-env`;
            const c = await attach(chain(master, master === "galactic-tap" ? "b9" : "ba"));
            const r = await run({
              master,
              command: "ADD",
              containerId: cid,
              stdin: c,
              path: [rec],
            });
            assert.equal(r.code, 0, r.stdout);
            const env = Object.fromEntries(
              (await Deno.readTextFile(`${dir}/env-${cid}-ADD`)).trim().split("\n").map((l) => {
                const i = l.indexOf("=");
                return [l.slice(0, i), l.slice(i + 1)];
              }),
            );
            assert.equal(env.NODE_NAME, NODE, "galactic exports its node name");
            assert.equal(env.KUBECONFIG, "/var/lib/galactic/kubeconfig");
            assert.equal(env.CNI_COMMAND, "ADD");
            assert.equal(env.GALACTIC_MASTER_TEST_NADS, nads, "the rest of its environment");
            assert.equal(env.CNI_NETNS_OVERRIDE, master === "galactic-tap" ? "true" : undefined);
            const d = await run({
              master,
              command: "DEL",
              containerId: cid,
              stdin: c,
              path: [rec],
            });
            assert.equal(d.code, 0, d.stdout);
            await logged(cid, ["ADD", "DEL"]);
          }
          assert.deepEqual(await claimsOf("galactic-veth-env"), []);
          await ledger("the delegate's environment");
        },
      );

      await t.step(
        "a delegate that fails with nothing on stdout is reported with its stderr",
        async () => {
          const mute = await delegateWrapper(
            dir,
            "mute",
            plugin.installed.path,
            'echo "milo-ipam: killed by the OOM killer" >&2\nexit 137',
          );
          const c = await attach(chain("galactic-veth", "bb"));
          const r = await run({
            master: "galactic-veth",
            command: "ADD",
            containerId: "gv-mute",
            stdin: c,
            path: [mute],
          });
          assert.equal(r.code, 1, r.stdout);
          assert.deepEqual(r.json, {
            code: 0,
            msg: 'netplugin failed: "milo-ipam: killed by the OOM killer\\n"',
          });
          await ledger("a mute delegate");
        },
      );

      await t.step(
        "DEL while Milo answers 503: the master swallows it, the release is journaled, reconcile makes it",
        async () => {
          const conf = await attach(chain("galactic-veth", "bc"));
          await addOk("galactic-veth", "gv-503", conf);
          const held = (await claimsOf("gv-503")).map((c) => c.metadata.name).sort();
          assert.equal(held.length, 2);
          // Short deadlines for this DEL (the network config may lower the node's).
          const c = { ...conf, ipam: { ...ipam, timeouts: { requestMs: 300, totalMs: 1_200 } } };
          const d = await whileMiloFails(
            { errorRate: 1, errorStatuses: [503], methods: ["DELETE"] },
            { master: "galactic-veth", command: "DEL", containerId: "gv-503", stdin: c },
          );
          assert.equal(d.code, 0, `the master swallows the IPAM DEL failure: ${d.stdout}`);
          await removed("gv-503"); // the runtime saw DEL succeed: the attachment is gone
          const warned = (await masterLines()).find((x) =>
            String(x.msg).startsWith("DEL: IPAM delegation failed") && x.containerID === "gv-503"
          );
          assert.equal(warned?.level, "WARN");
          assert.equal(
            typeof warned?.err,
            "string",
            `slog writes the error as one string: ${JSON.stringify(warned)}`,
          );
          assert.match(String(warned?.err), /Milo/);
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
          const c = await attach(chain("galactic-veth", "bd", {
            ipam: { timeouts: { requestMs: 300, totalMs: 1_500 } },
          }));
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

      await t.step(
        "a released address and another attachment's ADD right after, under the documented identity and under none: it is held while galactic may still announce it",
        async () => {
          const readme = { identity: readmeIpam.identity };
          const isRetained = async (x: string[]) => {
            const r = await retained();
            return x.every((a) => r.includes(a));
          };
          let lowest = "";
          const gone: string[][] = [];
          for (
            const [label, over, att, next] of [
              ["the documented identity", readme, "c0", "c1"],
              ["no identity", {}, "c2", "c3"],
            ] as const
          ) {
            // A pod takes the lowest free address (Milo allocates first-fit) and goes.
            const a = await attach(chain("galactic-veth", att, { ipam: over }));
            const first = leasesOf(await addOk("galactic-veth", `hold-${att}`, a));
            lowest ||= first.find((x) => !x.includes(":"))!;
            await delOk(`hold-${att}`);
            assert.deepEqual(await claimsOf(`hold-${att}`), [], `${label}: no claim holds it`);
            assert.ok(await isRetained(first), `${label}: Milo keeps ${first} retained`);
            // galactic still announces it for its attachment (internal/cnibgp/ops_del.go).
            const own = advertisementName(VPC, att);
            for (const x of first) assert.deepEqual(announced().get(x), [own], `${label}: ${x}`);
            // Another attachment's ADD right after gets another address.
            const b = await attach(chain("galactic-veth", next, { ipam: over }));
            const other = leasesOf(await addOk("galactic-veth", `hold-${next}`, b));
            assert.ok(
              other.every((x) => !first.includes(x)),
              `${label}: hold-${next} got ${other}, hold-${att}'s ${first} still announced`,
            );
            await ledger(`${label}: another attachment's ADD right after`);
            gone.push(first);
          }
          // Just short of lease + min(lease, 24h): marked Expiring, not released.
          await milo.sweep("9m");
          for (const x of gone) assert.ok(await isRetained(x), "still retained 9 minutes on");
          // The same pod name gets its address back (a StatefulSet member's re-created pod).
          const again = await attach(chain("galactic-veth", "c0", { ipam: readme }));
          assert.deepEqual(
            leasesOf(await addOk("galactic-veth", "hold-c0b", again, { pod: "vm-hold-c0" })).sort(),
            [...gone[0]].sort(),
          );
          await delOk("hold-c0b");
          // galactic-router's GC drops the advertisements none of whose sandboxes lives
          // (internal/gc/gc.go); past the hold Milo's sweeper frees the addresses, and first-fit
          // hands the lowest on.
          const dropped = routerGc(nads, netns);
          for (const att of ["c0", "c2"]) assert.ok(dropped.includes(advertisementName(VPC, att)));
          for (const att of ["c1", "c3"]) assert.ok(!dropped.includes(advertisementName(VPC, att)));
          const held = (await retained()).filter((x) => !x.includes(":"));
          assert.ok(held.includes(lowest));
          const late = await milo.sweep("10m1s");
          assert.ok(late.released >= held.length, JSON.stringify(late));
          assert.deepEqual(await retained(), [], "past the hold the sweeper freed every address");
          // First-fit hands the lowest freed address on; galactic announces it for no one now.
          const q = await attach(chain("galactic-veth", "c4"));
          const lowestHeld = held.sort((x, y) => ipv4Number(x) - ipv4Number(y))[0];
          assert.equal(v4Of(await addOk("galactic-veth", "hold-c4", q)), lowestHeld);
          await ledger("after the hold and galactic's GC");
          for (const cid of ["hold-c1", "hold-c3", "hold-c4"]) await delOk(cid);
          routerGc(nads, netns);
          await milo.sweep("10m1s");
          await ledger("after the hold");
        },
      );

      await t.step(
        "two NADs of one name in two namespaces and two VPCs get two slots; another namespace's copy reaches neither",
        async () => {
          // galactic's own NADs: "private" in ns10 (vpc 10) and ns20 (vpc 20)
          // (deploy/containerlab/resources/tenants/ns10/iad/nad.yaml, ns20/iad/nad.yaml).
          const slot = { identity: "network" };
          const private10 = chain("galactic-veth", "10", {
            name: "private",
            vpc: "10",
            ipam: slot,
          });
          const private20 = chain("galactic-veth", "20", {
            name: "private",
            vpc: "20",
            ipam: slot,
          });
          const a = await addOk("galactic-veth", "ns10-0", await attach(private10, "ns10"), {
            ns: "ns10",
            pod: "db-0",
          });
          const b = await addOk("galactic-veth", "ns20-0", await attach(private20, "ns20"), {
            ns: "ns20",
            pod: "db-0",
          });
          const slotsOf = async (cid: string) => (await claimsOf(cid)).map((c) => c.metadata.name);
          const [a4, b4] = [await slotsOf("ns10-0"), await slotsOf("ns20-0")];
          assert.equal(a4.length, 2);
          assert.ok(a4.every((n) => n.startsWith("slot-") && !b4.includes(n)), `${a4} ${b4}`);
          assert.notEqual(v4Of(a), v4Of(b));
          // evil copies ns10's NAD, name, vpc, attachment and class: a slot of its own.
          const e = await addOk("galactic-veth", "evil-0", await attach(private10, "evil"), {
            ns: "evil",
            pod: "db-0",
          });
          assert.notEqual(v4Of(e), v4Of(a));
          assert.ok((await slotsOf("evil-0")).every((n) => !a4.includes(n)));
          await delOk("evil-0");
          assert.deepEqual(await slotsOf("ns10-0"), a4, "ns10's slot untouched by evil's DEL");
          await ledger("two namespaces, one NAD name");
        },
      );

      await t.step(
        "one attachment, one slot: the same attachment spelled with a leading zero, attached by Multus as net1, is the VM's slot",
        async () => {
          const slot = { identity: "network" };
          const a = await attach(chain("galactic-tap", "e1", { ipam: slot, name: "vm-e1" }));
          // Another NAD spelling it with leading zeros: to galactic the same attachment (one host
          // interface, internal/plumbing/intf/intf.go; one advertisement, crdnames.go).
          const b = await attach(
            chain("galactic-tap", "0e1", { ipam: slot, name: "vm-e1-multus", vpc: `0${VPC}` }),
          );
          assert.equal(interfaceName(`0${VPC}`, "0e1", "H"), interfaceName(VPC, "e1", "H"));
          assert.equal(advertisementName(`0${VPC}`, "0e1"), advertisementName(VPC, "e1"));
          const first = leasesOf(
            await addOk("galactic-tap", "vm-e1-a", a, { pod: "virt-launcher-e1-aaaaa" }),
          );
          // While the VM's pod holds the slot, a pod attaching it the other way waits: one holder.
          const launcher = { pod: "virt-launcher-e1-bbbbb", ifname: "net1" };
          const r = await run({
            master: "galactic-tap",
            command: "ADD",
            containerId: "vm-e1-b",
            stdin: b,
            ...launcher,
          });
          assert.equal(r.json?.code, 11, `one slot, held by the first: ${r.stdout}`);
          await logged("vm-e1-b", ["ADD", "DEL"]);
          await ledger("the same attachment spelled otherwise, while the first holds it");
          await delOk("vm-e1-a");
          const again = await addOk("galactic-tap", "vm-e1-b", b, launcher);
          assert.deepEqual(
            leasesOf(again).sort(),
            [...first].sort(),
            "the VM's next pod gets the attachment's address, however spelled, as net1",
          );
          await ledger("one attachment, one slot");
        },
      );

      await t.step(
        "a VM behind galactic-tap whose runtime keeps no result cache: reconcile releases nothing of it; once a cache named it, its absence does",
        async () => {
          const vm = await attach(chain("galactic-tap", "d0", { ipam: { identity: "network" } }));
          await addOk("galactic-tap", "vm-d0", vm, { pod: "virt-launcher-d0-x1x1x", cache: false });
          const held = (await claimsOf("vm-d0")).map((c) => c.metadata.name).sort();
          assert.equal(held.length, 2);
          type Report = {
            released: { claim: string; via: string }[];
            kept: { claim: string; reason: string }[];
          };
          // --force: past the brakes, which judge the node's caches as a whole, not one claim.
          const reconcile = async () => {
            const rec = await plugin.run({
              command: "",
              args: ["reconcile", "--grace", "0", "--force"],
            });
            assert.equal(rec.code, 0, rec.stdout);
            return rec.json as Report;
          };
          for (let i = 0; i < 3; i++) {
            const report = await reconcile();
            assert.deepEqual(report.released, [], `run ${i}: ${JSON.stringify(report.released)}`);
            for (const name of held) {
              const why = report.kept.find((k) => k.claim === name)?.reason ?? "";
              assert.match(why, /no result cache has named yet: no evidence it is gone/);
            }
          }
          assert.deepEqual((await claimsOf("vm-d0")).map((c) => c.metadata.name).sort(), held);
          await ledger("a VM whose runtime keeps no result cache, after reconciles");
          // A runtime that caches it (Kata's, a CRI sandbox): named once, then gone without a DEL
          // (its cache and sandbox with it): absent twice, it is released.
          await Deno.writeTextFile(
            cache("vm-d0"),
            JSON.stringify({ kind: "cniCacheV1", containerId: "vm-d0", ifName: "eth0" }),
          );
          assert.deepEqual((await reconcile()).released, []);
          await removed("vm-d0");
          await reconcile();
          const gone = await reconcile();
          assert.deepEqual(
            gone.released.map((x) => `${x.via}:${x.claim}`).sort(),
            held.map((n) => `orphan:${n}`),
          );
          assert.deepEqual(await claimsOf("vm-d0"), []);
          await ledger("the VM gone without a DEL, once a cache had named it");
        },
      );

      await t.step("GC and STATUS never reach the delegate; other verbs are refused", async () => {
        const conf = await attach(chain("galactic-veth", "be"));
        const before = (await claims()).length;
        // An empty valid-attachments list: had it reached milo-ipam, its GC would release all.
        const gc = await run({
          master: "galactic-veth",
          command: "GC",
          stdin: { ...conf, "cni.dev/valid-attachments": [] },
        });
        assert.equal(gc.code, 0, gc.stdout);
        assert.equal(gc.stdout, "", "GC is not registered: skel answers success, nothing printed");
        const tapConf = stanza(chain("galactic-tap", "be"), 0);
        const status = await run({ master: "galactic-tap", command: "STATUS", stdin: tapConf });
        assert.equal(status.code, 0, status.stdout);
        const probed = await run({
          master: "galactic-tap",
          command: "STATUS",
          stdin: tapConf,
          env: { GALACTIC_MASTER_TEST_APISERVER: milo.adminUrl },
        });
        assert.equal(probed.code, 0, probed.stdout);
        const down = await run({
          master: "galactic-tap",
          command: "STATUS",
          stdin: tapConf,
          env: { GALACTIC_MASTER_TEST_APISERVER: `http://127.0.0.1:${freePort()}` },
        });
        assert.equal(down.json?.code, 50, down.stdout);
        const old = await run({
          master: "galactic-veth",
          command: "GC",
          stdin: { ...conf, cniVersion: "1.0.0" },
        });
        assert.equal(old.json?.code, 1, old.stdout);
        const other = await run({ master: "galactic-veth", command: "FOO", stdin: conf });
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
