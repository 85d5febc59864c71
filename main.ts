/**
 * milo-ipam: the CNI IPAM plugin (exec'd with CNI_COMMAND), and its
 * subcommands `agent`, `reconcile`, `sweep`, `show`, `release`, `decommission`
 * and `version`. Modules
 * load only on the path that needs them: a call the node agent answers
 * imports the socket client alone, and the handlers, the Milo client and zod
 * load only when the plugin does the work itself.
 */
import { installed } from "./lib/paths.ts";
import { callAgent } from "./lib/thin.ts";
import { readStdinBytes } from "./lib/stdin.ts";
import { warmTlsCrypto } from "./lib/warm.ts";

/** When this process started (ms since epoch): the CNI deadline counts from here. */
const STARTED = performance.timeOrigin;

/** A subcommand: its entry point and its `--help` text. */
interface Subcommand {
  cli(args: string[]): Promise<number>;
  usage: string;
}

const SUBCOMMANDS: Record<string, () => Promise<Subcommand>> = {
  agent: async () => ({
    cli: (await import("./lib/agent_cli.ts")).agentCli,
    usage: (await import("./lib/usage.ts")).AGENT_USAGE,
  }),
  reconcile: async () => ({
    cli: (await import("./lib/reconcile_cli.ts")).reconcileCli,
    usage: (await import("./lib/usage.ts")).RECONCILE_USAGE,
  }),
  sweep: async () => {
    const [{ sweepCli, parseSweepArgs, USAGE }, { sweepUsage }] = await Promise.all([
      import("./lib/sweep_cli.ts"),
      import("./lib/usage.ts"),
    ]);
    return {
      cli: (args) => {
        // A wrong command line is a usage error (exit 2) before any report is made.
        parseSweepArgs(args);
        return sweepCli(args);
      },
      usage: sweepUsage(USAGE),
    };
  },
  show: async () => ({
    cli: (await import("./lib/show.ts")).showCli,
    usage: (await import("./lib/usage.ts")).SHOW_USAGE,
  }),
  release: async () => ({
    cli: (await import("./lib/release_cli.ts")).releaseCli,
    usage: (await import("./lib/usage.ts")).RELEASE_USAGE,
  }),
  decommission: async () => ({
    cli: (await import("./lib/decommission_cli.ts")).decommissionCli,
    usage: (await import("./lib/usage.ts")).DECOMMISSION_USAGE,
  }),
  version: async () => ({
    cli: (await import("./lib/version_cli.ts")).versionCli,
    usage: (await import("./lib/usage.ts")).VERSION_USAGE,
  }),
};

function write(text: string): void {
  if (text) Deno.stdout.writeSync(new TextEncoder().encode(text));
}

/**
 * Runs a subcommand: `--help` prints its usage (exit 0), a wrong command line
 * its usage on stderr (exit 2); any other failure prints a CNI error JSON
 * like the verbs do (exit 1).
 */
async function subcommand(name: string, args: string[]): Promise<number> {
  const [cmd, { wantsHelp, print, usageError }] = await Promise.all([
    SUBCOMMANDS[name](),
    import("./lib/cli.ts"),
  ]);
  if (wantsHelp(args)) {
    print("stdout", cmd.usage);
    return 0;
  }
  try {
    return await cmd.cli(args);
  } catch (err) {
    const [{ encodeError, LATEST_VERSION }, { toCniError, UsageError }] = await Promise.all([
      import("./lib/cni.ts"),
      import("./lib/errors.ts"),
    ]);
    if (err instanceof UsageError) {
      return usageError(`milo-ipam ${name}`, err.details || "wrong command line", cmd.usage).exit;
    }
    write(JSON.stringify(encodeError(LATEST_VERSION, toCniError(err))) + "\n");
    return 1;
  }
}

/** `milo-ipam` run by hand: `--help` and `help` print the usage; anything else is wrong. */
async function byHand(args: string[]): Promise<number> {
  const [{ MAIN_USAGE }, { print, usageError }] = await Promise.all([
    import("./lib/usage.ts"),
    import("./lib/cli.ts"),
  ]);
  if (args.length === 1 && ["--help", "-h", "help"].includes(args[0])) {
    print("stdout", MAIN_USAGE);
    return 0;
  }
  const what = args[0].startsWith("-") ? "unknown flag" : "unknown command";
  return usageError("milo-ipam", `${what} ${JSON.stringify(args[0])}`, MAIN_USAGE).exit;
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
  if (first && Object.hasOwn(SUBCOMMANDS, first)) return await subcommand(first, rest);
  if (args.length && !Deno.env.get("CNI_COMMAND")) return await byHand(args);
  return await cni();
}

if (import.meta.main) Deno.exit(await main(Deno.args));
