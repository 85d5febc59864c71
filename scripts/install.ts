/**
 * Installs milo-ipam as one executable, `DIR/milo-ipam`, sandboxed to the
 * Milo host and the files named by the node config.
 *
 *   deno task install --dir DIR [--config NODE_CONFIG] [--allow-host HOST:PORT]...
 *                     [--kube in-cluster|KUBECONFIG] [--mode auto|compile|launcher]
 *                     [--bundle DIR] [--deno PATH]
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
import { join, resolve } from "node:path";
import { parseCommandLine, usageError } from "../lib/cli.ts";
import { INSTALL_GLOBAL, type InstallSettings } from "../lib/paths.ts";
import { requireScrapeToken } from "../lib/config.ts";
import { requirePrivateDirs } from "../lib/owned.ts";
import { permissionFlags } from "../lib/permissions.ts";
import { commit, writeAtomic } from "./atomic.ts";
import { compile, launcherScript, placeBundle } from "./build.ts";
import { planSandbox, type SandboxOptions, supportDir } from "./sandbox.ts";

const DENO_VERSION = "2.9.6";

/** What `install` produced. */
export interface Installed {
  path: string;
  kind: "compiled" | "launcher";
  flags: string[];
  /** What the install warned about on stderr (a node config in the runtimes' network directory). */
  warnings: string[];
}

/** Options of one installation. */
export interface InstallOptions extends SandboxOptions {
  mode?: "auto" | "compile" | "launcher";
  quiet?: boolean;
  /** A bundle built before (the image's `bundle/`), instead of bundling the sources. */
  bundleDir?: string;
  /**
   * The Deno a launcher runs, used where it is (root's, on a read-only
   * filesystem: the image's); without it the running Deno is copied into the
   * install.
   */
  denoPath?: string;
}

/** `deno task install --help`. */
export const INSTALL_USAGE =
  `usage: deno task install --dir DIR [--config NODE_CONFIG] [--allow-host HOST:PORT]...
                         [--kube in-cluster|KUBECONFIG] [--mode auto|compile|launcher]
                         [--bundle DIR] [--deno PATH]

Writes one executable, DIR/milo-ipam, whose permission sandbox is derived from the
node config: the Milo host, the agent socket, and the files the config names.

  --dir DIR             where to install (a runtime's CNI bin directory: /opt/cni/bin)
  --config FILE         the node config the plugin reads (default /etc/milo-ipam/node.json,
                        with the older /etc/cni/net.d/milo-ipam.conf while it is absent)
  --allow-host H:P      one more host the sandbox grants (repeatable)
  --kube in-cluster|F   the sweep's install: grant the Kubernetes API and its credentials
  --mode M              auto (default: compile, else a launcher), compile or launcher
  --bundle DIR          install a bundle built before (the image's) instead of the sources
  --deno PATH           the launcher runs this Deno where it is instead of a copy`;

/** Why `deno compile` failed in this process (it fails the same way until denort can be fetched). */
let compileUnavailable: string | undefined;

/** The forms quiet installs of this process have reported (see {@link announce}). */
const announced = new Set<string>();

/**
 * Says on stderr which form a quiet install wrote, once per form in this
 * process, so a test run's output shows whether it ran compiled binaries or
 * launchers (an install that is not quiet says so on every install).
 */
function announce(o: InstallOptions, form: string): void {
  if (!o.quiet || announced.has(form)) return;
  announced.add(form);
  console.error(`milo-ipam install: ${form}`);
}

