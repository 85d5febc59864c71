/**
 * Where the node config is, without loading the config schema: the thin
 * client (agent path) needs it before anything heavy is imported.
 */

/** Default path of the node config file. */
export const DEFAULT_NODE_CONFIG = "/etc/milo-ipam/node.json";
/** Earlier default path, inside the runtimes' network directory; read with a warning. */
export const LEGACY_NODE_CONFIG = "/etc/cni/net.d/milo-ipam.conf";

/** Default unix socket of the node agent. */
export const DEFAULT_AGENT_SOCKET = "/run/milo-ipam/agent.sock";

/** The global through which an install bakes its settings into the bundle. */
export const INSTALL_GLOBAL = "__miloIpamInstall";

/** What an install bakes in: the node config path, and network grants the CNI path drops. */
export interface InstallSettings {
  nodeConfig?: string;
  /** `host:port` grants (agent metrics, the sweep's Kubernetes API) the CNI path revokes. */
  nonCniNet?: string[];
}

/** The settings the installer baked in (empty when run from source). */
export function installed(): InstallSettings {
  const v = (globalThis as Record<string, unknown>)[INSTALL_GLOBAL];
  return typeof v === "object" && v !== null ? v as InstallSettings : {};
}

/** Where the node config path came from. */
export type NodeConfigSource = "env" | "installed" | "default";

/** The node config file to read: `MILO_IPAM_CONFIG`, else the installed path, else the default. */
export function nodeConfigPath(env: (name: string) => string | undefined): {
  path: string;
  source: NodeConfigSource;
} {
  const fromEnv = env("MILO_IPAM_CONFIG");
  if (fromEnv) return { path: fromEnv, source: "env" };
  const baked = installed().nodeConfig;
  return baked
    ? { path: baked, source: "installed" }
    : { path: DEFAULT_NODE_CONFIG, source: "default" };
}
