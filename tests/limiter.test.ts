/**
 * The agent's node-wide limiter of Milo requests alone, on a simulated clock:
 * it cuts on 429/503, recovers gradually, pauses every caller on a
 * Retry-After with full jitter, and fails a queued request at its deadline
 * without sending it.
 */
import assert from "node:assert/strict";
import {
  type LimiterEvent,
  LIMITS,
  MiloLimiter,
  RECONCILE_ROUTE,
  type Slot,
} from "../lib/limiter.ts";
import { VirtualClock } from "../testing/virtual_clock.ts";

function limiter(random = () => 0.5) {
  const clock = new VirtualClock(0);
  const events: LimiterEvent[] = [];
  const l = new MiloLimiter({
    now: clock.now,
    timer: clock.timer,
    random,
    onEvent: (e) => events.push(e),
  });
  /** A slot, on the simulated clock: the time it came, or the reason none did. */
  const take = async (deadline = Infinity, signal?: AbortSignal) => {
    const got = await clock.run(l.acquire(deadline, signal));
    return { got, at: clock.now() };
  };
  const slot = async (deadline = Infinity): Promise<Slot> => {
    const { got } = await take(deadline);
    assert.ok(typeof got === "object", `a slot, not ${got}`);
    return got;
  };
  return { clock, l, events, take, slot };
}

/** Settles the promise on the simulated clock, or tells it is still pending. */
async function settledBy<T>(
  clock: VirtualClock,
  p: Promise<T>,
  ms: number,
): Promise<T | "pending"> {
  return await clock.run(Promise.race([p, clock.sleep(ms).then(() => "pending" as const)]));
}

Deno.test("limiter: without overload it does not pace; it holds two in flight at first", async () => {
  const { l, clock, slot } = limiter();
  assert.equal(l.rate, Infinity);
  assert.equal(l.concurrency, LIMITS.initialConcurrency);
  const a = await slot(), b = await slot();
  assert.equal(clock.now(), 0, "two slots at once");
  const third = l.acquire(Infinity);
  assert.equal(await settledBy(clock, third, 10), "pending", "the third waits for an answer");
  a.done({ status: 201 });
  assert.equal(typeof await clock.run(third), "object");
  b.done({ status: 201 });
});

/** Milo admitted `n` requests just now; then two slots go out (the concurrency), and `queued` wait. */
async function busy(x: ReturnType<typeof limiter>, n: number, queued: number[]) {
  for (let i = 0; i < n; i++) (await x.slot()).done({ status: 201 });
  const out = [await x.slot(), await x.slot()];
  const waiting = queued.map((deadline) => x.l.acquire(deadline));
  return { out, waiting };
}

async function granted(clock: VirtualClock, p: Promise<Slot | "deadline" | "aborted">) {
  const s = await clock.run(p);
  assert.ok(typeof s === "object", `a slot, not ${s}`);
  return s;
}

Deno.test("limiter: a 429 to a busy node cuts rate and concurrency, and the rate paces the queue", async () => {
  const x = limiter(() => 0);
  const { l, clock, events } = x;
  // Milo admitted 10 requests within the last second, then refuses one while others wait.
  const { out, waiting } = await busy(x, 10, [Infinity, Infinity, Infinity]);
  out[0].done({ status: 429, retryAfterMs: 1000 });
  out[1].done({ status: 201 }); // sent before the cut: it raises nothing
  assert.deepEqual(events.filter((e) => e !== "queued"), ["paused", "cut"]);
  assert.equal(l.rate, 10 * LIMITS.firstShare, "the first rate: 0.7x what Milo admitted");
  assert.equal(l.concurrency, 1, `cut from ${LIMITS.initialConcurrency}`);
  const t0 = clock.now();
  const times: number[] = [];
  for (const w of waiting) {
    (await granted(clock, w)).done({ status: 201 });
    times.push(clock.now() - t0);
  }
  assert.equal(times[0], 0, "Retry-After x0: no pause");
  for (let i = 1; i < times.length - 1; i++) {
    const gap = times[i] - times[i - 1];
    assert.ok(gap > 1000 / 8 && gap <= 1000 / 7, `paced at about 7/s: ${times}`);
  }
  assert.equal(times.at(-1), times.at(-2), `the last call, alone, is not paced: ${times}`);
  // A later overload cuts the rate again, multiplicatively.
  const before = l.rate;
  const again = await x.slot();
  const queued = l.acquire(Infinity);
  again.done({ status: 503 });
  assert.ok(Math.abs(l.rate - before * LIMITS.decrease) < 1e-9, `${before} -> ${l.rate}`);
  (await granted(clock, queued)).done({ status: 201 });
});

