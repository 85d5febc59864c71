/**
 * `milo-ipam agent` on one node, started as a DaemonSet starts it: the
 * node's installed executable with the `agent` argument, inside the node's
 * namespace; ready when it says it listens and its socket exists.
 */
import { execIn } from "./netns.ts";
import type { NodeInstall } from "./nodes.ts";

const READY_TIMEOUT_MS = 30_000;
const STDERR_TAIL = 10_000;
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** The agent process of one node. */
export class NodeAgent {
  readonly #inst: NodeInstall;
  readonly #ns: string;
  #child?: Deno.ChildProcess;
  #stderr = "";
  /** How many times it was started. */
  starts = 0;

  constructor(inst: NodeInstall, ns: string) {
    if (!inst.socket) throw new Error(`${inst.node}: the node config has no agent socket`);
    this.#inst = inst;
    this.#ns = ns;
  }

  /** Whether the process runs (started and not yet killed). */
  get running(): boolean {
    return this.#child !== undefined;
  }

  /** The last lines it wrote to stderr. */
  stderrTail(): string {
    return this.#stderr;
  }

  /** Starts the agent and waits until it listens on its socket. */
  async start(): Promise<void> {
    if (this.#child) throw new Error(`${this.#inst.node}: the agent runs already`);
    const child = new Deno.Command("ip", {
      args: ["netns", "exec", this.#ns, this.#inst.bin, "agent"],
      env: { PATH, NODE_NAME: this.#inst.node },
      clearEnv: true,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    this.#child = child;
    this.starts++;
    const { promise: listening, resolve } = Promise.withResolvers<boolean>();
    this.#stderr = "";
    (async () => {
      try {
        for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
          this.#stderr = (this.#stderr + chunk).slice(-STDERR_TAIL);
          if (this.#stderr.includes("listening on")) resolve(true);
        }
      } catch { /* closed */ }
      resolve(false);
    })();
    const timer = setTimeout(() => resolve(false), READY_TIMEOUT_MS);
    const ok = await listening.finally(() => clearTimeout(timer));
    const isSocket = await Deno.lstat(this.#inst.socket!).then((s) => s.isSocket, () => false);
    if (ok && isSocket) return;
    await this.kill("SIGKILL");
    throw new Error(
      `${this.#inst.node}: the agent did not listen on ${this.#inst.socket} within ` +
        `${READY_TIMEOUT_MS} ms: ${this.#stderr}`,
    );
  }

  /** Sends `signal` (the agent itself: `ip netns exec` and the launcher exec it) and waits. */
  async kill(signal: Deno.Signal = "SIGTERM"): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child) return;
    try {
      child.kill(signal);
    } catch { /* gone */ }
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 40_000);
    await child.status;
    clearTimeout(timer);
  }

  /** `GET /metrics` from inside the node's namespace (the metrics port is on its loopback). */
  async metrics(): Promise<string> {
    if (!this.#inst.metrics) throw new Error(`${this.#inst.node}: no agent.metrics configured`);
    const url = `http://${this.#inst.metrics}/metrics`;
    const r = await execIn(this.#ns, Deno.execPath(), [
      "eval",
      `const r = await fetch(${JSON.stringify(url)}); ` +
      `if (!r.ok) Deno.exit(1); console.log(await r.text());`,
    ], { env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" }, timeoutMs: 30_000 });
    if (r.code !== 0) throw new Error(`GET ${url} in ${this.#ns}: ${r.stderr || r.stdout}`);
    return r.stdout;
  }
}

/** The value of a counter series in Prometheus text, e.g. `milo_ipam_calls_total{verb="ADD",code="0"}`. */
export function metricValue(text: string, series: string): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith(series + " ")) return Number(line.slice(series.length + 1));
  }
  return undefined;
}
