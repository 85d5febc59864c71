/**
 * The API listener (node:http or node:https): body limits, the page and its
 * feed, faults around each API request, counters, and closing and reopening
 * on the same port for the `down` fault.
 */

import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import {
  authenticate,
  claimCreateName,
  handleApi,
  isClaimCreate,
  type Meter,
  notARoute,
  parseRoute,
  type Reply,
  type Route,
} from "./api.ts";
import type { ApfQueue } from "./apf.ts";
import type { Decision, Faults, FaultState } from "./faults.ts";
import type { Ipam } from "./ipam.ts";
import type { AllocationCeiling } from "./limits.ts";
import { type Admitted, type Quota, type QuotaRefusal, quotaRefused } from "./quota.ts";
import { renderPage, utilization } from "./page.ts";
import { bump, type Stats } from "./stats.ts";
import { ApiError, injected } from "./status.ts";

const MAX_BODY = 1 << 20;

/** What the listener needs. */
export interface ListenerOptions {
  host: string;
  /** 0 picks a free port; reopening after `down` reuses the bound one. */
  port: number;
  /** PEM certificate and key: HTTPS. */
  tls?: { cert: string; key: string };
  ipam: Ipam;
  faults: FaultState;
  /** The allocation ceiling: its limits and switches. */
  ceiling: AllocationCeiling;
  /** API Priority and Fairness: every request waits for a seat (a create for the ceiling too) or is refused here. */
  queue: ApfQueue;
  /** Milo's quota admission of claim creates. */
  quota: Quota;
  /** The counters in force (a reset replaces them). */
  stats: () => Stats;
  log: (line: string) => void;
}

/** The API listener. */
export class ApiListener {
  readonly #o: ListenerOptions;
  #server: http.Server | undefined;
  #port: number;
  #sockets = new Set<Socket>();
  #hangs = new Set<ReturnType<typeof setTimeout>>();

  constructor(opts: ListenerOptions) {
    this.#o = opts;
    this.#port = opts.port;
  }

  /** The bound port (after the first {@link listen}). */
  get port(): number {
    return this.#port;
  }

