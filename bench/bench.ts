/**
 * milo-ipam benchmark: the installed plugin as a runtime experiences it.
 *
 *   deno task bench            full run, writes bench/results/<date>.{md,svg,json}
 *   deno task bench --quick    CI smoke: few samples, writes .tmp/bench/ (no assertions)
 *   deno task bench --out DIR  write the report elsewhere
 *
 * Everything runs on 127.0.0.1: milo-dev (TLS, and a plain-HTTP twin for the
 * TLS comparison), the plugin installed by scripts/install.ts (launcher or
 * compiled binary, with its permission flags), Debian's host-local, and a bare
 * `deno run` of an empty script with the plugin's flags. Each sample is one
 * process, exec to exit. Series that are compared are interleaved in one loop
 * (A/B alternating) so that machine noise hits them alike.
 */
import { parseArgs } from "node:util";
import { dirname, join } from "node:path";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type RunResult, type TestPlugin } from "../testing/plugin.ts";
import { launcherScript } from "../scripts/install.ts";
import { renderChart } from "./chart.ts";
import {
  type BenchResults,
  median,
  type RequestCount,
  type RssRow,
  type Series,
  summarize,
  type SweepPoint,
} from "./model.ts";
import type { PhaseSample } from "./phases.ts";
import { renderReport } from "./report.ts";
import { BENCH_CLASSES, BENCH_SEED, BENCH_TOKEN } from "./seed.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const HOST_LOCAL = "/usr/lib/cni/host-local";
const GNU_TIME = "/usr/bin/time";
const LEVELS = [1, 8, 32, 64];
const EXEC_TIMEOUT_MS = 30_000;

interface Plan {
  quick: boolean;
  warmup: number;
  samples: number;
  startupSamples: number;
  phaseSamples: number;
  probeRounds: number;
  rssSamples: number;
  sweepN: (level: number) => number;
  /** Longest wait for an idle machine before measuring (s). */
  quietWaitS: number;
  /** Whole-run time budget (s): later sections are cut short past it. */
  budgetS: number;
}

const FULL: Plan = {
  quick: false,
  warmup: 10,
  samples: 200,
  startupSamples: 60,
  phaseSamples: 30,
  probeRounds: 15,
  rssSamples: 20,
  sweepN: (level) => (level === 1 ? 100 : 200),
  quietWaitS: 300,
  budgetS: 3_600,
};

const QUICK: Plan = {
  quick: true,
  warmup: 1,
  samples: 6,
  startupSamples: 3,
  phaseSamples: 1,
  probeRounds: 1,
  rssSamples: 1,
  sweepN: (level) => (level === 1 ? 4 : level),
  quietWaitS: 0,
  budgetS: 80,
};

