/**
 * What the image carries besides Deno and denort, built from the sources:
 *
 *   deno run --allow-all scripts/image.ts --out DIR
 *
 * writes `DIR/bundle/` (the plugin's bundle: main.js and its chunks, which
 * every node compiles with its own sandbox), `DIR/node-install.js` (the init
 * containers' program, scripts/node_install.ts in one file) and
 * `DIR/RELEASE`. deploy/Containerfile runs it; nothing else is built later.
 */
import { join, resolve } from "node:path";
import { parseCommandLine, usageError } from "../lib/cli.ts";
import { RELEASE } from "../lib/version.ts";
import { bundleScript, writeBundle } from "./build.ts";

const USAGE = `usage: deno run --allow-all scripts/image.ts --out DIR

Writes the image's files: DIR/bundle/ (the plugin's bundle), DIR/node-install.js (the
init containers' program) and DIR/RELEASE.`;

/** Writes the image's files into `out`. */
export async function buildImageFiles(out: string): Promise<void> {
  await Deno.mkdir(out, { recursive: true });
  await writeBundle(join(out, "bundle"));
  await bundleScript("scripts/node_install.ts", join(resolve(out), "node-install.js"));
  await Deno.writeTextFile(join(out, "RELEASE"), `${RELEASE}\n`);
}

if (import.meta.main) {
  const p = parseCommandLine("image", Deno.args, {
    usage: USAGE,
    options: { out: { type: "string" } },
  });
  if ("exit" in p) Deno.exit(p.exit);
  const out = p.values.out as string | undefined;
  if (!out) Deno.exit(usageError("image", "--out is required", USAGE).exit);
  await buildImageFiles(out);
  console.error(`milo-ipam ${RELEASE}: image files in ${out}`);
}