Deno.test("limiter: recovery is additive, about +2 requests/s per second at the rate", async () => {
  const x = limiter(() => 0);
  const { l, clock } = x;
  const { out, waiting } = await busy(x, 10, Array(40).fill(Infinity));
  out[0].done({ status: 429, retryAfterMs: 1000 });
  out[1].done({ status: 201 });
  const cut = l.rate;
  const start = clock.now();
  const rates: number[] = [];
  for (const w of waiting) {
    (await granted(clock, w)).done({ status: 201 });
    rates.push(l.rate);
  }
  const seconds = (clock.now() - start) / 1000;
  const gained = l.rate - cut;
  const competing = rates.slice(0, -1);
  assert.ok(
    competing.every((r, i) => i === 0 || r > competing[i - 1]),
    "it rises with every answer while calls compete",
  );
  assert.equal(rates.at(-1), rates.at(-2), "the last call, alone, was not held back: no rise");
  assert.ok(rates.every((r, i) => i === 0 || r - rates[i - 1] < 0.5), "never by a jump");
  assert.ok(
    Math.abs(gained - LIMITS.increasePerS * seconds) < 2,
    `+${gained.toFixed(1)}/s in ${seconds.toFixed(1)} s`,
  );
});

Deno.test("limiter: Retry-After pauses every caller for a jittered time, then one probe goes alone", async () => {
  const x = limiter(() => 0.25);
  const { clock, events } = x;
  const { out, waiting } = await busy(x, 0, [Infinity, Infinity, Infinity]);
  const t0 = clock.now();
  out[0].done({ status: 429, retryAfterMs: 4000 });
  // Sent before the pause began: its refusal is old news, no second pause nor cut.
  out[1].done({ status: 429, retryAfterMs: 4000 });
  assert.equal(events.filter((e) => e === "paused").length, 1);
  assert.equal(events.filter((e) => e === "cut").length, 1);
  const probe = await granted(clock, waiting[0]);
  assert.equal(clock.now() - t0, 1000, "paused 0.25 x Retry-After: full jitter, node-wide");
  assert.equal(await settledBy(clock, waiting[1], 50), "pending", "the probe goes alone");
  probe.done({ status: 201 });
  (await granted(clock, waiting[1])).done({ status: 201 });
  (await granted(clock, waiting[2])).done({ status: 201 });

  // Other draws spread the same refusal over [0, Retry-After]: nodes do not come back in step.
  const waits: number[] = [];
  for (const r of [0, 0.3, 0.7, 0.999]) {
    const y = limiter(() => r);
    const b = await busy(y, 0, [Infinity]);
    const t = y.clock.now();
    b.out[0].done({ status: 429, retryAfterMs: 1000 });
    b.out[1].done({ status: 201 });
    (await granted(y.clock, b.waiting[0])).done({ status: 201 });
    waits.push(y.clock.now() - t);
  }
  assert.deepEqual(waits, [0, 300, 700, 999]);
});

Deno.test("limiter: a refused probe pauses again without cutting again", async () => {
  const x = limiter(() => 0.5);
  const { l, clock, events } = x;
  const { out, waiting } = await busy(x, 10, [Infinity, Infinity]);
  out[0].done({ status: 429, retryAfterMs: 1000 });
  out[1].done({ status: 201 });
  const rate = l.rate;
  const probe = await granted(clock, waiting[0]);
  const t = clock.now();
  probe.done({ status: 429, retryAfterMs: 1000 });
  assert.equal(l.rate, rate, "one refused probe is no news of the rate");
  assert.deepEqual(events.filter((e) => e !== "queued"), ["paused", "cut", "paused"]);
  (await granted(clock, waiting[1])).done({ status: 201 });
  assert.equal(clock.now() - t, 500);
});

