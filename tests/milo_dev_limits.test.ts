/**
 * The real server's limits: the allocation ceiling and API Priority and
 * Fairness' queue in front of it (429 on overflow), the behaviour switches,
 * and the cost of a LIST.
 */

import assert from "node:assert/strict";
import { ApfQueue, DroppedRequests, type Entry } from "../milo-dev/apf.ts";
import {
  AllocationCeiling,
  DEFAULT_ALLOCATIONS_PER_SECOND,
  DEFAULT_CONCURRENCY,
  DEFAULT_QUEUE_LENGTH,
  DEFAULT_QUEUE_WAIT_MS,
  defaultLimits,
  type Limits,
  mergeLimits,
} from "../milo-dev/limits.ts";
import type { IPClaimObject } from "../milo-dev/objects.ts";
import { startServer } from "../milo-dev/server.ts";
import { claimBody, miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { DEV_SEED } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
const NS = "/namespaces/default";
const POOL = "/ippools/vpc-7b3e-pods-v4";
const APF_TEXT = "Too many requests, please try again later.\n";

const limits = (over: Partial<Limits>): Limits => ({ ...defaultLimits(), ...over });

Deno.test("milo-dev limits: Milo's defaults; the ceiling is a sliding one-second window", () => {
  assert.deepEqual(defaultLimits(), {
    allocationsPerSecond: 370,
    concurrency: 49,
    queueLength: 300,
    queueWaitMs: 15_000,
    pagedLists: false,
    checkedPreconditions: false,
    tenantClasses: false,
    sameNameRaceConflict: false,
  });
  assert.equal(DEFAULT_ALLOCATIONS_PER_SECOND, 370);
  assert.equal(DEFAULT_QUEUE_LENGTH, 6 * 50, "APF's hand of 6 queues of 50");
  assert.equal(DEFAULT_CONCURRENCY, Math.ceil(600 * 20 / 245), "global-default's share of 600");
  assert.equal(DEFAULT_QUEUE_WAIT_MS, 60_000 / 4, "a quarter of the 60 s request timeout");
  let now = 10_000;
  const c = new AllocationCeiling(limits({ allocationsPerSecond: 3 }), () => now);
  const admit = (at: number) => {
    now = at;
    return c.admit();
  };
  assert.deepEqual(admit(10_000), { admitted: true });
  assert.deepEqual(admit(10_400), { admitted: true });
  assert.deepEqual(admit(10_900), { admitted: true });
  assert.deepEqual(admit(10_950), { admitted: false, waitMs: 50 }, "the window has room at 11,000");
  assert.deepEqual(admit(10_999), { admitted: false, waitMs: 1 }, "refused: no admit");
  assert.deepEqual(admit(11_000), { admitted: true }, "the first left the window");
  assert.deepEqual(admit(11_001), { admitted: false, waitMs: 399 });
  assert.deepEqual(admit(11_400), { admitted: true }, "the second left it");
  // Admissions of the last second count against a new ceiling at once.
  c.set(limits({ allocationsPerSecond: 2 }));
  assert.deepEqual(admit(11_450), { admitted: false, waitMs: 550 });
  assert.deepEqual(admit(11_999), { admitted: false, waitMs: 1 }, "11,000 and 11,400");
  assert.deepEqual(admit(12_000), { admitted: true });
  assert.deepEqual(admit(12_001), { admitted: false, waitMs: 399 });
  c.set(limits({ allocationsPerSecond: 0 }));
  for (let i = 0; i < 5_000; i++) assert.equal(admit(12_002).admitted, true, "0 is unlimited");
  c.set(limits({ allocationsPerSecond: 4_000 }));
  assert.deepEqual(admit(12_500), { admitted: false, waitMs: 502 }, "they counted too");
  assert.deepEqual(admit(13_002), { admitted: true });
  assert.equal(c.get().allocationsPerSecond, 4_000);

  const one = limits({ allocationsPerSecond: 1 });
  assert.deepEqual(mergeLimits(one, {}), one);
  assert.deepEqual(
    mergeLimits(one, {
      allocationsPerSecond: 0,
      queueLength: 0,
      queueWaitMs: 10,
      pagedLists: true,
    }),
    { ...one, allocationsPerSecond: 0, queueLength: 0, queueWaitMs: 10, pagedLists: true },
  );
  for (
    const bad of [
      [],
      null,
      { allocationsPerSecond: -1 },
      { allocationsPerSecond: 1.5 },
      { allocationsPerSecond: "5" },
      { queueLength: -1 },
      { queueWaitMs: 1e9 },
      { checkedPreconditions: "yes" },
      { tenantClasses: 1 },
    ]
  ) {
    assert.throws(() => mergeLimits(one, bad), JSON.stringify(bad));
  }
  assert.throws(() => mergeLimits(one, { nope: 1 }), /unknown limit/);
});

Deno.test("milo-dev limits: Retry-After as APF's dropped-requests tracker sets it", () => {
  let s = 1_000;
  const d = new DroppedRequests(() => s);
  const drop = (at: number, n = 1) => {
    s = at;
    for (let i = 0; i < n; i++) d.record();
    return d.retryAfter;
  };
  assert.equal(d.retryAfter, 1);
  assert.equal(drop(1_000, 5), 1, "decided when the next second starts");
  assert.equal(drop(1_001), 2, "3 × 1 dropped in the last second: doubled");
  assert.equal(drop(1_001, 10), 2);
  assert.equal(drop(1_002), 2, "raised at most once per retryAfter seconds");
  assert.equal(drop(1_003), 4, "11 + 1 ≥ 3 × 2 in the last two seconds, two seconds on");
  assert.equal(drop(1_004), 4);
  assert.equal(drop(1_030), 3, "fewer than retryAfter dropped: lowered by one");
  assert.equal(drop(1_040), 2);
  assert.equal(drop(1_050), 1);
  assert.equal(drop(1_060), 1, "never below 1");
  for (let t = 2_000; t < 2_100; t++) drop(t, 200);
  assert.equal(d.retryAfter, 32, "at most 32");
});

Deno.test("milo-dev limits: APF's queue serves in order as the ceiling has room", async () => {
  const c = new AllocationCeiling(limits({ allocationsPerSecond: 2, queueLength: 2 }));
  const q = new ApfQueue(c);
  const open = new AbortController().signal;
  try {
    const first = await Promise.all([q.enter("a", open), q.enter("a", open)]);
    assert.deepEqual(first.map(admittedAt), [0, 0]);
    for (const e of first) if (e !== "gone" && e.admitted) e.done();
    const order: string[] = [];
    const waiting = ["w1", "w2"].map((w) =>
      q.enter("a", open).then((e) => {
        order.push(w);
        return e;
      })
    );
    const gone = new AbortController();
    const other = q.enter("b", gone.signal);
    assert.equal(q.length, 3);
    const full = await q.enter("a", open);
    assert.deepEqual(full, { admitted: false, retryAfterSeconds: 1, why: "full" });
    gone.abort();
    assert.equal(await other, "gone", "a caller that hung up leaves the queue");
    const served = await Promise.all(waiting);
    assert.deepEqual(order, ["w1", "w2"]);
    for (const e of served) {
      assert.equal(e !== "gone" && e.admitted, true);
      if (e !== "gone" && e.admitted) e.done();
    }
    c.set(limits({ allocationsPerSecond: 1, queueLength: 5, queueWaitMs: 50 }));
    q.kick();
    const late = await q.enter("a", open);
    assert.deepEqual(late, { admitted: false, retryAfterSeconds: 1, why: "timeout" });
  } finally {
    q.close();
  }
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
    assert.deepEqual(await r.json(), defaultLimits());
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
    assert.deepEqual(await dev.limits(), limits({ allocationsPerSecond: 0 }));
  } finally {
    await dev.stop();
  }
});

