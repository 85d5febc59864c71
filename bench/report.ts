/** Renders a run's results as the Markdown report `bench/results/<date>.md`. */
import { type BenchResults, median, type Series, type Summary } from "./model.ts";
import type { PhaseSample } from "./phases.ts";

function ms(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return "–";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1);
}

function table(head: string[], rows: (string | number)[][]): string {
  const align = head.map((_, i) => (i === 0 ? ":--" : "--:"));
  return [head, align, ...rows].map((r) => `| ${r.join(" | ")} |`).join("\n");
}

function verdict(ok: boolean | undefined): string {
  return ok === undefined ? "n/a" : ok ? "**meets**" : "**misses**";
}

/** Budgets of issue 5, judged against one run. */
export interface Budget {
  what: string;
  limit: string;
  figure: string;
  ok: boolean | undefined;
}

function find(list: Series[], key: string): Summary | undefined {
  const s = list.find((x) => x.key === key);
  return s && s.summary.n ? s.summary : undefined;
}

/** Evaluates every budget of the issue. */
export function budgets(r: BenchResults): Budget[] {
  const out: Budget[] = [];
  for (const [key, verb] of [["add", "ADD"], ["check", "CHECK"], ["del", "DEL"]]) {
    const s = find(r.latency, key);
    out.push({
      what: `${verb} p50, 1 in flight`,
      limit: "≤ 35 ms",
      figure: `${ms(s?.p50)} ms`,
      ok: s ? s.p50 <= 35 : undefined,
    });
    out.push({
      what: `${verb} p99, 1 in flight`,
      limit: "≤ 100 ms",
      figure: `${ms(s?.p99)} ms`,
      ok: s ? s.p99 <= 100 : undefined,
    });
  }
  const floor = find(r.latency, "floor"), version = find(r.latency, "version");
  const ratio = floor && version ? version.p50 / floor.p50 : NaN;
  out.push({
    what: "start-up (VERSION p50 / bare `deno run` p50)",
    limit: "≤ 1.5×",
    figure: `${ratio.toFixed(2)}× (${ms(version?.p50)} / ${ms(floor?.p50)} ms)`,
    ok: Number.isFinite(ratio) ? ratio <= 1.5 : undefined,
  });
  for (const verb of ["ADD", "DEL", "CHECK"]) {
    const c = r.requests.find((x) => x.verb === verb);
    const perFamily = c ? c.totals.map((t) => t / c.families) : [];
    out.push({
      what: `${verb} requests per family (server count, every sample)`,
      limit: "= 1",
      figure: c ? `${perFamily.join(", ")} (${c.methods.join("; ")}; ${c.samples} calls)` : "–",
      ok: c ? perFamily.length === 1 && perFamily[0] === 1 : undefined,
    });
  }
  for (const clusters of [1, 2]) {
    const p = r.sweep.find((x) => x.verb === "ADD" && x.inFlight === 32 && x.clusters === clusters);
    const tag = clusters === 1 ? "one cluster" : "two clusters";
    out.push({
      what: `ADD throughput, 32 in flight, ${tag}`,
      limit: "≥ 40 ADD/s",
      figure: p ? `${p.perSecond.toFixed(1)} ADD/s` : "–",
      ok: p ? p.perSecond >= 40 && p.failures === 0 : undefined,
    });
    out.push({
      what: `ADD p99, 32 in flight, ${tag}`,
      limit: "≤ 500 ms",
      figure: p ? `${ms(p.summary.p99)} ms` : "–",
      ok: p ? p.summary.p99 <= 500 : undefined,
    });
  }
  const peak = Math.max(
    ...r.rss.filter((x) => x.label.startsWith("milo-ipam")).map((x) => x.maxKiB),
  );
  out.push({
    what: "peak RSS of one plugin process (max over ADD/DEL samples)",
    limit: "≤ 64 MiB",
    figure: Number.isFinite(peak) ? `${(peak / 1024).toFixed(1)} MiB` : "–",
    ok: Number.isFinite(peak) ? peak <= 64 * 1024 : undefined,
  });
  return out;
}