  /** Binds the port and serves. */
  listen(): Promise<void> {
    const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) =>
      this.#onRequest(req, res);
    const tls = this.#o.tls;
    const s = tls ? https.createServer(tls, onRequest) : http.createServer(onRequest);
    s.keepAliveTimeout = 5_000;
    s.on("connection", (sock: Socket) => {
      this.#o.stats().connections++;
      this.#sockets.add(sock);
      sock.on("close", () => this.#sockets.delete(sock));
    });
    if (tls) {
      s.on("secureConnection", () => {
        const st = this.#o.stats();
        st.tlsHandshakes = (st.tlsHandshakes ?? 0) + 1;
      });
    }
    s.on("clientError", (_err, sock: Socket) => sock.destroy());
    return new Promise((resolve, reject) => {
      s.once("error", reject);
      s.listen(this.#port, this.#o.host, () => {
        s.off("error", reject);
        const a = s.address();
        if (a && typeof a === "object") this.#port = a.port;
        this.#server = s;
        resolve();
      });
    });
  }

  /** Stops listening and drops every connection and hung request. */
  close(): Promise<void> {
    const s = this.#server;
    this.#server = undefined;
    for (const t of this.#hangs) clearTimeout(t);
    this.#hangs.clear();
    for (const sock of this.#sockets) sock.destroy();
    this.#sockets.clear();
    if (!s) return Promise.resolve();
    return new Promise((resolve) => s.close(() => resolve()));
  }

  async #onRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const t0 = performance.now();
    const gone = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) gone.abort();
    });
    const body = await readBody(req, res);
    if (body === undefined) return;
    const url = new URL(req.url ?? "/", "http://milo-dev");
    const p = url.pathname;
    const { ipam, log } = this.#o;
    const stats = this.#o.stats();
    try {
      if (p === "/" && (req.method === "GET" || req.method === "HEAD")) {
        stats.page.html++;
        const project = url.searchParams.get("project");
        const html = renderPage(utilization(ipam, project), project);
        res.writeHead(200, {
          "content-type": "text/html; charset=utf-8",
          "cache-control": "no-store",
          "server-timing": timingSince(t0),
        });
        res.end(req.method === "HEAD" ? undefined : html);
      } else if (p === "/-/utilization" && req.method === "GET") {
        stats.page.feed++;
        const feed = utilization(ipam, url.searchParams.get("project"));
        send(res, { status: 200, body: feed }, timingSince(t0));
      } else if ((p === "/healthz" || p === "/readyz") && req.method === "GET") {
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("ok");
      } else await this.#onApi(req, res, url, body, t0, gone.signal);
    } catch (err) {
      log(`milo-dev: ${err instanceof Error ? err.stack : err}`);
      if (!res.headersSent) {
        const e = new ApiError(500, "InternalError", `Internal error occurred: ${err}`);
        send(res, { status: 500, body: e.status }, timingSince(t0));
      } else res.socket?.destroy();
    }
  }

  /**
   * One `/apis/...` request (or an unknown path) with the faults drawn for
   * it: through APF (a seat held until it is answered), a claim create
   * through Milo's quota admission too.
   */
  async #onApi(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    url: URL,
    body: string,
    t0: number,
    gone: AbortSignal,
  ): Promise<void> {
    const method = req.method ?? "GET";
    const route = parseRoute(url.pathname);
    const kind = route?.resource ?? "other";
    const stats = this.#o.stats();
    stats.total++;
    bump(stats.byMethod, method);
    bump(stats.byKind, kind);
    const authorization = req.headers.authorization ?? null;
    let startedAt = t0;
    let seat: (() => void) | undefined;
    try {
      if (route) {
        const entered = await this.#enter(route, method, url, authorization, body, gone);
        if (entered === "gone") return;
        if (typeof entered === "number") {
          bump(stats.byStatus, "429");
          sendText(res, 429, "Too many requests, please try again later.\n", {
            "retry-after": String(entered),
          });
          return;
        }
        seat = entered.done;
        startedAt = Math.max(t0, entered.at);
      }
      const admitted = route
        ? await this.#admitQuota(route, method, url, body, gone, authorization)
        : undefined;
      if (admitted === "gone") return;
      if (admitted) startedAt = performance.now();
      await this.#answer(
        res,
        { method, url, route, kind, authorization, body, startedAt, t0 },
        admitted,
      );
    } finally {
      seat?.();
    }
  }

  /** The answer of an API request past APF and quota (faults drawn for it). */
  async #answer(
    res: http.ServerResponse,
    r: {
      method: string;
      url: URL;
      route: Route | undefined;
      kind: string;
      authorization: string | null;
      body: string;
      startedAt: number;
      t0: number;
    },
    admitted: Admitted | QuotaRefusal | undefined,
  ): Promise<void> {
    const { method, url, route, kind, authorization, body, t0 } = r;
    const stats = this.#o.stats();
    const d = this.#o.faults.decide(method, kind);
    const f = this.#o.faults.get();
    let delayed = 0;
    if (d.delayMs > 0) {
      stats.faults.latency++;
      const start = performance.now();
      await new Promise((r) => setTimeout(r, d.delayMs));
      delayed = performance.now() - start;
    }
    // Injected latency is reported apart, so milo;dur stays the handling time.
    const timing = () => {
      const ms = performance.now() - t0 - delayed;
      return `milo;dur=${ms.toFixed(3)}` + (delayed ? `, fault;dur=${delayed.toFixed(3)}` : "");
    };
    if (f.faultPoint === "before" && this.#fault(res, d, f, timing)) return;
    let reply: Reply;
    try {
      if (typeof admitted === "string") {
        bump(stats.quotaRefused, admitted);
        throw quotaRefused(claimCreateName(route!.namespace!, body) ?? "", admitted);
      }
      if (route) {
        reply = handleApi(this.#o.ipam, {
          method,
          url,
          route,
          authorization,
          body,
          failRelease: d.failRelease,
          limits: this.#o.ceiling.get(),
          startedAt: r.startedAt,
          usage: (p) => this.#o.quota.usage(p),
        });
        if (d.failRelease) stats.faults.releaseFail++;
        if (reply.meter) count(stats, reply.meter);
      } else {
        const other = { method, url, route: { resource: "other" }, authorization, body };
        authenticate(this.#o.ipam, other);
        reply = notARoute();
      }
    } catch (err) {
      reply = this.#internalError(err, method, url);
    }
    if (typeof admitted === "object") admitted.settle(reply.status === 201);
    if (f.faultPoint === "after" && this.#fault(res, d, f, timing)) return;
    bump(stats.byStatus, String(reply.status));
    send(res, reply, timing());
  }

  /**
   * Milo's quota admission of a claim create that is not a dry run and whose
   * body validates (Milo validates it first; an invalid one is answered as
   * such): the grant, Milo's 403, `gone`, or undefined when none applies.
   */
  async #admitQuota(
    route: Route,
    method: string,
    url: URL,
    body: string,
    gone: AbortSignal,
    authorization: string | null,
  ): Promise<Admitted | QuotaRefusal | "gone" | undefined> {
    if (!isClaimCreate(method, route) || url.searchParams.has("dryRun")) return undefined;
    const ns = route.namespace!;
    const name = claimCreateName(ns, body);
    if (name === undefined) return undefined;
    let project: string;
    try {
      project = authenticate(this.#o.ipam, { method, url, route, authorization, body });
    } catch {
      return undefined;
    }
    return await this.#o.quota.admit(project, ns, name, gone);
  }

  /**
   * A request through APF: its queue's answer once authentication passed
   * (401 and 403 come first, from the handler): when it may start (`at`) and
   * how it gives its seat back, the `Retry-After` of a rejection, or `gone`.
   */
  async #enter(
    route: Route,
    method: string,
    url: URL,
    authorization: string | null,
    body: string,
    gone: AbortSignal,
  ): Promise<{ at: number; done: () => void } | number | "gone"> {
    try {
      authenticate(this.#o.ipam, { method, url, route, authorization, body });
    } catch {
      return { at: performance.now(), done: () => {} };
    }
    const create = isClaimCreate(method, route);
    const e = await this.#o.queue.enter(authorization ?? "", gone, create);
    if (e === "gone") return "gone";
    const stats = this.#o.stats();
    if (!e.admitted) {
      stats.throttled++;
      return e.retryAfterSeconds;
    }
    if (e.waitedMs > 0) stats.queued++;
    return { at: performance.now(), done: e.done };
  }

  /** Applies a drawn fault to the answer; false when there is none. */
  #fault(res: http.ServerResponse, d: Decision, f: Faults, timing: () => string): boolean {
    if (d.action === "none") return false;
    const stats = this.#o.stats();
    stats.faults[d.action]++;
    if (d.action === "reset") res.socket?.destroy();
    else if (d.action === "hang") this.#hang(res, f.hangMs);
    else if (d.status === 429) {
      bump(stats.byStatus, "429");
      sendText(res, 429, "Too many requests, please try again later.\n", {
        "retry-after": String(f.retryAfterSeconds),
        "server-timing": timing(),
      });
    } else {
      const e = injected(d.status, f.retryAfterSeconds);
      bump(stats.byStatus, String(d.status));
      send(res, { status: e.status.code, body: e.status, headers: e.headers }, timing());
    }
    return true;
  }

  /** Answers nothing for `ms`, then drops the connection. */
  #hang(res: http.ServerResponse, ms: number): void {
    const t = setTimeout(() => {
      this.#hangs.delete(t);
      res.socket?.destroy();
    }, ms);
    this.#hangs.add(t);
    res.on("close", () => {
      clearTimeout(t);
      this.#hangs.delete(t);
    });
  }

  #internalError(err: unknown, method: string, url: URL): Reply {
    if (err instanceof ApiError) {
      return { status: err.status.code, body: err.status, headers: err.headers };
    }
    this.#o.log(
      `milo-dev: internal error on ${method} ${url.pathname}: ${
        err instanceof Error ? err.stack : err
      }`,
    );
    const e = new ApiError(500, "InternalError", `Internal error occurred: ${err}`, {
      causes: [{ message: String(err) }],
    });
    return { status: 500, body: e.status };
  }
}

