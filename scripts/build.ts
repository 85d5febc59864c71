/**
 * Building the plugin with the running (pinned) Deno: the module bundled with
 * code splitting into a directory of its own, `deno compile` of it, and the
 * launcher that runs the bundle where compile cannot fetch its runtime; both
 * forms with the same runtime flags.
 */
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { writeAtomic } from "./atomic.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const COMPILE_TIMEOUT_MS = 180_000;

/** Runs `deno ARGS` from the repository root: whether it succeeded, and what it printed. */
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
    // Deno needs a cache directory: the install's own, root's (a container may have no home).
    `export DENO_DIR=${shellQuote(join(dirname(bundle), "cache"))}`,
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

/** The hash that names a bundle's directory: of every file's name and text. */
async function hashOf(files: Map<string, string>): Promise<string> {
  const all = new TextEncoder().encode([...files].map(([n, t]) => `${n}\n${t}`).join("\n"));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return Array.from(digest.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A bundle built before (the image's), read from `dir`: `main.js` and its chunks. */
async function bundleFrom(dir: string): Promise<Bundle> {
  const files = new Map<string, string>();
  for (const e of [...Deno.readDirSync(dir)].sort((x, y) => x.name < y.name ? -1 : 1)) {
    if (e.isFile && e.name.endsWith(".js")) {
      files.set(e.name, await Deno.readTextFile(join(dir, e.name)));
    }
  }
  if (!files.has("main.js")) throw new Error(`${dir} holds no main.js: not a milo-ipam bundle`);
  return { files, hash: await hashOf(files) };
}

/** Bundles one script (`entry`, from the repository root) into the single file `out`. */
export async function bundleScript(entry: string, out: string): Promise<void> {
  const r = await run(
    ["bundle", "--quiet", "--minify", "--platform", "deno", "--output", out, entry],
    COMPILE_TIMEOUT_MS,
  );
  if (!r.ok) throw new Error(`deno bundle ${entry} failed:\n${r.output}`);
}

/** Writes the module's bundle (main.js and its chunks) into `dir` (the image's build). */
export async function writeBundle(dir: string): Promise<void> {
  const b = await bundleFiles();
  await Deno.mkdir(dir, { recursive: true });
  for (const [file, text] of b.files) await writeAtomic(join(dir, file), text, 0o644);
}
/** How long a replaced bundle directory stays for processes started from the one before. */
const KEEP_OLD_BUNDLE_MS = 10 * 60_000;

/** The arguments of `deno bundle` that bundle the module (main.ts) into `outdir`. */
export function moduleBundleArgs(outdir: string): string[] {
  return [
    "bundle",
    "--quiet",
    "--minify",
    "--platform",
    "deno",
    "--code-splitting",
    "--outdir",
    outdir,
    "main.ts",
  ];
}

/**
 * The module bundled with code splitting: `main.js` and chunks that load only
 * on the path that needs them (the agent path never loads the handlers or
 * zod). Bundled once per process (the sources do not change under it).
 */
function bundleFiles(): Promise<Bundle> {
  bundling ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "milo-ipam-bundle-" });
    try {
      const bundled = await run(moduleBundleArgs(dir), COMPILE_TIMEOUT_MS);
      if (!bundled.ok) throw new Error(`deno bundle failed:\n${bundled.output}`);
      const files = new Map<string, string>();
      for (const e of [...Deno.readDirSync(dir)].sort((x, y) => x.name < y.name ? -1 : 1)) {
        files.set(e.name, await Deno.readTextFile(join(dir, e.name)));
      }
      if (!files.has("main.js")) throw new Error("deno bundle wrote no main.js");
      return { files, hash: await hashOf(files) };
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  })();
  bundling.catch(() => bundling = undefined);
  return bundling;
}

/**
 * Writes the bundle (made from the sources, or read from `from`: one built
 * before) into `support/bundle-<hash>/` (a new directory renamed into place,
 * so it is whole or absent) and removes bundle directories that were
 * replaced long enough ago that no process started from them still runs;
 * answers the directory's name.
 */
export async function placeBundle(support: string, from?: string): Promise<string> {
  const b = from ? await bundleFrom(from) : await bundleFiles();
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

/**
 * The `deno compile` arguments: the runtime and permission flags, every
 * chunk of `chunksDir` (whether or not compile follows lazy imports), and no
 * V8 code cache: a compiled binary keeps one in the system's temporary
 * directory, where another user could leave one for root to load.
 */
export function compileArgs(
  entry: string,
  chunksDir: string,
  flags: string[],
  output: string,
): string[] {
  return [
    "compile",
    "--quiet",
    "--no-code-cache",
    ...RUNTIME_FLAGS,
    "--include",
    chunksDir,
    ...flags,
    "--output",
    output,
    entry,
  ];
}

/** `deno compile`s `entry` into `output` ({@link compileArgs}). */
export function compile(
  entry: string,
  chunksDir: string,
  flags: string[],
  output: string,
): Promise<{ ok: boolean; output: string }> {
  return run(compileArgs(entry, chunksDir, flags, output), COMPILE_TIMEOUT_MS);
}