/** When an entry was admitted (ms waited), or what it came to. */
function admittedAt(e: Entry | "gone"): number | string {
  return e === "gone" ? "gone" : e.admitted ? e.waitedMs : e.why;
}

Deno.test("ApfQueue seats every verb: a GET waits for a seat; a create the ceiling holds back does not hold up a GET behind it", async () => {
  const c = new AllocationCeiling(
    limits({ allocationsPerSecond: 1, concurrency: 2, queueLength: 5, queueWaitMs: 5_000 }),
  );
  const q = new ApfQueue(c);
  const open = new AbortController().signal;
  try {
    const [a, b] = await Promise.all([q.enter("t", open, false), q.enter("t", open, true)]);
    assert.equal(q.running, 2, "a GET and a create hold both seats");
    const get = q.enter("t", open, false);
    assert.equal(q.length, 1, "a GET past the seats waits");
    if (a !== "gone" && a.admitted) a.done();
    const got = await get;
    assert.equal(got !== "gone" && got.admitted, true, "served once a seat is free");
    if (b !== "gone" && b.admitted) b.done();
    // The ceiling (1 a second) is spent: a create waits for it, holding no seat, and a
    // DELETE behind it is served at once.
    const create = q.enter("t", open, true);
    const del = await q.enter("t", open, false);
    assert.equal(del !== "gone" && del.admitted, true);
    assert.equal(q.length, 1, "the create still waits for the ceiling");
    if (del !== "gone" && del.admitted) del.done();
    if (got !== "gone" && got.admitted) got.done();
    const made = await create;
    assert.equal(made !== "gone" && made.admitted, true);
    if (made !== "gone" && made.admitted) made.done();
    assert.equal(q.running, 0);
  } finally {
    q.close();
  }
});

