/**
 * The one reader of the node config file, for every entry point: the file
 * `MILO_IPAM_CONFIG`, the install or the default names (lib/paths.ts), the
 * legacy path's fallback and its warnings, read and environment errors. It
 * answers the text alone: the exec'd plugin reads its few hints from it
 * before the agent answers without loading the schema (lib/thin.ts), and
 * lib/config_file.ts validates it.
 */
import { CniError, errorText } from "./errors.ts";
import {
  DEFAULT_NODE_CONFIG,
  dirOf,
  LEGACY_NODE_CONFIG,
  nodeConfigPath,
  type NodeConfigSource,
} from "./paths.ts";

/** The node config file as read: where, its text, and why an operator should move it. */
export interface NodeFile {
  at: string;
  text: string;
  warning?: string;
}

/**
 * Reads the node config file: `MILO_IPAM_CONFIG`, else the installed path,
 * else the default. When no path was chosen (no install choice, or none
 * installed), the legacy path is read when the default is absent, with a
 * warning; a chosen path inside the runtimes' network directory warns too. A
 * file that `MILO_IPAM_CONFIG` names and that cannot be read is an
 * environment error; none found is a config error. `fallback` replaces the
 * default and legacy paths of an uninstalled run (tests). Synchronous: a
 * local file of a few hundred bytes, read before anything else can run.
 */
export function readNodeFile(
  env: (name: string) => string | undefined,
  fallback = { path: DEFAULT_NODE_CONFIG, legacy: LEGACY_NODE_CONFIG },
): NodeFile {
  const found = nodeConfigPath(env);
  const { source } = found;
  const path = source === "default" ? fallback.path : found.path;
  const legacy = source === "default" ? fallback.legacy : found.legacy;
  let at = path;
  let text = readText(path, source);
  let warning = found.netDir
    ? `node config ${path} lies in ${found.netDir}, the directory runtimes scan for networks; ` +
      `move it to ${DEFAULT_NODE_CONFIG} and reinstall`
    : undefined;
  if (text === undefined && legacy) {
    text = readText(legacy, source);
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
  return warning ? { at, text, warning } : { at, text };
}

/** The file's text, or undefined when a file not named by the environment is absent. */
function readText(path: string, source: NodeConfigSource): string | undefined {
  try {
    return Deno.readTextFileSync(path);
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
