/** Test support: install milo-ipam into a temp dir and run it the way a CNI runtime does. */
import { execCni, type ExecResult } from "../scripts/cni_exec.ts";
import { install, type Installed, type InstallOptions } from "../scripts/install.ts";
import { waitForText } from "./child.ts";

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
  /** When it settles, the plugin process is SIGKILLed. */
  killOn?: Promise<unknown>;
  /** Called with the plugin process once it runs. */
  onSpawn?: (child: Deno.ChildProcess) => void;
}

/** An installed plugin with its own token, log, state and node config files. */
export interface TestPlugin {
  installed: Installed;
  dir: string;
  tokenFile: string;
  logFile: string;
  /** The node config file, baked into the install (no MILO_IPAM_CONFIG needed). */
  nodeConfig: string;
  /** With `nodeConfigAt`: the install's default and legacy node config paths (in the temp dir). */
  nodeConfigPaths?: { default: string; legacy: string };
  /** libcni-style result cache directory granted to the plugin. */
  resultsDir: string;
  /** milo-ipam's state directory (reconcile state, release journal). */
  stateDir: string;
  /** The node config as installed. */
  node: Record<string, unknown>;
  /** Rewrites the node config file: `over` replaces top-level keys of the installed one. */
  setNode(over: Record<string, unknown>): Promise<void>;
  /** A network config (bridge master) delegating to milo-ipam; `ipam` fields override. */
  netConf(ipam?: Record<string, unknown>, top?: Record<string, unknown>): Record<string, unknown>;
  run(o: RunOptions): Promise<RunResult>;
  logLines(): Promise<Record<string, unknown>[]>;
  /** The agent's socket (with `agent: true`). */
  socket?: string;
  /** Starts `milo-ipam agent` from the install (with extra env) and waits for its socket. */
  startAgent(env?: Record<string, string>): Promise<void>;
  /** Stops the agent (SIGTERM by default) and waits for it to exit. */
  stopAgent(signal?: Deno.Signal): Promise<void>;
  /** The running agent's process id (the launcher execs Deno, so it is the agent's own). */
  agentPid(): number | undefined;
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
  /** Extra node config keys. */
  nodeConfig?: Record<string, unknown>;
  allowHosts?: string[];
  /** Install for the cluster sweep: `in-cluster` or a kubeconfig path (see scripts/install.ts). */
  kube?: string;
  /** Give the node config an agent section (socket in the temp dir); start it with startAgent. */
  agent?: boolean;
  /** The agent's metrics listener (`127.0.0.1:PORT`). */
  agentMetrics?: string;
  /** The file holding the scraper's token (`agent.metricsTokenFile`). */
  agentMetricsTokenFile?: string;
  /** How to install (see scripts/install.ts): `auto` unless a test needs one form. */
  mode?: InstallOptions["mode"];
  /**
   * Moves the install's default and legacy node config paths into the temp dir
   * (`etc/milo-ipam/node.json`, `etc/cni/net.d/milo-ipam.conf`) and writes the
   * node config at the one named here. Without it the node config is
   * `DIR/node.json`, named at install.
   */
  nodeConfigAt?: "default" | "legacy";
  /** With `nodeConfigAt`: false installs with no node config named (`--config` left out). */
  chooseConfig?: boolean;
}): Promise<TestPlugin> {
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-plugin-" });
  const tokenFile = `${dir}/token`;
  const logFile = `${dir}/milo-ipam.log`;
  const nodeConfigPaths = o.nodeConfigAt
    ? { default: `${dir}/etc/milo-ipam/node.json`, legacy: `${dir}/etc/cni/net.d/milo-ipam.conf` }
    : undefined;
  const nodeConfig = nodeConfigPaths?.[o.nodeConfigAt!] ?? `${dir}/node.json`;
  if (nodeConfigPaths) {
    for (const p of Object.values(nodeConfigPaths)) {
      await Deno.mkdir(p.slice(0, p.lastIndexOf("/")), { recursive: true });
    }
  }
  const resultsDir = `${dir}/results`;
  const stateDir = `${dir}/state`;
  await Deno.writeTextFile(tokenFile, o.token + "\n", { mode: 0o600 });
  await Deno.mkdir(resultsDir);
  await Deno.mkdir(stateDir);
  const node: Record<string, unknown> = {
    milo: { url: o.miloUrl, tokenFile, ...(o.caFile ? { caFile: o.caFile } : {}) },
    cluster: o.cluster ?? "cluster-a",
    node: o.node ?? "node-a1",
    log: { file: logFile, level: "debug" },
    resultsDir,
    stateDir,
    timeouts: { requestMs: 1000, totalMs: 4000 },
    gc: { minAgeS: 0 },
    ...SCOPE_GRANT,
    ...(o.agent
      ? {
        agent: {
          socket: `${dir}/run/agent.sock`,
          ...(o.agentMetrics ? { metrics: o.agentMetrics } : {}),
          ...(o.agentMetricsTokenFile ? { metricsTokenFile: o.agentMetricsTokenFile } : {}),
        },
      }
      : {}),
    ...o.nodeConfig,
  };
  const writeNode = (v: Record<string, unknown>) =>
    Deno.writeTextFile(nodeConfig, JSON.stringify(v, null, 2));
  await writeNode(node);
  const netConf = netConfFor(o.classes);
  const installed = await install({
    dir: `${dir}/bin`,
    config: nodeConfigPaths && o.chooseConfig === false ? undefined : nodeConfig,
    ...(nodeConfigPaths ? { nodeConfigPaths } : {}),
    allowHosts: o.allowHosts,
    kube: o.kube,
    mode: o.mode,
    quiet: true,
  });
  const run = (r: RunOptions) => runAs(installed.path, dir, r);
  const socket = (node.agent as { socket?: string } | undefined)?.socket;
  const { startAgent, stopAgent, agentPid } = agentControl(installed.path, socket);
  return {
    installed,
    dir,
    socket,
    startAgent,
    stopAgent,
    agentPid,
    tokenFile,
    logFile,
    nodeConfig,
    ...(nodeConfigPaths ? { nodeConfigPaths } : {}),
    resultsDir,
    stateDir,
    node,
    setNode: (over) => writeNode({ ...node, ...over }),
    netConf,
    run,
    logLines: async () =>
      (await Deno.readTextFile(logFile).catch(() => "")).split("\n").filter(Boolean).map((l) =>
        JSON.parse(l)
      ),
    cleanup: async () => {
      await stopAgent("SIGKILL");
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Starts and stops `milo-ipam agent` from an install, as a DaemonSet container would. */
function agentControl(path: string, socket: string | undefined) {
  let agent: Deno.ChildProcess | undefined;
  const startAgent = async (extraEnv: Record<string, string> = {}) => {
    if (!socket) throw new Error("installPlugin({ agent: true }) gives the node config an agent");
    agent = new Deno.Command(path, {
      args: ["agent"],
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", ...extraEnv },
      clearEnv: true,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    // Ready when it says so on stderr (a stale socket file may exist before it binds).
    const { found, said } = await waitForText(agent.stderr, "listening on", 10_000);
    if (found) return;
    agent.kill("SIGKILL");
    await agent.status;
    throw new Error(`the agent did not listen on ${socket} within 10 s: ${said}`);
  };
  const stopAgent = async (signal: Deno.Signal = "SIGTERM") => {
    const a = agent;
    agent = undefined;
    if (!a) return;
    try {
      a.kill(signal);
    } catch { /* gone */ }
    await a.status;
  };
  return { startAgent, stopAgent, agentPid: () => agent?.pid };
}

/** The scope of {@link netConfFor}'s networks. */
const SCOPE = {
  network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" },
};

/**
 * The node config's grant of that scope to every namespace's networks, as a
 * cluster of one network grants it (a test of the grants sets `allowScopes`).
 */
export const SCOPE_GRANT = { allowScopes: [{ scope: SCOPE }] };

/** A bridge network config delegating to milo-ipam; `ipam` and `top` override fields. */
function netConfFor(classes?: Record<string, string>) {
  const baseIpam = {
    type: "milo-ipam",
    classes: classes ?? { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
    scope: SCOPE,
    gateways: { ipv4: "169.254.1.1", ipv6: "fe80::1" },
  };
  return (ipam: Record<string, unknown> = {}, top: Record<string, unknown> = {}) => ({
    cniVersion: "1.1.0",
    name: "vpc-7b3e",
    type: "bridge",
    bridge: "cni0",
    vpc: "vpc-7b3e",
    vpcattachment: "vpc-7b3e-attach-1",
    ipam: { ...baseIpam, ...ipam },
    ...top,
  });
}

/** Runs the installed file with a runtime's CNI environment (empty values are left out). */
async function runAs(path: string, dir: string, r: RunOptions): Promise<RunResult> {
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
  };
  for (const [k, v] of Object.entries(r.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  for (const k of Object.keys(env)) if (env[k] === "") delete env[k];
  return await execCni(path, {
    env,
    args: r.args,
    stdin: r.stdin,
    timeoutMs: r.timeoutMs,
    killOn: r.killOn,
    onSpawn: r.onSpawn,
  });
}
