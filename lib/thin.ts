/**
 * The exec'd plugin as a thin client of the node agent: it sends the
 * invocation (CNI environment, stdin, its start time) over the agent's unix
 * socket and prints the agent's reply. It imports no handler, no Milo client
 * and no schema; when the agent is absent, refuses or is stuck for
 * `requestMs` (connecting, taking the request or acknowledging it, counted
 * from the process's start), the caller does the work itself.
 */
import { type AgentFrame, FrameReader, type RequestHeader, writeRequest } from "./frames.ts";
import { DEFAULT_AGENT_SOCKET, nodeConfigPath } from "./paths.ts";
import { ENV_VARS } from "./permissions.ts";
import { within } from "./timers.ts";

/** Extra time past the agent's deadline before the client gives up (as the watchdog does). */
const GRACE_MS = 500;
/**
 * How long connecting, sending the request and the agent's first frame may
 * take together (from the process's start) when the node config does not say.
 */
const DEFAULT_REQUEST_MS = 2_000;

/** What asking the agent came to. */
export type AgentOutcome =
  | { kind: "done"; exitCode: number; stdout: string }
  | { kind: "fallback"; reason: string; counted: boolean; https?: boolean };

/** The few node settings the client needs, read without the schema. */
interface Hints {
  socket: string;
  requestMs: number;
  /** Set when the node config has an `agent` section: a fallback is then worth counting. */
  expected: boolean;
  /** Set when `milo.url` is https: the fallback then makes a first TLS connection. */
  https: boolean;
}

async function hints(env: (name: string) => string | undefined): Promise<Hints | undefined> {
  const { path, legacy } = nodeConfigPath(env);
  let text: string | undefined;
  for (const p of legacy ? [path, legacy] : [path]) {
    text = await Deno.readTextFile(p).catch(() => undefined);
    if (text !== undefined) break;
  }
  if (text === undefined) return undefined;
  try {
    const v = JSON.parse(text);
    const agent = typeof v?.agent === "object" && v.agent ? v.agent : undefined;
    const requestMs = v?.timeouts?.requestMs;
    return {
      socket: typeof agent?.socket === "string" ? agent.socket : DEFAULT_AGENT_SOCKET,
      requestMs: Number.isInteger(requestMs) && requestMs > 0 ? requestMs : DEFAULT_REQUEST_MS,
      expected: agent !== undefined,
      https: typeof v?.milo?.url === "string" && v.milo.url.startsWith("https:"),
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
  const h = await hints((k) => env[k]);
  if (!h) return { kind: "fallback", reason: "no readable node config", counted: false };
  const fallback = (reason: string): AgentOutcome => ({
    kind: "fallback",
    reason,
    counted: h.expected,
    https: h.https,
  });
  // One budget for the whole exchange up to the first frame: an agent that
  // never accepts, never reads the request or never answers costs requestMs.
  const until = started + h.requestMs;
  const stuck = Symbol("stuck");
  const slow = () => fallback(`agent did not answer within ${h.requestMs} ms`);
  let conn: Deno.UnixConn;
  try {
    const connecting = Deno.connect({ transport: "unix", path: h.socket });
    const c = await within<Deno.UnixConn | typeof stuck>(
      connecting,
      until - Date.now(),
      () => stuck,
    );
    if (c === stuck) {
      connecting.then((late) => late.close(), () => {});
      return slow();
    }
    conn = c;
  } catch (err) {
    return fallback(`agent socket ${h.socket}: ${err instanceof Error ? err.name : err}`);
  }
  try {
    const header: RequestHeader = { v: 1, env, started };
    const reader = new FrameReader(conn);
    // On the deadline the connection is closed below, which cancels a write or
    // read still pending (its rejection is the race's, and ignored).
    const first = await within<AgentFrame | null | typeof stuck>(
      writeRequest(conn, header, stdin).then(() => reader.json<AgentFrame>()),
      until - Date.now(),
      () => stuck,
    );
    if (first === stuck) return slow();
    if (first === null) return fallback("agent closed the connection");
    if (first.kind === "reply") return done(first);
    const { deadline, cniVersion } = first;
    const late = Symbol("late");
    const final = await within<AgentFrame | null | typeof late>(
      reader.json<AgentFrame>(),
      deadline + GRACE_MS - Date.now(),
      () => late,
    );
    if (final === late || (final === null && Date.now() >= deadline)) {
      return { kind: "done", exitCode: 1, stdout: lateError(cniVersion, deadline, started) };
    }
    if (final === null || final.kind !== "reply") return fallback("agent closed the connection");
    return done(final);
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
