/**
 * A scriptable stand-in for Milo on 127.0.0.1, for process tests of answers
 * milo-dev never gives (bad leases, redirects, huge bodies, hangs). Each test
 * passes the handler; bodies come from the shared fixtures
 * (testing/milo_fixtures.ts).
 */
import { fixture } from "./milo_fixtures.ts";

/** One request the fake saw. */
export interface Seen {
  method: string;
  path: string;
  body: unknown;
}

/** A running fake. */
export interface FakeMilo {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

/** The bound claim Milo would answer for a create body, with the given status overrides. */
export function boundFor(
  create: Record<string, unknown>,
  status: Record<string, unknown>,
  uid = crypto.randomUUID(),
): Record<string, unknown> {
  const base = fixture<{ metadata: object; spec: object }>("ipclaim-bound-ipv4.json");
  const meta = create.metadata as Record<string, unknown>;
  return {
    ...base,
    metadata: { ...base.metadata, ...meta, uid, creationTimestamp: new Date().toISOString() },
    spec: { ...base.spec, ...(create.spec as object) },
    status: { phase: "Bound", poolRef: { name: "p" }, ...status },
  };
}

/** Starts a fake whose `handle` answers every request; requests are recorded first. */
export function fakeMilo(
  handle: (req: Request, seen: Seen) => Response | Promise<Response>,
): Promise<FakeMilo> {
  const seen: Seen[] = [];
  const { promise, resolve } = Promise.withResolvers<string>();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    onListen: (a) => resolve(`http://127.0.0.1:${a.port}`),
  }, async (req) => {
    const text = await req.text();
    let body: unknown = undefined;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = text;
    }
    const s = { method: req.method, path: new URL(req.url).pathname, body };
    seen.push(s);
    return await handle(req, s);
  });
  return promise.then((url) => ({ url, seen, close: () => server.shutdown() }));
}
