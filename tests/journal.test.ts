/** The release journal in-process: written by a failing DEL, dropped by ADD, never dropping, atomic. */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimName } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { Holdings } from "../lib/holdings.ts";
import { hostId } from "../lib/host.ts";
import { writeAtomic } from "../lib/atomic_write.ts";
import { IN_DOUBT, Journal, type JournalEntry } from "../lib/journal.ts";
import {
  CONTAINER_ID,
  invocation,
  type InvocationOptions,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { statusReply } from "../testing/milo_fixtures.ts";
import { lost, StubMilo } from "../testing/stub_milo.ts";

const FOREVER = Number.POSITIVE_INFINITY;
const attachment = (containerId: string) => ({
  cluster: "cluster-a",
  node: "node-1",
  network: "vpc-7b3e",
  containerId,
  ifname: "eth0",
});

/** The host identity the stub invocations of `dir` record (one made in `dir`). */
const hostOf = (dir: string) => hostId({ hostIdFile: `${dir}/machine-id`, stateDir: dir });

/** The entry owing both claims of the default attachment (a pod in shop), by name. */
const entryOfBoth = (created: number, lastError: string, host: string): JournalEntry => ({
  ...attachment(CONTAINER_ID),
  host,
  podNamespace: "shop",
  pod: "shop/web-0",
  created,
  claims: [
    { name: claimName(attachment(CONTAINER_ID), "ipv4") },
    { name: claimName(attachment(CONTAINER_ID), "ipv6") },
  ],
  attempts: 0,
  lastError,
});

function world(dir: string) {
  const stub = new StubMilo();
  const inv = (command: "ADD" | "DEL", o: Partial<InvocationOptions> = {}) =>
    invocation(stub, { command, stateDir: dir, ...o });
  return { stub, inv, journal: new Journal(dir) };
}

Deno.test("journal: a failing DEL writes one entry (0600 in a 0700 dir) naming its claims", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    const now = Date.parse("2026-12-01T12:00:00Z");
    w.stub.inject({ times: FOREVER, answer: () => statusReply(503) });
    const e = await rejectsWith(del(w.inv("DEL", { now: () => now })), 11);
    const path = w.journal.pathOf(attachment(CONTAINER_ID));
    assert.ok(e.details.includes(path));
    const entry: JournalEntry = JSON.parse(await Deno.readTextFile(path));
    assert.deepEqual(entry, entryOfBoth(now, e.message, hostOf(dir)));
    assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
    assert.equal((await Deno.stat(w.journal.dir)).mode! & 0o777, 0o700);
    await rejectsWith(del(w.inv("DEL", { now: () => now + 5 })), 11);
    const again = await w.journal.list();
    assert.equal(again.length, 1, "a repeated failure extends the entry");
    assert.equal(again[0].entry?.created, now);
  });
});

Deno.test("journal: a later ADD of the same attachment drops its entry, another ADD does not", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    w.stub.inject({ times: FOREVER, answer: () => statusReply(503) });
    await rejectsWith(del(w.inv("DEL")), 11);
    await rejectsWith(del(w.inv("DEL", { containerId: "other" })), 11);
    assert.equal((await w.journal.list()).length, 2);
    w.stub.clearFaults();
    await add(w.inv("ADD"));
    const left = await w.journal.list();
    assert.deepEqual(left.map((e) => e.entry?.containerId), ["other"]);
  });
});

Deno.test("journal: an ADD waits for a release in progress on the entry, then drops it", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    const path = await w.journal.record(attachment(CONTAINER_ID), [{ name: "pod-x-v4" }], "e");
    const events: string[] = [];
    w.stub.inject({
      method: "POST",
      times: FOREVER,
      answer: () => void events.push("POST"),
    });
    const release = Promise.withResolvers<void>();
    const locked = Promise.withResolvers<void>();
    const held = w.journal.whileLocked(path, async () => {
      locked.resolve();
      await release.promise;
      events.push("released");
    });
    await locked.promise;
    const adding = add(w.inv("ADD"));
    for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
    release.resolve();
    assert.equal(await held, true);
    await adding;
    assert.deepEqual(events, ["released", "POST", "POST"], "the ADD waited on the lock");
    assert.deepEqual(await w.journal.list(), []);
    assert.equal(await w.journal.whileLocked(path, () => Promise.resolve()), false);
  });
});

Deno.test("journal: an entry that cannot be dropped fails the ADD with code 5 before any request", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    await Deno.mkdir(w.journal.pathOf(attachment(CONTAINER_ID)), { recursive: true });
    await rejectsWith(add(w.inv("ADD")), 5, /release journal entry/);
    assert.equal(w.stub.requests.length, 0);
  });
});

