/**
 * The exec'd plugin as a thin client of the node agent: it sends the
 * invocation (CNI environment, stdin, its start time) over the agent's unix
 * socket and prints the agent's reply. It imports no handler, no Milo client
 * and no schema; when the agent is absent, refuses, or is stuck for
 * `requestMs` (taking the request or acknowledging it, counted from
 * connecting), the caller does the work itself.
 */
import {
  type AgentFrame,
  FrameReader,
  type RequestHeader,
  writeJson,
  writeRequest,
} from "./frames.ts";
import { untrustedSocket } from "./owned.ts";
import { DEFAULT_TIMEOUTS, TIMEOUT_RANGE } from "./node_defaults.ts";
import { readNodeFile } from "./node_file.ts";
import { DEFAULT_AGENT_SOCKET } from "./paths.ts";
import { ENV_VARS } from "./permissions.ts";
import { WATCHDOG_GRACE_MS, within } from "./timers.ts";

/** How long telling the agent that this process takes the call over may take. */
const TAKE_OVER_MS = 100;

/** What asking the agent came to. */
export type AgentOutcome =
  | { kind: "done"; exitCode: number; stdout: string }
  | { kind: "fallback"; reason: string; counted: boolean; https?: boolean; totalMs?: number };

/** The few node settings the client needs, read without the schema. */
interface Hints {
  socket: string;
  requestMs: number;
  /** Set when the node config has an `agent` section: a fallback is then worth counting. */
  expected: boolean;
  /** Set when `milo.url` is https: the fallback then makes a first TLS connection. */
  https: boolean;
  /**
   * The node's `timeouts.totalMs` (its default when it sets none; undefined
   * when it sets one out of range): the call's bound until the config is validated.
   */
  totalMs?: number;
}

function hints(env: (name: string) => string | undefined): Hints | undefined {
  let text: string;
  try {
    text = readNodeFile(env).text;
  } catch {
    // No readable node config: the plugin's own read says why.
    return undefined;
  }
  try {
    const v = JSON.parse(text);
    const agent = typeof v?.agent === "object" && v.agent ? v.agent : undefined;
    const { requestMs, totalMs } = v?.timeouts ?? {};
    return {
      socket: typeof agent?.socket === "string" ? agent.socket : DEFAULT_AGENT_SOCKET,
      requestMs: Number.isInteger(requestMs) && requestMs > 0
        ? requestMs
        : DEFAULT_TIMEOUTS.requestMs,
      expected: agent !== undefined,
      https: typeof v?.milo?.url === "string" && v.milo.url.startsWith("https:"),
      totalMs: totalMs === undefined
        ? DEFAULT_TIMEOUTS.totalMs
        : Number.isInteger(totalMs) && totalMs > 0 && totalMs <= TIMEOUT_RANGE.totalMs.max
        ? totalMs
        : undefined,
    };
  } catch {
    return undefined;
  }
}

/** The transient CNI error the client prints when the agent outlives the deadline. */
function lateError(cniVersion: string, deadline: number, started: number): string {
  return JSON.stringify({
    cniVersion,
    code: 11,
    msg: "invocation exceeded timeouts.totalMs",
    details: `${Math.round(deadline - started)} ms since the process started`,
  });
}

function done(r: { exitCode: number; stdout: string }): AgentOutcome {
  return { kind: "done", exitCode: r.exitCode, stdout: r.stdout };
}

/** Sends the invocation to the agent and waits for its answer. */
export async function callAgent(started: number, stdin: Uint8Array): Promise<AgentOutcome> {
  const env: Record<string, string> = {};
  for (const k of ENV_VARS) {
    const v = Deno.env.get(k);
    if (v !== undefined) env[k] = v;
  }
  const h = hints((k) => env[k]);
  if (!h) return { kind: "fallback", reason: "no readable node config", counted: false };
  const fallback = (reason: string): AgentOutcome => ({
    kind: "fallback",
    reason,
    counted: h.expected,
    https: h.https,
    totalMs: h.totalMs,
  });
  const distrust = untrustedSocket(h.socket);
  if (distrust) return fallback(`agent socket ${h.socket} is not trusted: ${distrust}`);
  let conn: Deno.UnixConn;
  try {
    // A unix socket connects or fails at once (absent, refused, or EAGAIN on a full
    // backlog): the kernel completes it without the agent, which cannot make it wait.
    conn = await Deno.connect({ transport: "unix", path: h.socket });
  } catch (err) {
    return fallback(`agent socket ${h.socket}: ${err instanceof Error ? err.name : err}`);
  }
  try {
    // The budget runs from here, not from the process's start: a process that waited long
    // for a CPU (a node starting many pods at once) still gives the agent its requestMs.
    const giveUpAt = Date.now() + h.requestMs;
    return await exchange(conn, { v: 1, env, started }, stdin, giveUpAt, h, fallback);
  } catch (err) {
    return fallback(`agent connection failed: ${err instanceof Error ? err.message : err}`);
  } finally {
    try {
      conn.close();
    } catch {
      // Closed already.
    }
  }
}

async function exchange(
  conn: Deno.UnixConn,
  header: RequestHeader,
  stdin: Uint8Array,
  giveUpAt: number,
  h: Hints,
  fallback: (reason: string) => AgentOutcome,
): Promise<AgentOutcome> {
  const reader = new FrameReader(conn);
  // A write or read still pending when the budget ends is cancelled by the
  // caller closing the connection (its rejection is the race's, and ignored).
  const answer = writeRequest(conn, header, stdin).then(() => reader.json<AgentFrame>());
  // One budget for sending the request and the first frame, until giveUpAt:
  // an agent that never reads or never answers costs requestMs. Its timer is
  // made once the request is on its way: the first one in a process costs
  // about 0.4 ms, spent while the agent works.
  const stuck = Symbol("stuck");
  const first = await within<AgentFrame | null | typeof stuck>(
    answer,
    giveUpAt - Date.now(),
    () => stuck,
  );
  // A timer counts from when it is made: a process stopped between reading the clock
  // and making it would wait past giveUpAt, so a late acknowledgement is judged by the clock.
  if (first === stuck || (first?.kind === "ack" && Date.now() >= giveUpAt)) {
    // The call is this process's from here: the agent must not undo what it did of it.
    await within(writeJson(conn, { kind: "fallback" }), TAKE_OVER_MS, () => undefined)
      .catch(() => {});
    return fallback(`agent did not answer within ${h.requestMs} ms`);
  }
  if (first === null) return fallback("agent closed the connection");
  if (first.kind === "reply") return done(first);
  const { deadline, cniVersion } = first;
  const late = Symbol("late");
  const final = await within<AgentFrame | null | typeof late>(
    reader.json<AgentFrame>(),
    deadline + WATCHDOG_GRACE_MS - Date.now(),
    () => late,
  );
  if (final === late || (final === null && Date.now() >= deadline)) {
    return { kind: "done", exitCode: 1, stdout: lateError(cniVersion, deadline, header.started) };
  }
  if (final === null || final.kind !== "reply") return fallback("agent closed the connection");
  return done(final);
}
