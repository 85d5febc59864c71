/**
 * milo-ipam: the CNI IPAM plugin (exec'd with CNI_COMMAND), and its
 * subcommands `agent`, `reconcile` and `sweep`. Modules load only on the path
 * that needs them: a call the node agent answers imports the socket client
 * alone, and the handlers, the Milo client and zod load only when the plugin
 * does the work itself.
 */
import { installed } from "./lib/paths.ts";
import { callAgent } from "./lib/thin.ts";
import { readStdinBytes } from "./lib/stdin.ts";
import { warmTlsCrypto } from "./lib/warm.ts";

/** When this process started (ms since epoch): the CNI deadline counts from here. */
const STARTED = performance.timeOrigin;

const SUBCOMMANDS: Record<string, () => Promise<{ cli(args: string[]): Promise<number> }>> = {
  agent: async () => ({ cli: (await import("./lib/agent.ts")).agentCli }),
  reconcile: async () => ({ cli: (await import("./lib/reconcile.ts")).reconcileCli }),
  sweep: async () => ({ cli: (await import("./lib/sweep_cli.ts")).sweepCli }),
};

function write(text: string): void {
  if (text) Deno.stdout.writeSync(new TextEncoder().encode(text));
}

/** Runs a subcommand; a failure prints a CNI error JSON like the verbs do. */
async function subcommand(name: string, args: string[]): Promise<number> {
  try {
    return await (await SUBCOMMANDS[name]()).cli(args);
  } catch (err) {
    const [{ encodeError, LATEST_VERSION }, { toCniError }] = await Promise.all([
      import("./lib/cni.ts"),
      import("./lib/errors.ts"),
    ]);
    write(JSON.stringify(encodeError(LATEST_VERSION, toCniError(err))) + "\n");
    return 1;
  }
}

/** One CNI call: VERSION locally, anything else by the agent, else in this process. */
async function cni(): Promise<number> {
  const granted = installed();
  for (const host of granted.nonCniNet ?? []) Deno.permissions.revokeSync({ name: "net", host });
  const stdin = readStdinBytes();
  if (Deno.env.get("CNI_COMMAND") === "VERSION") {
    const [{ version }, { decodeStdin }] = await Promise.all([
      import("./lib/version.ts"),
      import("./lib/stdin.ts"),
    ]);
    let text = "";
    try {
      text = decodeStdin(stdin);
    } catch {
      // VERSION answers whatever stdin holds.
    }
    write(JSON.stringify(version(text)) + "\n");
    return 0;
  }
  for (const path of granted.nonCniDirs ?? []) Deno.permissions.revokeSync({ name: "write", path });
  const r = await callAgent(STARTED, stdin);
  if (r.kind === "done") {
    write(r.stdout);
    return r.exitCode;
  }
  if (r.https) warmTlsCrypto();
  return await (await import("./lib/run.ts")).runPlugin(STARTED, stdin, r);
}

/** Runs milo-ipam with its command-line arguments; answers the exit code. */
export async function main(args: string[]): Promise<number> {
  const [first, ...rest] = args;
  return first && Object.hasOwn(SUBCOMMANDS, first) ? await subcommand(first, rest) : await cni();
}

if (import.meta.main) Deno.exit(await main(Deno.args));