Deno.test("limiter: a node that is not busy pauses on overload but keeps its limits", async () => {
  const { l, events, slot } = limiter();
  (await slot()).done({ status: 503 });
  assert.deepEqual(events, ["paused"]);
  assert.equal(l.rate, Infinity);
  assert.equal(l.concurrency, LIMITS.initialConcurrency);
});

Deno.test("limiter: a queued request that gets no slot before its deadline fails unsent", async () => {
  const x = limiter(() => 0.5);
  const { l, clock, events, take } = x;
  const t0 = clock.now();
  const { out, waiting } = await busy(x, 0, [t0 + 5_040]);
  out[0].done({ status: 429, retryAfterMs: 10_000 }); // everyone paused until t0 + 5 s
  out[1].done({ status: 201 });
  // A deadline the pause outlasts: no slot, at once.
  const early = await take(t0 + 2_000);
  assert.equal(early.got, "deadline");
  assert.equal(early.at, t0, "known at once: the pause outlasts it");
  // A deadline after the pause, behind the probe: it fails when its deadline comes.
  const late = l.acquire(t0 + 5_050);
  const probe = await granted(clock, waiting[0]);
  assert.equal(clock.now(), t0 + 5_000);
  assert.equal(await clock.run(late), "deadline");
  assert.equal(clock.now(), t0 + 5_050, "at its deadline, not before");
  assert.equal(events.filter((e) => e === "expired").length, 2);
  probe.done({ status: 201 });
});

Deno.test("limiter: a caller gone while queued leaves the queue", async () => {
  const { l, clock, slot } = limiter();
  const a = await slot(), b = await slot();
  const gone = new AbortController();
  const waiting = l.acquire(Infinity, gone.signal);
  assert.equal(l.queued, 1);
  gone.abort();
  assert.equal(await clock.run(waiting), "aborted");
  assert.equal(l.queued, 0);
  assert.equal(await l.acquire(Infinity, gone.signal), "aborted");
  a.done({ status: 201 });
  b.done({ status: 201 });
});

Deno.test("limiter: earliest deadline first; a slot reported twice counts once", async () => {
  const { l, clock, slot } = limiter();
  const a = await slot(), b = await slot();
  const order: string[] = [];
  const late = l.acquire(10_000).then((s) => (order.push("late"), s));
  const soon = l.acquire(5_000).then((s) => (order.push("soon"), s));
  a.done({ status: 201 });
  a.done({ status: 201 });
  const first = await clock.run(soon);
  assert.ok(typeof first === "object");
  assert.deepEqual(order, ["soon"], "the double report freed one slot, not two");
  b.done({ status: 201 });
  const second = await clock.run(late);
  assert.ok(typeof second === "object");
  assert.deepEqual(order, ["soon", "late"]);
  first.done({ status: 201 });
  second.done({ status: 201 });
});

Deno.test("limiter: a slot holds its place until answered or timed out, as Milo's queue serves", async () => {
  const { l, clock, slot } = limiter();
  const queued = [await slot(), await slot()];
  const t0 = clock.now();
  const waiting = l.acquire(Infinity);
  assert.equal(await settledBy(clock, waiting, 5_000), "pending", "unanswered, they hold it");
  queued[0].done({ status: 201 }); // answered (by a Milo whose requests time out past 10 s)
  const third = await clock.run(waiting);
  assert.ok(typeof third === "object");
  assert.equal(clock.now() - t0, 5_000, "at the answer");
  for (const s of [queued[1], third]) s.done({ status: 201 });
});