/** Installs the plugin into `o.dir`. */
export async function install(o: InstallOptions): Promise<Installed> {
  if (Deno.version.deno !== DENO_VERSION) {
    throw new Error(`install needs Deno ${DENO_VERSION} (running ${Deno.version.deno})`);
  }
  const dir = resolve(o.dir);
  const support = supportDir(dir);
  await Deno.mkdir(support, { recursive: true, mode: 0o755 });
  const { node, choice, grants, nonCniNet, nonCniDirs } = await planSandbox(o);
  requirePrivateDirs(node);
  requireScrapeToken(node.agent);
  const { warnings } = choice;
  for (const w of warnings) o.quiet || console.error(`warning: ${w}`);
  const flags = permissionFlags(grants);
  const bundle = join(support, "milo-ipam.js");
  const settings: InstallSettings = { ...choice.settings, nonCniNet, nonCniDirs };
  const prelude = `globalThis.${INSTALL_GLOBAL}=${JSON.stringify(settings)};\n`;
  const dirName = await placeBundle(support, o.bundleDir);
  const entry = `import { main } from "./${dirName}/main.js";\nDeno.exit(await main(Deno.args));\n`;
  await writeAtomic(bundle, prelude + entry, 0o644);
  const target = join(dir, "milo-ipam");
  const mode = o.mode ?? "auto";
  const say = (m: string) => o.quiet || console.error(m);
  if (mode === "compile" || (mode === "auto" && !compileUnavailable)) {
    const tmp = `${target}.${crypto.randomUUID().slice(0, 8)}.tmp`;
    const compiled = await compile(bundle, join(support, dirName), flags, tmp);
    if (compiled.ok) {
      await commit(tmp, target, 0o755);
      say(`installed compiled binary ${target}`);
      announce(o, "compiled binaries (deno compile)");
      return { path: target, kind: "compiled", flags, warnings };
    }
    await Deno.remove(tmp).catch(() => {});
    if (mode === "compile") throw new Error(`deno compile failed:\n${compiled.output}`);
    compileUnavailable = compileFailure(compiled.output);
    say(`deno compile unavailable (${compileUnavailable}); writing a launcher instead`);
  }
  const deno = o.denoPath ? resolve(o.denoPath) : join(support, "deno");
  if (!o.denoPath) await writeAtomic(deno, await Deno.readFile(Deno.execPath()), 0o755);
  await writeAtomic(target, launcherScript(deno, bundle, flags), 0o755);
  say(`installed launcher ${target} (Deno ${Deno.version.deno})`);
  announce(
    o,
    `launchers with the same flags (${
      mode === "launcher" ? "--mode launcher" : `deno compile unavailable: ${compileUnavailable}`
    })`,
  );
  return { path: target, kind: "launcher", flags, warnings };
}

/**
 * Why `deno compile` failed, in one line: its error, the step it names first
 * and the root cause of its "Caused by" chain, and the URL it was fetching
 * (denort, where no DENORT_BIN names one), rather than the error line alone,
 * which names only a temporary file.
 */
export function compileFailure(text: string): string {
  // deno-lint-ignore no-control-regex
  const lines = text.replace(/\x1b\[[0-9;]*m/g, "").split("\n").map((l) => l.trim());
  const error = lines.find((l) => /^error\b/i.test(l)) ?? lines.find((l) => l) ?? "no output";
  const from = lines.indexOf("Caused by:");
  const to = lines.indexOf("Stack backtrace:", from);
  const causedBy = from < 0 ? [] : lines.slice(from + 1, to < 0 ? undefined : to);
  const chain = causedBy.flatMap((l) => /^\d+: (.+)$/.exec(l)?.[1] ?? []);
  const url = chain.join(" ").match(/\bfor url \((\S+?)\)/)?.[1];
  const causes = [...new Set([chain[0], chain.at(-1)].filter(Boolean))]
    .map((c) => c!.replace(/ for url \(\S+?\)/, "").replace(/\.$/, ""));
  return [error, ...causes].join(": ") + (url ? ` (fetching ${url})` : "") +
    (url?.includes("denort") ? "; set DENORT_BIN to a denort of this Deno release" : "");
}

if (import.meta.main) {
  const p = parseCommandLine("install", Deno.args, {
    usage: INSTALL_USAGE,
    options: {
      dir: { type: "string" },
      config: { type: "string" },
      "allow-host": { type: "string", multiple: true },
      kube: { type: "string" },
      mode: { type: "string", default: "auto" },
      bundle: { type: "string" },
      deno: { type: "string" },
    },
  });
  if ("exit" in p) Deno.exit(p.exit);
  const values = p.values as {
    dir?: string;
    config?: string;
    "allow-host"?: string[];
    kube?: string;
    mode: string;
    bundle?: string;
    deno?: string;
  };
  if (!values.dir) Deno.exit(usageError("install", "--dir is required", INSTALL_USAGE).exit);
  if (!["auto", "compile", "launcher"].includes(values.mode)) {
    Deno.exit(
      usageError("install", `--mode ${values.mode}: auto, compile or launcher`, INSTALL_USAGE).exit,
    );
  }
  try {
    const r = await install({
      dir: values.dir,
      config: values.config,
      allowHosts: values["allow-host"],
      kube: values.kube,
      mode: values.mode as InstallOptions["mode"],
      bundleDir: values.bundle,
      denoPath: values.deno,
    });
    console.log(JSON.stringify(r));
  } catch (err) {
    console.error(`install failed: ${err instanceof Error ? err.message : err}`);
    Deno.exit(1);
  }
}
