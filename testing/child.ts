/** The milo-dev child process: spawn (under an optional prefix), ready line, stderr tail, exit. */

import { parseHostPort } from "../milo-dev/server.ts";

const MAIN = new URL("../milo-dev/main.ts", import.meta.url).pathname;
const ROOT = new URL("../", import.meta.url).pathname;
const READY_TIMEOUT_MS = 30_000;
const EXIT_TIMEOUT_MS = 10_000;
const STDERR_TAIL = 20_000;

/** The URLs of the ready line. */
export interface Ready {
  url: string;
  admin: string;
}

/** How the child is run; `listen` and `admin` get the bound ports after the first start. */
export interface ChildConfig {
  prefix: string[];
  seedPath: string;
  dbPath: string;
  listen: string;
  admin: string;
  /** Arguments appended to milo-dev's command line (TLS, limits). */
  extraArgs: string[];
}

/** The milo-dev process. */
export class Child {
  readonly config: ChildConfig;
  #process?: Deno.ChildProcess;
  #stderr = "";
  #stderrDone: Promise<void> = Promise.resolve();

  constructor(config: ChildConfig) {
    this.config = config;
  }

  /** Whether a process is up (started and not yet seen to exit). */
  get running(): boolean {
    return this.#process !== undefined;
  }

  /** The last 20,000 characters of its stderr. */
  stderrTail(): string {
    return this.#stderr;
  }

  /** Spawns and waits for the ready line; retries while the port is still taken. */
  async start(): Promise<Ready> {
    for (let attempt = 1;; attempt++) {
      try {
        const ready = await this.#spawn();
        // Later starts bind the ports this one got.
        this.config.listen = withPort(this.config.listen, new URL(ready.url).port);
        this.config.admin = withPort(this.config.admin, new URL(ready.admin).port);
        return ready;
      } catch (err) {
        if (attempt >= 20 || !/in use|AddrInUse/i.test(String(err))) throw err;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  async #spawn(): Promise<Ready> {
    const c = this.config;
    const deno = [Deno.execPath(), "run", "--allow-all", MAIN];
    const [cmd, ...args] = [...c.prefix, ...deno];
    const flags = [
      "--seed",
      c.seedPath,
      "--db",
      c.dbPath,
      "--listen",
      c.listen,
      "--admin",
      c.admin,
    ];
    const child = new Deno.Command(cmd, {
      args: [...args, ...flags, ...c.extraArgs],
      cwd: ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
    }).spawn();
    this.#process = child;
    this.#stderr = "";
    const verbose = Boolean(Deno.env.get("MILO_DEV_VERBOSE"));
    this.#stderrDone = eachLine(child.stderr, (l) => {
      this.#stderr = (this.#stderr + l + "\n").slice(-STDERR_TAIL);
      if (verbose) console.error(l);
    });
    const { promise, resolve, reject } = Promise.withResolvers<Ready>();
    const timer = setTimeout(
      () => reject(new Error(`milo-dev not ready within ${READY_TIMEOUT_MS} ms`)),
      READY_TIMEOUT_MS,
    );
    // Read stdout to its end so the child never blocks on a full pipe.
    eachLine(child.stdout, (l) => {
      const msg = parseLine(l);
      if (msg?.ready) resolve({ url: String(msg.url), admin: String(msg.admin) });
    }).then(() => reject(new Error("milo-dev exited before it was ready")));
    try {
      return await promise;
    } catch (err) {
      await this.signal("SIGKILL");
      throw new Error(`${(err as Error).message}\n${this.#stderr}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sends `sig` and waits for the exit (SIGKILL after 10 s) and the last stderr. */
  async signal(sig: Deno.Signal): Promise<void> {
    const child = this.#process;
    if (!child) return;
    try {
      child.kill(sig);
    } catch { /* already gone */ }
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, EXIT_TIMEOUT_MS);
    await child.status;
    clearTimeout(timer);
    await this.#stderrDone;
    this.#process = undefined;
  }
}

/** `addr` (`HOST:PORT`, `[v6]:PORT`) with another port. */
function withPort(addr: string, port: string): string {
  const { host } = parseHostPort(addr);
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

function parseLine(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** Calls `fn` for each complete line of `stream` until it ends. */
export async function eachLine(
  stream: ReadableStream<Uint8Array>,
  fn: (line: string) => void,
): Promise<void> {
  let buf = "";
  try {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
        fn(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    }
  } catch { /* closed */ }
}

/**
 * Reads `stream` until its text contains `needle` (true) or it ends or
 * `timeoutMs` passes (false), then keeps draining it in the background so the
 * child never blocks on a full pipe. Answers what was read.
 */
export async function waitForText(
  stream: ReadableStream<Uint8Array>,
  needle: string,
  timeoutMs: number,
): Promise<{ found: boolean; said: string }> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  const timer = setTimeout(() => reader.cancel(), timeoutMs);
  let said = "";
  try {
    while (!said.includes(needle)) {
      const { value, done } = await reader.read();
      if (done) break;
      said += value;
    }
  } catch {
    /* cancelled */
  } finally {
    clearTimeout(timer);
  }
  (async () => {
    while (!(await reader.read().catch(() => ({ done: true }))).done) { /* drain */ }
  })();
  return { found: said.includes(needle), said };
}
