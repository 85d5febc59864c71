/**
 * Where one ADD spends its time, measured in a fresh process per sample.
 *
 * bench/sections/anatomy.ts spawns this script once per sample with the CNI environment of an
 * ADD and the network config on stdin, and reads one JSON object of phase
 * timings (ms) from stdout. It walks the same steps as main.ts's `runCni`,
 * through the same lib/ modules, timing each: the plugin's hot path carries no
 * benchmark code. Every step runs once per process, so each timing is a cold,
 * first-call figure, as in the real plugin process.
 *
 *   deno run --allow-all bench/phases.ts BUNDLE_DIR   (env: CNI_*, MILO_IPAM_CONFIG)
 *
 * There are no static imports, so the time before the first line runs is the
 * runtime's own start-up.
 */

/** Phase timings of one sample (ms). */
export interface PhaseSample {
  /** performance.now() at the first line: runtime start until user code runs. */
  runtimeStart: number;
  /** `import()` of the installed bundle's main.js and every chunk (parse, compile, evaluate). */
  bundleLoad: number;
  /** `import()` of the unbundled lib/ modules and zod, for comparison. */
  libLoad: number;
  stdinRead: number;
  nodeConfigRead: number;
  configParse: number;
  envAndIdentity: number;
  tokenRead: number;
  /** caFile read plus `Deno.createHttpClient` (0 without caFile). */
  tlsClientCreate: number;
  /** Handler start to the first request leaving: claim names (SHA-256), labels, bodies. */
  claimBodies: number;
  /** First request sent to the last response body read (both families in parallel). */
  requestsWall: number;
  /** Milo's own handling, from `Server-Timing: milo;dur=`, the slower of the parallel pair. */
  miloHandling: number;
  /** requestsWall minus miloHandling: connect, TLS handshake, HTTP, loopback. */
  clientNetwork: number;
  /** Last response read to the handler's return: response validation and result encoding. */
  parseAndEncode: number;
  /** JSON.stringify of the result and one write (to /dev/null). */
  resultWrite: number;
  /** The one JSON log line. */
  logWrite: number;
  /** A second request on the now-open connection (GET of the claim), client wall. */
  warmRequest: number;
  /** Server-Timing of that warm request. */
  warmRequestMilo: number;
  /** Number of requests the ADD sent. */
  requests: number;
  /** runtimeStart to the end of logWrite. */
  total: number;
  /** CPU time (user + system, all threads) of the bundle's `import()`. */
  bundleLoadCpu: number;
  /** CPU time of the ADD handler: claim bodies, both requests, parse and encode. */
  handlerCpu: number;
  /** CPU time of the whole process up to the end of logWrite (runtime start included). */
  totalCpu: number;
}

const runtimeStart = performance.now();

async function timed<T>(fn: () => Promise<T> | T): Promise<[T, number]> {
  const t = performance.now();
  const v = await fn();
  return [v, performance.now() - t];
}

interface Trace {
  start: number;
  end: number;
  miloMs: number;
}

function serverMs(res: Response): number {
  const m = /milo;dur=([\d.]+)/.exec(res.headers.get("server-timing") ?? "");
  return m ? Number(m[1]) : NaN;
}

type CpuUsage = (prev?: { user: number; system: number }) => { user: number; system: number };
type Cpu = { usage: CpuUsage; ms: (u: { user: number; system: number }) => number };

/** Imports the bundle's main.js and then every chunk, then the unbundled modules. */
async function load(bundle: string, cpu: Cpu) {
  const chunks = [...Deno.readDirSync(bundle)].map((e) => e.name).filter((n) => n.endsWith(".js"))
    .sort((x, y) => (x === "main.js" ? -1 : y === "main.js" ? 1 : x < y ? -1 : 1));
  const c0 = cpu.usage();
  const [, bundleLoad] = await timed(async () => {
    for (const c of chunks) await import(new URL(`file://${bundle}/${c}`).href);
  });
  const bundleLoadCpu = cpu.ms(cpu.usage(c0));
  const [mods, libLoad] = await timed(async () => {
    const [add, claims, cni, config, netconf, log, milo, http, stdin, journal, holdings] =
      await Promise
        .all([
          import("../lib/add.ts"),
          import("../lib/claims.ts"),
          import("../lib/cni.ts"),
          import("../lib/config_file.ts"),
          import("../lib/netconf.ts"),
          import("../lib/log.ts"),
          import("../lib/milo.ts"),
          import("../lib/http.ts"),
          import("../lib/stdin.ts"),
          import("../lib/journal.ts"),
          import("../lib/holdings.ts"),
        ]);
    return { add, claims, cni, config, netconf, log, milo, http, stdin, journal, holdings };
  });
  return { mods, bundleLoad, bundleLoadCpu, libLoad };
}

type Mods = Awaited<ReturnType<typeof load>>["mods"];

