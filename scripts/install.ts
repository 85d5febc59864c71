/**
 * Installs milo-ipam as one executable, `DIR/milo-ipam`, sandboxed to the
 * Milo host and the files named by the node config.
 *
 *   deno task install --dir DIR [--config NODE_CONFIG] [--allow-host HOST:PORT]...
 *                     [--kube in-cluster|KUBECONFIG] [--mode auto|compile|launcher]
 *
 * Without `--config` the plugin reads /etc/milo-ipam/node.json, and the old
 * default /etc/cni/net.d/milo-ipam.conf (with a warning in the log) while the
 * new one is absent; the sandbox then grants reading both. A node config in
 * the runtimes' network directory, named or found, is warned about here on
 * stderr and by the plugin in its log.
 *
 * `--kube` is for the cluster sweep's install (its CronJob): it grants the
 * Kubernetes API host and the files holding its credentials; the CNI path
 * revokes that host at start.
 *
 * The module is bundled, then `deno compile`d; where compile cannot fetch its
 * runtime, a launcher runs the bundle with a pinned copy of Deno and the same
 * permission flags. Every file is replaced atomically, so a runtime never
 * execs a half-written plugin.
 */
import { parseArgs } from "node:util";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type NodeConfig, parseNodeConfig } from "../lib/config.ts";
import {
  DEFAULT_NODE_CONFIG,
  INSTALL_GLOBAL,
  type InstallSettings,
  LEGACY_NODE_CONFIG,
} from "../lib/paths.ts";
import {
  type Grants,
  isInside,
  netGrant,
  nodeConfigReads,
  permissionFlags,
} from "../lib/permissions.ts";
import { kubeconfigGrants, SERVICE_ACCOUNT_DIR } from "../lib/kube_access.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const DENO_VERSION = "2.9.6";
const COMPILE_TIMEOUT_MS = 180_000;

/** What `install` produced. */
export interface Installed {
  path: string;
  kind: "compiled" | "launcher";
  flags: string[];
  /** What the install warned about on stderr (a node config in the runtimes' network directory). */
  warnings: string[];
}

