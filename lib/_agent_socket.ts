/**
 * The agent's unix socket: bound 0600 in a private directory (a stale socket
 * removed, a live agent's refused); each connection's request read within
 * {@link REQUEST_READ_MS}, the calls of one attachment run one after the
 * other, and the frames sent in order (an ack, then one reply). What a call
 * does is the agent's (lib/agent.ts).
 */
import { CniError } from "./errors.ts";
import { type AgentFrame, FrameReader, type RequestHeader, writeJson } from "./frames.ts";
import type { Reply } from "./invoke.ts";
import { ownSocketDir } from "./owned.ts";
import { dirOf } from "./paths.ts";
import { within } from "./timers.ts";

/** How long a connection may take to deliver its request. */
const REQUEST_READ_MS = 5_000;

/** One request read from the socket. */
export interface SocketCall {
  header: RequestHeader;
  stdin: Uint8Array;
  /** Aborted when the caller closes its connection or says it does the call itself. */
  gone: AbortSignal;
  /** Set when the caller said it does the call itself (its `fallback` frame). */
  caller: { tookOver: boolean };
  /** Sends a frame after every frame sent before it. */
  send: (frame: AgentFrame) => void;
}

/** What the agent does with the socket's requests. */
export interface SocketHandler {
  /** One call's reply, or undefined when its caller left before its turn. */
  call(c: SocketCall): Promise<Reply | undefined>;
  /** After the reply is sent: the call's record. */
  answered(reply: Reply, started: number): Promise<void>;
  /** A connection that failed. */
  failed(err: unknown): Promise<void>;
}

/** The agent's listener and the connections it is serving. */
export class AgentSocket {
  readonly #handler: SocketHandler;
  readonly #inflight = new Set<Promise<void>>();
  readonly #lanes = new Map<string, Promise<void>>();
  #listener: Deno.Listener | undefined;

  constructor(handler: SocketHandler) {
    this.#handler = handler;
  }

  /** Binds `path` (0600 in a 0700 directory) and starts accepting. */
  async listen(path: string): Promise<void> {
    ownSocketDir(dirOf(path));
    await removeStaleSocket(path);
    this.#listener = Deno.listen({ transport: "unix", path });
    await Deno.chmod(path, 0o600);
    this.#accept(this.#listener);
  }

  /** Stops accepting; the connections in flight go on. Calling it again is harmless. */
  close(): void {
    try {
      this.#listener?.close();
    } catch {
      // Closed already.
    }
  }

  /** The connections being served now. */
  get inflight(): Promise<void>[] {
    return [...this.#inflight];
  }

  #accept(listener: Deno.Listener): void {
    (async () => {
      try {
        for await (const conn of listener) {
          const p = this.#serve(conn).finally(() => this.#inflight.delete(p));
          this.#inflight.add(p);
        }
      } catch {
        // Listener closed.
      }
    })();
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    try {
      const reader = new FrameReader(conn);
      const read = (async () =>
        [await reader.json<RequestHeader>(), await reader.next()] as const)();
      const got = await within(read, REQUEST_READ_MS, () => null);
      if (!got || !got[0] || !got[1] || got[0].v !== 1) return;
      const [header, stdin] = got;
      // The caller's process may be killed by its runtime (its connection then closes), or
      // stop waiting and do the call itself (it says so first).
      const gone = new AbortController();
      const caller = { tookOver: false };
      reader.control().then((why) => {
        caller.tookOver = why === "fallback";
        gone.abort();
      });
      // Frames go out one after the other: the ack may still be writing when the reply is ready.
      let sending = Promise.resolve();
      const send = (frame: AgentFrame) =>
        sending = sending.then(() => writeJson(conn, frame)).catch(() => {});
      const reply = await this.#inLane(
        header,
        () => this.#handler.call({ header, stdin, gone: gone.signal, caller, send }),
      );
      if (!reply) return;
      const stdout = reply.stdout ? JSON.stringify(reply.stdout) + "\n" : "";
      await send({ kind: "reply", exitCode: reply.exitCode, stdout });
      await this.#handler.answered(reply, header.started);
    } catch (err) {
      await this.#handler.failed(err);
    } finally {
      try {
        conn.close();
      } catch {
        // Closed already.
      }
    }
  }

  /**
   * Runs `fn` after every earlier call of the same attachment (container and
   * interface) has ended, so an ADD whose caller is gone and the runtime's DEL
   * or next ADD of that attachment never overlap.
   */
  async #inLane<T>(header: RequestHeader, fn: () => Promise<T>): Promise<T> {
    const id = header.env.CNI_CONTAINERID;
    if (!id) return await fn();
    const key = `${id}\u0000${header.env.CNI_IFNAME ?? ""}`;
    const before = this.#lanes.get(key) ?? Promise.resolve();
    let done = () => {};
    const mine = before.then(() => new Promise<void>((r) => done = r));
    this.#lanes.set(key, mine);
    try {
      await before;
      return await fn();
    } finally {
      done();
      if (this.#lanes.get(key) === mine) this.#lanes.delete(key);
    }
  }
}

/** Removes a socket file nobody answers on; refuses to start beside a live agent. */
async function removeStaleSocket(path: string): Promise<void> {
  try {
    const info = await Deno.lstat(path);
    if (!info.isSocket) throw new CniError("config", `${path} exists and is not a socket`);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  try {
    const c = await Deno.connect({ transport: "unix", path });
    c.close();
    throw new CniError("config", `another agent answers on ${path}`);
  } catch (err) {
    if (err instanceof CniError) throw err;
    await Deno.remove(path);
  }
}