/** Creates `name`; the answer. */
function create(dev: MiloDev, name: string, labels?: Record<string, string>, ns = "default") {
  const body = claimBody(name, { labels });
  (body.metadata as Any).namespace = ns;
  return miloApi<Any>(dev, "POST", `/namespaces/${ns}/ipclaims`, { body });
}

/** A claim create as raw HTTP (APF's 429 is plain text), its status, headers and text. */
async function rawCreate(dev: MiloDev, name: string, signal?: AbortSignal) {
  const r = await dev.fetch(`${dev.url}/apis/ipam.miloapis.com/v1alpha1${NS}/ipclaims`, {
    method: "POST",
    headers: { authorization: `Bearer ${dev.token}`, "content-type": "application/json" },
    body: JSON.stringify(claimBody(name)),
    signal,
  });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

/** Waits until the window has forgotten every admission. */
const windowPasses = () => new Promise((r) => setTimeout(r, 1_100));

/** Creates `n` claims `prefix-1..n` one after the other; asserts they took under a second. */
async function fillWindow(dev: MiloDev, prefix: string, n: number): Promise<void> {
  const t0 = performance.now();
  for (let i = 1; i <= n; i++) {
    const r = await create(dev, `${prefix}-${i}`);
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
  const took = performance.now() - t0;
  assert.ok(took < 1_000, `the ${n} creates took ${took} ms: not within one second`);
}

Deno.test("milo-dev limits: the ceiling and APF's queue over HTTP", async (t) => {
  const N = 5;
  const dev = await startMiloDev({ allocationsPerSecond: N });
  try {
    await t.step("past N a second a create waits in the queue, then is served", async () => {
      assert.equal((await dev.limits()).allocationsPerSecond, N);
      await dev.resetStats();
      await fillWindow(dev, "c", N);
      const r = await create(dev, "queued");
      assert.equal(r.status, 201, JSON.stringify(r.body));
      assert.equal(r.body.status.address, `10.40.0.${N + 1}`);
      const s = await dev.stats();
      assert.equal(s.queued, 1);
      assert.equal(s.throttled, 0);
      assert.equal(s.allocations, N + 1);
    });

    await t.step(
      "an empty queue (queueLength 0): 429 at once, plain text, nothing made",
      async () => {
        await windowPasses();
        await dev.setLimits({ queueLength: 0 });
        await dev.resetStats();
        await fillWindow(dev, "d", N);
        const r = await rawCreate(dev, "over");
        assert.equal(r.status, 429);
        assert.equal(r.text, APF_TEXT);
        assert.equal(r.headers.get("content-type"), "text/plain; charset=utf-8");
        assert.equal(r.headers.get("x-content-type-options"), "nosniff");
        assert.match(r.headers.get("retry-after") ?? "", /^[1-9]\d*$/);
        assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/over`)).status, 404);
        const allocs = await miloApi<Any>(dev, "GET", `${NS}/ipallocations`);
        assert.equal(allocs.body.items.length, 2 * N + 1);
        const pool = await miloApi<Any>(dev, "GET", POOL);
        assert.equal(pool.body.status.capacity.allocated, String(2 * N + 3), "2 reserved");
        // A dry run is a create too; GETs, LISTs and DELETEs are not queued.
        assert.equal((await rawCreate(dev, "dry")).status, 429);
        assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/c-1`)).status, 200);
        assert.equal((await miloApi(dev, "DELETE", `${NS}/ipclaims/d-${N}`)).status, 200);
        const s = await dev.stats();
        assert.equal(s.throttled, 2);
        assert.equal(s.allocations, N);
        assert.equal(s.byStatus["429"], 2);
        assert.equal(s.faults.error, 0, "not an injected fault");
        await windowPasses();
        const again = await create(dev, "over");
        assert.equal(again.status, 201, "admitted once the second has passed");
        assert.equal(
          again.body.status.address,
          `10.40.0.${2 * N + 1}`,
          "the freed address, no hole",
        );
      },
    );

    await t.step(
      "a create that waits past queueWaitMs is refused; a gone caller is never served",
      async () => {
        await windowPasses();
        await dev.setLimits({ queueWaitMs: 100 });
        await fillWindow(dev, "e", N);
        const late = await rawCreate(dev, "late");
        assert.deepEqual([late.status, late.text], [429, APF_TEXT]);
        await dev.setLimits({});
        const hungUp = await rawCreate(dev, "hung-up", AbortSignal.timeout(100)).catch((e) => e);
        assert.ok(hungUp instanceof DOMException, "the caller gave up while queued");
        await windowPasses();
        assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/late`)).status, 404);
        assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/hung-up`)).status, 404);
      },
    );

    await t.step(
      "unauthenticated or wrong-project creates are refused before the queue",
      async () => {
        await windowPasses();
        await dev.setLimits({ allocationsPerSecond: 1, queueLength: 0 });
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
        assert.equal((await rawCreate(dev, "two")).status, 429);
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

      assert.equal((await dev.setLimits({ allocationsPerSecond: 0 })).allocationsPerSecond, 0);
      const burst = await Promise.all(
        Array.from({ length: 6 * N }, (_, i) => create(dev, `u-${i}`)),
      );
      assert.deepEqual(burst.map((r) => r.status), Array(6 * N).fill(201), "0: unlimited");
      const patched = await put({ allocationsPerSecond: 5, queueLength: 0 }, "PATCH");
      assert.deepEqual(patched, {
        status: 200,
        body: limits({ allocationsPerSecond: 5, queueLength: 0 }),
      });
      assert.equal((await rawCreate(dev, "x-1")).status, 429, "the burst's second still counts");
      // PUT {} and DELETE go back to the start-up flag.
      assert.deepEqual((await put({})).body, limits({ allocationsPerSecond: N }));
      await dev.setLimits({ allocationsPerSecond: 7 });
      const del = await fetch(`${dev.adminUrl}/limits`, { method: "DELETE" });
      assert.deepEqual(await del.json(), limits({ allocationsPerSecond: N }));
    });

    await t.step("a restart keeps the flag, not the run-time setting", async () => {
      await dev.setLimits({ allocationsPerSecond: 3, pagedLists: true });
      await dev.restart();
      assert.deepEqual(await dev.limits(), limits({ allocationsPerSecond: N }));
    });
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev limits: a LIST counts every row under the prefix", async (t) => {
  const seed: Any = structuredClone(DEV_SEED);
  seed.projects[0].namespaces = ["default", "other"];
  const dev = await startMiloDev({ seed });
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

    await t.step("one answer, as Milo's store: limit and continue unread", async () => {
      await dev.resetStats();
      const r = await miloApi<Any>(dev, "GET", `${NS}/ipclaims?limit=20&continue=anything`);
      assert.equal(r.status, 200);
      assert.equal(r.body.items.length, 50);
      assert.equal(r.body.metadata.continue, undefined);
      assert.equal(r.body.metadata.remainingItemCount, undefined);
      assert.equal((await dev.stats()).listRowsScanned, 50);
      const all = await dev.listClaims("tenant-a", "app=one");
      assert.equal(all.length, 8, "without a namespace: the whole project");
      assert.equal((await dev.stats()).listRowsScanned, 50 + 57);
    });

    await t.step("pagedLists: Kubernetes' paging; every page scans it all again", async () => {
      // Opts in: milo-dev's paging, the behaviour this step is about; Milo has none.
      assert.equal((await dev.setLimits({ pagedLists: true })).pagedLists, true);
      try {
        await dev.resetStats();
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
        const s = await dev.stats();
        assert.equal(s.lists, 3);
        assert.equal(s.listRowsScanned, 3 * 50);
        assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims?continue=bogus`)).status, 410);
      } finally {
        await dev.setLimits({});
      }
    });

    await t.step(
      "a DELETE ignores its uid precondition, as Milo's; checkedPreconditions checks it",
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
        const ignored = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/pre-ignored`, {
          body: wrongUid,
        });
        assert.equal(ignored.status, 200);
        assert.equal(ignored.body.metadata.name, "pre-ignored");
        assert.notEqual(ignored.body.metadata.uid, "not-it", "the answer is the claim it deleted");
        const bad = await miloApi(dev, "DELETE", `${NS}/ipclaims/pre-checked`, { body: "[]" });
        assert.equal(bad.status, 400, "the body is still read");
        // Opts in: Kubernetes' stores' check, the behaviour this step is about.
        await dev.setLimits({ checkedPreconditions: true });
        try {
          const checked = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/pre-checked`, {
            body: wrongUid,
          });
          assert.equal(checked.status, 409, "Kubernetes' stores check it");
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
      assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/l-1`)).status, 200, "not a LIST");
      const s = await dev.stats();
      assert.deepEqual(s.listsByKind, {
        ipallocations: { lists: 1, rowsScanned: 50 },
        ippools: { lists: 1, rowsScanned: 2 },
        ipclasses: { lists: 1, rowsScanned: 0 },
      }, "a tenant's key space holds no IPClass");
      assert.equal(s.lists, 3);
      assert.equal(s.listRowsScanned, 52);
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
      assert.equal(s.queued, 0);
      assert.equal(s.allocations, 0);
    });
  } finally {
    await dev.stop();
  }
});