/** Options of one installation. */
export interface InstallOptions {
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
  mode?: "auto" | "compile" | "launcher";
  quiet?: boolean;
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
function supportDir(dir: string): string {
  return join(resolve(dir), ".milo-ipam");
}

/** The sandbox grants the node config calls for (see {@link plan}). */
export async function grantsFor(o: InstallOptions): Promise<Grants & { nonCniDirs: string[] }> {
  const p = await plan(o);
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
async function chooseNodeConfig(o: InstallOptions): Promise<NodeConfigChoice> {
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
async function plan(o: InstallOptions): Promise<{
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
  const secrets = [m.tokenFile, m.caFile, m.certFile, m.keyFile].filter((f): f is string => !!f);
  const socketDir = dirname(node.agent.socket);
  const kube = await kubeGrants(o.kube);
  const nonCniNet = [...(node.agent.metrics ? [node.agent.metrics] : []), ...kube.net];
  // The bundle's chunks load on demand (RUNTIME_FLAGS), under the read grant.
  const code = supportDir(o.dir);
  // Everything the plugin reads but the socket and its directory.
  const reads = [code, ...configs, ...secrets, ...node.resultsDirs, node.hostIdFile, node.stateDir];
  const g: Grants = {
    net: [
      netGrant(m.url),
      ...(m.proxy ? [netGrant(m.proxy)] : []),
      ...(o.allowHosts ?? []),
      `unix:${node.agent.socket}`,
      ...nonCniNet,
    ],
    read: [...reads, socketDir, node.agent.socket, ...kube.read],
    write: [node.log.file, node.stateDir, socketDir, node.agent.socket],
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

async function run(args: string[], timeoutMs: number): Promise<{ ok: boolean; output: string }> {
  const cmd = new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  });
  try {
    const out = await cmd.output();
    const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    return { ok: out.success, output: text };
  } catch (err) {
    return { ok: false, output: String(err) };
  }
}

/** Moves `tmp` over `target` after fsync, with `mode`, owned by root when run as root. */
async function commit(tmp: string, target: string, mode: number): Promise<void> {
  const f = await Deno.open(tmp, { read: true, write: true });
  try {
    await f.sync();
  } finally {
    f.close();
  }
  await Deno.chmod(tmp, mode);
  if (Deno.uid() === 0) await Deno.chown(tmp, 0, 0);
  await Deno.rename(tmp, target);
}

/** Writes `data` to `target` atomically (beside it, fsync, rename). */
async function writeAtomic(target: string, data: string | Uint8Array, mode: number) {
  const tmp = `${target}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  try {
    if (typeof data === "string") await Deno.writeTextFile(tmp, data);
    else await Deno.writeFile(tmp, data);
    await commit(tmp, target, mode);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
}

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * Runtime flags of both forms besides the permissions. Deno loads every
 * statically named dynamic import at start unless told to load them lazily:
 * without it, each call would read and analyse the sweep, agent and handler
 * chunks it never runs. The V8 heap grows by at most half its live size
 * between collections, from 1 MiB semi-spaces: the resident agent (about
 * 10 MiB of live data) then levels off near 85 MiB of RSS within its first
 * thousand calls; with V8's defaults it collects rarely enough that its heap
 * and the native buffers its garbage still holds reach about 170 MiB. A CNI
 * call's short process is unchanged.
 */
const RUNTIME_FLAGS = [
  "--no-config",
  "--unstable-lazy-dynamic-imports",
  "--v8-flags=--max-semi-space-size=1,--heap-growing-percent=50",
];

/** The launcher script: pinned Deno, bundled module, the same flags. */
export function launcherScript(deno: string, bundle: string, flags: string[]): string {
  const argv = [
    deno,
    "run",
    ...RUNTIME_FLAGS,
    "--no-lock",
    "--no-remote",
    "--no-npm",
    ...flags,
    bundle,
  ];
  return [
    "#!/bin/sh",
    "# milo-ipam launcher, written by scripts/install.ts where deno compile was unavailable.",
    "export DENO_NO_UPDATE_CHECK=1 DENO_NO_PROMPT=1",
    `exec ${argv.map(shellQuote).join(" ")} "$@"`,
    "",
  ].join("\n");
}

/** The bundle: file name → text, and a hash of all of it (its directory's name). */
interface Bundle {
  files: Map<string, string>;
  hash: string;
}

let bundling: Promise<Bundle> | undefined;
/** Why `deno compile` failed in this process (it fails the same way until denort can be fetched). */
let compileUnavailable: string | undefined;
/** How long a replaced bundle directory stays for processes started from the one before. */
const KEEP_OLD_BUNDLE_MS = 10 * 60_000;

/**
 * The module bundled with code splitting: `main.js` and chunks that load only
 * on the path that needs them (the agent path never loads the handlers or
 * zod). Bundled once per process (the sources do not change under it).
 */
function bundleFiles(): Promise<Bundle> {
  bundling ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "milo-ipam-bundle-" });
    try {
      const bundled = await run(
        [
          "bundle",
          "--quiet",
          "--minify",
          "--platform",
          "deno",
          "--code-splitting",
          "--outdir",
          dir,
          "main.ts",
        ],
        COMPILE_TIMEOUT_MS,
      );
      if (!bundled.ok) throw new Error(`deno bundle failed:\n${bundled.output}`);
      const files = new Map<string, string>();
      for (const e of [...Deno.readDirSync(dir)].sort((x, y) => x.name < y.name ? -1 : 1)) {
        files.set(e.name, await Deno.readTextFile(join(dir, e.name)));
      }
      if (!files.has("main.js")) throw new Error("deno bundle wrote no main.js");
      const all = new TextEncoder().encode([...files].map(([n, t]) => `${n}\n${t}`).join("\n"));
      const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
      const hash = Array.from(digest.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
      return { files, hash };
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  })();
  bundling.catch(() => bundling = undefined);
  return bundling;
}

/**
 * Writes the bundle into `support/bundle-<hash>/` (a new directory renamed
 * into place, so it is whole or absent) and removes bundle directories that
 * were replaced long enough ago that no process started from them still runs.
 */
async function placeBundle(support: string, b: Bundle): Promise<string> {
  const name = `bundle-${b.hash}`;
  const target = join(support, name);
  if (!await Deno.stat(target).then(() => true, () => false)) {
    const tmp = join(support, `.${name}.${crypto.randomUUID().slice(0, 8)}.tmp`);
    await Deno.mkdir(tmp, { mode: 0o755 });
    for (const [file, text] of b.files) await writeAtomic(join(tmp, file), text, 0o644);
    if (Deno.uid() === 0) await Deno.chown(tmp, 0, 0);
    await Deno.rename(tmp, target);
  }
  for (const e of Deno.readDirSync(support)) {
    if (!e.isDirectory || e.name === name || !/^\.?bundle-/.test(e.name)) continue;
    const at = join(support, e.name);
    const age = Date.now() - ((await Deno.stat(at)).mtime?.getTime() ?? 0);
    if (age > KEEP_OLD_BUNDLE_MS) await Deno.remove(at, { recursive: true }).catch(() => {});
  }
  return name;
}

/** Installs the plugin into `o.dir`. */
export async function install(o: InstallOptions): Promise<Installed> {
  if (Deno.version.deno !== DENO_VERSION) {
    throw new Error(`install needs Deno ${DENO_VERSION} (running ${Deno.version.deno})`);
  }
  const dir = resolve(o.dir);
  const support = supportDir(dir);
  await Deno.mkdir(support, { recursive: true, mode: 0o755 });
  const { choice, grants, nonCniNet, nonCniDirs } = await plan(o);
  const { warnings } = choice;
  for (const w of warnings) o.quiet || console.error(`warning: ${w}`);
  const flags = permissionFlags(grants);
  const bundle = join(support, "milo-ipam.js");
  const settings: InstallSettings = { ...choice.settings, nonCniNet, nonCniDirs };
  const prelude = `globalThis.${INSTALL_GLOBAL}=${JSON.stringify(settings)};\n`;
  const dirName = await placeBundle(support, await bundleFiles());
  const entry = `import { main } from "./${dirName}/main.js";\nDeno.exit(await main(Deno.args));\n`;
  await writeAtomic(bundle, prelude + entry, 0o644);
  const target = join(dir, "milo-ipam");
  const mode = o.mode ?? "auto";
  const say = (m: string) => o.quiet || console.error(m);
  if (mode === "compile" || (mode === "auto" && !compileUnavailable)) {
    const tmp = `${target}.${crypto.randomUUID().slice(0, 8)}.tmp`;
    // Every chunk goes into the binary, whether or not compile follows lazy imports.
    const chunks = ["--include", join(support, dirName)];
    const compiled = await run(
      ["compile", "--quiet", ...RUNTIME_FLAGS, ...chunks, ...flags, "--output", tmp, bundle],
      COMPILE_TIMEOUT_MS,
    );
    if (compiled.ok) {
      await commit(tmp, target, 0o755);
      say(`installed compiled binary ${target}`);
      return { path: target, kind: "compiled", flags, warnings };
    }
    await Deno.remove(tmp).catch(() => {});
    if (mode === "compile") throw new Error(`deno compile failed:\n${compiled.output}`);
    compileUnavailable = firstLine(compiled.output);
    say(`deno compile unavailable (${firstLine(compiled.output)}); writing a launcher instead`);
  }
  const deno = join(support, "deno");
  await writeAtomic(deno, await Deno.readFile(Deno.execPath()), 0o755);
  await writeAtomic(target, launcherScript(deno, bundle, flags), 0o755);
  say(`installed launcher ${target} (Deno ${Deno.version.deno})`);
  return { path: target, kind: "launcher", flags, warnings };
}

function firstLine(text: string): string {
  const lines = text.split("\n").map((l) => l.trim());
  return lines.find((l) => /error/i.test(l)) ?? lines.find((l) => l) ?? "no output";
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      dir: { type: "string" },
      config: { type: "string" },
      "allow-host": { type: "string", multiple: true },
      kube: { type: "string" },
      mode: { type: "string", default: "auto" },
    },
  });
  if (!values.dir || !["auto", "compile", "launcher"].includes(values.mode ?? "")) {
    console.error(
      "usage: deno task install --dir DIR [--config NODE_CONFIG] [--allow-host HOST:PORT]... " +
        "[--kube in-cluster|KUBECONFIG] [--mode auto|compile|launcher]",
    );
    Deno.exit(2);
  }
  try {
    const r = await install({
      dir: values.dir,
      config: values.config,
      allowHosts: values["allow-host"],
      kube: values.kube,
      mode: values.mode as InstallOptions["mode"],
    });
    console.log(JSON.stringify(r));
  } catch (err) {
    console.error(`install failed: ${err instanceof Error ? err.message : err}`);
    Deno.exit(1);
  }
}
