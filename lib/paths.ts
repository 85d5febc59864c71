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

/** The directory part of a path (`.` for a bare name, `/` at the root). */
export function dirOf(path: string): string {
  const at = path.lastIndexOf("/");
  return at < 0 ? "." : at === 0 ? "/" : path.slice(0, at);
}

/** The global through which an install bakes its settings into the bundle. */
export const INSTALL_GLOBAL = "__miloIpamInstall";

/** What an install bakes in: where the node config is, and network grants the CNI path drops. */
export interface InstallSettings {
  /** The node config file: the one named at install, else the default path. */
  nodeConfig?: string;
  /**
   * Set when no node config was named at install: the old default, read
   * (with a warning) when `nodeConfig` is absent.
   */
  legacyNodeConfig?: string;
  /**
   * Set when the file named at install lies in the runtimes' network
   * directory (this one): every read of it warns.
   */
  nodeConfigNetDir?: string;
  /** `host:port` grants (agent metrics, the sweep's Kubernetes API) the CNI path revokes. */
  nonCniNet?: string[];
  /**
   * Directories the agent writes (the socket's) that the CNI path may not: it revokes writing
   * there (reading stays: the plugin checks the socket's directory before it trusts the socket,
   * and a revoked read would take a granted parent, such as the log's directory, with it).
   */
  nonCniDirs?: string[];
}

/** The settings the installer baked in (empty when run from source). */
export function installed(): InstallSettings {
  const v = (globalThis as Record<string, unknown>)[INSTALL_GLOBAL];
  return typeof v === "object" && v !== null ? v as InstallSettings : {};
}

/** Where the node config path came from. */
export type NodeConfigSource = "env" | "installed" | "default";

/** Where to read the node config. */
export interface NodeConfigLocation {
  path: string;
  source: NodeConfigSource;
  /** The old default, read with a warning when `path` is absent (no path was chosen). */
  legacy?: string;
  /** The runtimes' network directory, when the chosen `path` lies in it (read with a warning). */
  netDir?: string;
}

/**
 * The node config file to read: `MILO_IPAM_CONFIG`, else the installed path
 * (with the legacy fallback when the install chose none), else the default
 * (with the legacy fallback).
 */
export function nodeConfigPath(env: (name: string) => string | undefined): NodeConfigLocation {
  const fromEnv = env("MILO_IPAM_CONFIG");
  if (fromEnv) return { path: fromEnv, source: "env" };
  const s = installed();
  if (!s.nodeConfig) {
    return { path: DEFAULT_NODE_CONFIG, source: "default", legacy: LEGACY_NODE_CONFIG };
  }
  return {
    path: s.nodeConfig,
    source: "installed",
    ...(s.legacyNodeConfig ? { legacy: s.legacyNodeConfig } : {}),
    ...(s.nodeConfigNetDir ? { netDir: s.nodeConfigNetDir } : {}),
  };
}
