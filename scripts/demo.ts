/**
 * `deno task demo`: a runtime's-eye story of milo-ipam against milo-dev.
 *
 * Starts milo-dev (the development Milo IPAM server) with one tenant and a
 * dual-stack VPC, installs the plugin into a temp dir, then ADDs pods on two
 * clusters at once, CHECKs them, deletes one lease behind the plugin's back,
 * DELs, survives a Milo outage with a bounded error, and prints Milo's
 * inventory and utilization. Ends by itself and cleans up (`--keep` leaves
 * milo-dev running for the page until Ctrl-C).
 */
import { parseCommandLine } from "../lib/cli.ts";
import { KEYS } from "../lib/claims.ts";
import { DEFAULT_TIMEOUT_FLOORS } from "../lib/network_timeouts.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { DEMO_SEED as SEED, DEMO_TOKEN as TOKEN } from "../testing/seeds.ts";
import { execCni, type ExecResult } from "./cni_exec.ts";
import { install, type Installed } from "./install.ts";

const NODES = [
  { cluster: "cluster-a", node: "a1" },
  { cluster: "cluster-a", node: "a2" },
  { cluster: "cluster-b", node: "b1" },
  { cluster: "cluster-b", node: "b2" },
];

interface Pod {
  cluster: string;
  node: string;
  name: string;
  containerId: string;
  result?: Record<string, unknown>;
}

const say = (s = "") => console.log(s);
const heading = (s: string) => say(`\n== ${s}`);

/** What every step of the story uses. */
interface Demo {
  milo: MiloDev;
  run(
    pod: Pod,
    command: string,
    extra?: Record<string, unknown>,
    timeouts?: { requestMs: number; totalMs: number },
  ): Promise<ExecResult>;
}

/** Tries of a call answered 11 ("try again later"), as a kubelet retries a pod's sandbox. */
const TRIES = 5;

/** `d.run` retried while it answers 11, a second apart; answers the last result and its tries. */
async function retried(
  d: Demo,
  pod: Pod,
  command: string,
  extra: Record<string, unknown> = {},
): Promise<ExecResult & { tries: number }> {
  for (let tries = 1;; tries++) {
    const r = await d.run(pod, command, extra);
    if (r.code === 0 || r.json?.code !== 11 || tries === TRIES) return { ...r, tries };
    await new Promise((done) => setTimeout(done, 1_000));
  }
}

/** The network's Network object: what its NAD names, without the uid root pins. */
const NETWORK = { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc7b3e" };
/** Root's grant: namespace shop's network claims in that Network's space, uid included. */
const GRANT = {
  namespace: "shop",
  network: "vpc7b3e",
  scope: { network: { ...NETWORK, uid: "6f1c0b2e-8d4a-4c1e-9b7a-2e5d3f4a1c90" } },
  classes: ["vpc-pods-ipv4", "vpc-pods-ipv6"],
};

/** Each cluster's VPC attachment, base62 as galactic requires (`internal/cnimaster/config.go`). */
const ATTACHMENT: Record<string, string> = { "cluster-a": "a1", "cluster-b": "b1" };

/**
 * The NAD's config as galactic-veth gives it: the network's timeouts are the
 * node's own (2 s a request, 10 s a call) unless `timeouts` says otherwise.
 */
function netConf(cluster: string, timeouts?: { requestMs: number; totalMs: number }) {
  return {
    cniVersion: "1.1.0",
    name: "vpc7b3e",
    type: "galactic-veth",
    vpc: "7b3e",
    vpcattachment: ATTACHMENT[cluster],
    ipam: {
      type: "milo-ipam",
      classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
      scope: { network: NETWORK },
      gateways: { ipv4: "169.254.1.1", ipv6: "fe80::1" },
      ...(timeouts ? { timeouts } : {}),
    },
  };
}

/** One install per cluster, as each cluster's nodes have their own node config. */
async function installClusters(dir: string, milo: MiloDev): Promise<Record<string, Installed>> {
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, TOKEN, { createNew: true, mode: 0o600 });
  const installs: Record<string, Installed> = {};
  for (const cluster of new Set(NODES.map((n) => n.cluster))) {
    const nodeConfig = `${dir}/${cluster}/node.json`;
    await Deno.mkdir(`${dir}/${cluster}`, { recursive: true });
    await Deno.writeTextFile(
      nodeConfig,
      JSON.stringify({
        milo: {
          url:
            `${milo.url}/apis/resourcemanager.miloapis.com/v1alpha1/projects/tenant-a/control-plane`,
          tokenFile,
        },
        cluster,
        log: { file: `${dir}/milo-ipam.log` },
        resultsDir: `${dir}/results`,
        stateDir: `${dir}/${cluster}/state`,
        allowScopes: [GRANT],
      }),
    );
    installs[cluster] = await install({
      dir: `${dir}/${cluster}/bin`,
      config: nodeConfig,
      quiet: true,
    });
  }
  heading("Install");
  for (const [cluster, i] of Object.entries(installs)) {
    say(`${cluster}: ${i.path} (${i.kind}) with ${i.flags.join(" ")}`);
  }
  return installs;
}

