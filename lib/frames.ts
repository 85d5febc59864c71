/**
 * The agent's wire format on its unix socket: length-prefixed frames (a
 * 4-byte big-endian length, then the bytes). A request is a JSON header frame
 * and a stdin frame; the agent answers an optional `ack` frame (the deadline
 * and result version, once it has read the config) and one `reply` frame. A
 * plugin that stops waiting and does the call itself says so first with a
 * `fallback` frame: from then on the call is the plugin's, and the agent
 * never undoes what it did of it.
 */

/** Largest frame accepted (stdin is at most 1 MiB + 1 byte). */
export const MAX_FRAME_BYTES = 2 * 1024 * 1024;

/** The header of a request: the CNI environment and when the plugin process started. */
export interface RequestHeader {
  v: 1;
  env: Record<string, string>;
  /** When the plugin process started (ms since epoch); totalMs counts from here. */
  started: number;
}

/** What the agent answers. */
export type AgentFrame =
  | { kind: "ack"; deadline: number; cniVersion: string }
  | { kind: "reply"; exitCode: number; stdout: string };

/** What the plugin may send after its request. */
export type ClientFrame = { kind: "fallback" };

/** Frames `parts` into one buffer, each behind its 4-byte length. */
function framed(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + 4 + p.byteLength, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const p of parts) {
    view.setUint32(at, p.byteLength);
    out.set(p, at + 4);
    at += 4 + p.byteLength;
  }
  return out;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let at = 0; at < bytes.byteLength;) at += await conn.write(bytes.subarray(at));
}

/** Writes a JSON frame. */
export function writeJson(conn: Deno.Conn, value: unknown): Promise<void> {
  return writeAll(conn, framed(new TextEncoder().encode(JSON.stringify(value))));
}

/** Sends one request, the header frame and the stdin frame, in one write. */
export function writeRequest(
  conn: Deno.Conn,
  header: RequestHeader,
  stdin: Uint8Array,
): Promise<void> {
  return writeAll(conn, framed(new TextEncoder().encode(JSON.stringify(header)), stdin));
}

/**
 * Reads frames from a connection; `next()` answers null at end of stream.
 * A frame is read into a buffer of its size, each byte copied once: what is
 * read ahead of it comes from a buffer of one read, the rest of a large frame
 * straight from the connection.
 */
export class FrameReader {
  readonly #ahead = new Uint8Array(64 * 1024);
  /** The bytes read ahead and not yet taken: `#ahead[#start, #end)`. */
  #start = 0;
  #end = 0;
  readonly #conn: Deno.Conn;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** Fills `out` from what was read ahead, then from the connection; false at end of stream. */
  async #fill(out: Uint8Array): Promise<boolean> {
    let at = 0;
    for (;;) {
      const n = Math.min(this.#end - this.#start, out.length - at);
      out.set(this.#ahead.subarray(this.#start, this.#start + n), at);
      this.#start += n;
      at += n;
      if (at === out.length) return true;
      const into = out.length - at >= this.#ahead.length ? out.subarray(at) : this.#ahead;
      const got = await this.#conn.read(into);
      if (got === null) return false;
      if (into === this.#ahead) [this.#start, this.#end] = [0, got];
      else at += got;
      if (at === out.length) return true;
    }
  }

  /** The next frame's bytes, or null when the stream ended first. */
  async next(): Promise<Uint8Array | null> {
    const head = new Uint8Array(4);
    if (!await this.#fill(head)) return null;
    const len = new DataView(head.buffer).getUint32(0);
    if (len > MAX_FRAME_BYTES) throw new Error(`frame of ${len} bytes exceeds the limit`);
    const frame = new Uint8Array(len);
    return await this.#fill(frame) ? frame : null;
  }

  /**
   * Reads what the plugin sends after its request until it says it falls
   * back (`fallback`) or closes its end, or the connection fails (`closed`:
   * the caller's process is gone); anything else is dropped.
   */
  async control(): Promise<"fallback" | "closed"> {
    try {
      for (let f = await this.json<ClientFrame>(); f !== null; f = await this.json<ClientFrame>()) {
        if (f?.kind === "fallback") return "fallback";
      }
    } catch {
      // Reset, closed, or not a frame: the caller is gone as far as the agent can tell.
    }
    return "closed";
  }

  /** The next frame as JSON, or null at end of stream. */
  async json<T>(): Promise<T | null> {
    const f = await this.next();
    return f === null ? null : JSON.parse(new TextDecoder().decode(f)) as T;
  }
}
