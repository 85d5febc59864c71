/** Test support: install milo-ipam into a temp dir and run it the way a CNI runtime does. */
import { execCni, type ExecResult } from "../../scripts/cni_exec.ts";
import { install, type Installed } from "../../scripts/install.ts";

/** What one plugin process did. */
export type RunResult = ExecResult;

/** One invocation, as a runtime would make it. */
export interface RunOptions {
  command: string;
  containerId?: string;
  ifname?: string;
  netns?: string;
  podName?: string;
  podNamespace?: string;
  /** stdin: an object is JSON-encoded. */
  stdin?: unknown;
  /** Command-line arguments (e.g. `reconcile ...`). */
  args?: string[];
  /** Extra or overriding environment; `undefined` values remove a variable. */
  env?: Record<string, string | undefined>;
  timeoutMs?: number;
}

/** An installed plugin with its own token, log and node config files. */
export interface TestPlugin {
  installed: Installed;
  dir: string;
  tokenFile: string;
  logFile: string;
  nodeConfig: string;
  /** The installed network config file (a bridge config delegating to milo-ipam). */
  configFile: string;
  /** libcni-style result cache directory granted to the plugin. */
  resultsDir: string;
  /** Reconcile state file granted to the plugin. */
  stateFile: string;
  /** A network config (bridge master) delegating to milo-ipam; `ipam` fields override. */
  netConf(ipam?: Record<string, unknown>, top?: Record<string, unknown>): Record<string, unknown>;
  run(o: RunOptions): Promise<RunResult>;
  logLines(): Promise<Record<string, unknown>[]>;
  cleanup(): Promise<void>;
}

/** Installs the plugin sandboxed to `miloUrl` and returns helpers to drive it. */
export async function installPlugin(o: {
  miloUrl: string;
  token: string;
  caFile?: string;
  cluster?: string;
  node?: string;
  classes?: Record<string, string>;
}): Promise<TestPlugin> {
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-plugin-" });
  const tokenFile = `${dir}/token`;
  const logFile = `${dir}/milo-ipam.log`;
  const nodeConfig = `${dir}/node.conf`;
  await Deno.writeTextFile(tokenFile, o.token + "\n");
  await Deno.writeTextFile(nodeConfig, JSON.stringify({ node: o.node ?? "node-a1" }));
  const baseIpam = {
    type: "milo-ipam",
    milo: { url: o.miloUrl, tokenFile, ...(o.caFile ? { caFile: o.caFile } : {}) },
    cluster: o.cluster ?? "cluster-a",
    classes: o.classes ?? { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
    scope: {
      network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" },
    },
    gateways: { ipv4: "169.254.1.1", ipv6: "fe80::1" },
    timeouts: { requestMs: 1000, totalMs: 4000 },
    log: { file: logFile, level: "debug" },
  };
  const netConf = (ipam: Record<string, unknown> = {}, top: Record<string, unknown> = {}) => ({
    cniVersion: "1.1.0",
    name: "vpc-7b3e",
    type: "bridge",
    bridge: "cni0",
    vpc: "vpc-7b3e",
    vpcattachment: "vpc-7b3e-attach-1",
    ipam: { ...baseIpam, ...ipam },
    ...top,
  });
  const configFile = `${dir}/net.conf`;
  await Deno.writeTextFile(configFile, JSON.stringify(netConf()));
  const resultsDir = `${dir}/results`;
  const stateFile = `${dir}/state/reconcile.json`;
  await Deno.mkdir(resultsDir);
  await Deno.mkdir(`${dir}/state`);
  const installed = await install({
    dir: `${dir}/bin`,
    config: configFile,
    nodeConfig,
    resultsDir,
    stateFile,
    quiet: true,
  });
  const run = async (r: RunOptions): Promise<RunResult> => {
    const env: Record<string, string> = {
      PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
      CNI_COMMAND: r.command,
      CNI_CONTAINERID: r.containerId ?? "",
      CNI_IFNAME: r.ifname ?? "eth0",
      CNI_NETNS: r.netns ?? "/var/run/netns/test",
      CNI_PATH: `${dir}/bin`,
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${r.podNamespace ?? "shop"};K8S_POD_NAME=${
        r.podName ?? "web-0"
      };K8S_POD_UID=uid-${r.containerId ?? "none"}`,
      MILO_IPAM_CONFIG: nodeConfig,
    };
    for (const [k, v] of Object.entries(r.env ?? {})) {
      if (v === undefined) delete env[k];
      else env[k] = v;
    }
    for (const k of Object.keys(env)) if (env[k] === "") delete env[k];
    return await execCni(installed.path, {
      env,
      args: r.args,
      stdin: r.stdin,
      timeoutMs: r.timeoutMs,
    });
  };
  return {
    installed,
    dir,
    tokenFile,
    logFile,
    nodeConfig,
    configFile,
    resultsDir,
    stateFile,
    netConf,
    run,
    logLines: async () =>
      (await Deno.readTextFile(logFile).catch(() => "")).split("\n").filter(Boolean).map((l) =>
        JSON.parse(l)
      ),
    cleanup: () => Deno.remove(dir, { recursive: true }),
  };
}
