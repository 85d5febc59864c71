/** `milo-ipam version`: the release, its state format and CNI versions. */
import { SUPPORTED_VERSIONS } from "./cni.ts";
import { STATE_FORMAT } from "./state_format.ts";
import { RELEASE } from "./version.ts";

/** What `milo-ipam version` prints. */
function releaseInfo(): Record<string, unknown> {
  return {
    release: RELEASE,
    stateFormat: STATE_FORMAT,
    cniVersions: [...SUPPORTED_VERSIONS],
    deno: Deno.version.deno,
  };
}

/**
 * `milo-ipam version [--output text|json]`: the release, its state format and
 * CNI versions on stdout; answers the exit code (2 for a wrong command line).
 */
export async function versionCli(args: string[]): Promise<number> {
  const [{ parseCommandLine, usageError }, { VERSION_USAGE }] = await Promise.all([
    import("./cli.ts"),
    import("./usage.ts"),
  ]);
  const p = parseCommandLine("milo-ipam version", args, {
    usage: VERSION_USAGE,
    options: { output: { type: "string", default: "text" } },
  });
  if ("exit" in p) return p.exit;
  const output = p.values.output;
  if (output !== "text" && output !== "json") {
    return usageError("milo-ipam version", `--output ${output}: text or json`, VERSION_USAGE).exit;
  }
  const i = releaseInfo();
  const text = output === "json"
    ? JSON.stringify(i) + "\n"
    : `milo-ipam ${i.release} (state format ${i.stateFormat}; CNI ${
      (i.cniVersions as string[]).join(", ")
    }; Deno ${i.deno})\n`;
  Deno.stdout.writeSync(new TextEncoder().encode(text));
  return 0;
}
