/** The machine the bench runs on, how busy it is, and Debian's host-local for comparison. */
import type { BenchResults, Machine } from "./model.ts";
import { execTimed, say, text } from "./proc.ts";

/** Debian's host-local IPAM plugin. */
export const HOST_LOCAL = "/usr/lib/cni/host-local";

/** CPU, memory, kernel, OS and the load average now. */
export async function machine(): Promise<Machine> {
  const cpuinfo = await text("/proc/cpuinfo");
  const kib = Number(/MemTotal:\s+(\d+)/.exec(await text("/proc/meminfo"))?.[1] ?? NaN);
  const osRelease = await text("/etc/os-release");
  return {
    nproc: navigator.hardwareConcurrency,
    memory: Number.isFinite(kib) ? `${(kib / 1024 / 1024).toFixed(1)} GiB` : "unknown",
    kernel: Deno.osRelease(),
    cpu: /model name\s*:\s*(.+)/.exec(cpuinfo)?.[1]?.trim() ?? "unknown",
    os: /PRETTY_NAME="?([^"\n]+)"?/.exec(osRelease)?.[1] ?? Deno.build.os,
    loadBefore: (await text("/proc/loadavg")).trim(),
    loadAfter: "",
  };
}

/** host-local's path and package version, or null when it is not installed. */
export async function hostLocalVersion(): Promise<BenchResults["hostLocal"]> {
  try {
    await Deno.stat(HOST_LOCAL);
  } catch {
    say(`${HOST_LOCAL} missing: apt-get install -y containernetworking-plugins; skipping it`);
    return null;
  }
  const r = await execTimed(HOST_LOCAL, [], { CNI_COMMAND: "VERSION" }, "{}").catch(() => null);
  const pkg = await new Deno.Command("dpkg-query", {
    args: ["-W", "-f=${Version}", "containernetworking-plugins"],
    stdout: "piped",
    stderr: "null",
  }).output().then((o) => new TextDecoder().decode(o.stdout)).catch(() => "");
  const line = (r?.stderr || r?.stdout || "").split("\n")[0];
  return { path: HOST_LOCAL, version: pkg ? `containernetworking-plugins ${pkg}` : line };
}

/** Machine-wide CPU jiffies (busy, total) and this process tree's own (self + reaped children). */
export interface CpuSnap {
  busy: number;
  total: number;
  own: number;
}

/** The CPU counters now. */
export async function cpuSnap(): Promise<CpuSnap> {
  const stat = (await text("/proc/stat")).split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const total = stat.reduce((x, y) => x + y, 0);
  const idle = (stat[3] ?? 0) + (stat[4] ?? 0);
  const self = (await text("/proc/self/stat")).split(") ")[1]?.split(" ") ?? [];
  // utime stime cutime cstime, counted after "pid (comm)".
  const own = [11, 12, 13, 14].reduce((sum, i) => sum + Number(self[i] ?? 0), 0);
  return { busy: total - idle, total, own };
}

/** Waits (bounded) until the CPUs are mostly idle; returns the last idle share seen. */
export async function waitForQuiet(maxS: number): Promise<{ idle: number; waitedS: number }> {
  const t0 = performance.now();
  let idle = NaN;
  for (let i = 0; i < 1_000; i++) {
    const a = await cpuSnap();
    await new Promise((r) => setTimeout(r, maxS > 0 ? 2_000 : 500));
    const b = await cpuSnap();
    idle = 1 - (b.busy - a.busy) / Math.max(1, b.total - a.total);
    const waited = (performance.now() - t0) / 1000;
    if (idle >= 0.8 || waited >= maxS) return { idle, waitedS: waited };
    if (i === 0) say(`machine busy (${((1 - idle) * 100).toFixed(0)}% CPU): waiting ≤ ${maxS} s`);
  }
  return { idle, waitedS: (performance.now() - t0) / 1000 };
}

/** Machine-wide busy share and the bench's own share of it between two snapshots (%). */
export function contention(a: CpuSnap, b: CpuSnap): { busyPct: number; ownPct: number } {
  const busy = b.busy - a.busy;
  return {
    busyPct: (busy / Math.max(1, b.total - a.total)) * 100,
    ownPct: Math.min(100, ((b.own - a.own) / Math.max(1, busy)) * 100),
  };
}