Deno.test("journal: never drops an entry past its share's bound; that share's ADDs are refused meanwhile", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const journal = new Journal(dir, 4096, 3);
    const shop = (id: string) => ({ ...attachment(id), podNamespace: "shop" });
    for (const [i, id] of ["a", "b", "c", "d"].entries()) {
      await journal.record(shop(id), [{ name: `pod-${id}-v4` }], "e", 1_000 + i);
    }
    await journal.record(shop("a"), [{ name: "pod-a-v6", uid: "u" }], "later", 9_000);
    const ids = async () => (await journal.list()).map((e) => e.entry?.containerId);
    assert.deepEqual(await ids(), ["a", "b", "c", "d"], "every owed release kept");
    const a = (await journal.list())[0].entry!;
    assert.equal(a.created, 1_000);
    assert.equal(a.lastError, "later");
    assert.deepEqual(a.claims, [{ name: "pod-a-v4" }, { name: "pod-a-v6", uid: "u" }]);
    assert.deepEqual(journal.full(shop("x")), { share: "namespace shop", owed: 4, limit: 3 });

    const inv = invocation(stub, { command: "ADD", stateDir: dir });
    const full = { ...inv, journal };
    await rejectsWith(
      add(full),
      11,
      /4 releases are owed to Milo for namespace shop \(its limit 3\)/,
    );
    assert.equal(stub.requests.length, 0, "refused before any request");

    const dels = invocation(stub, { command: "DEL", stateDir: dir, containerId: "e" });
    stub.inject({ times: FOREVER, answer: () => statusReply(503) });
    await rejectsWith(del({ ...dels, journal }), 11, /journaled/);
    assert.equal((await journal.list()).length, 5, "a DEL still records while full");

    for (const id of ["a", "b", "c"]) await journal.update(journal.pathOf(attachment(id)), null);
    assert.equal(await journal.countOwed(), 2);
    assert.equal(journal.full(shop("x")), undefined, "counting clears the flag");
    stub.clearFaults();
    await add(full);
  });
});

Deno.test("journal: one namespace filling its share never refuses another namespace's ADD", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    // The node's limit, and one namespace's, at 3 entries.
    const journal = new Journal(dir, 3, 3);
    const evil = (command: "ADD" | "DEL", containerId: string) => ({
      ...w.inv(command, { containerId, args: { K8S_POD_NAMESPACE: "evil" } }),
      journal,
    });
    // Creates never answered in time (the network's timeouts shorter than Milo's answers):
    // each ADD is left in doubt, and the DEL after it owes an in-doubt entry.
    w.stub.inject({ method: "POST", times: FOREVER, answer: () => lost() });
    for (const id of ["e1", "e2", "e3"]) {
      await rejectsWith(add(evil("ADD", id)), 11);
      await del(evil("DEL", id));
    }
    const owed = await journal.list();
    assert.deepEqual(owed.map((e) => [e.entry?.podNamespace, e.entry?.inDoubt]), [
      ["evil", true],
      ["evil", true],
      ["evil", true],
    ]);
    const sent = w.stub.requests.length;
    await rejectsWith(
      add(evil("ADD", "e4")),
      11,
      /owed to Milo for namespace evil/,
    );
    assert.equal(w.stub.requests.length, sent, "evil's ADD refused before any request");
    w.stub.clearFaults();
    await add({ ...w.inv("ADD", { containerId: "shop-1" }), journal });
    assert.equal((await journal.list()).length, 3, "no entry dropped");
  });
});

Deno.test("journal: at the node's limit, namespaces owing an even part or more are refused, others go on", async () => {
  await withTempDir(async (dir) => {
    const journal = new Journal(dir, 4, 512);
    const of = (ns: string, id: string) => ({ ...attachment(id), podNamespace: ns });
    for (const id of ["e1", "e2", "e3"]) await journal.record(of("evil", id), [{ name: id }], "e");
    assert.equal(journal.full(of("evil", "x")), undefined, "under both limits");
    await journal.record(of("quiet", "q1"), [{ name: "q1" }], "e");
    assert.deepEqual(journal.full(of("evil", "x")), { share: "namespace evil", owed: 3, limit: 2 });
    assert.equal(journal.full(of("quiet", "x")), undefined, "under an even part: its ADDs go on");
    assert.equal(journal.full(of("shop", "x")), undefined);
    // Entries from before shares (no namespace, no marker) count against their network's.
    const legacy = `${journal.dir}/pod-legacy.json`;
    await writeAtomic(legacy, { ...attachment("old"), created: 1, claims: [], attempts: 0 });
    await Deno.remove(`${journal.dir}/shares`, { recursive: true });
    assert.equal(await journal.countOwed(), 5);
    assert.deepEqual(journal.full(of("evil", "x")), { share: "namespace evil", owed: 3, limit: 1 });
    assert.deepEqual(journal.full(attachment("x")), {
      share: "network vpc-7b3e",
      owed: 1,
      limit: 1,
    });
    for (const e of await journal.list()) {
      if (e.entry?.podNamespace !== "quiet") await journal.update(e.path, null);
    }
    assert.equal(await journal.countOwed(), 1);
    for (const ns of ["evil", "quiet", "shop"]) assert.equal(journal.full(of(ns, "x")), undefined);
  });
});

