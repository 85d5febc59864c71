/**
 * What every section measures against: milo-dev over TLS (and a plain-HTTP
 * twin), the plugin installed by scripts/install.ts four times (two clusters
 * on TLS, one on HTTP, one with the node agent), the bare floor and a minimal
 * TLS client in the launcher's exact shape, and Debian's host-local.
 */
import { dirname, join } from "node:path";
import { launcherScript } from "../scripts/build.ts";
import { miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { BENCH_CLASSES, BENCH_SEED, BENCH_TOKEN } from "../testing/seeds.ts";
import { HOST_LOCAL, hostLocalVersion } from "./machine.ts";
import type { BenchResults } from "./model.ts";
import { cniEnv, type Exec, execTimed, say } from "./proc.ts";

/** Production timeouts of the node config (lib/config.ts's defaults). */
export const PRODUCTION_TIMEOUTS = { requestMs: 2_000, totalMs: 10_000 };

/**
 * A minimal TLS client: read the CA and the token, POST the two claims of a
 * dual-stack ADD in parallel on one fresh client. Exits 1 unless both are 201.
 */
const TLS_CLIENT = `const [url, caFile, tokenFile, v4, v6] = Deno.args;
const client = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(caFile)] });
const token = (await Deno.readTextFile(tokenFile)).trim();
const id = Deno.env.get("CNI_CONTAINERID");
const post = (className, f) =>
  fetch(url + "/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims", {
    method: "POST",
    client,
    headers: { authorization: "Bearer " + token, "content-type": "application/json" },
    body: JSON.stringify({
      apiVersion: "ipam.miloapis.com/v1alpha1",
      kind: "IPClaim",
      metadata: { name: "tc-" + id + "-" + f, namespace: "default" },
      spec: {
        className,
        reclaimPolicy: "Delete",
        scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" } },
      },
    }),
  }).then(async (r) => (await r.text(), r.status));
const codes = await Promise.all([post(v4, "v4"), post(v6, "v6")]);
Deno.exit(codes.every((c) => c === 201) ? 0 : 1);
`;

/** The servers, installs and scripts the sections share. */
export interface World {
  tmp: string;
  tls: MiloDev;
  http: MiloDev;
  /** TLS, cluster-a, no agent section: every call does the work itself. */
  a: TestPlugin;
  /** TLS, cluster-b. */
  b: TestPlugin;
  /** Plain HTTP, cluster-a. */
  h: TestPlugin;
  /** TLS, cluster-g, with an agent section (start it with `g.startAgent()`). */
  g: TestPlugin;
  /** The Deno binary the launcher runs. */
  denoBin: string;
  /** The installed bundle's directory (`main.js` and its chunks). */
  bundleDir: string;
  bundleBytes: number;
  /** An empty file, and launcher-shaped scripts running it with `a`'s and `g`'s flags. */
  empty: string;
  floor: string;
  agentFloor: string;
  /** Runs the minimal TLS client for `id` (its claims are deleted again, untimed). */
  tlsClient(id: string): Promise<Exec>;
  hostLocal: BenchResults["hostLocal"];
  /** host-local ADD or DEL of `id`. */
  hostLocalRun(cmd: "ADD" | "DEL", id: string): Promise<Exec>;
  /** host-local's network config for `id`. */
  hostLocalConf(id: string): string;
  /** Stops and removes everything. */
  close(): Promise<void>;
}

async function script(path: string, body: string): Promise<string> {
  await Deno.writeTextFile(path, body);
  await Deno.chmod(path, 0o755);
  return path;
}

async function bundleOf(plugin: TestPlugin): Promise<{ dir: string; bytes: number }> {
  const support = join(dirname(plugin.installed.path), ".milo-ipam");
  const entry = await Deno.readTextFile(join(support, "milo-ipam.js"));
  const name = /\.\/(bundle-[0-9a-f]+)\/main\.js/.exec(entry)?.[1];
  if (!name) throw new Error(`no bundle directory named in ${support}/milo-ipam.js`);
  const dir = join(support, name);
  let bytes = 0;
  for await (const e of Deno.readDir(dir)) bytes += (await Deno.stat(join(dir, e.name))).size;
  return { dir, bytes };
}

/** The floor scripts and the minimal TLS client, in the launcher's shape. */
async function scripts(tmp: string, tls: MiloDev, a: TestPlugin, g: TestPlugin) {
  const launcher = a.installed.kind === "launcher";
  const denoBin = launcher ? join(dirname(a.installed.path), ".milo-ipam/deno") : Deno.execPath();
  const empty = await script(join(tmp, "empty.js"), "");
  const shaped = (name: string, file: string, flags: string[]) =>
    script(join(tmp, name), launcherScript(denoBin, file, flags));
  const client = await shaped(
    "tls-client",
    await script(join(tmp, "tls-client.js"), TLS_CLIENT),
    a.installed.flags,
  );
  const tlsClient = async (id: string) => {
    const args = [tls.url, tls.caFile ?? "", a.tokenFile, BENCH_CLASSES.ipv4, BENCH_CLASSES.ipv6];
    const r = await execTimed(client, args, cniEnv(a, "ADD", id), "");
    for (const f of ["v4", "v6"]) {
      await miloApi(tls, "DELETE", `/namespaces/default/ipclaims/tc-${id}-${f}`);
    }
    return r;
  };
  return {
    denoBin,
    empty,
    floor: await shaped("floor", empty, a.installed.flags),
    agentFloor: await shaped("agent-floor", empty, g.installed.flags),
    tlsClient,
  };
}

function hostLocalConf(tmp: string): (id: string) => string {
  return (_id) =>
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "bench-host-local",
      type: "bridge",
      ipam: {
        type: "host-local",
        dataDir: join(tmp, "host-local"),
        ranges: [[{ subnet: "10.88.0.0/16" }], [{ subnet: "fd88::/64" }]],
      },
    });
}

