import { redactedJson } from "./errors.ts";
import { appendOwned } from "./owned.ts";
import { within } from "./timers.ts";

/** Log levels in increasing severity; `off` disables logging. */
export const LEVELS = ["debug", "info", "warn", "error", "off"] as const;

/** A log level. */
export type Level = typeof LEVELS[number];

/** Longest time one log write may take (a slow disk, or a FIFO nobody reads). */
export const LOG_WRITE_MS = 250;

/** Appends JSON lines to the configured log file; never writes to stdout. */
export class Logger {
  #file: string | undefined;
  #level: Level;

  constructor(file?: string, level: Level = "info") {
    this.#file = file;
    this.#level = level;
  }

  /** Points the logger at a file and level once the config is known. */
  configure(file: string, level: Level): void {
    this.#file = file;
    this.#level = level;
  }

  /**
   * Writes one JSON line if `level` passes the threshold, giving up after
   * `timeoutMs`; credentials are redacted; failures go to stderr only.
   */
  async write(
    level: Exclude<Level, "off">,
    record: Record<string, unknown>,
    timeoutMs = LOG_WRITE_MS,
  ): Promise<void> {
    if (!this.#file || LEVELS.indexOf(level) < LEVELS.indexOf(this.#level)) return;
    const entry = { ts: new Date().toISOString(), level, ...record };
    const line = redactedJson(entry) + "\n";
    const file = this.#file;
    const wrote = appendOwned(file, new TextEncoder().encode(line), 0o640)
      .then(() => undefined, (err) => err instanceof Error ? err.message : String(err));
    const failure = await within(wrote, timeoutMs, () => `timed out after ${timeoutMs} ms`);
    if (failure) console.error(`milo-ipam: cannot write log file ${file}: ${failure}`);
  }
}
