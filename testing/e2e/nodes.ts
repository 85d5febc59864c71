/**
 * milo-ipam installed on each node as a node's own /opt/cni/bin: its node
 * config (with an agent section in agent mode), the install from
 * scripts/install.ts, and the wrapper in CNI_PATH that can SIGKILL the
 * plugin mid-call.
 */
import { install } from "../../scripts/install.ts";
import { E2E_SCOPE } from "./netconf.ts";
import { clusterOf, type NodeName } from "./topology.ts";

/** How the plugin runs on the nodes: alone, or as a thin client of a node agent. */
export type Mode = "direct" | "agent";

/** Both modes, in the order the e2e runs them. */
export const MODES: readonly Mode[] = ["direct", "agent"];

/** The agents' metrics listener, on each node namespace's loopback. */
export const AGENT_METRICS = "127.0.0.1:9464";

/** The node configs' timeouts: the limits every network config of the e2e stays within. */
const NODE_TIMEOUT_LIMITS = { requestMs: 10_000, totalMs: 30_000 };

/**
 * The agents' reconcile timer: a day, so it never races scenario 3's reconcile
 * runs (they share the node's state file); the agent still reconciles once at start.
 */
const AGENT_RECONCILE_INTERVAL_S = 86_400;

/** One node's install. */
export interface NodeInstall {
  node: NodeName;
  cluster: string;
  /** The installed executable (`DIR/milo-ipam`). */
  bin: string;
  /** CNI_PATH's first directory: the killable wrapper `milo-ipam`. */
  wrapDir: string;
  nodeConfig: string;
  logFile: string;
  resultsDir: string;
  /** Every result cache the node config names (`resultsDirs`), when it names a list. */
  resultsDirs?: string[];
  stateDir: string;
  /** The agent's socket (agent mode). */
  socket?: string;
  /** The agent's metrics address inside the node namespace (agent mode). */
  metrics?: string;
}

/** What a node install needs from the world. */
export interface NodeInstallOptions {
  node: NodeName;
  mode: Mode;
  /** The world's temp dir: the install goes to `DIR/<node>/`. */
  dir: string;
  miloUrl: string;
  tokenFile: string;
  caFile: string;
  /** The runtime's result cache (the node config's `resultsDir` when no `resultsDirs` is given). */
  resultsDir: string;
  /**
   * Every libcni result cache whose entries name live containers, the
   * runtime's first (the node config's `resultsDirs`, e.g. the runtime's and
   * Multus's `<cniDir>/results`); when given, the config names this list
   * instead of `resultsDir` (it may not set both).
   */
  resultsDirs?: string[];
  stateDir: string;
}

/** Writes the node's config and installs milo-ipam with it, plus the killable wrapper. */
export async function installNode(o: NodeInstallOptions): Promise<NodeInstall> {
  const cluster = clusterOf(o.node);
  const base = `${o.dir}/${o.node}`;
  const nodeConfig = `${base}/node.json`;
  const logFile = `${o.dir}/milo-ipam-${cluster}.log`;
  const socket = o.mode === "agent" ? `${base}/run/agent.sock` : undefined;
  const metrics = o.mode === "agent" ? AGENT_METRICS : undefined;
  await Deno.mkdir(base, { recursive: true });
  const config = {
    milo: { url: o.miloUrl, tokenFile: o.tokenFile, caFile: o.caFile },
    cluster,
    node: o.node,
    log: { file: logFile, level: "info" },
    ...(o.resultsDirs ? { resultsDirs: o.resultsDirs } : { resultsDir: o.resultsDir }),
    stateDir: o.stateDir,
    timeouts: NODE_TIMEOUT_LIMITS,
    gc: { minAgeS: 0 },
    // Scenario 8's db-0 keeps its address by pod identity: the node grants it to its namespace.
    allowIdentities: [{ namespace: "shop", identity: "pod" }],
    // Every network of the e2e claims in one space, granted to each namespace's pods.
    allowScopes: [{ scope: E2E_SCOPE }],
    ...(socket
      ? { agent: { socket, metrics, reconcileIntervalS: AGENT_RECONCILE_INTERVAL_S } }
      : {}),
  };
  await Deno.writeTextFile(nodeConfig, JSON.stringify(config, null, 2));
  const installed = await install({ dir: `${base}/bin`, config: nodeConfig, quiet: true });
  const wrapDir = `${base}/wrap`;
  await Deno.mkdir(wrapDir, { recursive: true });
  await Deno.writeTextFile(`${wrapDir}/milo-ipam`, wrapper(installed.path), { mode: 0o755 });
  await Deno.chmod(`${wrapDir}/milo-ipam`, 0o755);
  return {
    node: o.node,
    cluster,
    bin: installed.path,
    wrapDir,
    nodeConfig,
    logFile,
    resultsDir: o.resultsDir,
    resultsDirs: o.resultsDirs,
    stateDir: o.stateDir,
    socket,
    metrics,
  };
}

/** A `milo-ipam` that execs the real one, under `timeout -s KILL` when E2E_KILL_AFTER is set. */
function wrapper(real: string): string {
  return [
    "#!/bin/sh",
    `real='${real}'`,
    'if [ -n "$E2E_KILL_AFTER" ]; then exec timeout -s KILL "$E2E_KILL_AFTER" "$real" "$@"; fi',
    'exec "$real" "$@"',
    "",
  ].join("\n");
}

/** Reads the JSON log lines of a node install (its cluster's log file). */
export async function logLines(inst: NodeInstall): Promise<Record<string, unknown>[]> {
  const text = await Deno.readTextFile(inst.logFile).catch(() => "");
  return text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}