/** The plugin installed against `dev` with the bench's token, classes and production timeouts. */
export function installBench(
  dev: MiloDev,
  o: { cluster: string; node?: string; agent?: boolean },
): Promise<TestPlugin> {
  return installPlugin({
    miloUrl: dev.url,
    token: BENCH_TOKEN,
    caFile: dev.caFile,
    cluster: o.cluster,
    node: o.node,
    classes: { ...BENCH_CLASSES },
    nodeConfig: { timeouts: PRODUCTION_TIMEOUTS },
    agent: o.agent ?? false,
  });
}

/** Starts both servers and installs the plugin four ways. */
export async function makeWorld(): Promise<World> {
  const tmp = await Deno.makeTempDir({ prefix: "milo-ipam-bench-" });
  const undo: (() => Promise<void>)[] = [() => Deno.remove(tmp, { recursive: true })];
  const close = async () => {
    for (const c of undo.reverse()) await c().catch(() => {});
  };
  try {
    const tls = await startMiloDev({ seed: BENCH_SEED, tls: true, token: BENCH_TOKEN });
    undo.push(() => tls.stop());
    const http = await startMiloDev({ seed: BENCH_SEED, token: BENCH_TOKEN });
    undo.push(() => http.stop());
    say(`milo-dev ${tls.url} (TLS) and ${http.url} (HTTP)`);
    const mk = async (dev: MiloDev, cluster: string, agent = false) => {
      const p = await installBench(dev, { cluster, agent });
      undo.push(() => p.cleanup());
      return p;
    };
    const a = await mk(tls, "cluster-a");
    const b = await mk(tls, "cluster-b");
    const h = await mk(http, "cluster-a");
    const g = await mk(tls, "cluster-g", true);
    say(`installed ${a.installed.kind}: ${a.installed.path}`);
    const bundle = await bundleOf(a);
    const conf = hostLocalConf(tmp);
    return {
      tmp,
      tls,
      http,
      a,
      b,
      h,
      g,
      ...await scripts(tmp, tls, a, g),
      bundleDir: bundle.dir,
      bundleBytes: bundle.bytes,
      hostLocal: await hostLocalVersion(),
      hostLocalConf: conf,
      hostLocalRun: (cmd, id) => execTimed(HOST_LOCAL, [], cniEnv(a, cmd, id), conf(id)),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
