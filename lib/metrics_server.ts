/**
 * The agent's metrics listener: `GET /metrics`, `/readyz` and `/livez` over
 * plain HTTP/1.1 on the port `agent.metrics` names, bounded so that nobody
 * who can reach the port can grow the agent or shut the scraper out: at most
 * {@link MAX_CONNECTIONS} connections at once, a request head of at most
 * {@link HEAD_BYTES} read within {@link HEAD_MS}, one answer per connection,
 * then close. Every connection is accepted: past the bound, the oldest one
 * still without its request head is closed to make room. A scraper (or a
 * probe) sends its head as it connects, so held connections (idle, or
 * trickling a head) are the ones closed, never a request being answered;
 * scrapes arriving together share one rendering.
 *
 * With a scrape token (`agent.metricsTokenFile`), `/metrics` answers only a
 * request carrying it as `Authorization: Bearer` (Prometheus's
 * `authorization`, the PodMonitor's in deploy/monitoring), else 401: on the
 * node's addresses under `hostNetwork`, every pod reaches the port. The probes
 * stay open, as the kubelet sends no credentials; they say ready or not, and
 * why not. Tokens are compared by their SHA-256, so the time a comparison
 * takes tells nothing of the token.
 */
import { sha256Hex } from "./sha256.ts";
import { after, within } from "./timers.ts";

/** Connections served at once (file descriptors of the agent). */
export const MAX_CONNECTIONS = 64;
/** Longest a client may take to send its request head. */
export const HEAD_MS = 2_000;
/** Largest request head read (a scrape's is a few hundred bytes). */
export const HEAD_BYTES = 8 * 1024;
/** Longest writing the answer may take. */
const WRITE_MS = 2_000;

/** A running listener. */
export interface MetricsServer {
  close(): Promise<void>;
}

/** One open connection: whether its request head is still awaited, and its handling. */
interface Open {
  waiting: boolean;
  done?: Promise<void>;
}

/** A probe: null when it passes, else why it fails (answered 503 with that text). */
export type Probe = () => Promise<string | null>;

/** The probes served beside the metrics: `GET /readyz` and `GET /livez`. */
export interface Probes {
  ready: Probe;
  live: Probe;
}

/**
 * The bearer token a scrape of `/metrics` must send, asked for at each scrape
 * (so a rotated token counts at once); null when none can be read, and then
 * every scrape is refused.
 */
export type ScrapeToken = () => Promise<string | null>;

/**
 * Serves `render()` at `GET /metrics` on `hostname:port`, only to a request
 * bearing `scrapeToken()` when one is given, and the probes at `GET /readyz`
 * and `GET /livez` (200 `ok`, or 503 and the reason).
 */
export function serveMetrics(
  hostname: string,
  port: number,
  render: () => Promise<string>,
  probes?: Probes,
  scrapeToken?: ScrapeToken,
): MetricsServer {
  const listener = Deno.listen({ hostname, port });
  // In order of acceptance: the first waiting one is the oldest still without its head.
  const open = new Map<Deno.Conn, Open>();
  let rendering: Promise<string> | undefined;
  const shared = () => rendering ??= render().finally(() => rendering = undefined);
  const accepting = (async () => {
    try {
      for await (const conn of listener) {
        if (open.size >= MAX_CONNECTIONS) {
          // A turn of the event loop first: heads that have arrived are read (their
          // connections are then being answered), however fast connections arrive.
          await after(0);
          evictOne(open);
        }
        const state: Open = { waiting: true };
        open.set(conn, state);
        state.done = answer(conn, state, shared, probes, scrapeToken).finally(() => {
          open.delete(conn);
          closeQuietly(conn);
        });
      }
    } catch {
      // Listener closed.
    }
  })();
  return {
    async close() {
      listener.close();
      await accepting;
      await Promise.allSettled([...open.values()].map((o) => o.done));
    },
  };
}

/** Closes the oldest connection still without its request head, else the oldest one. */
function evictOne(open: Map<Deno.Conn, Open>): void {
  let victim: Deno.Conn | undefined;
  for (const [conn, o] of open) {
    if (o.waiting) {
      victim = conn;
      break;
    }
    victim ??= conn;
  }
  if (!victim) return;
  open.delete(victim);
  closeQuietly(victim);
}

async function answer(
  conn: Deno.Conn,
  state: Open,
  render: () => Promise<string>,
  probes?: Probes,
  scrapeToken?: ScrapeToken,
): Promise<void> {
  const head = await within(readHead(conn), HEAD_MS, () => null).catch(() => null);
  if (head === null) return;
  state.waiting = false;
  const [method, target = ""] = head.slice(0, head.indexOf("\r\n")).split(" ");
  const path = target.split("?")[0];
  const probe = path === "/readyz" ? probes?.ready : path === "/livez" ? probes?.live : undefined;
  const failed = probe && method === "GET" ? await probe().catch((err) => String(err)) : null;
  const refused = method === "GET" && path === "/metrics" && scrapeToken !== undefined &&
    !await bears(head, scrapeToken);
  const [status, body] = method !== "GET"
    ? [405, "method not allowed\n"]
    : probe
    ? failed === null ? [200, "ok\n"] : [503, `${failed}\n`]
    : path !== "/metrics"
    ? [404, "not found\n"]
    : refused
    ? [401, "unauthorized: /metrics needs the scraper's bearer token (agent.metricsTokenFile)\n"]
    : [200, await render()];
  const bytes = new TextEncoder().encode(body);
  const metrics = status === 200 && path === "/metrics";
  const text = `HTTP/1.1 ${status} ${REASONS[status]}\r\n` +
    `content-type: ${metrics ? "text/plain; version=0.0.4" : "text/plain"}\r\n` +
    (status === 401 ? `www-authenticate: Bearer realm="milo-ipam"\r\n` : "") +
    `content-length: ${bytes.byteLength}\r\nconnection: close\r\n\r\n`;
  const out = new Uint8Array([...new TextEncoder().encode(text), ...bytes]);
  const write = async () => {
    for (let at = 0; at < out.byteLength;) at += await conn.write(out.subarray(at));
  };
  await within(write(), WRITE_MS, () => undefined).catch(() => {});
}

const REASONS: Record<number, string> = {
  200: "OK",
  401: "Unauthorized",
  404: "Not Found",
  405: "Method Not Allowed",
  503: "Service Unavailable",
};

/** Whether the request head bears the scrape token (`Authorization: Bearer TOKEN`). */
async function bears(head: string, scrapeToken: ScrapeToken): Promise<boolean> {
  const token = await scrapeToken().catch(() => null);
  if (!token) return false;
  const sent = head.split("\r\n").slice(1)
    .map((line) => /^authorization:[ \t]*bearer[ \t]+(\S+)[ \t]*$/i.exec(line)?.[1])
    .find((t) => t !== undefined);
  return sent !== undefined && sha256Hex(sent) === sha256Hex(token);
}

/** The request head (up to the blank line), or null when it ends first or grows too big. */
async function readHead(conn: Deno.Conn): Promise<string | null> {
  const buf = new Uint8Array(HEAD_BYTES);
  let used = 0;
  while (used < buf.byteLength) {
    const n = await conn.read(buf.subarray(used));
    if (n === null) return null;
    used += n;
    const text = new TextDecoder().decode(buf.subarray(0, used));
    if (text.includes("\r\n\r\n")) return text;
  }
  return null;
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Closed already.
  }
}
