/**
 * The plugin's permission sandbox, as one list. `scripts/install.ts` turns it
 * into Deno flags for both the compiled binary and the launcher.
 */

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
] as const;

/** What one installation may touch. */
export interface Grants {
  /** `host:port` of every Milo endpoint. */
  net: string[];
  /** Files and directories the plugin reads (config, token, TLS material). */
  read: string[];
  /** Files the plugin writes (the log file). */
  write: string[];
}

/** `host:port` for a Milo URL, with the scheme's default port made explicit. */
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
    `--allow-env=${ENV_VARS.join(",")}`,
    "--allow-sys=hostname",
  ];
  if (g.net.length) flags.push(`--allow-net=${list(g.net)}`);
  if (g.read.length) flags.push(`--allow-read=${list(g.read)}`);
  if (g.write.length) flags.push(`--allow-write=${list(g.write)}`);
  return flags;
}
