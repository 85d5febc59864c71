/**
 * An HTTP relay that runs inside the milo network namespace
 * (`ip netns exec NS deno run --allow-net --allow-read relay.ts CA_FILE`)
 * so the test, in the host namespace, can reach milo-dev's loopback-only
 * admin port and its API without any traffic leaving the namespaces.
 *
 * Protocol: one JSON request per stdin line `{id, method, url, headers?, body?}`,
 * one JSON answer per stdout line `{id, status, body}` or `{id, error}`.
 */

/** One request to the relay. */
export interface RelayRequest {
  id: number;
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: string;
  timeoutMs?: number;
}

/** The relay's answer. */
export interface RelayAnswer {
  id: number;
  status?: number;
  body?: string;
  error?: string;
}

async function serve(caFile: string | undefined): Promise<void> {
  const client = caFile
    ? Deno.createHttpClient({ caCerts: [await Deno.readTextFile(caFile)] })
    : undefined;
  const enc = new TextEncoder();
  const out = (a: RelayAnswer) => Deno.stdout.writeSync(enc.encode(JSON.stringify(a) + "\n"));
  const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
  let buf = "";
  const handle = async (line: string) => {
    let req: RelayRequest;
    try {
      req = JSON.parse(line);
    } catch {
      return;
    }
    try {
      const res = await fetch(req.url, {
        method: req.method,
        headers: req.headers,
        body: req.body,
        signal: AbortSignal.timeout(req.timeoutMs ?? 15_000),
        ...(client && req.url.startsWith("https:") ? { client } : {}),
      });
      out({ id: req.id, status: res.status, body: await res.text() });
    } catch (err) {
      out({ id: req.id, error: String(err) });
    }
  };
  for await (const chunk of lines) {
    buf += chunk;
    for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.trim()) handle(line);
    }
  }
  client?.close();
}

if (import.meta.main) await serve(Deno.args[0]);