const PHASES: [keyof PhaseSample, string][] = [
  ["bundleLoad", "module load: `import()` of the installed bundle (parse, compile, evaluate)"],
  ["stdinRead", "stdin read"],
  ["nodeConfigRead", "node config file read"],
  ["configParse", "config parse and validation (zod, first call)"],
  ["envAndIdentity", "CNI env parse and attachment identity"],
  ["tokenRead", "token file read"],
  ["tlsClientCreate", "caFile read + `Deno.createHttpClient` (TLS client creation)"],
  ["claimBodies", "claim bodies: SHA-256 names, labels (until the first request leaves)"],
  ["clientNetwork", "requests, client side: connect, TLS handshake, HTTP, loopback"],
  ["miloHandling", "requests, Milo's own handling (Server-Timing, slower of the pair)"],
  ["parseAndEncode", "response validation (zod) and result encoding"],
  ["resultWrite", "result JSON write"],
  ["logWrite", "log line append"],
];

function phaseMedian(xs: PhaseSample[], k: keyof PhaseSample): number {
  return median(xs.map((x) => x[k] as number).filter(Number.isFinite));
}

function phaseSection(r: BenchResults): string {
  const { tls, http } = r.phases;
  if (!tls.length) return "_not measured_";
  const floor = find(r.latency, "floor");
  const add = find(r.latency, "add");
  const addHttp = find(r.latency, "add-http");
  const rows: (string | number)[][] = [];
  rows.push([
    "process exec, Deno runtime start and exit (bare `deno run` floor, p50)",
    ms(floor?.p50),
    ms(floor?.p50),
    "floor series",
  ]);
  let sumT = floor?.p50 ?? 0, sumH = floor?.p50 ?? 0;
  for (const [k, label] of PHASES) {
    const t = phaseMedian(tls, k), h = phaseMedian(http, k);
    sumT += t;
    sumH += h;
    rows.push([label, ms(t), ms(h), "phases.ts"]);
  }
  rows.push(["**sum of the parts**", `**${ms(sumT)}**`, `**${ms(sumH)}**`, ""]);
  rows.push([
    "measured ADD p50 (whole process)",
    ms(add?.p50),
    ms(addHttp?.p50),
    "latency series",
  ]);
  rows.push([
    "unaccounted (scheduling, event-loop turns between phases, exit)",
    ms((add?.p50 ?? NaN) - sumT),
    ms((addHttp?.p50 ?? NaN) - sumH),
    "difference",
  ]);
  const extra = table(["in the same fresh process", "TLS", "HTTP"], [
    [
      "runtime start until the first line of user code (`performance.now()` there)",
      ms(phaseMedian(tls, "runtimeStart")),
      ms(phaseMedian(http, "runtimeStart")),
    ],
    [
      "`import()` of the unbundled lib/ + npm:zod instead of the bundle",
      ms(phaseMedian(tls, "libLoad")),
      ms(phaseMedian(http, "libLoad")),
    ],
    [
      "a second request on the open connection (client wall)",
      ms(phaseMedian(tls, "warmRequest")),
      ms(phaseMedian(http, "warmRequest")),
    ],
    [
      "… of which Milo's handling",
      ms(phaseMedian(tls, "warmRequestMilo")),
      ms(phaseMedian(http, "warmRequestMilo")),
    ],
    [
      "CPU time of the bundle's `import()`",
      ms(phaseMedian(tls, "bundleLoadCpu")),
      ms(phaseMedian(http, "bundleLoadCpu")),
    ],
    [
      "CPU time of the ADD handler (bodies, both requests, parse, encode)",
      ms(phaseMedian(tls, "handlerCpu")),
      ms(phaseMedian(http, "handlerCpu")),
    ],
    [
      "CPU time of the whole harness process until the log line",
      ms(phaseMedian(tls, "totalCpu")),
      ms(phaseMedian(http, "totalCpu")),
    ],
    [
      "requests sent by the ADD",
      String(median(tls.map((x) => x.requests))),
      String(median(http.map((x) => x.requests))),
    ],
  ]);
  return [
    `Medians of ${tls.length} fresh processes each (\`bench/phases.ts\`: the steps of`,
    "`main.ts` through the same lib/ modules, each timed once, cold, in a new process; the",
    "two families' requests run in parallel as in the plugin). Milliseconds.",
    "",
    table(["phase of one dual-stack ADD", "TLS", "HTTP", "source"], rows),
    "",
    extra,
  ].join("\n");
}

