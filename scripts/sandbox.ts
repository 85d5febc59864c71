/**
 * What an install grants: the node config it chooses and reads (the file
 * named, else the default path, else the legacy one, warned about), the
 * permission sandbox derived from that config, and the layouts it refuses (a
 * credential, config or code file inside a directory the plugin may write).
 */
import { dirname, join, resolve } from "node:path";
import { type NodeConfig, parseNodeConfig } from "../lib/config.ts";
import { kubeconfigGrants, SERVICE_ACCOUNT_DIR } from "../lib/kube_access.ts";
import { DEFAULT_NODE_CONFIG, type InstallSettings, LEGACY_NODE_CONFIG } from "../lib/paths.ts";
import { rotatedLog } from "../lib/log.ts";
import { type Grants, isInside, netGrant, nodeConfigReads } from "../lib/permissions.ts";

/** What an install's sandbox is derived from. */
export interface SandboxOptions {
  /** The directory the plugin is installed in (its code lies in {@link supportDir}). */
  dir: string;
  /**
   * The node config file. Without it the plugin reads the default path, and
   * the legacy path (with a warning) while the default is absent.
   */
  config?: string;
  /**
   * The default and legacy node config paths (/etc/milo-ipam/node.json,
   * /etc/cni/net.d/milo-ipam.conf) of an install without `config`. Only the
   * installer reads them; tests move them into a temp dir.
   */
  nodeConfigPaths?: { default: string; legacy: string };
  allowHosts?: string[];
  /** The sweep's Kubernetes API: `in-cluster` (service account), or a kubeconfig path. */
  kube?: string;
}

/** The real path of `p` when it exists, else `p` resolved. */
async function real(p: string): Promise<string> {
  try {
    return await Deno.realPath(p);
  } catch {
    return resolve(p);
  }
}

/** The directory beside the executable holding the bundle (and the launcher's Deno). */
export function supportDir(dir: string): string {
  return join(resolve(dir), ".milo-ipam");
}

/** The sandbox grants the node config calls for (see {@link planSandbox}). */
export async function grantsFor(o: SandboxOptions): Promise<Grants & { nonCniDirs: string[] }> {
  const p = await planSandbox(o);
  return { ...p.grants, nonCniDirs: p.nonCniDirs };
}

/** The install's choice of node config, and the file read now (to derive the grants). */
interface NodeConfigChoice {
  /** The file read. */
  path: string;
  /** What the plugin gets: the file named, or the default with the legacy fallback. */
  settings: Pick<InstallSettings, "nodeConfig" | "legacyNodeConfig" | "nodeConfigNetDir">;
  warnings: string[];
}

/** True when `path` (resolved, or its real path) lies inside `dir`. */
async function inside(path: string, dir: string): Promise<boolean> {
  return isInside(resolve(path), resolve(dir)) || isInside(await real(path), await real(dir));
}

/**
 * The node config to read: the file named, else the default path, else the
 * legacy path (warned about). A named file in the runtimes' network
 * directory is warned about here and, baked into the plugin, in its log.
 */
async function chooseNodeConfig(o: SandboxOptions): Promise<NodeConfigChoice> {
  const at = o.nodeConfigPaths ?? { default: DEFAULT_NODE_CONFIG, legacy: LEGACY_NODE_CONFIG };
  const [def, legacy] = [resolve(at.default), resolve(at.legacy)];
  const netDir = dirname(legacy);
  const why = `${netDir} is the directory container runtimes scan for networks, and a file ` +
    "there without `type` can leave a runtime without a pod network";
  if (o.config !== undefined) {
    const path = resolve(o.config);
    if (!await inside(path, netDir)) return { path, settings: { nodeConfig: path }, warnings: [] };
    return {
      path,
      settings: { nodeConfig: path, nodeConfigNetDir: netDir },
      warnings: [
        `node config ${path} lies in ${netDir}: ${why}; move it to ${def} and reinstall ` +
        "without --config",
      ],
    };
  }
  const settings = { nodeConfig: def, legacyNodeConfig: legacy };
  if (await exists(def)) return { path: def, settings, warnings: [] };
  if (await exists(legacy)) {
    return {
      path: legacy,
      settings,
      warnings: [
        `node config read from ${legacy}, as ${def} is absent: ${why}; move it to ${def} ` +
        "(the plugin reads it from there without reinstalling, and warns in its log until then)",
      ],
    };
  }
  throw new Error(`cannot read node config: neither ${def} nor ${legacy} exists`);
}

