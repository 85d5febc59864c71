/**
 * One-step probes, each in a fresh process: what a single first-time step of
 * the plugin costs inside Deno, in wall time and CPU time (all threads).
 *
 *   deno run --allow-all bench/probe.ts MODE [URL] [CA_FILE]
 *
 * MODE: stdin-stream | stdin-read | fetch-http | fetch-tls-one | fetch-tls-pair | connect-tls
 * Prints {"wallMs": n, "cpuMs": n}. bench.ts runs these interleaved.
 */
import process from "node:process";

const [mode, url, caFile] = Deno.args;

async function step(): Promise<void> {
  switch (mode) {
    case "stdin-stream": {
      const r = Deno.stdin.readable.getReader();
      for (let i = 0; i < 1_000; i++) if ((await r.read()).done) break;
      return;
    }
    case "stdin-read": {
      const buf = new Uint8Array(65_536);
      for (let i = 0; i < 1_000; i++) if (Deno.stdin.readSync(buf) === null) break;
      return;
    }
    case "fetch-http": {
      const get = () => fetch(url).then((r) => r.text());
      await Promise.all([get(), get()]);
      return;
    }
    case "fetch-tls-one":
    case "fetch-tls-pair": {
      const client = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(caFile)] });
      const get = () => fetch(url, { client }).then((r) => r.text());
      await (mode === "fetch-tls-one" ? get() : Promise.all([get(), get()]));
      client.close();
      return;
    }
    case "connect-tls": {
      const u = new URL(url);
      const conn = await Deno.connectTls({
        hostname: u.hostname,
        port: Number(u.port),
        caCerts: [await Deno.readTextFile(caFile)],
      });
      await conn.handshake();
      conn.close();
      return;
    }
    default:
      throw new Error(`unknown probe ${mode}`);
  }
}

if (import.meta.main) {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await step();
  const wallMs = performance.now() - t0;
  const u = process.cpuUsage(c0);
  console.log(JSON.stringify({ wallMs, cpuMs: (u.user + u.system) / 1000 }));
}
