/**
 * The command lines of every command and task: `--help` prints the usage on
 * stdout (exit 0); an unknown flag, a missing value or a stray argument prints
 * what is wrong and the usage on stderr (exit 2).
 */
import { parseArgs, type ParseArgsConfig, type ParseArgsOptionsConfig } from "node:util";
import { errorText, UsageError } from "./errors.ts";

/** A command's usage text and its flags (node:util parseArgs options). */
export interface CommandLine {
  /** What `--help` prints: the usage line(s), then one line per flag. */
  usage: string;
  options: NonNullable<ParseArgsConfig["options"]>;
  /** Whether plain arguments are allowed (default none). */
  positionals?: boolean;
}

/** The exit code of a command line that asks for help (0) or is wrong (2). */
export const USAGE_EXIT = { help: 0, wrong: 2 } as const;

/** True when `args` asks for help: `--help` or `-h` before any `--`. */
export function wantsHelp(args: string[]): boolean {
  for (const a of args) {
    if (a === "--") return false;
    if (a === "--help" || a === "-h") return true;
  }
  return false;
}

/** What {@link parseCommandLine} found: the values, or the exit code the usage was printed with. */
export type Parsed =
  | { values: Record<string, unknown>; positionals: string[] }
  | { exit: number };

/** Writes `text` to stdout or stderr, with one trailing newline. */
export function print(to: "stdout" | "stderr", text: string): void {
  const out = to === "stdout" ? Deno.stdout : Deno.stderr;
  out.writeSync(new TextEncoder().encode(text.endsWith("\n") ? text : `${text}\n`));
}

/**
 * Parses `args` against `cmd`: help on stdout (exit 0) when asked, the error
 * and the usage on stderr (exit 2) for an unknown flag, a flag without its
 * value or an argument the command does not take.
 */
export function parseCommandLine(name: string, args: string[], cmd: CommandLine): Parsed {
  if (wantsHelp(args)) {
    print("stdout", cmd.usage);
    return { exit: USAGE_EXIT.help };
  }
  try {
    const { values, positionals } = parseArgs({
      args,
      options: cmd.options,
      strict: true,
      allowPositionals: cmd.positionals ?? false,
    });
    return { values, positionals };
  } catch (err) {
    return usageError(name, err instanceof Error ? err.message : String(err), cmd.usage);
  }
}

/**
 * The flags of a command whose wrong command line is a config error: `args`
 * parsed against `options` (strict, no plain arguments); an unknown flag or a
 * missing value throws `usage` with what is wrong.
 */
export function parseFlags<O extends ParseArgsOptionsConfig>(
  args: string[],
  usage: string,
  options: O,
) {
  try {
    return parseArgs({ args, options }).values;
  } catch (err) {
    throw new UsageError(usage, errorText(err));
  }
}

/** Prints `why` and the usage on stderr; answers exit 2. */
export function usageError(name: string, why: string, usage: string): { exit: number } {
  print("stderr", `${name}: ${why}\n\n${usage}`);
  return { exit: USAGE_EXIT.wrong };
}
