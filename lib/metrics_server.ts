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
 */
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
 * Serves `render()` at `GET /metrics` on `hostname:port`, and the probes at
 * `GET /readyz` and `GET /livez` (200 `ok`, or 503 and the reason).
 */
export function serveMetrics(
  hostname: string,
  port: number,
  render: () => Promise<string>,
  probes?: Probes,
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
        state.done = answer(conn, state, shared, probes).finally(() => {
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
): Promise<void> {
  const head = await within(readHead(conn), HEAD_MS, () => null).catch(() => null);
  if (head === null) return;
  state.waiting = false;
  const [method, target = ""] = head.slice(0, head.indexOf("\r\n")).split(" ");
  const path = target.split("?")[0];
  const probe = path === "/readyz" ? probes?.ready : path === "/livez" ? probes?.live : undefined;
  const failed = probe && method === "GET" ? await probe().catch((err) => String(err)) : null;
  const [status, body] = method !== "GET"
    ? [405, "method not allowed\n"]
    : probe
    ? failed === null ? [200, "ok\n"] : [503, `${failed}\n`]
    : path !== "/metrics"
    ? [404, "not found\n"]
    : [200, await render()];
  const bytes = new TextEncoder().encode(body);
  const metrics = status === 200 && path === "/metrics";
  const text = `HTTP/1.1 ${status} ${REASONS[status]}\r\n` +
    `content-type: ${metrics ? "text/plain; version=0.0.4" : "text/plain"}\r\n` +
    `content-length: ${bytes.byteLength}\r\nconnection: close\r\n\r\n`;
  const out = new Uint8Array([...new TextEncoder().encode(text), ...bytes]);
  const write = async () => {
    for (let at = 0; at < out.byteLength;) at += await conn.write(out.subarray(at));
  };
  await within(write(), WRITE_MS, () => undefined).catch(() => {});
}

const REASONS: Record<number, string> = {
  200: "OK",
  404: "Not Found",
  405: "Method Not Allowed",
  503: "Service Unavailable",
};

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
