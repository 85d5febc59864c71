/** Concurrency: two clusters hammering one small pool never share an address. */

import assert from "node:assert/strict";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";
import { DEV_SEED } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
const NS = "/namespaces/default";

Deno.test("milo-dev concurrency: 2 x 100 concurrent creates on a /26", async () => {
  const seed: Any = structuredClone(DEV_SEED);
  seed.projects[0].ipPools[0].spec.cidr = "10.40.0.0/26";
  const dev = await startMiloDev({ seed });
  try {
    const capacity = 64 - 2;
    const create = (cluster: string, i: number) =>
      miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: claimBody(`${cluster}-pod-${i}`, {
          labels: { "milo-ipam.io/cluster": cluster, "milo-ipam.io/node": `node-${i % 4}` },
          annotations: { "milo-ipam.io/pod": `default/${cluster}-pod-${i}` },
        }),
      });
    const results = await Promise.all(
      ["cluster-a", "cluster-b"].flatMap((c) =>
        Array.from({ length: 100 }, (_, i) => create(c, i))
      ),
    );
    const ok = results.filter((r) => r.status === 201);
    const full = results.filter((r) => r.status === 507);
    assert.equal(
      ok.length + full.length,
      200,
      `unexpected statuses ${results.map((r) => r.status)}`,
    );
    assert.equal(ok.length, capacity);
    for (const r of full) {
      assert.equal(r.body.reason, "InsufficientStorage");
      assert.match(
        r.body.message,
        /^IPPool "vpc-7b3e-pods-v4" \(class "vpc-pods-ipv4"\) has no free \/32/,
      );
    }
    const addrs = ok.map((r) => r.body.status.address);
    assert.equal(new Set(addrs).size, addrs.length, "no duplicate address");
    const expected = Array.from({ length: capacity }, (_, i) => `10.40.0.${i + 1}`);
    assert.deepEqual([...addrs].sort(), [...expected].sort());

    const listed = await dev.listClaims();
    assert.equal(listed.length, capacity);
    const a = await dev.listClaims("tenant-a", "milo-ipam.io/cluster=cluster-a");
    const b = await dev.listClaims("tenant-a", "milo-ipam.io/cluster=cluster-b");
    assert.equal(a.length + b.length, capacity);
    const allocs = await miloApi<Any>(dev, "GET", `${NS}/ipallocations`);
    assert.equal(allocs.body.items.length, capacity);

    let pool = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
    assert.deepEqual(pool.body.status.capacity, { total: "64", allocated: "64", available: "0" });
    assert.equal(pool.body.status.utilizationPercent, 100);

    const victims = ok.slice(0, 10);
    const dels = await Promise.all(
      victims.map((r) => miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/${r.body.metadata.name}`)),
    );
    assert.deepEqual(dels.map((d) => d.status), Array(10).fill(200));
    pool = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
    assert.deepEqual(pool.body.status.capacity, { total: "64", allocated: "54", available: "10" });
    assert.equal(pool.body.status.utilizationPercent, 84.375);

    const again = await Promise.all(Array.from({ length: 15 }, (_, i) => create("cluster-c", i)));
    const again201 = again.filter((r) => r.status === 201).map((r) => r.body.status.address);
    assert.equal(again201.length, 10);
    assert.equal(again.filter((r) => r.status === 507).length, 5);
    assert.deepEqual(
      [...again201].sort(),
      victims.map((r) => r.body.status.address).sort(),
      "the freed addresses and only those are reused",
    );
  } finally {
    await dev.stop();
  }
});