/** The steps before the handler: stdin, node config, network config, identity, token, client. */
async function prepare(m: Mods) {
  const [stdin, stdinRead] = await timed(() => m.stdin.decodeStdin(m.stdin.readStdinBytes()));
  const env = (k: string) => Deno.env.get(k);
  const [node, nodeConfigRead] = await timed(() => m.config.readNodeConfig(env));
  const [conf, configParse] = await timed(() => m.netconf.parseNetConf(stdin, node, "ADD"));
  const cni = m.cni.readCniEnv(env);
  const [attachment, envAndIdentity] = await timed(() =>
    m.claims.attachmentOf(node, conf, m.cni.readCniEnv(env))
  );
  const [token, tokenRead] = await timed(() => m.http.readToken(node));
  const [client, tlsClientCreate] = await timed(() => m.http.httpClientFor(node));
  const times = { stdinRead, nodeConfigRead, configParse, envAndIdentity, tokenRead };
  return { node, conf, cni, attachment, token, client, times: { ...times, tlsClientCreate } };
}

/** A fetch that records when each request left and its answer was read, and Milo's time. */
function tracing(traces: Trace[]): typeof fetch {
  return async (input, init) => {
    const tr: Trace = { start: performance.now(), end: 0, miloMs: NaN };
    traces.push(tr);
    const res = await fetch(input, init);
    tr.miloMs = serverMs(res);
    const body = await res.text();
    tr.end = performance.now();
    return new Response(body, { status: res.status, headers: res.headers });
  };
}

/** The ADD handler over a tracing client, then the result and log writes. */
async function runAdd(m: Mods, p: Awaited<ReturnType<typeof prepare>>, cpu: Cpu) {
  const traces: Trace[] = [];
  const mc = new m.milo.MiloClient({
    baseUrl: p.node.milo.url.replace(/\/+$/, ""),
    namespace: p.node.milo.namespace,
    token: p.token,
    requestMs: p.conf.network.timeouts.requestMs,
    deadline: Date.now() + p.conf.network.timeouts.totalMs,
    client: p.client,
    fetch: tracing(traces),
  });
  const c1 = cpu.usage();
  const handlerStart = performance.now();
  const { output, claims } = await m.add.add({
    env: p.cni,
    conf: p.conf,
    node: p.node,
    attachment: p.attachment,
    milo: mc,
    rollback: mc,
    journal: new m.journal.Journal(p.node.stateDir),
    holdings: new m.holdings.Holdings(p.node.stateDir),
    deadline: Date.now() + p.conf.network.timeouts.totalMs,
    callId: crypto.randomUUID(),
    now: Date.now,
  });
  const handlerEnd = performance.now();
  const handlerCpu = cpu.ms(cpu.usage(c1));
  if (!traces.length) throw new Error("the ADD sent no request");
  const [, resultWrite] = await timed(() => {
    const f = Deno.openSync("/dev/null", { write: true });
    f.writeSync(new TextEncoder().encode(JSON.stringify(output) + "\n"));
    f.close();
  });
  const logger = new m.log.Logger();
  const [, logWrite] = await timed(() => {
    logger.configure(p.node.log.file, p.node.log.level);
    const line = { verb: "ADD", containerId: p.cni.containerId, claims, outcome: "ok" };
    return logger.write("info", { ...line, durationMs: 0 });
  });
  const ends = { total: performance.now(), totalCpu: cpu.ms(cpu.usage()) };
  return { mc, traces, claims, handlerStart, handlerEnd, handlerCpu, resultWrite, logWrite, ends };
}

async function main(): Promise<PhaseSample> {
  const bundle = Deno.args[0];
  if (!bundle) throw new Error("usage: phases.ts BUNDLE_DIR");
  const usage: CpuUsage = (await import("node:process")).default.cpuUsage;
  const cpu: Cpu = { usage, ms: (u) => (u.user + u.system) / 1000 };
  const { mods, bundleLoad, bundleLoadCpu, libLoad } = await load(bundle, cpu);
  const p = await prepare(mods);
  const a = await runAdd(mods, p, cpu);
  const firstStart = Math.min(...a.traces.map((t) => t.start));
  const lastEnd = Math.max(...a.traces.map((t) => t.end));
  const requestsWall = lastEnd - firstStart;
  const miloHandling = Math.max(...a.traces.map((t) => t.miloMs));
  const n = a.traces.length;
  const [, warmRequest] = await timed(() => a.mc.getClaim(a.claims[0]));
  const warmRequestMilo = a.traces.length > n ? a.traces[n].miloMs : NaN;
  for (const name of a.claims) await a.mc.deleteClaim(name);
  a.mc.close();
  return {
    runtimeStart,
    bundleLoad,
    libLoad,
    ...p.times,
    claimBodies: firstStart - a.handlerStart,
    requestsWall,
    miloHandling,
    clientNetwork: requestsWall - miloHandling,
    parseAndEncode: a.handlerEnd - lastEnd,
    resultWrite: a.resultWrite,
    logWrite: a.logWrite,
    warmRequest,
    warmRequestMilo,
    requests: n,
    ...a.ends,
    bundleLoadCpu,
    handlerCpu: a.handlerCpu,
  };
}

if (import.meta.main) {
  try {
    console.log(JSON.stringify(await main()));
  } catch (err) {
    console.error(`phases: ${err instanceof Error ? err.stack : err}`);
    Deno.exit(1);
  }
}
