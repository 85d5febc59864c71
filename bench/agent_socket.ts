/** Calls the node agent in-process over its unix socket, as lib/thin.ts does from a process. */
import { type AgentFrame, FrameReader, type RequestHeader, writeRequest } from "../lib/frames.ts";

/** The agent's reply to one invocation. */
export interface SocketReply {
  exitCode: number;
  stdout: string;
}

/** Sends one invocation (CNI environment and stdin) and waits for the reply frame. */
export async function callSocket(
  socket: string,
  env: Record<string, string>,
  stdin: string,
): Promise<SocketReply> {
  const conn = await Deno.connect({ transport: "unix", path: socket });
  try {
    const header: RequestHeader = { v: 1, env: cniOnly(env), started: Date.now() };
    await writeRequest(conn, header, new TextEncoder().encode(stdin));
    const reader = new FrameReader(conn);
    for (let frames = 0; frames < 2; frames++) {
      const f = await reader.json<AgentFrame>();
      if (!f) break;
      if (f.kind === "reply") return { exitCode: f.exitCode, stdout: f.stdout };
    }
    throw new Error("the agent closed the connection without a reply");
  } finally {
    try {
      conn.close();
    } catch {
      // Closed already.
    }
  }
}

/** The variables the thin client forwards. */
function cniOnly(env: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).filter(([k]) => k.startsWith("CNI_") || k === "MILO_IPAM_CONFIG"),
  );
}