Deno.test("journal: writes are atomic (temp file, rename); a failed write leaves no temp file", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/entry.json`;
    const big = { claims: Array.from({ length: 2_000 }, (_, i) => ({ name: `pod-${i}-v4` })) };
    let reads = 0;
    const writing = (async () => {
      for (let i = 0; i < 20; i++) await writeAtomic(path, { ...big, n: i });
    })();
    await writeAtomic(path, { ...big, n: -1 });
    while (reads < 200) {
      const v = JSON.parse(await Deno.readTextFile(path));
      assert.equal(v.claims.length, 2_000, "a reader never sees a partial file");
      reads++;
    }
    await writing;
    assert.equal(JSON.parse(await Deno.readTextFile(path)).n, 19);
    assert.deepEqual((await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name), [
      "entry.json",
    ]);
    await Deno.mkdir(`${dir}/taken.json`);
    await Deno.writeTextFile(`${dir}/taken.json/keep`, "x");
    await rejectsWith(writeAtomic(`${dir}/taken.json`, { a: 1 }), 5, /cannot write/);
    assert.deepEqual((await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name).sort(), [
      "entry.json",
      "taken.json",
    ]);
    assert.equal(await Deno.readTextFile(`${dir}/taken.json/keep`), "x");
  });
});

Deno.test("journal: a malformed entry is listed with its error, never dropped silently", async () => {
  await withTempDir(async (dir) => {
    const journal = new Journal(dir);
    await journal.record(attachment("ok"), [{ name: "pod-ok-v4" }], "e", 5);
    await Deno.writeTextFile(`${journal.dir}/pod-broken.json`, JSON.stringify({ claims: 3 }));
    const list = await journal.list();
    assert.equal(list.length, 2);
    const broken = list.find((e) => e.path.endsWith("pod-broken.json"));
    assert.match(broken?.error ?? "", /malformed/);
    assert.equal(list.find((e) => e.entry)?.entry?.containerId, "ok");
  });
});

Deno.test("journal: a failed ADD leaves the entry owed; a reconcile waits for an ADD in flight", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    w.stub.inject({ method: "GET", times: FOREVER, answer: () => statusReply(503) });
    await rejectsWith(del(w.inv("DEL")), 11);
    w.stub.clearFaults();
    w.stub.inject({ method: "POST", times: FOREVER, answer: () => statusReply(503) });
    await rejectsWith(add(w.inv("ADD")), 11);
    const [kept] = await w.journal.list();
    assert.equal(kept.entry?.claims.length, 2, "the failed ADD dropped nothing");
    w.stub.clearFaults();
    const posted = Promise.withResolvers<void>();
    const go = Promise.withResolvers<void>();
    w.stub.inject({
      method: "POST",
      times: 1,
      answer: async () => {
        posted.resolve();
        await go.promise;
        return undefined;
      },
    });
    const adding = add(w.inv("ADD"));
    await posted.promise;
    let ran = false;
    const reconciling = w.journal.whileLocked(kept.path, () => Promise.resolve(void (ran = true)));
    for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
    assert.equal(ran, false, "the release waits while the ADD holds the entry");
    go.resolve();
    await adding;
    assert.equal(await reconciling, false, "the ADD succeeded: nothing left to release");
    assert.equal(ran, false);
    assert.deepEqual(await w.journal.list(), []);
  });
});

Deno.test("journal: a record made while a release holds the entry waits, and is kept", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    const a = attachment(CONTAINER_ID);
    const path = await w.journal.record(a, [{ name: "pod-x-v4" }], "first");
    const locked = Promise.withResolvers<void>();
    const release = Promise.withResolvers<void>();
    const releasing = w.journal.whileLocked(path, async (entry) => {
      locked.resolve();
      await release.promise;
      await w.journal.update(path, { ...entry, claims: [], attempts: entry.attempts + 1 });
    });
    await locked.promise;
    const recording = w.journal.record(a, [{ name: "pod-x-v6" }], "second");
    for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
    release.resolve();
    await releasing;
    await recording;
    const [e] = await w.journal.list();
    assert.deepEqual(e.entry?.claims, [{ name: "pod-x-v6" }], "the later record is not lost");
    assert.equal(e.entry?.lastError, "second");
  });
});

/** Whether the node's record says an ADD of the attachment `id` is in doubt. */
const inDoubt = (dir: string, id: string) =>
  new Holdings(dir).read(attachment(id))?.state === "adding";

Deno.test("journal: an ADD is in doubt while it leases; success or every create answered settles it", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    const during: boolean[] = [];
    w.stub.inject({
      method: "POST",
      times: 2,
      answer: () => void during.push(inDoubt(dir, CONTAINER_ID)),
    });
    await add(w.inv("ADD"));
    assert.deepEqual(during, [true, true], "marked before its creates went out");
    assert.equal(inDoubt(dir, CONTAINER_ID), false, "settled by success");

    w.stub.inject({ method: "POST", times: FOREVER, answer: () => statusReply(403) });
    await rejectsWith(add(w.inv("ADD", { containerId: "refused-by-milo" })), 101);
    assert.equal(inDoubt(dir, "refused-by-milo"), false, "Milo answered every create");

    w.stub.clearFaults();
    w.stub.inject({ method: "POST", times: FOREVER, answer: () => lost() });
    await rejectsWith(add(w.inv("ADD", { containerId: "unanswered" })), 11);
    assert.equal(inDoubt(dir, "unanswered"), true, "a create without an answer leaves it");
  });
});

Deno.test("journal: a DEL after an ADD in doubt records an in-doubt entry that later DELs keep", async () => {
  await withTempDir(async (dir) => {
    const w = world(dir);
    const now = Date.parse("2026-12-01T12:00:00Z");
    w.stub.inject({ method: "POST", times: FOREVER, answer: () => lost() });
    await rejectsWith(add(w.inv("ADD")), 11);
    w.stub.clearFaults();
    // The doubt began when that ADD ended: its window counts from there.
    const doubtSince = new Holdings(dir).read(attachment(CONTAINER_ID))!.until!;
    await del(w.inv("DEL", { now: () => now }));
    assert.equal(inDoubt(dir, CONTAINER_ID), false, "the DEL settled the marker");
    const expected: JournalEntry = {
      ...entryOfBoth(now, IN_DOUBT, hostOf(dir)),
      inDoubt: true,
      doubtSince,
    };
    assert.deepEqual((await w.journal.list()).map((e) => e.entry), [expected]);
    await del(w.inv("DEL", { now: () => now + 1_000 }));
    assert.deepEqual((await w.journal.list()).map((e) => e.entry), [expected], "a repeated DEL");
    await add(w.inv("ADD"));
    assert.deepEqual(await w.journal.list(), [], "an ADD that succeeds takes the attachment back");
  });
});

Deno.test("holdings: adding, held, adopted from a LIST, forgotten claim by claim; the listed mark", () =>
  withTempDir(async (dir) => {
    const h = new Holdings(dir);
    const now = Date.parse("2026-12-01T12:00:00Z");
    const a = { ...attachment("a"), host: "h1" };
    h.adding(a, "add-1", ["pod-a-v4", "pod-a-v6"], now - 1_000, now + 9_000);
    assert.deepEqual(h.read(a), {
      state: "adding",
      addId: "add-1",
      at: now - 1_000,
      until: now + 9_500,
      cluster: "cluster-a",
      host: "h1",
      node: "node-1",
      network: "vpc-7b3e",
      containerId: "a",
      ifname: "eth0",
      claims: [{ name: "pod-a-v4" }, { name: "pod-a-v6" }],
    });
    h.held(a, "add-1", [{ name: "pod-a-v4", uid: "u4", address: "10.0.0.1/32" }], now);
    h.adopt(a, { name: "pod-a-v4", uid: "other" }, now);
    h.adopt(a, { name: "pod-a-v6", uid: "u6" }, now);
    assert.deepEqual(h.read(a)?.claims, [
      { name: "pod-a-v4", uid: "u4", address: "10.0.0.1/32" },
      { name: "pod-a-v6", uid: "u6" },
    ]);
    h.adopt({ ...attachment("b"), host: "h1" }, { name: "pod-b-v4", uid: "ub" }, now);
    assert.equal(h.read(attachment("b"))?.addId, "listed");
    assert.deepEqual(h.all().map((x) => x.h.containerId).sort(), ["a", "b"]);
    h.forget(a, ["pod-a-v4"]);
    assert.deepEqual(h.read(a)?.claims.map((c) => c.name), ["pod-a-v6"]);
    h.forget(a, ["pod-a-v6"]);
    assert.equal(h.read(a), undefined, "a record without claims is removed");
    assert.equal(h.listedAt(), undefined);
    h.markListed();
    assert.equal(typeof h.listedAt(), "number");
    await Deno.writeTextFile(h.pathOf(attachment("torn")), "{");
    assert.equal(h.read(attachment("torn"))?.state, "adding", "an unreadable record is in doubt");
    assert.deepEqual(h.all().map((x) => x.h.containerId), ["b"], "and left out of the list");
  }));