function sweepSection(r: BenchResults): string {
  const rows = r.sweep.map((p) => [
    p.clusters === 1 ? "one" : "two",
    p.inFlight,
    p.verb,
    p.n,
    p.failures,
    (p.wallMs / 1000).toFixed(1),
    p.perSecond.toFixed(1),
    ms(p.summary.p50),
    ms(p.summary.p90),
    ms(p.summary.p99),
    ms(p.summary.max),
    ms(p.clientCpuMs),
    ms(p.serverCpuMs),
  ]);
  return table(
    [
      "clusters",
      "in flight",
      "verb",
      "n",
      "failed",
      "wall s",
      "per s",
      "p50",
      "p90",
      "p99",
      "max",
      "plugin CPU/call",
      "milo-dev CPU/call",
    ],
    rows,
  );
}

function analysis(r: BenchResults, bs: Budget[]): string {
  const out: string[] = [];
  const floor = find(r.latency, "floor"), version = find(r.latency, "version");
  const add = find(r.latency, "add"), addHttp = find(r.latency, "add-http");
  const direct = find(r.startup, "deno-direct"), dv = find(r.startup, "deno-version");
  const noCache = find(r.startup, "version-no-cache"), v2 = find(r.startup, "version");
  const hlAdd = find(r.latency, "hl-add"), hlDel = find(r.latency, "hl-del");
  const del = find(r.latency, "del");
  const pm = (k: keyof PhaseSample) => phaseMedian(r.phases.tls, k);
  const missed = bs.filter((b) => b.ok === false).map((b) => b.what);
  out.push(
    missed.length ? `Budgets missed: ${missed.join("; ")}.` : "Every budget is met in this run.",
  );
  const foreign = 100 - r.contention.ownPct;
  if (foreign > 10) {
    out.push(
      `- Noise: other processes used about ${foreign.toFixed(0)}% of the CPU time spent during ` +
        `this run; every figure is inflated by that, the interleaved ratios less so.`,
    );
  }
  if (floor && add) {
    out.push(
      `- The floor is the runtime itself: a bare \`deno run\` of an empty file with the same flags ` +
        `takes ${ms(floor.p50)} ms (p50) on this machine, ${
          (floor.p50 / add.p50 * 100).toFixed(0)
        }% of an ADD's ${ms(add.p50)} ms. ` +
        (floor.p50 > 35
          ? `It alone is above the 35 ms p50 budget, so no \`deno run\` launcher can meet that ` +
            `budget here; only a process that does not start a Deno runtime per call could.`
          : `It leaves ${ms(35 - floor.p50)} ms of the 35 ms budget for the plugin's own work.`),
    );
  }
  const sf = find(r.startup, "floor");
  if (dv && direct && sf) {
    out.push(
      `- Start-up anatomy: exec of the ${
        (r.install.kind === "launcher" ? "vendored " : "") + "deno binary"
      } with \`--version\` (no JS runtime) ${ms(dv.p50)} ms; \`deno run\` of an empty file ` +
        `without permission flags and without the sh hop ${ms(direct.p50)} ms; with the ` +
        `launcher's sh and flags ${ms(sf.p50)} ms (same loop). So V8 and the runtime's ` +
        `bootstrap cost about ${ms(direct.p50 - dv.p50)} ms, the binary's exec and exit ` +
        `${ms(dv.p50)} ms, and ` +
        (sf.p50 - direct.p50 > 2
          ? `the launcher shape (sh, flag parsing) ${ms(sf.p50 - direct.p50)} ms.`
          : `the launcher shape (sh, permission flags) nothing measurable.`),
    );
  }
  if (version && floor) {
    out.push(
      `- The plugin's own start-up (VERSION: load the ${
        (r.install.bundleBytes / 1024).toFixed(0)
      } KiB minified bundle, read stdin, print) adds ${ms(version.p50 - floor.p50)} ms over the ` +
        `floor; in a fresh process the bundle's \`import()\` takes ${ms(pm("bundleLoad"))} ms ` +
        `against ${ms(pm("libLoad"))} ms for the unbundled lib/ + npm:zod graph.` +
        (noCache && v2
          ? ` Without V8's code cache (\`--no-code-cache\`) VERSION takes ${ms(noCache.p50)} ms ` +
            `against ${ms(v2.p50)} ms with it (same loop).`
          : ""),
    );
  }
  if (add && addHttp) {
    out.push(
      `- TLS: an ADD over https costs ${ms(add.p50 - addHttp.p50)} ms more than over plain ` +
        `http at p50 (${ms(add.p50)} vs ${ms(addHttp.p50)} ms): creating the client with the ` +
        `CA takes ${ms(pm("tlsClientCreate"))} ms and the two parallel requests' client side ` +
        `(connect + handshake + HTTP) ${ms(pm("clientNetwork"))} ms against ${
          ms(phaseMedian(r.phases.http, "clientNetwork"))
        } ms over http. Milo's own handling is ${ms(pm("miloHandling"))} ms. In CPU time the ` +
        `ADD handler costs ${ms(pm("handlerCpu"))} ms over TLS against ${
          ms(phaseMedian(r.phases.http, "handlerCpu"))
        } ms over http: the first connection's TLS set-up and handshakes are CPU work in the ` +
        `plugin process, not waiting, and a second request on the open connection takes ` +
        `${ms(pm("warmRequest"))} ms.`,
    );
  }
  out.push(
    `- In-process work besides the network is small: config parse ${ms(pm("configParse"))} ms, ` +
      `claim bodies (SHA-256 names) ${ms(pm("claimBodies"))} ms, response validation and ` +
      `encoding ${ms(pm("parseAndEncode"))} ms, log line ${ms(pm("logWrite"))} ms.`,
  );
  const probe = (m: string) => r.probes.find((p) => p.mode === m);
  const ps = probe("stdin-stream"), pr = probe("stdin-read");
  const pf = probe("fetch-http"), p1 = probe("fetch-tls-one"), p2 = probe("fetch-tls-pair");
  const pc = probe("connect-tls");
  if (ps && pr && pf && p1 && p2 && pc && ps.n) {
    out.push(
      `- Probes: the first fetch of a process costs ${ms(pf.cpuMs)} ms of CPU over plain HTTP ` +
        `(lazy-loaded fetch/streams code, the HTTP client); over TLS ${ms(p1.cpuMs)} ms for one ` +
        `request and ${ms(p2.cpuMs)} ms for the parallel pair, so the TLS cost is the ` +
        `per-process set-up (\`Deno.connectTls\` alone: ${ms(pc.cpuMs)} ms), not the second ` +
        `handshake; serialising the two families onto one connection would not save it. ` +
        `Reading stdin through \`Deno.stdin.readable\` costs ${ms(ps.cpuMs)} ms of CPU against ` +
        `${ms(pr.cpuMs)} ms with \`Deno.stdin.read()\`: a saving for VERSION/STATUS start-up, ` +
        `though for ADD most of it moves to the first fetch, which loads the same streams code.`,
    );
  }
  const zodPct = (r.install.zodBytes / r.install.plainBytes) * 100;
  if (Number.isFinite(zodPct)) {
    out.push(
      `- Module size: npm:zod is ${zodPct.toFixed(0)}% of the unminified bundle (${
        (r.install.zodBytes / 1024).toFixed(0)
      } of ${(r.install.plainBytes / 1024).toFixed(0)} KiB); the bundle's \`import()\` costs ` +
        `${ms(pm("bundleLoadCpu"))} ms of CPU, so hand-written validation instead of zod could ` +
        `save up to about half of that. Bundling already beats the unbundled graph ` +
        `(${ms(pm("libLoad"))} ms).`,
    );
  }
  const st = find(r.startup, "version-single-threaded");
  if (st && v2 && noCache) {
    const cur = r.startup.find((x) => x.key === "version");
    const faster = (x: Summary) => x.p50 < v2.p50 * 0.95;
    const verdictOf = (x: Summary, name: string) =>
      faster(x)
        ? `${name} is ${ms(v2.p50 - x.p50)} ms faster at p50: worth adding to the launcher`
        : `${name} is no faster`;
    out.push(
      `- Tried on launcher copies, VERSION p50 (same loop): as installed ${ms(v2.p50)} ms (CPU ${
        ms(cur?.cpuMs)
      }), \`--no-code-cache\` ${ms(noCache.p50)} ms, \`--v8-flags=--single-threaded\` ` +
        `${ms(st.p50)} ms (CPU ${
          ms(r.startup.find((x) => x.key === "version-single-threaded")?.cpuMs)
        }): ${verdictOf(noCache, "`--no-code-cache`")}; ${
          verdictOf(st, "`--single-threaded`")
        }. \`deno compile\` could not be tried here (it cannot download denort).`,
    );
  }
  if (hlAdd && add && hlDel && del) {
    out.push(
      `- host-local (Go, no network, a file lock and a file per address) takes ${ms(hlAdd.p50)} ` +
        `ms per ADD and ${ms(hlDel.p50)} ms per DEL at p50: milo-ipam is ${
          (add.p50 / hlAdd.p50).toFixed(1)
        }× (ADD) and ${(del.p50 / hlDel.p50).toFixed(1)}× (DEL) of that, almost all of it the ` +
        `Deno runtime's start.`,
    );
  }
  const s32 = r.sweep.find((p) => p.verb === "ADD" && p.inFlight === 32 && p.clusters === 1);
  const s1 = r.sweep.find((p) => p.verb === "ADD" && p.inFlight === 1 && p.clusters === 1);
  if (s32 && s1) {
    const perOp = s32.clientCpuMs + s32.serverCpuMs;
    out.push(
      `- Concurrency: ${r.machine.nproc} cores run ${s1.perSecond.toFixed(1)} ADD/s one at a ` +
        `time and ${s32.perSecond.toFixed(1)} ADD/s with 32 in flight. At 32 in flight each ADD ` +
        `costs ${ms(s32.clientCpuMs)} ms of CPU in the plugin process and ${
          ms(s32.serverCpuMs)
        } ms in milo-dev, so ${r.machine.nproc} cores cannot exceed about ${
          ((r.machine.nproc * 1000) / perOp).toFixed(0)
        } ADD/s even with nothing else running; 40 ADD/s would need ≤ ${
          ms((r.machine.nproc * 1000) / 40)
        } ms of CPU per ADD in total. Throughput is bounded by CPU per process, not by waiting ` +
        `on Milo.`,
    );
    const s64 = r.sweep.find((p) => p.verb === "ADD" && p.inFlight === 64 && p.clusters === 1);
    if (s64?.failures) {
      out.push(
        `- At 64 in flight ${s64.failures} of ${s64.n} ADDs failed with code 11 (requests timed ` +
          `out at \`requestMs\` 2000 and retries ran out of \`totalMs\`): with 64 runtimes ` +
          `starting on ${r.machine.nproc} cores neither the plugin processes nor milo-dev get ` +
          `the CPU to finish a request in time. The failures are clean CNI errors, not hangs.`,
      );
    }
  }
  return out.join("\n");
}

