/** Connection counters at admin /stats: TCP connections accepted and TLS handshakes completed. */

import assert from "node:assert/strict";
import { miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";

const NS = "/namespaces/default";

/** `n` sequential API requests over one long-lived client. */
async function requests(dev: MiloDev, client: Deno.HttpClient, n: number): Promise<void> {
  const viaClient = {
    url: dev.url,
    token: dev.token,
    fetch: (url: string, init?: RequestInit) => fetch(url, { ...init, client }),
  };
  for (let i = 0; i < n; i++) {
    assert.equal((await miloApi(viaClient, "GET", `${NS}/ipclaims`)).status, 200);
  }
}

Deno.test("milo-dev stats: a long-lived HTTPS client opens no connection or handshake per request", async () => {
  const dev = await startMiloDev({ tls: true });
  const caCerts = [await Deno.readTextFile(dev.caFile!)];
  const client = Deno.createHttpClient({ caCerts });
  const other = Deno.createHttpClient({ caCerts });
  try {
    await dev.resetStats();
    await requests(dev, client, 1);
    let s = await dev.stats();
    assert.deepEqual([s.total, s.connections, s.tlsHandshakes], [1, 1, 1]);

    // Deno's pool may open a second connection during a client's first requests; then it holds.
    await requests(dev, client, 50);
    await dev.resetStats();
    await requests(dev, client, 50);
    s = await dev.stats();
    assert.deepEqual([s.total, s.connections, s.tlsHandshakes], [50, 0, 0], "0 new per request");

    await dev.resetStats();
    await requests(dev, other, 1);
    await assert.rejects(() => fetch(`${dev.url}/healthz`), "an untrusted certificate fails");
    s = await dev.stats();
    assert.deepEqual(
      [s.connections, s.tlsHandshakes],
      [2, 1],
      "a failed handshake is a connection only",
    );
  } finally {
    client.close();
    other.close();
    await dev.stop();
  }
});

Deno.test("milo-dev stats: plain HTTP counts connections and has no tlsHandshakes", async () => {
  const dev = await startMiloDev();
  const client = Deno.createHttpClient({});
  try {
    await dev.resetStats();
    await requests(dev, client, 1);
    const s = await dev.stats();
    assert.deepEqual([s.total, s.connections], [1, 1]);
    assert.equal(s.tlsHandshakes, undefined);
    await dev.setFaults({ down: true });
    await dev.clearFaults();
    await requests(dev, client, 1);
    assert.equal((await dev.stats()).connections, 2, "a new connection after down/up, counted");
  } finally {
    client.close();
    await dev.stop();
  }
});
