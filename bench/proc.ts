/** Processes the benchmark runs: spawning and timing them, their CPU time, memory and output. */
import { dirname } from "node:path";
import type { RunResult, TestPlugin } from "../testing/plugin.ts";
import { type Series, summarize } from "./model.ts";

/** Longest any one spawned process may run. */
const EXEC_TIMEOUT_MS = 30_000;
/** Kernel clock ticks per second of /proc's CPU times. */
const CLK_TCK = 100;

/** What one non-plugin process did. */
export interface Exec {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/** A process result of either kind. */
export type Ran = RunResult | Exec;

/** Spawns a process the way testing/plugin.ts does and times spawn → exit. */
export async function execTimed(
  path: string,
  args: string[],
  env: Record<string, string>,
  stdin: string,
): Promise<Exec> {
  const started = performance.now();
  const child = new Deno.Command(path, {
    args,
    env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(EXEC_TIMEOUT_MS),
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(stdin)).catch(() => {});
  await writer.close().catch(() => {});
  const out = await child.output();
  return {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
    ms: performance.now() - started,
  };
}

/** The environment plugin.run gives the plugin, for the processes the bench spawns itself. */
export function cniEnv(
  p: TestPlugin,
  command: string,
  containerId: string,
): Record<string, string> {
  const env: Record<string, string> = {
    PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
    CNI_COMMAND: command,
    CNI_IFNAME: "eth0",
    CNI_NETNS: "/var/run/netns/test",
    CNI_PATH: dirname(p.installed.path),
    CNI_ARGS:
      `IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=uid-${containerId}`,
    MILO_IPAM_CONFIG: p.nodeConfig,
  };
  if (containerId) env.CNI_CONTAINERID = containerId;
  return env;
}

/** HOME and DENO_DIR of this process, so a child `deno run` finds the module cache. */
export function denoEnv(): Record<string, string> {
  const out: Record<string, string> = { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" };
  for (const k of ["HOME", "DENO_DIR", "XDG_CACHE_HOME"]) {
    const v = Deno.env.get(k);
    if (v) out[k] = v;
  }
  return out;
}

/** A progress line on stderr. */
export function say(msg: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
}

/** A file's text, or "" when it cannot be read. */
export async function text(path: string): Promise<string> {
  return await Deno.readTextFile(path).catch(() => "");
}

/** The fields of /proc/PID/stat after "pid (comm)": index 0 is the state. */
async function statFields(pid: number | "self"): Promise<string[]> {
  return (await text(`/proc/${pid}/stat`)).split(") ")[1]?.split(" ") ?? [];
}

/** CPU time (ms) of this process's reaped children: every process the bench ran and awaited. */
export async function childrenCpuMs(): Promise<number> {
  const f = await statFields("self");
  return ((Number(f[13] ?? 0) + Number(f[14] ?? 0)) * 1000) / CLK_TCK;
}

/** CPU time (ms, user + system, all threads) of a running process. */
export async function processCpuMs(pid: number): Promise<number> {
  const f = await statFields(pid);
  return ((Number(f[11] ?? 0) + Number(f[12] ?? 0)) * 1000) / CLK_TCK;
}

/** Resident set size (KiB) of a running process. */
export async function rssKiB(pid: number): Promise<number> {
  return Number(/VmRSS:\s+(\d+)/.exec(await text(`/proc/${pid}/status`))?.[1] ?? NaN);
}

/** Pids of this process's running children whose argv `match` accepts. */
export async function childPids(match: (argv: string[]) => boolean): Promise<number[]> {
  const out: number[] = [];
  for await (const e of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    if (Number((await statFields(Number(e.name)))[1]) !== Deno.pid) continue;
    const argv = (await text(`/proc/${e.name}/cmdline`)).split("\0").filter(Boolean);
    if (match(argv)) out.push(Number(e.name));
  }
  return out;
}

/** CPU time (ms) of the milo-dev processes the bench started. */
export async function serverCpuMs(): Promise<number> {
  let sum = 0;
  const pids = await childPids((argv) => argv.some((a) => a.endsWith("milo-dev/main.ts")));
  for (const pid of pids) sum += await processCpuMs(pid);
  return sum;
}

/** Runs `fn` over indexes 0..n-1 with at most `limit` in flight. */
export async function pool<T>(
  n: number,
  limit: number,
  fn: (i: number) => Promise<T>,
): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, n) }, worker));
  return out;
}

/** Whether a process exited 0. */
export function ok(r: Ran): boolean {
  return r.code === 0;
}

/** A call's outcome as a CNI code: "0" on success, else the error's `code` ("none" without one). */
export function cniCode(r: Ran): string {
  if (ok(r)) return "0";
  try {
    const code = JSON.parse(r.stdout).code;
    return typeof code === "number" ? String(code) : "none";
  } catch {
    return "none";
  }
}

/** The exit code and the start of the output, for error messages. */
export function brief(r: Ran): string {
  return `exit ${r.code}: ${(r.stdout + r.stderr).slice(0, 400)}`;
}

/** Runs processes and collects their wall time and CPU per series; drops warm-up rounds. */
export class Recorder {
  readonly #ms = new Map<string, number[]>();
  readonly #cpu = new Map<string, number[]>();
  readonly #fail = new Map<string, number>();
  readonly #labels = new Map<string, string>();
  readonly #warmup: number;

  constructor(warmup: number) {
    this.#warmup = warmup;
  }

  /** Runs one sample; the first round's failure aborts the bench. */
  async run<R extends Ran>(key: string, label: string, round: number, fn: () => Promise<R>) {
    const c0 = await childrenCpuMs();
    const r = await fn();
    const cpu = (await childrenCpuMs()) - c0;
    this.#labels.set(key, label);
    if (!ok(r) && round === 0) throw new Error(`${label} failed: ${brief(r)}`);
    if (round < this.#warmup) return r;
    if (!ok(r)) this.#fail.set(key, (this.#fail.get(key) ?? 0) + 1);
    else {
      this.#ms.set(key, [...(this.#ms.get(key) ?? []), r.ms]);
      this.#cpu.set(key, [...(this.#cpu.get(key) ?? []), cpu]);
    }
    return r;
  }

  /** Every series recorded, in first-run order. */
  series(): Series[] {
    return [...this.#labels.entries()].map(([key, label]) => {
      const cpu = this.#cpu.get(key) ?? [];
      return {
        key,
        label,
        summary: summarize(this.#ms.get(key) ?? []),
        failures: this.#fail.get(key) ?? 0,
        cpuMs: cpu.reduce((x, y) => x + y, 0) / (cpu.length || 1),
      };
    });
  }
}

/** Runs `x` then `y`, or `y` then `x` on odd rounds, so that noise hits both alike. */
export async function alternate(
  round: number,
  x: () => Promise<unknown>,
  y: () => Promise<unknown>,
): Promise<void> {
  if (round % 2) {
    await y();
    await x();
  } else {
    await x();
    await y();
  }
}