/** The whole report. */
export function renderReport(r: BenchResults, svgName: string): string {
  const bs = budgets(r);
  const m = r.machine;
  const rowsOf = (list: Series[]) =>
    list.map((s) => [
      s.label,
      s.summary.n,
      ms(s.summary.p50),
      ms(s.summary.p90),
      ms(s.summary.p99),
      ms(s.summary.max),
      ms(s.summary.mean),
      ms(s.cpuMs),
      s.failures,
    ]);
  const latencyRows = rowsOf(r.latency);
  const latHead = ["series", "n", "p50", "p90", "p99", "max", "mean", "CPU/call", "failed"];
  const ratio = (x: string, y: string, q: keyof Summary) => {
    const a = find(r.latency, x), b = find(r.latency, y);
    return a && b ? `${(a[q] / b[q]).toFixed(1)}×` : "–";
  };
  const floor = find(r.latency, "floor"), version = find(r.latency, "version");
  const add = find(r.latency, "add");
  return [
    `# milo-ipam benchmark, ${r.date}${
      r.quick ? " (quick smoke run: too few samples to judge)" : ""
    }`,
    "",
    `![latency percentiles and throughput vs concurrency](${svgName})`,
    "",
    "## Machine",
    "",
    table(["", ""], [
      ["CPU", `${m.cpu}, ${m.nproc} cores (nproc)`],
      ["memory", m.memory],
      ["kernel", m.kernel],
      ["OS", m.os],
      ["load average before / after", `${m.loadBefore} / ${m.loadAfter}`],
      [
        "CPU contention",
        `${r.contention.idleBeforePct.toFixed(0)}% idle at the start (after waiting ${
          r.contention.waitedS.toFixed(0)
        } s); ${r.contention.busyPct.toFixed(0)}% busy during the run, ${
          r.contention.ownPct.toFixed(0)
        }% of that the benchmark's own processes`,
      ],
      ["Deno", `${r.deno.version} (V8 ${r.deno.v8}, TypeScript ${r.deno.typescript})`],
      [
        "install",
        `${r.install.kind}; bundle ${(r.install.bundleBytes / 1024).toFixed(1)} KiB minified (${
          (r.install.plainBytes / 1024).toFixed(0)
        } KiB unminified, ${
          ((r.install.zodBytes / r.install.plainBytes) * 100).toFixed(0)
        }% of it npm:zod)`,
      ],
      [
        "host-local",
        r.hostLocal ? `${r.hostLocal.path} (${r.hostLocal.version})` : "not installed",
      ],
      ["run", `${r.durationS.toFixed(0)} s, \`deno task bench${r.quick ? " --quick" : ""}\``],
    ]),
    "",
    "## Method",
    "",
    "- Every sample is one process, timed from spawn to exit by the parent (stdin written,",
    "  stdout/stderr read to the end), exactly as `testing/plugin.ts` runs the plugin.",
    "- The plugin is installed by `scripts/install.ts` into a temp dir (" + r.install.kind +
    ": minified",
    "  bundle run by a vendored Deno with the permission flags below); milo-dev runs on",
    "  127.0.0.1 with TLS (a throw-away CA in `caFile`), seeded by `bench/seed.ts` (a /16 IPv4",
    "  pool of /32s, a /64 IPv6 pool of /96s). Every ADD is dual-stack: two claims, in parallel.",
    "  A second install talks to a plain-HTTP milo-dev to isolate the cost of TLS.",
    `- Latency: ${r.warmup} warm-up rounds, then the measured rounds. One round runs, in order:`,
    "  floor and VERSION, plugin ADD and host-local ADD, CHECK (with the ADD's result as",
    "  `prevResult`), STATUS, ADD over HTTP, plugin DEL and host-local DEL; each A/B pair swaps",
    "  its order every round. Production timeouts (2 s per request, 10 s total).",
    "- The floor is the launcher's own shape (`#!/bin/sh` + `exec deno run` with the install's",
    "  flags) running an empty file.",
    "- host-local: Debian's `/usr/lib/cni/host-local`, dual-stack ranges (10.88.0.0/16,",
    "  fd88::/64), a temp `dataDir`, the same env and stdin plumbing.",
    "- Requests: milo-dev's admin `/stats` is reset before and read after every single plugin",
    "  call of the latency loop.",
    "- Concurrency: N ADDs with at most K in flight against one pool (each a process), then the",
    "  same N DELs; with two clusters, calls alternate between two installs (`cluster-a`,",
    "  `cluster-b`) sharing the pool.",
    "- Peak RSS: `/usr/bin/time -f %M` around the launcher (the shell `exec`s Deno, so this is",
    "  the Deno process).",
    "",
    "Permission flags of the install (from `install()`'s `flags`):",
    "",
    "```",
    ...r.install.flags,
    "```",
    "",
    "## Budgets",
    "",
    table(
      ["budget", "limit", "this run", "verdict"],
      bs.map((b) => [b.what, b.limit, b.figure, verdict(b.ok)]),
    ),
    "",
    "## Latency per verb, one in flight (ms)",
    "",
    table(latHead, latencyRows),
    "",
    "CPU/call: mean user + system time of the process (all threads), from the parent's",
    "reaped-children times (10 ms ticks, averaged over the samples).",
    "",
    "milo-ipam against host-local (same rounds, alternating):",
    "",
    table(["ratio", "p50", "p90", "p99"], [
      [
        "ADD milo-ipam / host-local",
        ratio("add", "hl-add", "p50"),
        ratio("add", "hl-add", "p90"),
        ratio("add", "hl-add", "p99"),
      ],
      [
        "DEL milo-ipam / host-local",
        ratio("del", "hl-del", "p50"),
        ratio("del", "hl-del", "p90"),
        ratio("del", "hl-del", "p99"),
      ],
    ]),
    "",
    "## Start-up",
    "",
    `Plugin start-up (VERSION) ${ms(version?.p50)} ms against the bare floor ${ms(floor?.p50)} ms`,
    `(p50): ${ms((version?.p50 ?? NaN) - (floor?.p50 ?? NaN))} ms of overhead, ${
      ((version?.p50 ?? NaN) / (floor?.p50 ?? NaN)).toFixed(2)
    }×. An ADD is ${ms((add?.p50 ?? NaN) - (floor?.p50 ?? NaN))} ms above the floor.`,
    "",
    "Start-up anatomy (a separate loop, variants interleaved, ms):",
    "",
    table(latHead, rowsOf(r.startup)),
    "",
    "## Where one ADD spends its time",
    "",
    phaseSection(r),
    "",
    "## One-step probes",
    "",
    "Each probe is a fresh `deno run` process timing one first-time step inside itself",
    "(`bench/probe.ts`; medians; CPU = user + system of all threads during the step).",
    "",
    table(
      ["step", "n", "wall ms", "CPU ms"],
      r.probes.map((p) => [p.label, p.n, ms(p.wallMs), ms(p.cpuMs)]),
    ),
    "",
    "## Requests per invocation, counted at the server",
    "",
    table(
      ["verb", "calls", "families", "requests per call", "by method"],
      r.requests.map((
        c,
      ) => [c.verb, c.samples, c.families, c.totals.join(", "), c.methods.join("; ")]),
    ),
    "",
    "## Concurrency sweep (latency in ms)",
    "",
    sweepSection(r),
    ...(r.skipped.length ? ["", `Skipped for the time budget: ${r.skipped.join(", ")}.`] : []),
    "",
    "## Peak RSS",
    "",
    r.rss.length
      ? table(
        ["process", "samples", "median MiB", "max MiB"],
        r.rss.map((
          x,
        ) => [x.label, x.samples, (x.medianKiB / 1024).toFixed(1), (x.maxKiB / 1024).toFixed(1)]),
      )
      : "_not measured: install Debian's `time` package_",
    "",
    "## What costs the time",
    "",
    analysis(r, bs),
    "",
  ].join("\n");
}

if (import.meta.main) {
  // Re-render a report (and its chart) from a results file: deno run -A bench/report.ts X.json
  const { renderChart } = await import("./chart.ts");
  const input = Deno.args[0];
  if (!input?.endsWith(".json")) {
    console.error("usage: deno run --allow-read --allow-write bench/report.ts RESULTS.json");
    Deno.exit(2);
  }
  const r: BenchResults = JSON.parse(await Deno.readTextFile(input));
  const base = input.slice(0, -".json".length);
  await Deno.writeTextFile(`${base}.svg`, renderChart(r));
  await Deno.writeTextFile(`${base}.md`, renderReport(r, `${base.split("/").pop()}.svg`));
}
