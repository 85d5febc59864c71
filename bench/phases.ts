/**
 * Where one ADD spends its time, measured in a fresh process per sample.
 *
 * bench.ts spawns this script once per sample with the CNI environment of an
 * ADD and the network config on stdin, and reads one JSON object of phase
 * timings (ms) from stdout. It walks the same steps as main.ts's `runCni`,
 * through the same lib/ modules, timing each: the plugin's hot path carries no
 * benchmark code. Every step runs once per process, so each timing is a cold,
 * first-call figure, as in the real plugin process.
 *
 *   deno run --allow-all bench/phases.ts BUNDLE.js   (env: CNI_*, MILO_IPAM_CONFIG)
 *
 * There are no static imports, so the time before the first line runs is the
 * runtime's own start-up.
 */

/** Phase timings of one sample (ms). */
export interface PhaseSample {
  /** performance.now() at the first line: runtime start until user code runs. */
  runtimeStart: number;
  /** `import()` of the installed bundle (parse, compile, evaluate). */
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

async function main(): Promise<PhaseSample> {
  const bundle = Deno.args[0];
  if (!bundle) throw new Error("usage: phases.ts BUNDLE.js");
  const cpuUsage: CpuUsage = (await import("node:process")).default.cpuUsage;
  const cpuMs = (u: { user: number; system: number }) => (u.user + u.system) / 1000;
  const c0 = cpuUsage();
  const [, bundleLoad] = await timed(() => import(new URL(`file://${bundle}`).href));
  const bundleLoadCpu = cpuMs(cpuUsage(c0));
  const [mods, libLoad] = await timed(() =>
    Promise.all([
      import("../lib/add.ts"),
      import("../lib/claims.ts"),
      import("../lib/cni.ts"),
      import("../lib/config.ts"),
      import("../lib/log.ts"),
      import("../lib/milo.ts"),
      import("../lib/stdin.ts"),
      import("../lib/journal.ts"),
    ])
  );
  const [
    { add },
    { attachmentOf },
    { readCniEnv },
    config,
    { Logger },
    milo,
    { decodeStdin, readStdinBytes },
    { Journal },
  ] = mods;

  const [stdin, stdinRead] = await timed(async () => decodeStdin(await readStdinBytes()));
  const env = (k: string) => Deno.env.get(k);
  const [node, nodeConfigRead] = await timed(() => config.readNodeConfig(env));
  const [conf, configParse] = await timed(() => config.parseNetConf(stdin, node, "ADD"));
  const [attachment, envAndIdentity] = await timed(() => {
    const cni = readCniEnv(env);
    return attachmentOf(node, conf, cni);
  });
  const [token, tokenRead] = await timed(() => milo.readToken(node));
  const [client, tlsClientCreate] = await timed(() => milo.httpClientFor(node));

  const traces: Trace[] = [];
  const tracingFetch: typeof fetch = async (input, init) => {
    const tr: Trace = { start: performance.now(), end: 0, miloMs: NaN };
    traces.push(tr);
    const res = await fetch(input, init);
    tr.miloMs = serverMs(res);
    const body = await res.text();
    tr.end = performance.now();
    return new Response(body, { status: res.status, headers: res.headers });
  };
  const mc = new milo.MiloClient({
    baseUrl: node.milo.url.replace(/\/+$/, ""),
    namespace: node.milo.namespace,
    token,
    requestMs: conf.network.timeouts.requestMs,
    deadline: Date.now() + conf.network.timeouts.totalMs,
    client,
    fetch: tracingFetch,
  });
  const cni = readCniEnv(env);
  const c1 = cpuUsage();
  const handlerStart = performance.now();
  const { output: result, claims: touched } = await add({
    env: cni,
    conf,
    node,
    attachment,
    milo: mc,
    rollback: mc,
    journal: new Journal(node.stateDir),
    now: Date.now,
  });
  const handlerEnd = performance.now();
  const handlerCpu = cpuMs(cpuUsage(c1));
  if (!traces.length) throw new Error("the ADD sent no request");
  const firstStart = Math.min(...traces.map((t) => t.start));
  const lastEnd = Math.max(...traces.map((t) => t.end));
  const requestsWall = lastEnd - firstStart;
  const miloHandling = Math.max(...traces.map((t) => t.miloMs));

  const [, resultWrite] = await timed(() => {
    const f = Deno.openSync("/dev/null", { write: true });
    f.writeSync(new TextEncoder().encode(JSON.stringify(result) + "\n"));
    f.close();
  });
  const logger = new Logger();
  const [, logWrite] = await timed(() => {
    logger.configure(node.log.file, node.log.level);
    return logger.write("info", {
      verb: "ADD",
      containerId: cni.containerId,
      claims: touched,
      outcome: "ok",
      durationMs: 0,
    });
  });
  const total = performance.now();
  const totalCpu = cpuMs(cpuUsage());

  const n = traces.length;
  const [, warmRequest] = await timed(() => mc.getClaim(touched[0]));
  const warmRequestMilo = traces.length > n ? traces[n].miloMs : NaN;
  for (const name of touched) await mc.deleteClaim(name);
  mc.close();
  return {
    runtimeStart,
    bundleLoad,
    libLoad,
    stdinRead,
    nodeConfigRead,
    configParse,
    envAndIdentity,
    tokenRead,
    tlsClientCreate,
    claimBodies: firstStart - handlerStart,
    requestsWall,
    miloHandling,
    clientNetwork: requestsWall - miloHandling,
    parseAndEncode: handlerEnd - lastEnd,
    resultWrite,
    logWrite,
    warmRequest,
    warmRequestMilo,
    requests: n,
    total,
    bundleLoadCpu,
    handlerCpu,
    totalCpu,
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
