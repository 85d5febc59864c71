/**
 * The exec'd plugin doing the work itself: read stdin, run the invocation,
 * print exactly one JSON document, append the log line, answer the exit code.
 */
import { encodeError, LATEST_VERSION } from "./cni.ts";
import { readNodeConfig } from "./config_file.ts";
import { CniError } from "./errors.ts";
import { invoke, type Reply } from "./invoke.ts";
import { Logger } from "./log.ts";
import { appendOwned } from "./owned.ts";
import { MiloClient } from "./milo.ts";
import { type Timer, timer, WATCHDOG_GRACE_MS } from "./timers.ts";

/**
 * The watchdog's deadline before the node config is read, when the thin
 * client could not read its `totalMs` either: the largest `totalMs` allowed.
 */
const UNCONFIGURED_TOTAL_MS = 300_000;

/** Stdout that takes one JSON document per process and ignores any later one. */
export class Stdout {
  #code: number | undefined;

  /** The exit code of what was printed, or undefined before anything was. */
  get code(): number | undefined {
    return this.#code;
  }

  /** Prints `value` (nothing for undefined) unless something was printed already. */
  print(value: Record<string, unknown> | undefined, code: number): void {
    if (this.#code !== undefined) return;
    this.#code = code;
    if (value) Deno.stdout.writeSync(new TextEncoder().encode(JSON.stringify(value) + "\n"));
  }
}

/**
 * Ends the process when the invocation outlives its deadline: with code 11
 * when nothing was printed yet, else with the code of what was printed.
 */
export class Watchdog {
  #timer: Timer | undefined;
  #version = LATEST_VERSION;
  readonly #out: Stdout;

  constructor(out: Stdout, deadline: number) {
    this.#out = out;
    this.arm(deadline);
  }

  /** Moves the deadline (ms since epoch); `cniVersion` is the version of the error printed. */
  arm(deadline: number, cniVersion?: string, totalMs?: number): void {
    if (cniVersion) this.#version = cniVersion;
    this.#timer?.cancel();
    const t = timer(deadline + WATCHDOG_GRACE_MS - Date.now());
    t.done.then(() => {
      const e = new CniError(
        "transient",
        "invocation exceeded timeouts.totalMs",
        totalMs ? `${totalMs} ms since the process started` : "deadline passed",
      );
      this.#out.print(encodeError(this.#version, e), 1);
      Deno.exit(this.#out.code ?? 1);
    });
    this.#timer = t;
  }

  /** Stops watching. */
  disarm(): void {
    this.#timer?.cancel();
  }
}

/** File in the state directory that grows by one byte per counted fallback (the agent reads its size). */
export const FALLBACK_COUNTER = "agent-fallbacks";

/** Why this process did the work itself although an agent was expected. */
export interface Fallback {
  reason: string;
  counted: boolean;
  /** The node config's `totalMs` as the thin client read it (lib/thin.ts), not yet validated. */
  totalMs?: number;
}

/** Appends the invocation's log line(s), bounded in time. */
async function writeLog(reply: Reply, fallback?: Fallback): Promise<void> {
  if (!reply.node) return;
  const logger = new Logger(reply.node.log.file, reply.node.log.level);
  if (reply.node.warning) await logger.write("warn", { msg: reply.node.warning });
  const via = fallback ? { via: "direct", fallback: fallback.reason } : { via: "direct" };
  // Two sandboxes on one address are an error in the log even when the call succeeded.
  const bad = reply.exitCode !== 0 || reply.record.duplicates !== undefined;
  await logger.write(bad ? "error" : "info", { ...reply.record, ...via });
}

/** Counts a fallback for the agent's metrics: one byte appended to the counter file. */
async function countFallback(stateDir: string): Promise<void> {
  await appendOwned(`${stateDir}/${FALLBACK_COUNTER}`, new Uint8Array([0x2e]), 0o644)
    .catch(() => {});
}

/**
 * Runs one CNI invocation in this process and returns the exit code; `stdin`
 * is what the caller read (`main.ts`, before it asked the agent).
 */
export async function runPlugin(
  started: number,
  stdin: Uint8Array,
  fallback?: Fallback,
): Promise<number> {
  const out = new Stdout();
  // The node's totalMs bounds the call from the start (a network may only lower it): the
  // watchdog holds it before the network config on stdin is parsed, whatever that config is.
  const watchdog = new Watchdog(out, started + (fallback?.totalMs ?? UNCONFIGURED_TOTAL_MS));
  const env = (name: string) => Deno.env.get(name);
  const reply = await invoke({ env, stdin, started }, {
    nodeConfig: () => readNodeConfig(env),
    openMilo: MiloClient.open,
    onBound: (deadline) => watchdog.arm(deadline, undefined, deadline - started),
    onDeadline: (deadline, v) => watchdog.arm(deadline, v, deadline - started),
  });
  out.print(reply.stdout, reply.exitCode);
  if (fallback?.counted && reply.node) await countFallback(reply.node.stateDir);
  await writeLog(reply, fallback);
  watchdog.disarm();
  return reply.exitCode;
}
