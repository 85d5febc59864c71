import { errorText } from "./errors.ts";
import { redactedJson } from "./redact.ts";
import { appendOwned } from "./owned.ts";
import { within } from "./timers.ts";

/** Log levels in increasing severity; `off` disables logging. */
export const LEVELS = ["debug", "info", "warn", "error", "off"] as const;

/** A log level. */
export type Level = typeof LEVELS[number];

/** Longest time one log write may take (a slow disk, or a FIFO nobody reads). */
export const LOG_WRITE_MS = 250;

/**
 * Size at which the log file is rotated: renamed to `FILE.1` (replacing the
 * one before), so the log takes at most about twice this on the node.
 */
export const LOG_ROTATE_BYTES = 8 * 1024 * 1024;

/** The file a rotated log is renamed to (the install grants writing it). */
export function rotatedLog(file: string): string {
  return `${file}.1`;
}

/** Options of a {@link Logger}. */
export interface LoggerOptions {
  /** Also writes every record written to the file to stdout (the agent: `kubectl logs`). */
  stdout?: boolean;
  /** Size at which the file is rotated ({@link LOG_ROTATE_BYTES}). */
  rotateBytes?: number;
}

/**
 * Appends JSON lines to the configured log file, rotated at
 * {@link LOG_ROTATE_BYTES}; a CNI call never writes to stdout, the agent
 * (`stdout`) writes the same lines there too.
 */
export class Logger {
  #file: string | undefined;
  #level: Level;
  readonly #o: LoggerOptions;

  constructor(file?: string, level: Level = "info", o: LoggerOptions = {}) {
    this.#file = file;
    this.#level = level;
    this.#o = o;
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
    const bytes = new TextEncoder().encode(redactedJson(entry) + "\n");
    if (this.#o.stdout) {
      try {
        Deno.stdout.writeSync(bytes);
      } catch {
        // A closed stdout loses the copy, never the file's line.
      }
    }
    const file = this.#file;
    const max = this.#o.rotateBytes ?? LOG_ROTATE_BYTES;
    const wrote = appendOwned(file, bytes, 0o640)
      .then((at) => at.size >= max ? rotate(file, at.ino) : undefined)
      .then(() => undefined, (err) => errorText(err));
    const failure = await within(wrote, timeoutMs, () => `timed out after ${timeoutMs} ms`);
    if (failure) console.error(`milo-ipam: cannot write log file ${file}: ${failure}`);
  }
}

/**
 * Renames the log to {@link rotatedLog} while it is still the file this
 * process wrote (inode `ino`): of processes that filled it at once, one
 * renames it and the others find another file there and leave it.
 */
async function rotate(file: string, ino: number | null): Promise<void> {
  const now = await Deno.lstat(file).catch(() => null);
  if (!now?.isFile || now.ino !== ino) return;
  await Deno.rename(file, rotatedLog(file));
}