function runner(installs: Record<string, Installed>): Demo["run"] {
  return (pod, command, extra = {}, timeouts) =>
    execCni(installs[pod.cluster].path, {
      env: {
        CNI_COMMAND: command,
        CNI_CONTAINERID: pod.containerId,
        CNI_IFNAME: "eth0",
        CNI_NETNS: `/var/run/netns/${pod.name}`,
        CNI_ARGS:
          `IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=${pod.name};K8S_POD_UID=${pod.containerId}`,
        NODE_NAME: pod.node,
      },
      stdin: { ...netConf(pod.cluster, timeouts), ...extra },
    });
}

const describe = (r: ExecResult) => r.code === 0 ? "ok" : `error ${r.json?.code}: ${r.json?.msg}`;
const addresses = (r: Record<string, unknown> | undefined) =>
  ((r?.ips ?? []) as { address: string }[]).map((i) => i.address).join("  ");

async function addAll(d: Demo, pods: Pod[]): Promise<void> {
  heading(`ADD: ${pods.length} pods on two clusters at once (an ADD answered 11 is retried)`);
  const adds = await Promise.all(pods.map((p) => retried(d, p, "ADD")));
  adds.forEach((r, i) => {
    pods[i].result = r.json;
    say(
      `${pods[i].cluster}/${pods[i].node}  ${pods[i].name.padEnd(10)}  ${
        r.code === 0 ? addresses(r.json) : describe(r)
      }  (${Math.round(r.ms)} ms${r.tries > 1 ? `, try ${r.tries}` : ""})`,
    );
  });
  if (adds.some((r) => r.code !== 0)) throw new Error("an ADD failed after its retries; see above");
  const v4 = adds.map((r) => ((r.json?.ips ?? []) as { address: string }[])[0]?.address);
  say(`distinct IPv4 addresses: ${new Set(v4).size} of ${pods.length}`);
}

async function checks(d: Demo, pods: Pod[]): Promise<void> {
  heading("CHECK every pod against Milo");
  const all = await Promise.all(pods.map((p) => retried(d, p, "CHECK", { prevResult: p.result })));
  say(`${all.filter((r) => r.code === 0).length}/${pods.length} CHECK ok`);

  heading("A lease is deleted behind the plugin's back; CHECK catches it");
  const victim = pods[0];
  const [claim] = await d.milo.listClaims(
    "tenant-a",
    `${KEYS.podName}=${victim.name},${KEYS.family}=ipv4`,
  );
  const del = await d.milo.fetch(
    `${d.milo.url}/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims/${claim.metadata.name}`,
    { method: "DELETE", headers: { authorization: `Bearer ${TOKEN}` } },
  );
  await del.body?.cancel();
  say(`DELETE ${claim.metadata.name} directly in Milo: HTTP ${del.status}`);
  const caught = await retried(d, victim, "CHECK", { prevResult: victim.result });
  say(`CHECK ${victim.name}: ${JSON.stringify(caught.json)}`);
}

async function deletes(d: Demo, pods: Pod[]): Promise<void> {
  heading("DEL: four pods go away (each DEL sent twice, as runtimes may)");
  say(
    "a galactic network's claims are Retain: Milo keeps each released address retained for its " +
      "attachment until the class's retentionLease (5m here) ends, while galactic may still " +
      "announce it",
  );
  for (const p of [pods[0], ...pods.slice(4, 7)]) {
    const a = await retried(d, p, "DEL"), b = await retried(d, p, "DEL");
    say(`DEL ${p.name}: ${describe(a)}, again: ${describe(b)}`);
  }
}

