/** The real server's limits: the allocation ceiling (429) and the cost of a LIST. */

import assert from "node:assert/strict";
import {
  AllocationCeiling,
  DEFAULT_ALLOCATIONS_PER_SECOND,
  mergeLimits,
} from "../milo-dev/limits.ts";
import type { IPClaimObject } from "../milo-dev/objects.ts";
import { startServer } from "../milo-dev/server.ts";
import type { Status } from "../milo-dev/status.ts";
import { claimBody, miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { DEV_SEED } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
const NS = "/namespaces/default";
const POOL = "/ippools/vpc-7b3e-pods-v4";

Deno.test("milo-dev limits: the ceiling is a sliding one-second window", () => {
  let now = 10_000;
  const c = new AllocationCeiling({ allocationsPerSecond: 3 }, () => now);
  const admit = (at: number) => {
    now = at;
    return c.admit();
  };
  assert.deepEqual(admit(10_000), { admitted: true });
  assert.deepEqual(admit(10_400), { admitted: true });
  assert.deepEqual(admit(10_900), { admitted: true });
  assert.deepEqual(admit(10_950), { admitted: false, retryAfterSeconds: 1 });
  assert.deepEqual(admit(10_999), { admitted: false, retryAfterSeconds: 1 }, "refused: no admit");
  assert.deepEqual(admit(11_000), { admitted: true }, "the first left the window");
  assert.deepEqual(admit(11_001), { admitted: false, retryAfterSeconds: 1 });
  assert.deepEqual(admit(11_400), { admitted: true }, "the second left it");
  // Admissions of the last second count against a new ceiling at once.
  c.set({ allocationsPerSecond: 2 });
  assert.deepEqual(admit(11_450), { admitted: false, retryAfterSeconds: 1 });
  assert.deepEqual(admit(11_999), { admitted: false, retryAfterSeconds: 1 }, "11,000 and 11,400");
  assert.deepEqual(admit(12_000), { admitted: true });
  assert.deepEqual(admit(12_001), { admitted: false, retryAfterSeconds: 1 });
  c.set({ allocationsPerSecond: 0 });
  for (let i = 0; i < 5_000; i++) assert.equal(admit(12_002).admitted, true, "0 is unlimited");
  c.set({ allocationsPerSecond: 4_000 });
  assert.deepEqual(admit(12_500), { admitted: false, retryAfterSeconds: 1 }, "they counted too");
  assert.deepEqual(admit(13_002), { admitted: true });
  assert.deepEqual(c.get(), { allocationsPerSecond: 4_000 });

  assert.deepEqual(mergeLimits({ allocationsPerSecond: 1 }, {}), { allocationsPerSecond: 1 });
  assert.deepEqual(mergeLimits({ allocationsPerSecond: 1 }, { allocationsPerSecond: 0 }), {
    allocationsPerSecond: 0,
  });
  for (const bad of [[], null, { allocationsPerSecond: -1 }, { allocationsPerSecond: 1.5 }]) {
    assert.throws(() => mergeLimits({ allocationsPerSecond: 1 }, bad), JSON.stringify(bad));
  }
  assert.throws(() => mergeLimits({ allocationsPerSecond: 1 }, { allocationsPerSecond: "5" }));
  assert.throws(() => mergeLimits({ allocationsPerSecond: 1 }, { nope: 1 }), /unknown limit/);
});

Deno.test("milo-dev limits: 370 a second unless told; the launcher starts it unlimited", async () => {
  const dir = await Deno.makeTempDir({ prefix: "milo-dev-limits-" });
  const server = await startServer({
    seed: DEV_SEED,
    dbPath: `${dir}/milo.db`,
    listen: "127.0.0.1:0",
    log: () => {},
  });
  try {
    const r = await fetch(`${server.adminUrl}/limits`);
    assert.deepEqual(await r.json(), { allocationsPerSecond: DEFAULT_ALLOCATIONS_PER_SECOND });
    assert.equal(DEFAULT_ALLOCATIONS_PER_SECOND, 370);
  } finally {
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
  await assert.rejects(
    startServer({ seed: DEV_SEED, dbPath: `${dir}/x.db`, allocationsPerSecond: -1 }),
    /allocationsPerSecond must be an integer/,
  );
  const dev = await startMiloDev();
  try {
    assert.deepEqual(await dev.limits(), { allocationsPerSecond: 0 });
  } finally {
    await dev.stop();
  }
});

/** Creates `name`; the answer. */
function create(dev: MiloDev, name: string, labels?: Record<string, string>, ns = "default") {
  const body = claimBody(name, { labels });
  (body.metadata as Any).namespace = ns;
  return miloApi<Any>(dev, "POST", `/namespaces/${ns}/ipclaims`, { body });
}

/** Waits until the window has forgotten every admission. */
const windowPasses = () => new Promise((r) => setTimeout(r, 1_100));

Deno.test("milo-dev limits: the ceiling over HTTP", async (t) => {
  const N = 10;
  const dev = await startMiloDev({ allocationsPerSecond: N });
  try {
    await t.step("N creates in a second pass; the N+1st is 429 and allocates nothing", async () => {
      assert.deepEqual(await dev.limits(), { allocationsPerSecond: N });
      await dev.resetStats();
      const t0 = performance.now();
      for (let i = 1; i <= N; i++) {
        const r = await create(dev, `c-${i}`);
        assert.equal(r.status, 201, JSON.stringify(r.body));
        assert.equal(r.body.status.address, `10.40.0.${i}`);
      }
      const r = await miloApi<Status>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("over") });
      const took = performance.now() - t0;
      assert.ok(took < 1_000, `the N+1 creates took ${took} ms: not within one second`);
      assert.equal(r.status, 429);
      const retry = r.headers.get("retry-after") ?? "";
      assert.match(retry, /^[1-9]\d*$/, "Retry-After: whole seconds, at least 1");
      assert.deepEqual(r.body, {
        kind: "Status",
        apiVersion: "v1",
        metadata: {},
        status: "Failure",
        message: "Too many requests, please try again later.",
        reason: "TooManyRequests",
        details: { retryAfterSeconds: Number(retry) },
        code: 429,
      });
      assert.equal(r.headers.get("content-type"), "application/json");
      // Nothing was allocated: no claim, no allocation, the pool as it was.
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/over`)).status, 404);
      const allocs = await miloApi<Any>(dev, "GET", `${NS}/ipallocations`);
      assert.equal(allocs.body.items.length, N);
      const pool = await miloApi<Any>(dev, "GET", POOL);
      assert.equal(pool.body.status.capacity.allocated, String(N + 2), "N + 2 reserved");
      // A dry run is a create too; GETs, LISTs and DELETEs are not limited.
      const dry = await miloApi(dev, "POST", `${NS}/ipclaims?dryRun=All`, {
        body: claimBody("dry"),
      });
      assert.equal(dry.status, 429);
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/c-1`)).status, 200);
      assert.equal((await miloApi(dev, "DELETE", `${NS}/ipclaims/c-${N}`)).status, 200);
      const s = await dev.stats();
      assert.equal(s.throttled, 2);
      assert.equal(s.allocations, N);
      assert.equal(s.byStatus["429"], 2);
      assert.equal(s.faults.error, 0, "not an injected fault");

      await windowPasses();
      const again = await create(dev, "over");
      assert.equal(again.status, 201, "admitted once the second has passed");
      assert.equal(again.body.status.address, `10.40.0.${N}`, "the freed address, no hole");
    });

    await t.step(
      "unauthenticated or wrong-project creates are refused before the ceiling",
      async () => {
        await windowPasses();
        await dev.setLimits({ allocationsPerSecond: 1 });
        const anon = await miloApi(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("anon"),
          token: null,
        });
        assert.equal(anon.status, 401);
        const other = await miloApi(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("other"),
          project: "tenant-b",
        });
        assert.equal(other.status, 403);
        assert.equal((await create(dev, "one")).status, 201, "the one admission was left");
        assert.equal((await create(dev, "two")).status, 429);
      },
    );

    await t.step("changed at run time on the admin port", async () => {
      const put = async (body: unknown, method = "PUT") => {
        const r = await fetch(`${dev.adminUrl}/limits`, { method, body: JSON.stringify(body) });
        return { status: r.status, body: await r.json() };
      };
      for (const bad of [{ allocationsPerSecond: -1 }, { allocationsPerSecond: 2.5 }, { x: 1 }]) {
        const r = await put(bad);
        assert.equal(r.status, 400, JSON.stringify(bad));
        assert.match(r.body.error, /allocationsPerSecond|unknown limit/);
      }
      const notJson = await fetch(`${dev.adminUrl}/limits`, { method: "PUT", body: "{" });
      assert.equal(notJson.status, 400);
      await notJson.body?.cancel();

      assert.deepEqual(await dev.setLimits({ allocationsPerSecond: 0 }), {
        allocationsPerSecond: 0,
      });
      const burst = await Promise.all(
        Array.from({ length: 3 * N }, (_, i) => create(dev, `u-${i}`)),
      );
      assert.deepEqual(burst.map((r) => r.status), Array(3 * N).fill(201), "0: unlimited");
      assert.deepEqual(await put({ allocationsPerSecond: 5 }, "PATCH"), {
        status: 200,
        body: { allocationsPerSecond: 5 },
      });
      assert.equal((await create(dev, "x-1")).status, 429, "the burst's second still counts");
      // PUT {} and DELETE go back to the start-up flag.
      assert.deepEqual((await put({})).body, { allocationsPerSecond: N });
      await dev.setLimits({ allocationsPerSecond: 7 });
      const del = await fetch(`${dev.adminUrl}/limits`, { method: "DELETE" });
      assert.deepEqual(await del.json(), { allocationsPerSecond: N });
      assert.deepEqual(await dev.limits(), { allocationsPerSecond: N });
    });

    await t.step("a restart keeps the flag, not the run-time setting", async () => {
      await dev.setLimits({ allocationsPerSecond: 3 });
      await dev.restart();
      assert.deepEqual(await dev.limits(), { allocationsPerSecond: N });
    });
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev limits: a LIST counts every row under the prefix", async (t) => {
  const dev = await startMiloDev();
  try {
    const made = await Promise.all([
      ...Array.from({ length: 50 }, (_, i) => create(dev, `l-${i}`, { app: i ? "many" : "one" })),
      ...Array.from({ length: 7 }, (_, i) => create(dev, `o-${i}`, { app: "one" }, "other")),
    ]);
    assert.deepEqual(made.map((r) => r.status), Array(57).fill(201));
    const b = await miloApi(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("b-1"),
      token: "dev-token-b",
    });
    assert.equal(b.status, 201, "another tenant's claim is not under the prefix");

    await t.step("a selector matching 1 of 50 still scans 50", async () => {
      await dev.resetStats();
      const one = await miloApi<{ items: IPClaimObject[] }>(
        dev,
        "GET",
        `${NS}/ipclaims?labelSelector=app%3Done`,
      );
      assert.deepEqual(one.body.items.map((c) => c.metadata.name), ["l-0"]);
      let s = await dev.stats();
      assert.equal(s.lists, 1);
      assert.equal(s.listRowsScanned, 50);
      assert.deepEqual(s.listsByKind, { ipclaims: { lists: 1, rowsScanned: 50 } });

      const byName = await miloApi<Any>(
        dev,
        "GET",
        `${NS}/ipclaims?fieldSelector=metadata.name%3Dl-7`,
      );
      assert.equal(byName.body.items.length, 1);
      s = await dev.stats();
      assert.equal(s.listRowsScanned, 100, "a field selector scans them all too");
    });

    await t.step("without a namespace: the whole project; every page scans it again", async () => {
      await dev.resetStats();
      const all = await dev.listClaims("tenant-a", "app=one");
      assert.equal(all.length, 8);
      let s = await dev.stats();
      assert.equal(s.lists, 1);
      assert.equal(s.listRowsScanned, 57);
      let cont = "";
      let pages = 0;
      do {
        const q = `?limit=20${cont ? `&continue=${encodeURIComponent(cont)}` : ""}`;
        const r = await miloApi<Any>(dev, "GET", `${NS}/ipclaims${q}`);
        assert.equal(r.status, 200);
        cont = r.body.metadata.continue ?? "";
        pages++;
      } while (cont);
      assert.equal(pages, 3);
      s = await dev.stats();
      assert.equal(s.lists, 4);
      assert.equal(s.listRowsScanned, 57 + 3 * 50);
    });

    await t.step("pagedLists false: every item at once, limit and continue unread", async () => {
      assert.equal((await dev.setLimits({ pagedLists: false })).pagedLists, false);
      try {
        await dev.resetStats();
        const r = await miloApi<Any>(dev, "GET", `${NS}/ipclaims?limit=20&continue=anything`);
        assert.equal(r.status, 200);
        assert.equal(r.body.items.length, 50);
        assert.equal(r.body.metadata.continue, undefined);
        assert.equal(r.body.metadata.remainingItemCount, undefined);
        assert.equal((await dev.stats()).listRowsScanned, 50);
      } finally {
        const start = await dev.setLimits({});
        assert.deepEqual(start, { allocationsPerSecond: 0 }, "back to the start-up limits: paged");
        const paged = await miloApi<Any>(dev, "GET", `${NS}/ipclaims?limit=20`);
        assert.equal(paged.body.items.length, 20);
      }
    });

    await t.step(
      "checkedPreconditions false: a DELETE ignores its uid precondition, as Milo's",
      async () => {
        const wrongUid = {
          kind: "DeleteOptions",
          apiVersion: "v1",
          preconditions: { uid: "not-it" },
        };
        for (const name of ["pre-checked", "pre-ignored"]) {
          const made = await miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody(name) });
          assert.equal(made.status, 201, JSON.stringify(made.body));
        }
        const checked = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/pre-checked`, {
          body: wrongUid,
        });
        assert.equal(checked.status, 409, "Kubernetes' stores check it");
        assert.equal(
          (await dev.setLimits({ checkedPreconditions: false })).checkedPreconditions,
          false,
        );
        try {
          const ignored = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/pre-ignored`, {
            body: wrongUid,
          });
          assert.equal(ignored.status, 200);
          assert.equal(ignored.body.metadata.name, "pre-ignored");
          assert.notEqual(
            ignored.body.metadata.uid,
            "not-it",
            "the answer is the claim it deleted",
          );
          const bad = await miloApi(dev, "DELETE", `${NS}/ipclaims/pre-checked`, { body: "[]" });
          assert.equal(bad.status, 400, "the body is still read");
        } finally {
          await dev.setLimits({});
          await miloApi(dev, "DELETE", `${NS}/ipclaims/pre-checked`);
        }
      },
    );

    await t.step("other kinds count apart; a refused LIST reads nothing", async () => {
      await dev.resetStats();
      assert.equal((await miloApi(dev, "GET", `${NS}/ipallocations`)).status, 200);
      assert.equal((await miloApi(dev, "GET", "/ippools")).status, 200);
      assert.equal((await miloApi(dev, "GET", "/ipclasses")).status, 200);
      const bad = await miloApi(
        dev,
        "GET",
        `${NS}/ipclaims?labelSelector=${encodeURIComponent("a in (")}`,
      );
      assert.equal(bad.status, 400);
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims?continue=bogus`)).status, 410);
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/l-1`)).status, 200, "not a LIST");
      const s = await dev.stats();
      assert.deepEqual(s.listsByKind, {
        ipallocations: { lists: 1, rowsScanned: 50 },
        ippools: { lists: 1, rowsScanned: 2 },
        ipclasses: { lists: 1, rowsScanned: 2 },
      });
      assert.equal(s.lists, 3);
      assert.equal(s.listRowsScanned, 54);
      assert.equal(s.allocations, 0);
      assert.equal(s.throttled, 0);
    });

    await t.step("the stats reset zeroes them", async () => {
      await dev.resetStats();
      const s = await dev.stats();
      assert.equal(s.lists, 0);
      assert.equal(s.listRowsScanned, 0);
      assert.deepEqual(s.listsByKind, {});
      assert.equal(s.throttled, 0);
      assert.equal(s.allocations, 0);
    });
  } finally {
    await dev.stop();
  }
});
