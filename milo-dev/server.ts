/**
 * milo-dev server: the HTTP(S) API listener, the admin listener and their
 * wiring. A development and test tool, never a production backend.
 */

import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import { authenticate, handleApi, notARoute, parseRoute, type Reply } from "./api.ts";
import { defaultFaults, FaultError, type Faults, FaultState, mergeFaults } from "./faults.ts";
import { Ipam } from "./ipam.ts";
import { renderPage, utilization } from "./page.ts";
import { loadSeedFile, type Seed, validateSeed } from "./seed.ts";
import { ApiError, injected } from "./status.ts";
import { Store } from "./store.ts";

/** Options of {@link startServer}. */
export interface ServerOptions {
  /** Seed document (validated), or use `seedPath`. */
  seed?: unknown;
  /** Seed file (JSON, or YAML by extension). */
  seedPath?: string;
  /** SQLite database file (created when missing). */
  dbPath: string;
  /** API address `HOST:PORT`; default `127.0.0.1:8443`; `:0` picks a free port. */
  listen?: string;
  /** PEM certificate file; with `keyFile` the API is served over HTTPS. */
  certFile?: string;
  /** PEM private key file. */
  keyFile?: string;
  /** Admin address `HOST:PORT` (loopback only); default `127.0.0.1:0`. */
  admin?: string;
  /** Log lines (default: stderr). */
  log?: (line: string) => void;
}

/** A running milo-dev. */
export interface MiloDevServer {
  url: string;
  adminUrl: string;
  ipam: Ipam;
  faults: FaultState;
  /** Stops both listeners and closes the database. */
  close(): Promise<void>;
}

/** Request counters served at admin `/stats`. */
interface Stats {
  total: number;
  byMethod: Record<string, number>;
  byKind: Record<string, number>;
  byStatus: Record<string, number>;
  faults: Record<string, number>;
  page: { html: number; feed: number };
  since: string;
}

function newStats(): Stats {
  return {
    total: 0,
    byMethod: {},
    byKind: {},
    byStatus: {},
    faults: { latency: 0, error: 0, reset: 0, hang: 0, releaseFail: 0 },
    page: { html: 0, feed: 0 },
    since: new Date().toISOString(),
  };
}

function bump(m: Record<string, number>, k: string): void {
  m[k] = (m[k] ?? 0) + 1;
}

/** Splits `HOST:PORT` (`[v6]:PORT`, `:PORT`). */
export function parseHostPort(s: string): { host: string; port: number } {
  const m = s.match(/^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/);
  if (!m || Number(m[3]) > 65535) {
    throw new Error(`bad address ${JSON.stringify(s)}: want HOST:PORT`);
  }
  return { host: m[1] ?? (m[2] || "127.0.0.1"), port: Number(m[3]) };
}