async function outage(d: Demo): Promise<void> {
  heading("Milo outage: the plugin fails fast and bounded, never allocates locally");
  await d.milo.setFaults({ down: true });
  const newcomer: Pod = { ...NODES[0], name: "web-late", containerId: "late" + Date.now() };
  // The network's timeouts at the node's floor: the fastest a network may give up on Milo.
  const floor = DEFAULT_TIMEOUT_FLOORS;
  const down = await d.run(newcomer, "ADD", {}, floor);
  say(
    `ADD during outage (the node's floor: totalMs ${floor.totalMs}): ${describe(down)} after ${
      Math.round(down.ms)
    } ms`,
  );
  await d.milo.clearFaults();
  const back = await retried(d, newcomer, "ADD");
  say(`ADD retried after Milo is back: ${describe(back)} ${addresses(back.json)}`);
}

async function inventory(milo: MiloDev): Promise<void> {
  heading("Milo's inventory (pod leases by cluster and node)");
  const claims = await milo.listClaims("tenant-a");
  const groups = new Map<string, string[]>();
  for (const c of claims) {
    const a = c.metadata.annotations ?? {};
    const k = `${a[KEYS.cluster]}/${a[KEYS.node]}`;
    groups.set(k, [...(groups.get(k) ?? []), `${a[KEYS.pod]} ${c.status.allocatedCIDR}`]);
  }
  for (const [k, leases] of [...groups].sort()) {
    say(`${k}:`);
    for (const l of leases.sort()) say(`    ${l}`);
  }
  const pools = await milo.fetch(`${milo.url}/apis/ipam.miloapis.com/v1alpha1/ippools`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  }).then((r) => r.json());
  heading("Utilization");
  for (const p of pools.items) {
    const c = p.status.capacity;
    say(
      `${p.metadata.name.padEnd(18)} ${
        p.spec.cidr.padEnd(18)
      } allocated ${c.allocated} of ${c.total} (${p.status.utilizationPercent}%)`,
    );
  }
}

const USAGE = `usage: deno task demo [--keep]

Starts milo-dev, installs the plugin into a temp dir, runs ADDs, CHECKs, DELs and a Milo
outage as a runtime would, prints Milo's inventory, and cleans up.

  --keep   leave milo-dev running (its utilization page) until Ctrl-C`;

async function main(): Promise<number> {
  const p = parseCommandLine("demo", Deno.args, {
    usage: USAGE,
    options: { keep: { type: "boolean", default: false } },
  });
  if ("exit" in p) return p.exit;
  const values = p.values as { keep: boolean };
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-demo-" });
  const milo = await startMiloDev({ seed: SEED });
  try {
    heading("Milo");
    say(`milo-dev (development server, not a production backend) at ${milo.url}`);
    say(
      values.keep
        ? `utilization page: ${milo.url}/ (kept running after the story: --keep)`
        : "it stops when the demo ends (--keep leaves it running, with its utilization page)",
    );
    const d: Demo = { milo, run: runner(await installClusters(dir, milo)) };
    const pods: Pod[] = NODES.flatMap((n, i) =>
      Array.from({ length: 3 }, (_, j) => ({
        ...n,
        name: `web-${n.node}-${j}`,
        containerId: `c${i}${j}${crypto.randomUUID().replaceAll("-", "")}`,
      }))
    );
    await addAll(d, pods);
    await checks(d, pods);
    await deletes(d, pods);
    await outage(d);
    await inventory(milo);
    if (values.keep) {
      say(`\nmilo-dev keeps running at ${milo.url}/ ; Ctrl-C to stop and clean up.`);
      const { promise, resolve } = Promise.withResolvers<void>();
      Deno.addSignalListener("SIGINT", () => resolve());
      await promise;
    }
    say("\ndemo done; milo-dev stopped, the temp dir removed");
    return 0;
  } catch (err) {
    console.error(`demo failed: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  } finally {
    await milo.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.exit(await main());
