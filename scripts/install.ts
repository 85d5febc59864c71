/**
 * Installs milo-ipam as one executable, `DIR/milo-ipam`, sandboxed to the
 * Milo host(s) and files of the given config.
 *
 *   deno task install --dir DIR [--config FILE] [--node-config FILE]
 *                     [--allow-host HOST:PORT]... [--results-dir DIR] [--state-file FILE]
 *                     [--mode auto|compile|launcher]
 *
 * `--config` is a node config file, a network config with an `ipam` block, or
 * a conflist. The module is bundled, then `deno compile`d; where compile cannot
 * fetch its runtime, a launcher runs the bundle with a pinned Deno and the
 * same permission flags.
 */
import { parseArgs } from "node:util";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  DEFAULT_LOG_FILE,
  DEFAULT_NODE_CONFIG,
  DEFAULT_RESULTS_DIR,
  isPlainObject,
  mergeConfig,
} from "../lib/config.ts";
import { type Grants, netGrant, permissionFlags } from "../lib/permissions.ts";
import { DEFAULT_STATE_FILE } from "../lib/reconcile.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const DENO_VERSION = "2.9.6";
const COMPILE_TIMEOUT_MS = 180_000;

/** What `install` produced. */
export interface Installed {
  path: string;
  kind: "compiled" | "launcher";
  flags: string[];
}

/** Options of one installation. */
export interface InstallOptions {
  dir: string;
  config?: string;
  nodeConfig?: string;
  allowHosts?: string[];
  resultsDir?: string;
  stateFile?: string;
  mode?: "auto" | "compile" | "launcher";
  quiet?: boolean;
}

async function readJson(path: string): Promise<Record<string, unknown>> {
  const v = JSON.parse(await Deno.readTextFile(path));
  if (!isPlainObject(v)) throw new Error(`${path}: not a JSON object`);
  return v;
}

/** The milo-ipam settings found in a config file (one per milo-ipam ipam block). */
export function ipamBlocks(file: Record<string, unknown>): Record<string, unknown>[] {
  const plugins = Array.isArray(file.plugins) ? file.plugins : [file];
  const blocks = plugins.flatMap((p) =>
    isPlainObject(p) && isPlainObject(p.ipam) && p.ipam.type === "milo-ipam" ? [p.ipam] : []
  );
  if (blocks.length) return blocks;
  return isPlainObject(file.milo) ? [file] : [];
}

/** Derives the sandbox grants from the config and node config. */
export async function grantsFor(o: InstallOptions): Promise<Grants> {
  const nodePath = o.nodeConfig ?? DEFAULT_NODE_CONFIG;
  const node = await readJson(nodePath).catch(() => ({}));
  const file = o.config ? await readJson(o.config) : {};
  const blocks = ipamBlocks(file);
  const settings = (blocks.length ? blocks : [{}]).map((b) => mergeConfig(node, b));
  const stateDir = dirname(resolve(o.stateFile ?? DEFAULT_STATE_FILE));
  const g: Grants = {
    net: [...(o.allowHosts ?? [])],
    read: [DEFAULT_NODE_CONFIG, nodePath, o.resultsDir ?? DEFAULT_RESULTS_DIR, stateDir],
    write: [stateDir],
  };
  if (o.config) g.read.push(resolve(o.config));
  for (const s of settings) {
    const milo = isPlainObject(s.milo) ? s.milo : {};
    if (typeof milo.url === "string") g.net.push(netGrant(milo.url));
    for (const k of ["tokenFile", "caFile", "certFile", "keyFile"]) {
      if (typeof milo[k] === "string") g.read.push(milo[k] as string);
    }
    const log = isPlainObject(s.log) ? s.log : {};
    g.write.push(typeof log.file === "string" ? log.file : DEFAULT_LOG_FILE);
  }
  if (!g.net.length) {
    throw new Error("no Milo host: give --config with ipam.milo.url, or --allow-host HOST:PORT");
  }
  return g;
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

async function vendorDeno(target: string): Promise<void> {
  await Deno.remove(target).catch(() => {});
  try {
    await Deno.link(Deno.execPath(), target);
  } catch {
    await Deno.copyFile(Deno.execPath(), target);
  }
  await Deno.chmod(target, 0o755);
}

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** Writes the launcher script: pinned Deno, bundled module, the same flags. */
export function launcherScript(deno: string, bundle: string, flags: string[]): string {
  const argv = [
    deno,
    "run",
    "--no-config",
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

/** Installs the plugin into `o.dir`. */
export async function install(o: InstallOptions): Promise<Installed> {
  if (Deno.version.deno !== DENO_VERSION) {
    throw new Error(`install needs Deno ${DENO_VERSION} (running ${Deno.version.deno})`);
  }
  const dir = resolve(o.dir);
  const support = join(dir, ".milo-ipam");
  await Deno.mkdir(support, { recursive: true });
  const flags = permissionFlags(await grantsFor(o));
  const bundle = join(support, "milo-ipam.js");
  const bundled = await run(
    ["bundle", "--quiet", "--minify", "--platform", "deno", "--output", bundle, "main.ts"],
    COMPILE_TIMEOUT_MS,
  );
  if (!bundled.ok) throw new Error(`deno bundle failed:\n${bundled.output}`);
  const target = join(dir, "milo-ipam");
  const mode = o.mode ?? "auto";
  const say = (m: string) => o.quiet || console.error(m);
  if (mode !== "launcher") {
    const tmp = `${target}.compile-tmp`;
    const compiled = await run(
      ["compile", "--quiet", "--no-config", ...flags, "--output", tmp, bundle],
      COMPILE_TIMEOUT_MS,
    );
    if (compiled.ok) {
      await Deno.rename(tmp, target);
      say(`installed compiled binary ${target}`);
      return { path: target, kind: "compiled", flags };
    }
    await Deno.remove(tmp).catch(() => {});
    if (mode === "compile") throw new Error(`deno compile failed:\n${compiled.output}`);
    say(`deno compile unavailable (${firstLine(compiled.output)}); writing a launcher instead`);
  }
  const deno = join(support, "deno");
  await vendorDeno(deno);
  await Deno.writeTextFile(target, launcherScript(deno, bundle, flags), { mode: 0o755 });
  await Deno.chmod(target, 0o755);
  say(`installed launcher ${target} (Deno ${Deno.version.deno})`);
  return { path: target, kind: "launcher", flags };
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
      "node-config": { type: "string" },
      "allow-host": { type: "string", multiple: true },
      "results-dir": { type: "string" },
      "state-file": { type: "string" },
      mode: { type: "string", default: "auto" },
    },
  });
  if (!values.dir || !["auto", "compile", "launcher"].includes(values.mode ?? "")) {
    console.error(
      "usage: deno task install --dir DIR [--config FILE] [--node-config FILE] " +
        "[--allow-host HOST:PORT]... [--results-dir DIR] [--state-file FILE] [--mode auto|compile|launcher]",
    );
    Deno.exit(2);
  }
  try {
    const r = await install({
      dir: values.dir,
      config: values.config,
      nodeConfig: values["node-config"],
      allowHosts: values["allow-host"],
      resultsDir: values["results-dir"],
      stateFile: values["state-file"],
      mode: values.mode as InstallOptions["mode"],
    });
    console.log(JSON.stringify(r));
  } catch (err) {
    console.error(`install failed: ${err instanceof Error ? err.message : err}`);
    Deno.exit(1);
  }
}