Deno.test("limiter: late answers while calls compete cut the concurrency, and pause nothing", async () => {
  const { l, clock, slot, events } = limiter();
  const out = [await slot(), await slot()];
  const next = l.acquire(Infinity);
  // Answered after half its timeout: Milo's priority and fairness queued it. Send less.
  out[0].done({ status: 201, late: true });
  assert.equal(l.concurrency, 1, `cut from ${LIMITS.initialConcurrency}`);
  assert.deepEqual(events.filter((e) => e !== "queued"), ["cut"], "nothing paused");
  assert.equal(l.rate, Infinity, "the rate is Milo's refusals' to set");
  out[1].done({ status: "error", late: true }); // a timeout within the cut hold: no second cut
  const s = await clock.run(next);
  assert.ok(typeof s === "object");
  assert.equal(events.filter((e) => e === "cut").length, 1);
  s.done({ status: 201, late: true }); // a call alone: its own slowness cuts nothing
  assert.equal(events.filter((e) => e === "cut").length, 1);
});

/** A limiter whose calls come through {@link MiloLimiter.forCall}, as the agent's do. */
function calls(random = () => 0.5) {
  const x = limiter(random);
  const take = async (
    call: ReturnType<MiloLimiter["forCall"]>,
    deadline = Infinity,
    purpose: "lease" | "release" = "lease",
  ) => {
    const got = await x.clock.run(call.acquire(deadline, undefined, purpose));
    return { got, at: x.clock.now() };
  };
  return { ...x, take };
}

const ROUTE = { tenant: "shop", network: "vpc7b3e" };

Deno.test("limiter: a call alone that Milo refuses only pauses: no cut, no pacing", async () => {
  const { l, clock, events, take } = calls(() => 1);
  const add = l.forCall(ROUTE);
  const a = await take(add), b = await take(add);
  assert.ok(typeof a.got === "object" && typeof b.got === "object");
  a.got.done({ status: 503, retryAfterMs: 1_000 });
  b.got.done({ status: 503, retryAfterMs: 1_000 });
  const t0 = clock.now();
  const retry = await take(add);
  assert.equal(retry.at - t0, 1_000, "its retry waits the pause");
  assert.ok(typeof retry.got === "object");
  retry.got.done({ status: 503, retryAfterMs: 1_000 });
  assert.deepEqual(events.filter((e) => e === "cut"), [], "one call's refusals cut nothing");
  assert.equal(l.rate, Infinity);
  add.close();
  // The next call of the flow, after the pause: its two requests go back to back.
  const del = l.forCall(ROUTE);
  const first = await take(del);
  assert.ok(typeof first.got === "object");
  first.got.done({ status: 200 });
  const second = await take(del);
  assert.equal(second.at, first.at, "not paced: no other call competes");
  assert.ok(typeof second.got === "object");
  second.got.done({ status: 200 });
});

Deno.test("limiter: a release is never held back by the refusals of the lease it rolls back", async () => {
  const { l, clock, take } = calls(() => 1);
  const add = l.forCall(ROUTE);
  const t0 = clock.now();
  const post = await take(add, t0 + 1_500);
  assert.ok(typeof post.got === "object");
  post.got.done({ status: 503, retryAfterMs: 30_000 });
  assert.equal(
    (await take(add, t0 + 1_500)).got,
    "deadline",
    "the ADD's retry: the pause outlasts it",
  );
  add.close();
  // The runtime's DEL right after the failed ADD: its flow is the network's release flow.
  const del = l.forCall(ROUTE);
  for (let i = 0; i < 4; i++) {
    const s = await take(del, t0 + 3_000, "release");
    assert.ok(typeof s.got === "object", `request ${i} of the DEL: ${s.got}`);
    assert.equal(s.at, t0, "at once");
    s.got.done({ status: 200 });
  }
  // The lease flow still pauses: a new ADD waits for it.
  assert.equal((await take(l.forCall(ROUTE), t0 + 2_000)).got, "deadline");
});