/** The whole body as text; undefined when it was too large (answered 413) or the read failed. */
async function readBody(
  req: http.IncomingMessage,
  res: http.ServerResponse,
): Promise<string | undefined> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for await (const c of req) {
      size += c.length;
      if (size > MAX_BODY) {
        const e = new ApiError(413, "RequestEntityTooLarge", "the request body is too large");
        send(res, { status: 413, body: e.status }, `milo;dur=0`);
        return undefined;
      }
      chunks.push(c);
    }
  } catch {
    return undefined;
  }
  return new TextDecoder().decode(
    chunks.length === 1 ? chunks[0] : new Uint8Array(chunks.flatMap((c) => [...c])),
  );
}

/** Adds a request's cost to the counters. */
function count(stats: Stats, m: Meter): void {
  if (m.list) {
    stats.lists++;
    stats.listRowsScanned += m.list.rows;
    const k = stats.listsByKind[m.list.kind] ??= { lists: 0, rowsScanned: 0 };
    k.lists++;
    k.rowsScanned += m.list.rows;
  }
  if (m.allocated) stats.allocations++;
}

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

/** A plain-text answer, as Go's `http.Error` writes one (the apiserver's APF rejection). */
function sendText(
  res: http.ServerResponse,
  status: number,
  text: string,
  headers: Record<string, string>,
): void {
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "x-content-type-options": "nosniff",
    ...headers,
  });
  res.end(text);
}

function timingSince(t0: number): string {
  return `milo;dur=${(performance.now() - t0).toFixed(3)}`;
}