/** What one non-plugin process did. */
interface Exec {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Spawns a process the way testing/plugin.ts does and times spawn → exit. */
async function execTimed(
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

/** The environment plugin.run gives the plugin, for the processes bench.ts spawns itself. */
function cniEnv(
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

const CLK_TCK = 100;

/** CPU time (ms) of this process's reaped children: every process bench.ts ran and awaited. */
async function childrenCpuMs(): Promise<number> {
  const f = (await text("/proc/self/stat")).split(") ")[1]?.split(" ") ?? [];
  // cutime and cstime: fields 16 and 17 of /proc/PID/stat.
  return ((Number(f[13] ?? 0) + Number(f[14] ?? 0)) * 1000) / CLK_TCK;
}

/** CPU time (ms) of the milo-dev processes bench.ts started (children still running). */
async function serverCpuMs(): Promise<number> {
  let sum = 0;
  for await (const e of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    const stat = await text(`/proc/${e.name}/stat`);
    const f = stat.split(") ")[1]?.split(" ") ?? [];
    if (Number(f[1]) !== Deno.pid) continue;
    if (!(await text(`/proc/${e.name}/cmdline`)).includes("milo-dev/main.ts")) continue;
    sum += ((Number(f[11] ?? 0) + Number(f[12] ?? 0)) * 1000) / CLK_TCK;
  }
  return sum;
}

/** Runs processes and collects their wall time and CPU per series; drops warm-up rounds. */
class Recorder {
  #ms = new Map<string, number[]>();
  #cpu = new Map<string, number[]>();
  #fail = new Map<string, number>();
  #labels = new Map<string, string>();
  constructor(private readonly warmup: number) {}
  async run<R extends RunResult | Exec>(
    key: string,
    label: string,
    round: number,
    fn: () => Promise<R>,
  ): Promise<R> {
    const c0 = await childrenCpuMs();
    const r = await fn();
    const cpu = (await childrenCpuMs()) - c0;
    this.#labels.set(key, label);
    if (!ok(r) && round === 0) throw new Error(`${label} failed: ${brief(r)}`);
    if (round < this.warmup) return r;
    if (!ok(r)) this.#fail.set(key, (this.#fail.get(key) ?? 0) + 1);
    else {
      this.#ms.set(key, [...(this.#ms.get(key) ?? []), r.ms]);
      this.#cpu.set(key, [...(this.#cpu.get(key) ?? []), cpu]);
    }
    return r;
  }
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

/** HOME and DENO_DIR of this process, so a child `deno run` finds the module cache. */
function denoEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of ["HOME", "DENO_DIR", "XDG_CACHE_HOME"]) {
    const v = Deno.env.get(k);
    if (v) out[k] = v;
  }
  return out;
}

function say(msg: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
}

async function text(path: string): Promise<string> {
  return await Deno.readTextFile(path).catch(() => "");
}

async function machine(): Promise<BenchResults["machine"]> {
  const cpuinfo = await text("/proc/cpuinfo");
  const meminfo = await text("/proc/meminfo");
  const kib = Number(/MemTotal:\s+(\d+)/.exec(meminfo)?.[1] ?? NaN);
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

async function hostLocalVersion(): Promise<BenchResults["hostLocal"]> {
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
interface CpuSnap {
  busy: number;
  total: number;
  own: number;
}

async function cpuSnap(): Promise<CpuSnap> {
  const stat = (await text("/proc/stat")).split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const total = stat.reduce((x, y) => x + y, 0);
  const idle = (stat[3] ?? 0) + (stat[4] ?? 0);
  const self = (await text("/proc/self/stat")).split(") ")[1]?.split(" ") ?? [];
  // Fields 14..17 of /proc/PID/stat (utime stime cutime cstime), counted after "pid (comm)".
  const own = [11, 12, 13, 14].reduce((sum, i) => sum + Number(self[i] ?? 0), 0);
  return { busy: total - idle, total, own };
}

/** Waits (bounded) until the CPUs are mostly idle; returns the last idle share seen. */
async function waitForQuiet(maxS: number): Promise<{ idle: number; waitedS: number }> {
  const t0 = performance.now();
  let idle = NaN;
  for (let i = 0; i < 1_000; i++) {
    const a = await cpuSnap();
    await new Promise((r) => setTimeout(r, 2_000));
    const b = await cpuSnap();
    idle = 1 - (b.busy - a.busy) / Math.max(1, b.total - a.total);
    const waited = (performance.now() - t0) / 1000;
    if (idle >= 0.8 || waited >= maxS) return { idle, waitedS: waited };
    if (i === 0) say(`machine busy (${((1 - idle) * 100).toFixed(0)}% CPU): waiting ≤ ${maxS} s`);
  }
  return { idle, waitedS: (performance.now() - t0) / 1000 };
}

/** Bundles main.ts unminified and measures how much of it is npm:zod. */
async function bundleComposition(
  tmp: string,
): Promise<{ plainBytes: number; zodBytes: number }> {
  const out = join(tmp, "plain-bundle.js");
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["bundle", "--quiet", "--platform", "deno", "--output", out, "main.ts"],
    cwd: ROOT,
    stdout: "null",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  if (!r.success) return { plainBytes: NaN, zodBytes: NaN };
  let zod = false, zodBytes = 0, plainBytes = 0;
  for (const line of (await Deno.readTextFile(out)).split("\n")) {
    // esbuild marks each module's start with a `// path` comment.
    if (/^\/\/ \S+\.(ts|js)$/.test(line)) zod = /\/zod\//.test(line);
    const n = new TextEncoder().encode(line).length + 1;
    plainBytes += n;
    if (zod) zodBytes += n;
  }
  return { plainBytes, zodBytes };
}

/** Runs `fn` over indexes 0..n-1 with at most `limit` in flight. */
async function pool<T>(n: number, limit: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  const worker = async () => {
    for (let guard = 0; guard < n; guard++) {
      const i = next++;
      if (i >= n) return;
      out[i] = await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, n) }, worker));
  return out;
}

function ok(r: RunResult | Exec): boolean {
  return r.code === 0;
}

function brief(r: RunResult | Exec): string {
  return `exit ${r.code}: ${(r.stdout + r.stderr).slice(0, 400)}`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      out: { type: "string" },
      "no-wait": { type: "boolean", default: false },
    },
  });
  const plan = values.quick ? QUICK : FULL;
  const began = performance.now();
  const date = new Date().toISOString().slice(0, 10);
  const outDir = values.out ??
    (plan.quick ? join(ROOT, ".tmp/bench") : join(ROOT, "bench/results"));
  const base = join(outDir, plan.quick ? `${date}-quick` : date);
  const overBudget = () => (performance.now() - began) / 1000 > plan.budgetS;
  const quiet = await waitForQuiet(values["no-wait"] ? 0 : plan.quietWaitS);
  const host = await machine();
  say(`${plan.quick ? "quick" : "full"} run; load ${host.loadBefore}`);
  const cpu0 = await cpuSnap();

  let results: BenchResults;
  const tmp = await Deno.makeTempDir({ prefix: "milo-ipam-bench-" });
  const cleanups: (() => Promise<void>)[] = [() => Deno.remove(tmp, { recursive: true })];
  try {
    // --- servers and installs -------------------------------------------------------------
    const tls = await startMiloDev({ seed: BENCH_SEED, tls: true, token: BENCH_TOKEN });
    cleanups.push(() => tls.stop());
    const http = await startMiloDev({ seed: BENCH_SEED, token: BENCH_TOKEN });
    cleanups.push(() => http.stop());
    say(`milo-dev ${tls.url} (TLS) and ${http.url} (HTTP)`);
    const mk = async (url: string, caFile: string | undefined, cluster: string) => {
      const p = await installPlugin({
        miloUrl: url,
        token: BENCH_TOKEN,
        caFile,
        cluster,
        classes: { ...BENCH_CLASSES },
        nodeConfig: { timeouts: { requestMs: 2_000, totalMs: 10_000 } },
      });
      cleanups.push(() => p.cleanup());
      return p;
    };
    const a = await mk(tls.url, tls.caFile, "cluster-a");
    const b = await mk(tls.url, tls.caFile, "cluster-b");
    const h = await mk(http.url, undefined, "cluster-a");
    say(`installed ${a.installed.kind}: ${a.installed.path}`);
    const confOf = (p: TestPlugin) => p.netConf();
    const confA = confOf(a), confB = confOf(b), confH = confOf(h);
    const bundle = join(dirname(a.installed.path), ".milo-ipam/milo-ipam.js");
    const bundleBytes = (await Deno.stat(bundle).catch(() => ({ size: 0 }))).size;
    const vendored = join(dirname(a.installed.path), ".milo-ipam/deno");
    const denoBin = a.installed.kind === "launcher" ? vendored : Deno.execPath();

    // The floor: the launcher's own shape, an empty script, the install's flags.
    const empty = join(tmp, "empty.js");
    await Deno.writeTextFile(empty, "");
    const floor = join(tmp, "floor");
    await Deno.writeTextFile(floor, launcherScript(denoBin, empty, a.installed.flags));
    await Deno.chmod(floor, 0o755);
    // A copy of the launcher without V8's code cache, to see what the cache is worth.
    const noCache = join(tmp, "milo-ipam-no-code-cache");
    await Deno.writeTextFile(
      noCache,
      launcherScript(denoBin, bundle, ["--no-code-cache", ...a.installed.flags]),
    );
    await Deno.chmod(noCache, 0o755);
    const singleThreaded = join(tmp, "milo-ipam-single-threaded");
    await Deno.writeTextFile(
      singleThreaded,
      launcherScript(denoBin, bundle, ["--v8-flags=--single-threaded", ...a.installed.flags]),
    );
    await Deno.chmod(singleThreaded, 0o755);
    const composition = await bundleComposition(tmp);

    const hl = await hostLocalVersion();
    const hlConf = (_id: string) =>
      JSON.stringify({
        cniVersion: "1.0.0",
        name: "bench-host-local",
        type: "bridge",
        ipam: {
          type: "host-local",
          dataDir: join(tmp, "host-local"),
          ranges: [[{ subnet: "10.88.0.0/16" }], [{ subnet: "fd88::/64" }]],
        },
      });
    const hlRun = (cmd: "ADD" | "DEL", id: string) =>
      execTimed(HOST_LOCAL, [], cniEnv(a, cmd, id), hlConf(id));

    // --- where one ADD spends its time (sampled inside the latency loop) ---------------------
    const phaseRun = async (p: TestPlugin, conf: unknown, id: string): Promise<PhaseSample> => {
      const r = await execTimed(
        Deno.execPath(),
        [
          "run",
          "--allow-all",
          "--config",
          join(ROOT, "deno.json"),
          join(ROOT, "bench/phases.ts"),
          bundle,
        ],
        { ...cniEnv(p, "ADD", id), ...denoEnv(), NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
        JSON.stringify(conf),
      );
      if (r.code !== 0) throw new Error(`phases.ts failed: ${brief(r)}`);
      return JSON.parse(r.stdout);
    };
    const phases = { tls: [] as PhaseSample[], http: [] as PhaseSample[] };
    const phaseEvery = Math.max(1, Math.floor(plan.samples / plan.phaseSamples));
    const samplePhases = async (i: number) => {
      const measured = i - plan.warmup;
      const due = i === 0 || (measured >= 0 && measured % phaseEvery === 0 &&
        phases.tls.length < plan.phaseSamples);
      if (!due) return;
      const t = await phaseRun(a, confA, `ph-tls-${i}`);
      const u = await phaseRun(h, confH, `ph-http-${i}`);
      if (i === 0) return; // the first run fills the module cache
      phases.tls.push(t);
      phases.http.push(u);
    };

    // --- per-verb latency, one in flight, interleaved ------------------------------------------
    const rounds = plan.warmup + plan.samples;
    say(
      `latency: ${plan.warmup} warm-up + ${plan.samples} rounds, ${plan.phaseSamples} phase samples`,
    );
    const rec = new Recorder(plan.warmup);
    const counts = new Map<string, { totals: Set<number>; methods: Set<string>; n: number }>();
    const counted = async (verb: string, run: () => Promise<RunResult>): Promise<RunResult> => {
      await tls.resetStats();
      const r = await run();
      const s = await tls.stats();
      const c = counts.get(verb) ?? { totals: new Set(), methods: new Set(), n: 0 };
      c.n++;
      c.totals.add(s.total);
      c.methods.add(
        Object.entries(s.byMethod).sort().map(([m, k]) => `${m}=${k}`).join(" ") || "none",
      );
      counts.set(verb, c);
      return r;
    };
    for (let i = 0; i < rounds; i++) {
      const id = `lat-${i}`;
      const flip = i % 2 === 1;
      const pair = async (x: () => Promise<void>, y: () => Promise<void>) => {
        if (flip) {
          await y();
          await x();
        } else {
          await x();
          await y();
        }
      };
      let added: RunResult | undefined;
      await pair(async () => {
        await rec.run(
          "floor",
          "bare `deno run` (empty script, same flags)",
          i,
          () => execTimed(floor, [], cniEnv(a, "VERSION", ""), "{}"),
        );
      }, async () => {
        await rec.run(
          "version",
          "milo-ipam VERSION (start-up)",
          i,
          () => a.run({ command: "VERSION", stdin: { cniVersion: "1.1.0" } }),
        );
      });
      await pair(async () => {
        added = await counted(
          "ADD",
          () =>
            rec.run(
              "add",
              "milo-ipam ADD",
              i,
              () => a.run({ command: "ADD", containerId: id, stdin: confA }),
            ),
        );
      }, async () => {
        if (hl) await rec.run("hl-add", "host-local ADD", i, () => hlRun("ADD", id));
      });
      await counted("CHECK", () =>
        rec.run("check", "milo-ipam CHECK", i, () =>
          a.run({
            command: "CHECK",
            containerId: id,
            stdin: { ...confA, prevResult: added?.json },
          })));
      await counted(
        "STATUS",
        () =>
          rec.run(
            "status",
            "milo-ipam STATUS",
            i,
            () => a.run({ command: "STATUS", stdin: confA }),
          ),
      );
      await rec.run(
        "add-http",
        "milo-ipam ADD over plain HTTP",
        i,
        () => h.run({ command: "ADD", containerId: id, stdin: confH }),
      );
      await pair(async () => {
        await counted(
          "DEL",
          () =>
            rec.run(
              "del",
              "milo-ipam DEL",
              i,
              () => a.run({ command: "DEL", containerId: id, stdin: confA }),
            ),
        );
      }, async () => {
        if (hl) await rec.run("hl-del", "host-local DEL", i, () => hlRun("DEL", id));
      });
      const rd = await h.run({ command: "DEL", containerId: id, stdin: confH });
      if (!ok(rd)) throw new Error(`HTTP DEL failed: ${brief(rd)}`);
      await samplePhases(i);
      if ((i + 1) % 50 === 0) say(`  round ${i + 1}/${rounds}`);
    }
    const latency = rec.series();
    const requests: RequestCount[] = [...counts.entries()].map(([verb, c]) => ({
      verb,
      samples: c.n,
      families: verb === "STATUS" ? 1 : 2,
      totals: [...c.totals].sort(),
      methods: [...c.methods].sort(),
    }));

    // --- start-up anatomy ----------------------------------------------------------------------
    say(`start-up anatomy: ${plan.startupSamples} rounds`);
    const st = new Recorder(1);
    for (let i = 0; i < plan.startupSamples + 1; i++) {
      const v = cniEnv(a, "VERSION", "");
      const variants: [string, string, () => Promise<Exec | RunResult>][] = [
        [
          "deno-version",
          "`deno --version` (exec, no JS runtime)",
          () => execTimed(denoBin, ["--version"], v, ""),
        ],
        [
          "deno-direct",
          "`deno run` empty script, no flags, no sh",
          () => execTimed(denoBin, ["run", "--no-config", "--no-lock", empty], v, ""),
        ],
        [
          "floor",
          "bare `deno run` (empty script, same flags, via sh)",
          () => execTimed(floor, [], v, "{}"),
        ],
        [
          "version",
          "milo-ipam VERSION",
          () => a.run({ command: "VERSION", stdin: { cniVersion: "1.1.0" } }),
        ],
        [
          "version-no-cache",
          "milo-ipam VERSION with --no-code-cache",
          () => execTimed(noCache, [], v, JSON.stringify({ cniVersion: "1.1.0" })),
        ],
        [
          "version-single-threaded",
          "milo-ipam VERSION with --v8-flags=--single-threaded",
          () => execTimed(singleThreaded, [], v, JSON.stringify({ cniVersion: "1.1.0" })),
        ],
      ];
      const order = i % 2 ? [...variants].reverse() : variants;
      for (const [key, label, run] of order) await st.run(key, label, i, run);
    }
    const startup = st.series();

    // --- one-step probes -----------------------------------------------------------------------
    say(`probes: ${plan.probeRounds} rounds`);
    const PROBES: [string, string][] = [
      ["stdin-stream", "read stdin through `Deno.stdin.readable` (what lib/stdin.ts does)"],
      ["stdin-read", "read stdin with `Deno.stdin.read()` into a buffer"],
      ["fetch-http", "first fetch, two in parallel, plain HTTP"],
      ["fetch-tls-one", "first fetch, one, TLS with caFile client"],
      ["fetch-tls-pair", "first fetch, two in parallel, TLS with caFile client"],
      ["connect-tls", "`Deno.connectTls` + handshake only (no fetch)"],
    ];
    const probeData = new Map<string, { wall: number[]; cpu: number[] }>();
    for (let i = 0; i < plan.probeRounds + 1; i++) {
      const order = i % 2 ? [...PROBES].reverse() : PROBES;
      for (const [mode] of order) {
        const url = `${mode === "fetch-http" ? http.url : tls.url}/healthz`;
        const r = await execTimed(
          Deno.execPath(),
          [
            "run",
            "--no-config",
            "--allow-all",
            join(ROOT, "bench/probe.ts"),
            mode,
            url,
            tls.caFile ?? "",
          ],
          { ...denoEnv(), DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
          JSON.stringify(confA),
        );
        if (r.code !== 0) throw new Error(`probe ${mode}: ${brief(r)}`);
        if (i === 0) continue;
        const v = JSON.parse(r.stdout);
        const d = probeData.get(mode) ?? { wall: [], cpu: [] };
        d.wall.push(v.wallMs);
        d.cpu.push(v.cpuMs);
        probeData.set(mode, d);
      }
    }
    const probes = PROBES.map(([mode, label]) => ({
      mode,
      label,
      n: probeData.get(mode)?.wall.length ?? 0,
      wallMs: median(probeData.get(mode)?.wall ?? []),
      cpuMs: median(probeData.get(mode)?.cpu ?? []),
    }));

    // --- concurrency sweep ---------------------------------------------------------------------
    const sweep: SweepPoint[] = [];
    const skipped: string[] = [];
    for (const clusters of [1, 2]) {
      const plugins = clusters === 1 ? [a] : [a, b];
      const confs = clusters === 1 ? [confA] : [confA, confB];
      for (const level of LEVELS) {
        const n = plan.sweepN(level);
        const tag = `sw${clusters}-${level}`;
        if (overBudget()) {
          say(`  skipping ${clusters} cluster(s) × ${level}: past the ${plan.budgetS} s budget`);
          skipped.push(`${clusters} cluster(s) × ${level} in flight`);
          continue;
        }
        for (const verb of ["ADD", "DEL"] as const) {
          const cpu0 = await childrenCpuMs(), srv0 = await serverCpuMs();
          const t0 = performance.now();
          const rs = await pool(n, level, (i) =>
            plugins[i % plugins.length].run({
              command: verb,
              containerId: `${tag}-${i}`,
              stdin: confs[i % confs.length],
            }));
          const wallMs = performance.now() - t0;
          const clientCpuMs = ((await childrenCpuMs()) - cpu0) / n;
          const serverMs = ((await serverCpuMs()) - srv0) / n;
          const good = rs.filter(ok);
          const failures = rs.length - good.length;
          if (failures) {
            say(`  ${tag} ${verb}: ${failures} failed, e.g. ${brief(rs.find((r) => !ok(r))!)}`);
          }
          sweep.push({
            clusters,
            inFlight: level,
            verb,
            n,
            failures,
            wallMs,
            perSecond: (good.length / wallMs) * 1000,
            summary: summarize(good.map((r) => r.ms)),
            clientCpuMs,
            serverCpuMs: serverMs,
          });
          say(
            `sweep ${clusters} cluster(s) × ${level} in flight ${verb}: ${
              ((good.length / wallMs) * 1000).toFixed(1)
            }/s`,
          );
        }
      }
    }

    // --- peak RSS ------------------------------------------------------------------------------
    const rss: RssRow[] = [];
    try {
      await Deno.stat(GNU_TIME);
      say(`peak RSS: ${plan.rssSamples} samples`);
      const kib = {
        add: [] as number[],
        del: [] as number[],
        floor: [] as number[],
        hl: [] as number[],
      };
      const timedRss = async (path: string, env: Record<string, string>, stdin: string) => {
        const f = join(tmp, "rss.txt");
        const r = await execTimed(GNU_TIME, ["-f", "%M", "-o", f, path], env, stdin);
        if (r.code !== 0) throw new Error(`${path} under ${GNU_TIME}: ${brief(r)}`);
        return Number((await Deno.readTextFile(f)).trim().split("\n").pop());
      };
      for (let i = 0; i < plan.rssSamples; i++) {
        const id = `rss-${i}`;
        kib.add.push(await timedRss(a.installed.path, cniEnv(a, "ADD", id), JSON.stringify(confA)));
        kib.del.push(await timedRss(a.installed.path, cniEnv(a, "DEL", id), JSON.stringify(confA)));
        kib.floor.push(await timedRss(floor, cniEnv(a, "VERSION", ""), "{}"));
        if (hl) kib.hl.push(await timedRss(HOST_LOCAL, cniEnv(a, "ADD", id), hlConf(id)));
      }
      const row = (label: string, xs: number[]) =>
        xs.length &&
        rss.push({ label, samples: xs.length, medianKiB: median(xs), maxKiB: Math.max(...xs) });
      row("milo-ipam ADD", kib.add);
      row("milo-ipam DEL", kib.del);
      row("bare `deno run` (same flags)", kib.floor);
      row("host-local ADD", kib.hl);
    } catch (err) {
      say(
        `peak RSS skipped (apt-get install -y time): ${err instanceof Error ? err.message : err}`,
      );
    }

    // --- report (written once the servers are stopped and reaped) -----------------------------
    results = {
      date,
      quick: plan.quick,
      machine: { ...host, loadAfter: (await text("/proc/loadavg")).trim() },
      deno: {
        version: Deno.version.deno,
        v8: Deno.version.v8,
        typescript: Deno.version.typescript,
      },
      install: { kind: a.installed.kind, flags: a.installed.flags, bundleBytes, ...composition },
      probes,
      hostLocal: hl,
      warmup: plan.warmup,
      durationS: (performance.now() - began) / 1000,
      latency,
      startup,
      requests,
      phases,
      sweep,
      skipped,
      rss,
      contention: {
        idleBeforePct: quiet.idle * 100,
        waitedS: quiet.waitedS,
        busyPct: NaN,
        ownPct: NaN,
      },
    };
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
  }
  const cpu1 = await cpuSnap();
  const busy = cpu1.busy - cpu0.busy;
  results.contention.busyPct = (busy / Math.max(1, cpu1.total - cpu0.total)) * 100;
  results.contention.ownPct = Math.min(100, ((cpu1.own - cpu0.own) / Math.max(1, busy)) * 100);
  await Deno.mkdir(outDir, { recursive: true });
  const svgName = `${base.split("/").pop()}.svg`;
  await Deno.writeTextFile(`${base}.json`, JSON.stringify(results, null, 1) + "\n");
  await Deno.writeTextFile(`${base}.svg`, renderChart(results));
  await Deno.writeTextFile(`${base}.md`, renderReport(results, svgName));
  say(`wrote ${base}.md, .svg, .json in ${results.durationS.toFixed(0)} s`);
}

if (import.meta.main) await main();
