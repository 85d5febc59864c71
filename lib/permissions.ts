/**
 * The plugin's permission sandbox, as one list. `scripts/install.ts` turns it
 * into Deno flags for both the compiled binary and the launcher.
 */
import type { InstallSettings } from "./paths.ts";

/** Environment variables the plugin reads. */
export const ENV_VARS = [
  "CNI_COMMAND",
  "CNI_CONTAINERID",
  "CNI_NETNS",
  "CNI_IFNAME",
  "CNI_ARGS",
  "CNI_PATH",
  "MILO_IPAM_CONFIG",
  "NODE_NAME",
  "KUBERNETES_SERVICE_HOST",
  "KUBERNETES_SERVICE_PORT",
] as const;

/**
 * Proxy variables the plugin removes from its own environment before any
 * request (so Deno's fetch cannot follow them); removing needs the grant.
 */
export const PROXY_ENV_VARS = [
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "ALL_PROXY",
  "http_proxy",
  "https_proxy",
  "all_proxy",
] as const;

/** What one installation may touch. */
export interface Grants {
  /** `host:port` of every Milo endpoint (and the proxy the node config names). */
  net: string[];
  /** Files and directories the plugin reads (config, token, TLS material, caches). */
  read: string[];
  /** Files and directories the plugin writes (the log file, its state directory). */
  write: string[];
}

/**
 * The node config files the plugin may read, from what the install bakes in:
 * the file named at install; with none named, the default path and the
 * legacy one it falls back to. Nothing else: a legacy path the plugin never
 * falls back to is not granted.
 */
export function nodeConfigReads(s: InstallSettings): string[] {
  return [s.nodeConfig, s.legacyNodeConfig].filter((p): p is string => !!p);
}

/** `host:port` for a URL, with the scheme's default port made explicit. */
export function netGrant(url: string): string {
  const u = new URL(url);
  const port = u.port || (u.protocol === "https:" ? "443" : "80");
  return `${u.hostname}:${port}`;
}

/** The Deno permission flags for a set of grants: nothing more is allowed. */
export function permissionFlags(g: Grants): string[] {
  const list = (xs: string[]) => [...new Set(xs)].sort().join(",");
  const flags = [
    "--no-prompt",
    `--allow-env=${[...ENV_VARS, ...PROXY_ENV_VARS].join(",")}`,
    "--allow-sys=hostname,uid",
  ];
  if (g.net.length) flags.push(`--allow-net=${list(g.net)}`);
  if (g.read.length) flags.push(`--allow-read=${list(g.read)}`);
  if (g.write.length) flags.push(`--allow-write=${list(g.write)}`);
  return flags;
}

/** True when `path` is `dir` or lies inside it (both absolute and normalized). */
export function isInside(path: string, dir: string): boolean {
  const d = dir.endsWith("/") ? dir : `${dir}/`;
  return path === dir || path.startsWith(d);
}
