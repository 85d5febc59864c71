/** Log levels in increasing severity; `off` disables logging. */
export const LEVELS = ["debug", "info", "warn", "error", "off"] as const;

/** A log level. */
export type Level = typeof LEVELS[number];

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

  /** Writes one JSON line if `level` passes the threshold; failures go to stderr only. */
  async write(level: Exclude<Level, "off">, record: Record<string, unknown>): Promise<void> {
    if (!this.#file || LEVELS.indexOf(level) < LEVELS.indexOf(this.#level)) return;
    const line = JSON.stringify({ ts: new Date().toISOString(), level, ...record }) + "\n";
    try {
      await Deno.writeTextFile(this.#file, line, { append: true, create: true, mode: 0o640 });
    } catch (err) {
      console.error(
        `milo-ipam: cannot write log file ${this.#file}: ${
          err instanceof Error ? err.message : err
        }`,
      );
    }
  }
}