/** True when `path` exists (false only when it is absent). */
async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw new Error(`cannot read node config ${path}: ${err instanceof Error ? err.message : err}`);
  }
}

/**
 * Reads the node config, derives the sandbox grants from it, and refuses a
 * layout in which the plugin could write its own credentials or config.
 */
export async function planSandbox(o: SandboxOptions): Promise<{
  node: NodeConfig;
  choice: NodeConfigChoice;
  grants: Grants;
  nonCniNet: string[];
  nonCniDirs: string[];
}> {
  const choice = await chooseNodeConfig(o);
  const { path } = choice;
  let values: unknown;
  try {
    values = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    throw new Error(`cannot read node config ${path}: ${err instanceof Error ? err.message : err}`);
  }
  const node = parseNodeConfig(values, path, () => undefined);
  const configs = nodeConfigReads(choice.settings);
  const m = node.milo;
  const secrets = [m.tokenFile, m.caFile, m.certFile, m.keyFile, node.agent.metricsTokenFile]
    .filter((f): f is string => !!f);
  const socketDir = dirname(node.agent.socket);
  const kube = await kubeGrants(o.kube);
  const nonCniNet = [...(node.agent.metrics ? [node.agent.metrics] : []), ...kube.net];
  // The bundle's chunks load on demand (RUNTIME_FLAGS), under the read grant.
  const code = supportDir(o.dir);
  // Everything the plugin reads but the socket and its directory.
  const reads = [
    code,
    ...configs,
    ...secrets,
    ...node.resultsDirs,
    node.hostIdFile,
    node.hardwareIdFile,
    node.bootIdFile,
    node.stateDir,
    dirname(node.log.file),
  ];
  const g: Grants = {
    net: [
      netGrant(m.url),
      ...(m.proxy ? [netGrant(m.proxy)] : []),
      ...(o.allowHosts ?? []),
      `unix:${node.agent.socket}`,
      ...nonCniNet,
    ],
    read: [...reads, socketDir, node.agent.socket, ...kube.read],
    write: [node.log.file, rotatedLog(node.log.file), node.stateDir, socketDir, node.agent.socket],
  };
  // The agent creates the socket in its directory; the exec'd plugin keeps the socket alone.
  const others = [...reads, node.log.file];
  const shared = [...others, ...kube.read].includes(socketDir);
  const nonCniDirs = shared ? [] : [socketDir];
  const writable = await Promise.all(g.write.map(real));
  for (const f of [...secrets, ...kube.read, ...configs, code]) {
    const at = await real(f);
    const inside = writable.find((w) => isInside(at, w));
    if (inside) {
      throw new Error(
        `refusing to install: ${f} lies inside ${inside}, which the plugin may write; ` +
          "keep the token, TLS files, node config and the install dir out of log.file, stateDir " +
          "and the socket's directory",
      );
    }
  }
  return { node, choice, grants: g, nonCniNet, nonCniDirs };
}

/** The sweep's Kubernetes API host and credential files (none without `kube`). */
async function kubeGrants(kube?: string): Promise<{ net: string[]; read: string[] }> {
  if (!kube) return { net: [], read: [] };
  if (kube !== "in-cluster") {
    const path = resolve(kube);
    const g = await kubeconfigGrants(path);
    return { net: [g.net], read: [path, ...g.read] };
  }
  const host = Deno.env.get("KUBERNETES_SERVICE_HOST");
  const port = Deno.env.get("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw new Error(
      "--kube in-cluster needs KUBERNETES_SERVICE_HOST and _PORT (run it in the pod)",
    );
  }
  return {
    net: [`${host.includes(":") ? `[${host}]` : host}:${port}`],
    read: [SERVICE_ACCOUNT_DIR],
  };
}