/** Whether a listen host is on loopback. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function urlHost(host: string): string {
  if (host === "0.0.0.0" || host === "") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}

const MAX_BODY = 1 << 20;

/** Starts milo-dev: opens the store, applies the seed, binds both listeners. */
export async function startServer(opts: ServerOptions): Promise<MiloDevServer> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const seed: Seed = opts.seedPath ? await loadSeedFile(opts.seedPath) : validateSeed(opts.seed);
  const { host, port } = parseHostPort(opts.listen ?? "127.0.0.1:8443");
  const tls = Boolean(opts.certFile || opts.keyFile);
  if (tls && !(opts.certFile && opts.keyFile)) throw new Error("--cert and --key go together");
  if (!tls && !isLoopback(host)) {
    throw new Error(`refusing plain HTTP on non-loopback address ${host}: pass --cert and --key`);
  }
  const admin = parseHostPort(opts.admin ?? "127.0.0.1:0");
  if (!isLoopback(admin.host)) {
    throw new Error(`the admin listener must be on loopback, not ${admin.host}`);
  }
  const tlsOpts = tls
    ? { cert: await Deno.readTextFile(opts.certFile!), key: await Deno.readTextFile(opts.keyFile!) }
    : undefined;

  const store = new Store(opts.dbPath);
  let ipam: Ipam;
  try {
    ipam = new Ipam(store, seed);
  } catch (err) {
    store.close();
    throw err;
  }
  const faults = new FaultState();
  let stats = newStats();
  const sockets = new Set<Socket>();
  const hangs = new Set<ReturnType<typeof setTimeout>>();
  let server: http.Server | undefined;
  let boundPort = port;

  function send(res: http.ServerResponse, reply: Reply, timing: string): void {
    const body = JSON.stringify(reply.body);
    res.writeHead(reply.status, {
      "content-type": "application/json",
      "cache-control": "no-store",
      "server-timing": timing,
      ...reply.headers,
    });
    res.end(body);
  }

  function destroy(res: http.ServerResponse): void {
    res.socket?.destroy();
  }

  function hang(res: http.ServerResponse, ms: number): void {
    const t = setTimeout(() => {
      hangs.delete(t);
      destroy(res);
    }, ms);
    hangs.add(t);
    res.on("close", () => {
      clearTimeout(t);
      hangs.delete(t);
    });
  }

  async function onApi(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    url: URL,
    body: string,
    t0: number,
  ) {
    const method = req.method ?? "GET";
    const route = parseRoute(url.pathname);
    const kind = route?.resource ?? "other";
    stats.total++;
    bump(stats.byMethod, method);
    bump(stats.byKind, kind);
    const d = faults.decide(method, kind);
    const f = faults.get();
    let delayed = 0;
    if (d.delayMs > 0) {
      stats.faults.latency++;
      const start = performance.now();
      await new Promise((r) => setTimeout(r, d.delayMs));
      delayed = performance.now() - start;
    }
    const timing = () => {
      const ms = performance.now() - t0 - delayed;
      return `milo;dur=${ms.toFixed(3)}` + (delayed ? `, fault;dur=${delayed.toFixed(3)}` : "");
    };
    const applyFault = (): boolean => {
      if (d.action === "none") return false;
      stats.faults[d.action]++;
      if (d.action === "reset") destroy(res);
      else if (d.action === "hang") hang(res, f.hangMs);
      else {
        const e = injected(d.status, f.retryAfterSeconds);
        bump(stats.byStatus, String(d.status));
        send(res, { status: e.status.code, body: e.status, headers: e.headers }, timing());
      }
      return true;
    };
    if (f.faultPoint === "before" && applyFault()) return;
    let reply: Reply;
    try {
      if (route) {
        reply = handleApi(ipam, {
          method,
          url,
          route,
          authorization: req.headers.authorization ?? null,
          body,
          failRelease: d.failRelease,
        });
        if (d.failRelease) stats.faults.releaseFail++;
      } else {
        authenticate(ipam, {
          method,
          url,
          route: { resource: "other" },
          authorization: req.headers.authorization ?? null,
          body,
        });
        reply = notARoute();
      }
    } catch (err) {
      if (err instanceof ApiError) {
        reply = { status: err.status.code, body: err.status, headers: err.headers };
      } else {
        log(
          `milo-dev: internal error on ${method} ${url.pathname}: ${
            err instanceof Error ? err.stack : err
          }`,
        );
        const e = new ApiError(500, "InternalError", `Internal error occurred: ${err}`, {
          causes: [{ message: String(err) }],
        });
        reply = { status: 500, body: e.status };
      }
    }
    if (f.faultPoint === "after" && applyFault()) return;
    bump(stats.byStatus, String(reply.status));
    send(res, reply, timing());
  }

  async function onRequest(req: http.IncomingMessage, res: http.ServerResponse) {
    const t0 = performance.now();
    const chunks: Uint8Array[] = [];
    let size = 0;
    try {
      for await (const c of req) {
        size += c.length;
        if (size > MAX_BODY) {
          const e = new ApiError(413, "RequestEntityTooLarge", "the request body is too large");
          send(res, { status: 413, body: e.status }, `milo;dur=0`);
          return;
        }
        chunks.push(c);
      }
    } catch {
      return;
    }
    const body = new TextDecoder().decode(
      chunks.length === 1 ? chunks[0] : new Uint8Array(chunks.flatMap((c) => [...c])),
    );
    const url = new URL(req.url ?? "/", "http://milo-dev");
    const p = url.pathname;
    try {
      if (p === "/" && (req.method === "GET" || req.method === "HEAD")) {
        stats.page.html++;
        const project = url.searchParams.get("project");
        const html = renderPage(utilization(ipam, project), project);
        res.writeHead(200, {
          "content-type": "text/html; charset=utf-8",
          "cache-control": "no-store",
          "server-timing": `milo;dur=${(performance.now() - t0).toFixed(3)}`,
        });
        res.end(req.method === "HEAD" ? undefined : html);
      } else if (p === "/-/utilization" && req.method === "GET") {
        stats.page.feed++;
        send(
          res,
          { status: 200, body: utilization(ipam, url.searchParams.get("project")) },
          timingSince(t0),
        );
      } else if ((p === "/healthz" || p === "/readyz") && req.method === "GET") {
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("ok");
      } else await onApi(req, res, url, body, t0);
    } catch (err) {
      log(`milo-dev: ${err instanceof Error ? err.stack : err}`);
      if (!res.headersSent) {
        const e = new ApiError(500, "InternalError", `Internal error occurred: ${err}`);
        send(res, { status: 500, body: e.status }, timingSince(t0));
      } else destroy(res);
    }
  }

  function listenApi(): Promise<void> {
    const s = tlsOpts ? https.createServer(tlsOpts, onRequest) : http.createServer(onRequest);
    s.keepAliveTimeout = 5_000;
    s.on("connection", (sock: Socket) => {
      sockets.add(sock);
      sock.on("close", () => sockets.delete(sock));
    });
    s.on("clientError", (_err, sock: Socket) => sock.destroy());
    return new Promise((resolve, reject) => {
      s.once("error", reject);
      s.listen(boundPort, host, () => {
        s.off("error", reject);
        const a = s.address();
        if (a && typeof a === "object") boundPort = a.port;
        server = s;
        resolve();
      });
    });
  }

  function closeApi(): Promise<void> {
    const s = server;
    server = undefined;
    for (const t of hangs) clearTimeout(t);
    hangs.clear();
    for (const sock of sockets) sock.destroy();
    sockets.clear();
    if (!s) return Promise.resolve();
    return new Promise((resolve) => s.close(() => resolve()));
  }

  async function setFaults(next: Faults): Promise<void> {
    const wasDown = faults.get().down;
    faults.set(next);
    if (next.down && !wasDown) {
      await closeApi();
      log("milo-dev: API listener is down (fault)");
    } else if (!next.down && wasDown) {
      await listenApi();
      log("milo-dev: API listener is up again");
    }
  }

  try {
    await listenApi();
  } catch (err) {
    store.close();
    throw err;
  }

  const adminAbort = new AbortController();
  let adminPort = 0;
  const adminServer = Deno.serve({
    hostname: admin.host,
    port: admin.port,
    signal: adminAbort.signal,
    onListen: (a) => adminPort = a.port,
  }, async (req) => {
    const url = new URL(req.url);
    const json = (v: unknown, status = 200) =>
      new Response(JSON.stringify(v, null, 2) + "\n", {
        status,
        headers: { "content-type": "application/json" },
      });
    try {
      if (url.pathname === "/faults") {
        if (req.method === "GET") return json(faults.get());
        if (req.method === "DELETE") {
          await setFaults(defaultFaults());
          return json(faults.get());
        }
        if (req.method === "PUT" || req.method === "POST" || req.method === "PATCH") {
          const patch = await req.json().catch(() => {
            throw new FaultError("body must be JSON");
          });
          const base = req.method === "PUT" ? defaultFaults() : faults.get();
          await setFaults(mergeFaults(base, patch));
          return json(faults.get());
        }
      }
      if (url.pathname === "/stats" && req.method === "GET") return json(stats);
      if (
        (url.pathname === "/stats/reset" && req.method === "POST") ||
        (url.pathname === "/stats" && req.method === "DELETE")
      ) {
        stats = newStats();
        return json(stats);
      }
      if (url.pathname === "/healthz") return new Response("ok\n");
      if (url.pathname === "/") {
        return new Response(
          "milo-dev admin\n  GET|PUT|POST|DELETE /faults\n  GET /stats   POST /stats/reset\n  GET /healthz\n",
        );
      }
      return json({ error: "not found" }, 404);
    } catch (err) {
      if (err instanceof FaultError || err instanceof SyntaxError) {
        return json({ error: err.message }, 400);
      }
      return json({ error: String(err) }, 500);
    }
  });

  const apiUrl = `${tlsOpts ? "https" : "http"}://${urlHost(host)}:${boundPort}`;
  const adminUrl = `http://${urlHost(admin.host)}:${adminPort || adminServer.addr.port}`;
  let closed: Promise<void> | undefined;
  return {
    url: apiUrl,
    adminUrl,
    ipam,
    faults,
    close() {
      closed ??= (async () => {
        adminAbort.abort();
        await closeApi();
        await adminServer.finished;
        store.close();
      })();
      return closed;
    },
  };
}

function timingSince(t0: number): string {
  return `milo;dur=${(performance.now() - t0).toFixed(3)}`;
}
