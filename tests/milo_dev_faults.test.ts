/** Fault injection through the admin port: each kind, bounded, switchable. */

import assert from "node:assert/strict";
import type { IPClaimObject } from "../milo-dev/objects.ts";
import type { Status } from "../milo-dev/status.ts";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";

const NS = "/namespaces/default";

Deno.test("milo-dev faults", async (t) => {
  const dev = await startMiloDev();
  try {
    await t.step("off by default; GET /faults; stats count requests", async () => {
      const f = await (await fetch(`${dev.adminUrl}/faults`)).json();
      assert.equal(f.errorRate, 0);
      assert.equal(f.down, false);
      await dev.resetStats();
      await miloApi(dev, "GET", `${NS}/ipclaims`);
      await miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody("s1") });
      await miloApi(dev, "GET", "/ippools");
      const s = await dev.stats();
      assert.equal(s.total, 3);
      assert.deepEqual(s.byMethod, { GET: 2, POST: 1 });
      assert.deepEqual(s.byKind, { ipclaims: 2, ippools: 1 });
    });

    await t.step("invalid or unbounded settings are refused", async () => {
      for (
        const bad of [{ hangMs: 120_000 }, { latencyMs: 60_000 }, { errorRate: 2 }, {
          errorStatuses: [404],
        }, {
          nope: 1,
        }]
      ) {
        const r = await fetch(`${dev.adminUrl}/faults`, {
          method: "PUT",
          body: JSON.stringify(bad),
        });
        assert.equal(r.status, 400, JSON.stringify(bad));
        await r.body?.cancel();
      }
    });

    await t.step("latency is applied (loosely) and reported apart from milo;dur", async () => {
      await dev.setFaults({ latencyMs: 300 });
      const t0 = performance.now();
      const r = await miloApi(dev, "GET", "/ippools");
      const took = performance.now() - t0;
      assert.equal(r.status, 200);
      assert.ok(took >= 250, `took ${took} ms`);
      const timing = r.headers.get("server-timing") ?? "";
      assert.match(timing, /^milo;dur=[\d.]+, fault;dur=[\d.]+$/);
      await dev.clearFaults();
    });

    await t.step("503 (a Status) and 429 (APF's plain text) with Retry-After", async () => {
      await dev.setFaults({ errorRate: 1, errorStatuses: [503], retryAfterSeconds: 2 });
      const a = await miloApi<Status>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("never") });
      assert.equal(a.status, 503);
      assert.equal(a.headers.get("retry-after"), "2");
      assert.equal(a.body.reason, "ServiceUnavailable");
      assert.deepEqual(a.body.details, { retryAfterSeconds: 2 });
      await dev.setFaults({ errorRate: 1, errorStatuses: [429] });
      const b = await dev.fetch(`${dev.url}/apis/ipam.miloapis.com/v1alpha1/ippools`, {
        headers: { authorization: `Bearer ${dev.token}` },
      });
      assert.equal(b.status, 429);
      assert.equal(b.headers.get("retry-after"), "1");
      assert.equal(b.headers.get("content-type"), "text/plain; charset=utf-8");
      assert.equal(await b.text(), "Too many requests, please try again later.\n");
      await dev.clearFaults();
      assert.equal(
        (await miloApi(dev, "GET", `${NS}/ipclaims/never`)).status,
        404,
        "a faulted create held nothing",
      );
    });

    await t.step("errorRate is a share, reproducible with a seed", async () => {
      await dev.setFaults({ errorRate: 0.5, errorStatuses: [500, 503], seed: 7 });
      const codes: number[] = [];
      for (let i = 0; i < 40; i++) codes.push((await miloApi(dev, "GET", "/ippools")).status);
      await dev.setFaults({ errorRate: 0.5, errorStatuses: [500, 503], seed: 7 });
      const again: number[] = [];
      for (let i = 0; i < 40; i++) again.push((await miloApi(dev, "GET", "/ippools")).status);
      assert.deepEqual(again, codes);
      const failed = codes.filter((c) => c !== 200).length;
      assert.ok(failed > 5 && failed < 35, `${failed}/40 failed`);
      assert.ok(codes.every((c) => [200, 500, 503].includes(c)));
      await dev.clearFaults();
    });

    await t.step("faultPoint after: the create commits but the answer is lost", async () => {
      await dev.setFaults({
        errorRate: 1,
        errorStatuses: [503],
        faultPoint: "after",
        methods: ["POST"],
      });
      const r = await miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody("lost-answer") });
      assert.equal(r.status, 503);
      assert.equal(
        (await miloApi(dev, "GET", `${NS}/ipclaims/lost-answer`)).status,
        200,
        "GET not faulted",
      );
      await dev.clearFaults();
      assert.equal(
        (await miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody("lost-answer") })).status,
        409,
      );
    });

    await t.step("reset surfaces as a fetch error", async () => {
      await dev.setFaults({ resetRate: 1 });
      await assert.rejects(() => miloApi(dev, "GET", "/ippools"), TypeError);
      await assert.rejects(
        () => miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody("reset-me") }),
        TypeError,
      );
      await dev.clearFaults();
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/reset-me`)).status, 404);
    });

    await t.step("hang is bounded: the connection closes after hangMs", async () => {
      await dev.setFaults({ hangRate: 1, hangMs: 1200 });
      const t0 = performance.now();
      await assert.rejects(() => miloApi(dev, "GET", "/ippools"));
      const took = performance.now() - t0;
      assert.ok(took >= 1000 && took < 15_000, `hung for ${took} ms`);
      await dev.clearFaults();
    });

    await t.step("release failure leaves the claim Releasing until a retry", async () => {
      await miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody("sticky") });
      await dev.setFaults({ releaseFailRate: 1 });
      const r = await miloApi<Status>(dev, "DELETE", `${NS}/ipclaims/sticky`);
      assert.equal(r.status, 500);
      assert.equal(r.body.reason, "InternalError");
      const g = await miloApi<IPClaimObject>(dev, "GET", `${NS}/ipclaims/sticky`);
      assert.equal(g.body.status.phase, "Releasing");
      await dev.clearFaults();
      assert.equal((await miloApi(dev, "DELETE", `${NS}/ipclaims/sticky`)).status, 200);
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/sticky`)).status, 404);
    });

    await t.step(
      "down refuses connections; the admin port stays; recovery on the same port",
      async () => {
        assert.equal((await miloApi(dev, "GET", "/ippools")).status, 200);
        await dev.setFaults({ down: true });
        const port = Number(new URL(dev.url).port);
        await assert.rejects(
          () => Deno.connect({ hostname: "127.0.0.1", port }),
          Deno.errors.ConnectionRefused,
        );
        await assert.rejects(() => miloApi(dev, "GET", "/ippools"), TypeError);
        const f = await (await fetch(`${dev.adminUrl}/faults`)).json();
        assert.equal(f.down, true);
        await dev.clearFaults();
        assert.equal((await miloApi(dev, "GET", "/ippools")).status, 200);
        const s = await dev.stats();
        assert.ok(s.total > 0);
      },
    );
  } finally {
    await dev.stop();
  }
});