Deno.test("limiter: one tenant's refusals hold back neither another tenant's calls nor the reconcile", async () => {
  const { l, clock, take } = calls(() => 1);
  const t0 = clock.now();
  const noisy = Array.from({ length: 4 }, () => l.forCall({ tenant: "noisy", network: "n" }));
  const slots = await Promise.all(noisy.slice(0, 2).map((c) => take(c)));
  const queued = noisy.slice(2).map((c) => c.acquire(t0 + 20_000));
  for (const s of slots) {
    if (typeof s.got === "object") s.got.done({ status: 429, retryAfterMs: 30_000 });
  }
  for (const route of [{ tenant: "quiet", network: "q" }, RECONCILE_ROUTE]) {
    const call = l.forCall(route);
    for (const purpose of ["lease", "release"] as const) {
      const s = await take(call, t0 + 1_000, purpose);
      assert.ok(typeof s.got === "object", `${route.tenant} ${purpose}: ${s.got}`);
      assert.equal(s.at, t0);
      s.got.done({ status: 201 });
    }
  }
  for (const q of queued) assert.equal(await clock.run(q), "deadline", "the noisy tenant waits");
});

Deno.test("limiter: at the node's ceiling, the tenant served least recently goes first", async () => {
  const { l, clock } = calls();
  const t0 = clock.now();
  // Tenant a fills the node: 32 networks x the first concurrency of 2.
  const held: Slot[] = [];
  for (let n = 0; n < LIMITS.maxConcurrency / LIMITS.initialConcurrency; n++) {
    const call = l.forCall({ tenant: "a", network: `net${n}` });
    for (let i = 0; i < LIMITS.initialConcurrency; i++) {
      const s = await clock.run(call.acquire(Infinity));
      assert.ok(typeof s === "object");
      held.push(s);
    }
  }
  const order: string[] = [];
  const more = l.forCall({ tenant: "a", network: "net-more" }).acquire(t0 + 1_000)
    .then((s) => (order.push("a"), s));
  const other = l.forCall({ tenant: "b", network: "b" }).acquire(t0 + 5_000)
    .then((s) => (order.push("b"), s));
  assert.equal(l.queued, 2, "both wait for the ceiling");
  held.pop()!.done({ status: 201 });
  const first = await clock.run(other);
  assert.deepEqual(order, ["b"], "b, though a's deadline is earlier: a was served last");
  held.pop()!.done({ status: 201 });
  const second = await clock.run(more);
  assert.deepEqual(order, ["b", "a"]);
  for (const s of [...held, first, second]) if (typeof s === "object") s.done({ status: 201 });
});

Deno.test("limiter: a call that has answered holds nothing: its waiters leave, its slots stop counting", async () => {
  const { l, clock, take } = calls();
  const gone = l.forCall(ROUTE);
  const a = await take(gone), b = await take(gone);
  assert.ok(typeof a.got === "object" && typeof b.got === "object");
  const stuck = gone.acquire(Infinity);
  const next = l.forCall(ROUTE).acquire(Infinity);
  assert.equal(await settledBy(clock, next, 10), "pending", "two unanswered slots hold the flow");
  const t = clock.now();
  gone.close();
  assert.equal(await clock.run(stuck), "aborted");
  const s = await clock.run(next);
  assert.ok(typeof s === "object");
  assert.equal(clock.now(), t, "at once, not at its slots' answers");
  assert.equal(await gone.acquire(Infinity), "aborted", "a closed call asks for nothing more");
  a.got.done({ status: 201 }); // a late answer is still Milo's word, and frees nothing twice
  s.done({ status: 201 });
});

Deno.test("limiter: flows are bounded: a tenant making networks without end costs at most maxFlows", async () => {
  const { l, clock } = calls(() => 1);
  const live = await clock.run(l.forCall({ tenant: "t", network: "live" }).acquire(Infinity));
  assert.ok(typeof live === "object");
  for (let n = 0; n < LIMITS.maxFlows + 64; n++) {
    const s = await clock.run(l.forCall({ tenant: "t", network: `n${n}` }).acquire(Infinity));
    assert.ok(typeof s === "object");
    s.done({ status: 503 }); // each flow pauses for a second
    if (n === LIMITS.maxFlows / 2) await clock.run(clock.sleep(1_000));
  }
  assert.ok(l.flows <= LIMITS.maxFlows, `${l.flows} flows`);
  live.done({ status: 201 });
});
