/**
 * Reading the node config file: the one `MILO_IPAM_CONFIG`, the install or
 * the default names (lib/paths.ts), the legacy path's fallback and the
 * warnings, read and environment errors; the text is validated against the
 * schema (lib/config.ts) only when it changed.
 */
import {
  type NodeConfig,
  type ValidatedNodeConfig,
  validateNodeConfig,
  withNodeName,
} from "./config.ts";
import { CniError, errorText } from "./errors.ts";
import {
  DEFAULT_NODE_CONFIG,
  dirOf,
  LEGACY_NODE_CONFIG,
  nodeConfigPath,
  type NodeConfigSource,
} from "./paths.ts";

/**
 * The last node config file validated, by path and text: the agent reads the
 * file on every call (a change applies to the next one) and validates only
 * what changed.
 */
let lastRead: { at: string; text: string; v: ValidatedNodeConfig } | undefined;

/**
 * Reads the node config: `MILO_IPAM_CONFIG`, else the installed path, else
 * the default. When no path was chosen (no install choice, or none
 * installed), the legacy path is read when the default is absent, with a
 * warning; a chosen path inside the runtimes' network directory warns too. A
 * file that `MILO_IPAM_CONFIG` names and that cannot be read is an
 * environment error. `fallback` replaces the default and legacy paths of an
 * uninstalled run (tests).
 */
export async function readNodeConfig(
  env: (name: string) => string | undefined,
  fallback = { path: DEFAULT_NODE_CONFIG, legacy: LEGACY_NODE_CONFIG },
): Promise<NodeConfig> {
  const found = nodeConfigPath(env);
  const { source } = found;
  const path = source === "default" ? fallback.path : found.path;
  const legacy = source === "default" ? fallback.legacy : found.legacy;
  let at = path;
  let text = await readText(path, source);
  let warning = found.netDir
    ? `node config ${path} lies in ${found.netDir}, the directory runtimes scan for networks; ` +
      `move it to ${DEFAULT_NODE_CONFIG} and reinstall`
    : undefined;
  if (text === undefined && legacy) {
    text = await readText(legacy, source);
    at = legacy;
    warning = `node config read from ${legacy}, in ${dirOf(legacy)}, the directory runtimes ` +
      `scan for networks; move it to ${path}`;
  }
  if (text === undefined) {
    throw new CniError(
      "config",
      `no node config: ${path} does not exist${legacy ? ` (nor ${legacy})` : ""}`,
      "the node config holds milo.url, milo.tokenFile and cluster; see docs/configuration.md",
    );
  }
  if (lastRead?.at !== at || lastRead.text !== text) {
    let values: unknown;
    try {
      values = JSON.parse(text);
    } catch (err) {
      throw new CniError(
        "config",
        `node config ${at} is not valid JSON`,
        err instanceof Error ? err.message : "",
      );
    }
    lastRead = { at, text, v: validateNodeConfig(values, at) };
  }
  const cfg = withNodeName(lastRead.v, env);
  return warning ? { ...cfg, warning } : cfg;
}

/**
 * The environment of a command given `--config FILE`: `MILO_IPAM_CONFIG` is
 * `config` when given, every other name `env`'s.
 */
export function withConfigFlag(
  config: string | undefined,
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): (name: string) => string | undefined {
  return (n) => n === "MILO_IPAM_CONFIG" && config ? config : env(n);
}

/** The file's text, or undefined when a file not named by the environment is absent. */
async function readText(path: string, source: NodeConfigSource): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (err) {
    if (source === "env") {
      throw new CniError(
        "env",
        `cannot read MILO_IPAM_CONFIG=${path}`,
        err instanceof Deno.errors.NotCapable
          ? `${errorText(err)}; the plugin reads only the node config named at install: ` +
            "install again with --config naming this file"
          : errorText(err),
      );
    }
    if (err instanceof Deno.errors.NotFound) return undefined;
    if (err instanceof Deno.errors.NotCapable) {
      throw new CniError(
        "sandbox",
        `the permission sandbox refused reading node config ${path}`,
        "install milo-ipam with --config naming this file",
      );
    }
    throw new CniError("config", `cannot read node config ${path}`, errorText(err));
  }
}
