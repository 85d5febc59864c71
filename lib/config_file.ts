/**
 * The node config validated: the file as lib/node_file.ts reads it, checked
 * against the schema (lib/config.ts) only when its text changed.
 */
import {
  type NodeConfig,
  type ValidatedNodeConfig,
  validateNodeConfig,
  withNodeName,
} from "./config.ts";
import { CniError } from "./errors.ts";
import { readNodeFile } from "./node_file.ts";

/**
 * The last node config file validated, by path and text: the agent reads the
 * file on every call (a change applies to the next one) and validates only
 * what changed.
 */
let lastRead: { at: string; text: string; v: ValidatedNodeConfig } | undefined;

/**
 * Reads the node config (lib/node_file.ts) and validates it against the
 * schema when its text changed.
 */
export function readNodeConfig(
  env: (name: string) => string | undefined,
  fallback?: { path: string; legacy: string },
): Promise<NodeConfig> {
  try {
    const { at, text, warning } = readNodeFile(env, fallback);
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
    return Promise.resolve(warning ? { ...cfg, warning } : cfg);
  } catch (err) {
    return Promise.reject(err);
  }
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
