/**
 * Start-up anatomy: exec of the Deno binary alone, an empty `deno run`
 * without flags or sh, the floor, and VERSION, interleaved; and how much of
 * the unminified bundle is npm:zod.
 */
import { join } from "node:path";
import { launcherScript } from "../../scripts/build.ts";
import type { StartupResults } from "../model.ts";
import type { Plan } from "../plan.ts";
import { cniEnv, execTimed, type Ran, Recorder, say } from "../proc.ts";
import type { World } from "../world.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** Bundles main.ts unminified (one file) and measures how much of it is npm:zod. */
async function bundleComposition(tmp: string): Promise<{ plainBytes: number; zodBytes: number }> {
  const out = join(tmp, "plain-bundle.js");
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["bundle", "--quiet", "--platform", "deno", "--output", out, "main.ts"],
    cwd: ROOT,
    stdout: "null",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  if (!r.success) return { plainBytes: NaN, zodBytes: NaN };
  let zod = false, zodBytes = 0, plainBytes = 0;
  for (const line of (await Deno.readTextFile(out)).split("\n")) {
    // esbuild marks each module's start with a `// path` comment.
    if (/^\/\/ \S+\.(ts|js)$/.test(line)) zod = /\/zod\//.test(line);
    const n = new TextEncoder().encode(line).length + 1;
    plainBytes += n;
    if (zod) zodBytes += n;
  }
  return { plainBytes, zodBytes };
}

/** The start-up loop, then the bundle's make-up. */
export async function startupSection(w: World, plan: Plan): Promise<StartupResults> {
  say(`start-up anatomy: ${plan.startupSamples} rounds`);
  const st = new Recorder(1);
  const v = cniEnv(w.a, "VERSION", "");
  const nodeModule = join(w.tmp, "node-module");
  await Deno.writeTextFile(`${nodeModule}.js`, `import "node:module";\n`);
  await Deno.writeTextFile(
    nodeModule,
    launcherScript(w.denoBin, `${nodeModule}.js`, w.a.installed.flags),
  );
  await Deno.chmod(nodeModule, 0o755);
  const variants: [string, string, () => Promise<Ran>][] = [
    [
      "deno-version",
      "`deno --version` (exec, no JS runtime)",
      () => execTimed(w.denoBin, ["--version"], v, ""),
    ],
    [
      "deno-direct",
      "`deno run` empty script, no flags, no sh",
      () => execTimed(w.denoBin, ["run", "--no-config", "--no-lock", w.empty], v, ""),
    ],
    [
      "floor",
      "bare `deno run` (empty script, same flags, via sh)",
      () => execTimed(w.floor, [], v, "{}"),
    ],
    [
      "node-module",
      "a script importing only `node:module` (same flags, via sh)",
      () => execTimed(nodeModule, [], v, "{}"),
    ],
    [
      "version",
      "milo-ipam VERSION",
      () => w.a.run({ command: "VERSION", stdin: { cniVersion: "1.1.0" } }),
    ],
  ];
  for (let i = 0; i < plan.startupSamples + 1; i++) {
    const order = i % 2 ? [...variants].reverse() : variants;
    for (const [key, label, run] of order) await st.run(key, label, i, run);
  }
  return {
    series: st.series(),
    ...await bundleComposition(w.tmp),
    entryLoadsNodeModule: await entryLoadsNodeModule(w.bundleDir),
  };
}

/** Follows main.js's static imports through the bundle's chunks, looking for `node:module`. */
export async function entryLoadsNodeModule(bundleDir: string): Promise<boolean> {
  const seen = new Set<string>();
  const todo = ["main.js"];
  while (todo.length) {
    const file = todo.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = await Deno.readTextFile(`${bundleDir}/${file}`);
    if (/from\s*"node:module"|import\s*"node:module"/.test(text)) return true;
    for (const m of text.matchAll(/(?:from|import)\s*"\.\/([^"]+\.js)"/g)) todo.push(m[1]);
  }
  return false;
}
