/** Durability: kill -9 and restart on the same database loses nothing. */

import assert from "node:assert/strict";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
const NS = "/namespaces/default";

const summary = (items: Any[]) =>
  items.map((o) => [o.metadata.name, o.metadata.uid, o.status.allocatedCIDR, o.status.phase])
    .sort();

Deno.test("milo-dev durability: SIGKILL + restart keeps claims and free addresses", async () => {
  const dev = await startMiloDev();
  try {
    for (let i = 0; i < 20; i++) {
      const v4 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody(`p${i}-v4`) });
      assert.equal(v4.status, 201);
      const v6 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: claimBody(`p${i}-v6`, { className: "vpc-pods-ipv6" }),
      });
      assert.equal(v6.status, 201);
    }
    for (const i of [3, 4, 11]) {
      assert.equal((await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/p${i}-v4`)).status, 200);
    }
    const before = summary(await dev.listClaims());
    const poolBefore = (await miloApi<Any>(dev, "GET", "/ippools")).body.items.map((p: Any) =>
      p.status
    );
    assert.deepEqual(poolBefore[0].capacity, { total: "256", allocated: "19", available: "237" });

    await dev.kill("SIGKILL");
    await assert.rejects(() => fetch(`${dev.url}/healthz`));
    await dev.restart();

    assert.deepEqual(summary(await dev.listClaims()), before);
    const poolAfter = (await miloApi<Any>(dev, "GET", "/ippools")).body.items.map((p: Any) =>
      p.status
    );
    assert.deepEqual(poolAfter, poolBefore);

    const next = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("after-restart"),
    });
    assert.equal(next.status, 201);
    assert.equal(next.body.status.address, "10.40.0.4", "lowest free address after the restart");
    const taken = new Set(before.map((x: Any) => x[2]));
    assert.ok(!taken.has(next.body.status.allocatedCIDR));
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev durability: SIGKILL during concurrent creates leaves consistent state", async () => {
  const dev = await startMiloDev();
  try {
    const acked: string[] = [];
    const inflight = Array.from(
      { length: 120 },
      (_, i) =>
        miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody(`burst-${i}`) })
          .then((r) => {
            if (r.status === 201) acked.push(r.body.metadata.name);
          })
          .catch(() => {}),
    );
    for (let i = 0; i < 500 && acked.length < 5; i++) await new Promise((r) => setTimeout(r, 5));
    await dev.kill("SIGKILL");
    const ackedAtKill = acked.length;
    await Promise.all(inflight);
    await dev.restart();
    const claims = await dev.listClaims();
    assert.ok(
      ackedAtKill >= 1 && claims.length < 120,
      `killed mid-burst (${ackedAtKill} acked, ${claims.length} stored)`,
    );
    const names = new Set(claims.map((c: Any) => c.metadata.name));
    for (const n of acked) assert.ok(names.has(n), `acknowledged claim ${n} survived`);
    const addrs = claims.map((c: Any) => c.status.address);
    assert.equal(new Set(addrs).size, addrs.length, "no duplicate address");
    const allocs = await miloApi<Any>(dev, "GET", `${NS}/ipallocations`);
    assert.equal(allocs.body.items.length, claims.length, "one allocation per claim");
    const pool = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
    assert.equal(pool.body.status.capacity.allocated, String(claims.length + 2));
  } finally {
    await dev.stop();
  }
});
