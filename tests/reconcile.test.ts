/** The node reconcile in-process: injected clock, the in-memory stub, temp state and cache dirs. */
import assert from "node:assert/strict";
import { claimName } from "../lib/claims.ts";
import type { NodeConfig } from "../lib/config.ts";
import { Holdings } from "../lib/holdings.ts";
import { IN_DOUBT, Journal } from "../lib/journal.ts";
import { containerIdOf, ENTRY_HEAD_BYTES, stateFileOf } from "../lib/liveness.ts";
import { exitOf, reconcile, type ReconcileReport } from "../lib/reconcile.ts";
import {
  existingClaim,
  invocation,
  type InvocationOptions,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { reply, statusReply } from "../testing/milo_fixtures.ts";
import { StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const GRACE_MS = 300_000;

/** A node with claims of a live and an orphaned attachment, made an hour before the clock. */
async function setup(dir: string, nodeOver: Record<string, unknown> = {}) {
  const stub = new StubMilo();
  const clock = { t: Date.now() };
  stub.now = () => clock.t - 3_600_000;
  const addOf = (containerId: string, o: Partial<InvocationOptions> = {}) =>
    invocation(stub, { command: "ADD", stateDir: dir, containerId, node: nodeOver, ...o });
  /** Both claims of an attachment, as its ADD made them. */
  const lease = (containerId: string, o: Partial<InvocationOptions> = {}, record = true) => {
    const inv = addOf(containerId, o);
    const claims = [existingClaim(stub, inv, "ipv4"), existingClaim(stub, inv, "ipv6")];
    if (!record) return claims;
    // As the ADD that made them records them on its node.
    const held = claims.map((c) => ({
      name: c.metadata.name,
      uid: c.metadata.uid,
      address: c.status.allocatedCIDR,
    }));
    inv.holdings.held(inv.attachment, `add-${containerId}`, held, clock.t - 3_600_000);
    return claims;
  };
  const node: NodeConfig = addOf("x").node;
  const [runtimeDir] = node.resultsDirs;
  await Deno.mkdir(runtimeDir, { recursive: true });
  /** A libcni cache entry of the attachment, in `dir` (the runtime's by default). */
  const cache = (
    containerId: string,
    o: { network?: string; ifname?: string; dir?: string } = {},
  ) =>
    writeCacheEntry(o.dir ?? runtimeDir, o.network ?? "vpc-7b3e", containerId, o.ifname ?? "eth0");
  const live = lease("live");
  const orphan = lease("orphan");
  await cache("live");
  const run = (dryRun = false, force = false) =>
    reconcile({ node, milo: stub.client(), graceMs: GRACE_MS, dryRun, force, now: () => clock.t });
  /** Runs until the claims absent now are past their second observation. */
  const runTwice = async () => {
    await run();
    clock.t += GRACE_MS;
    return await run();
  };
  const state = async () =>
    JSON.parse(await Deno.readTextFile(stateFileOf(node))).absent as Record<
      string,
      { firstAbsent: number; uid?: string }
    >;
  return { stub, clock, node, live, orphan, lease, cache, run, runTwice, state, addOf };
}

/** Writes a libcni `cniCacheV1` entry as libcni names it: `<dir>/<network>-<cid>-<ifname>`. */
async function writeCacheEntry(dir: string, network: string, containerId: string, ifname: string) {
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(
    `${dir}/${network}-${containerId}-${ifname}`,
    JSON.stringify({
      kind: "cniCacheV1",
      containerId,
      ifName: ifname,
      networkName: network,
      result: {},
    }),
  );
}

const names = (claims: WireClaim[]) => claims.map((c) => c.metadata.name).sort();
const keptFor = (r: ReconcileReport, claim: WireClaim) =>
  r.kept.filter((k) => k.claim === claim.metadata.name).map((k) => k.reason);

Deno.test("reconcile: the first observation records, the second after the grace releases by uid", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    const t0 = w.clock.t;
    const first = await w.run();
    assert.deepEqual(first.released, []);
    assert.equal(first.live, 1);
    for (const c of w.orphan) {
      assert.deepEqual(keptFor(first, c), [
        "absent, waiting for a second observation after the grace period",
      ]);
    }
    for (const c of w.live) {
      assert.deepEqual(keptFor(first, c), ["live: a result cache names its container"]);
    }
    assert.deepEqual(await w.state(), {
      [w.orphan[0].metadata.name]: { firstAbsent: t0, uid: w.orphan[0].metadata.uid },
      [w.orphan[1].metadata.name]: { firstAbsent: t0, uid: w.orphan[1].metadata.uid },
    });
    assert.equal(w.stub.seen("DELETE").length, 0);

    w.clock.t = t0 + GRACE_MS - 1;
    assert.deepEqual((await w.run()).released, [], "not before the grace has passed");
    assert.equal((await w.state())[w.orphan[0].metadata.name].firstAbsent, t0);

    w.clock.t = t0 + GRACE_MS;
    const second = await w.run();
    assert.deepEqual(
      second.released.map((r) => [r.claim, r.via, r.containerId, r.address, r.pod]).sort(),
      w.orphan.map((c) => [
        c.metadata.name,
        "orphan",
        "orphan",
        c.status.allocatedCIDR,
        c.metadata.annotations?.["milo-ipam.io/pod"],
      ]).sort(),
    );
    assert.ok(second.released.every((r) => r.pod?.includes("/")), "each names its pod");
    const deletes = w.stub.seen("DELETE");
    assert.deepEqual(
      deletes.map((d) => [d.path.split("/").pop(), d.body]).sort(),
      w.orphan.map((c) => [c.metadata.name, {
        kind: "DeleteOptions",
        apiVersion: "v1",
        preconditions: { uid: c.metadata.uid },
      }]).sort(),
    );
    assert.deepEqual(names(w.stub.all()), names(w.live));
    assert.deepEqual(await w.state(), {});
    assert.deepEqual(second.errors, []);
  });
});

Deno.test("reconcile: a claim in the result cache is kept however long it lives", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.cache("orphan");
    await w.run();
    w.clock.t += 10 * GRACE_MS;
    const r = await w.run();
    assert.deepEqual(r.released, []);
    assert.equal(w.stub.all().length, 4);
    assert.deepEqual(await w.state(), {});
  });
});

Deno.test("reconcile: a uid changed on the re-check before the DELETE keeps the claim", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.run();
    w.clock.t += GRACE_MS;
    const [o4, o6] = w.orphan;
    w.stub.inject({
      method: "GET",
      path: `/ipclaims/${o4.metadata.name}`,
      answer: () => reply(200, { ...o4, metadata: { ...o4.metadata, uid: "replaced" } }),
    });
    const r = await w.run();
    assert.deepEqual(r.released.map((x) => x.claim), [o6.metadata.name]);
    assert.deepEqual(keptFor(r, o4), [
      "in Milo it is another claim now: left alone, dropped from the record",
    ]);
    assert.ok(w.stub.get(o4.metadata.name));
    assert.ok(!w.stub.seen("DELETE").some((d) => d.path.endsWith(o4.metadata.name)));
  });
});

Deno.test("reconcile: a claim Milo holds under another uid than the record's is left alone", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.run();
    const [o4] = w.orphan;
    w.stub.put({ ...o4, metadata: { ...o4.metadata, uid: "second-claim" } });
    w.clock.t += GRACE_MS;
    const r = await w.run();
    assert.ok(!r.released.some((x) => x.claim === o4.metadata.name));
    assert.deepEqual(keptFor(r, o4), [
      "in Milo it is another claim now: left alone, dropped from the record",
    ]);
    assert.ok(w.stub.get(o4.metadata.name));
    // Not this node's any more: later runs neither judge it nor count it absent.
    w.clock.t += GRACE_MS;
    const later = await w.run();
    assert.deepEqual(keptFor(later, o4), []);
    assert.ok(!(o4.metadata.name in ((await w.state()).absent ?? {})));
    assert.ok(w.stub.get(o4.metadata.name));
  });
});

Deno.test("reconcile: a later ADD of the attachment recorded meanwhile keeps its claims", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.run();
    w.clock.t += GRACE_MS;
    // The runtime ADDs the attachment again (a retry) while the run is deciding.
    w.stub.inject({
      method: "GET",
      path: `/ipclaims/${w.orphan[0].metadata.name}`,
      answer: () => void w.lease("orphan"),
    });
    const r = await w.run();
    assert.deepEqual(r.released.filter((x) => x.containerId === "orphan"), []);
    assert.ok(w.stub.get(w.orphan[0].metadata.name) || w.stub.get(w.orphan[1].metadata.name));
  });
});

Deno.test("reconcile: an attachment that reappears in the cache before the release is kept", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.run();
    w.clock.t += GRACE_MS;
    // The runtime caches the attachment between the run's two reads of the caches.
    const [o4] = w.orphan;
    w.stub.inject({
      method: "GET",
      path: `/ipclaims/${o4.metadata.name}`,
      answer: async () => {
        await w.cache("orphan");
        return undefined;
      },
    });
    const r = await w.run();
    assert.deepEqual(r.released.map((x) => x.claim), [o4.metadata.name], "already on its way");
    for (const c of w.orphan.slice(1)) {
      assert.deepEqual(keptFor(r, c), ["its container reappeared in a result cache on re-check"]);
    }
    assert.equal(w.stub.seen("DELETE").length, 1);
  });
});

Deno.test("reconcile: a claim recorded less than the grace ago is kept", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    const young = w.addOf("young");
    const [y4] = [existingClaim(w.stub, young, "ipv4")];
    // Recorded just before the second run, and absent from the first on.
    const at = w.clock.t + GRACE_MS - 10;
    young.holdings.held(young.attachment, "add-young", [{ name: y4.metadata.name }], at);
    await w.run();
    w.clock.t += GRACE_MS;
    const r = await w.run();
    assert.deepEqual(keptFor(r, y4), ["recorded less than the grace period ago"]);
    assert.ok(w.stub.get(y4.metadata.name));
  });
});

Deno.test("reconcile --dry-run records its observation and releases nothing", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    const t0 = w.clock.t;
    await w.run(true);
    assert.equal((await w.state())[w.orphan[0].metadata.name].firstAbsent, t0);
    w.clock.t = t0 + GRACE_MS;
    const dry = await w.run(true);
    assert.equal(dry.dryRun, true);
    assert.deepEqual(dry.released.map((r) => r.claim).sort(), names(w.orphan));
    assert.equal(w.stub.seen("DELETE").length, 0);
    assert.equal(w.stub.all().length, 4);
    assert.equal((await w.state())[w.orphan[0].metadata.name].firstAbsent, t0, "state kept");
    const real = await w.run();
    assert.deepEqual(real.released.map((r) => r.claim).sort(), names(w.orphan));
    assert.deepEqual(names(w.stub.all()), names(w.live));
  });
});

Deno.test("reconcile: a non-numeric state timestamp counts as first seen now", async () => {
  for (const [firstAbsent, released] of [["long ago", 0], [null, 0], [0, 1]] as const) {
    await withTempDir(async (dir) => {
      const w = await setup(dir);
      const [o4] = w.orphan;
      await Deno.writeTextFile(
        stateFileOf(w.node),
        JSON.stringify({ absent: { [o4.metadata.name]: { firstAbsent, uid: o4.metadata.uid } } }),
      );
      const r = await w.run();
      assert.equal(r.released.length, released, `firstAbsent=${JSON.stringify(firstAbsent)}`);
      if (!released) assert.equal((await w.state())[o4.metadata.name].firstAbsent, w.clock.t);
    });
  }
});

Deno.test("reconcile: a failing orphan release is an error and stays in the state", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.run();
    w.clock.t += GRACE_MS;
    const [o4] = w.orphan;
    w.stub.inject({ method: "DELETE", path: o4.metadata.name, answer: () => statusReply(403) });
    const r = await w.run();
    assert.deepEqual(r.errors.map((e) => e.claim), [o4.metadata.name]);
    assert.match(r.errors[0].error, /403/);
    assert.ok((await w.state())[o4.metadata.name], "retried on the next run");
  });
});

Deno.test("reconcile finishes the journal: by uid, 404 done, newer kept, failures counted", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    // Milo's clock reads the node's: the claims were made an hour ago, the entries a minute ago.
    w.stub.now = () => w.clock.t;
    const journal = new Journal(w.node.stateDir);
    const entryAt = w.clock.t - 60_000;
    const at = (containerId: string) => ({ ...w.addOf(containerId).attachment });
    const [l4, l6] = w.live;
    await journal.record(
      at("live"),
      [{ name: l4.metadata.name, uid: l4.metadata.uid }],
      "503",
      entryAt,
    );
    await journal.record(
      at("live"),
      [{ name: l6.metadata.name, uid: "an-older-claim" }],
      "503",
      entryAt,
    );
    const gone = claimName(at("gone"), "ipv4");
    await journal.record(at("gone"), [{ name: gone }], "503", entryAt);
    const [o4, o6] = w.orphan;
    await journal.record(at("orphan"), [{ name: o4.metadata.name }], "timeout", entryAt);
    const newer = w.lease("newer");
    w.stub.put({
      ...newer[0],
      metadata: { ...newer[0].metadata, creationTimestamp: new Date(w.clock.t).toISOString() },
    });
    await journal.record(at("newer"), [{ name: newer[0].metadata.name }], "503", entryAt);
    const failing = w.lease("failing");
    await journal.record(
      at("failing"),
      [{ name: failing[0].metadata.name, uid: failing[0].metadata.uid }],
      "first error",
      entryAt,
    );
    w.stub.inject({
      method: "DELETE",
      path: failing[0].metadata.name,
      times: Number.POSITIVE_INFINITY,
      answer: () => statusReply(503),
    });

    const r = await w.run();
    const byJournal = r.released.filter((x) => x.via === "journal").map((x) => x.claim).sort();
    // The uid the failed call read, or, another known (a claim made again since), only a claim
    // of the attachment made before the entry: l6 is one.
    assert.deepEqual(byJournal, [l4.metadata.name, l6.metadata.name, o4.metadata.name].sort());
    const del4 = w.stub.seen("DELETE", l4.metadata.name);
    assert.deepEqual(del4.map((d) => d.body), [{
      kind: "DeleteOptions",
      apiVersion: "v1",
      preconditions: { uid: l4.metadata.uid },
    }]);
    assert.deepEqual(r.kept.filter((k) => k.claim === gone).map((k) => k.reason), [
      "journal entry: claim absent",
    ]);
    assert.deepEqual(keptFor(r, newer[0]), [
      "journal entry: claim newer than the entry: kept in the node's record",
    ]);
    assert.ok(w.stub.get(newer[0].metadata.name));
    const record = new Holdings(dir).read(at("newer"));
    assert.ok(record?.claims.some((c) => c.name === newer[0].metadata.name), "left to the record");
    assert.deepEqual(keptFor(r, o6), [
      "absent, waiting for a second observation after the grace period",
    ]);

    assert.deepEqual(r.journal.map((j) => [j.containerId, j.claims, j.attempts]), [
      ["failing", [failing[0].metadata.name], 1],
    ]);
    assert.match(r.journal[0].lastError, /Milo unreachable or overloaded: DELETE/);
    const left = await journal.list();
    assert.equal(left.length, 1);
    assert.equal(left[0].entry?.attempts, 1);
    assert.equal(left[0].entry?.lastError, r.journal[0].lastError);
    assert.deepEqual(left[0].entry?.claims, [{
      name: failing[0].metadata.name,
      uid: failing[0].metadata.uid,
    }]);
    assert.equal((await w.run()).journal[0].attempts, 2);

    w.stub.clearFaults();
    const dry = await w.run(true);
    assert.equal(dry.journal[0].lastError, "dry run: not attempted");
    assert.ok(w.stub.get(failing[0].metadata.name));
    assert.deepEqual((await w.run()).journal, []);
    assert.equal(w.stub.get(failing[0].metadata.name), undefined);
    assert.deepEqual(await journal.list(), []);
  });
});

Deno.test("reconcile: an in-doubt entry releases claims landing within the grace, then ends", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    w.stub.now = () => w.clock.t;
    const journal = new Journal(w.node.stateDir);
    const t0 = w.clock.t;
    const at = (containerId: string) => ({ ...w.addOf(containerId).attachment });
    const doubt = (id: string) =>
      journal.owe(
        at(id),
        {
          claims: [],
          doubt: { since: t0, names: [claimName(at(id), "ipv4"), claimName(at(id), "ipv6")] },
        },
        IN_DOUBT,
        { now: t0, replace: true },
      );
    /** The claims of `id` as Milo would make them, created `afterMs` after the entry. */
    const land = (id: string, afterMs: number) =>
      w.lease(id).map((c) =>
        w.stub.put({
          ...c,
          metadata: { ...c.metadata, creationTimestamp: new Date(t0 + afterMs).toISOString() },
        })
      );
    await doubt("late");
    await doubt("never");
    await doubt("too-late");
    const [late4, late6] = land("late", 5_000);
    w.stub.remove(late6.metadata.name);
    const until = new Date(t0 + GRACE_MS).toISOString();
    const holdings = new Holdings(w.node.stateDir);
    holdings.adding(at("killed"), "add-killed", [claimName(at("killed"), "ipv4")], t0, t0 + 1e4);
    const inDoubt = () => holdings.read(at("killed"))?.state === "adding";

    w.clock.t = t0 + 10_000;
    const first = await w.run();
    assert.deepEqual(first.released.map((x) => [x.via, x.claim]), [[
      "journal",
      late4.metadata.name,
    ]]);
    assert.deepEqual(keptFor(first, late6), [`journal entry in doubt until ${until}`]);
    assert.deepEqual(first.journal, [], "waiting is no failure");
    const entries = async () =>
      Object.fromEntries(
        (await journal.list()).map((e) => [e.entry!.containerId, e.entry!.claims.length]),
      );
    // A name released in doubt stays watched until the grace ends: a retry's create may land.
    assert.deepEqual(await entries(), { late: 2, never: 2, "too-late": 2 });
    assert.equal(w.stub.seen("DELETE").length, 1);
    assert.equal(inDoubt(), true, "a record younger than the grace stays");

    const [again4] = land("late", 200_000);
    w.stub.remove(again4.metadata.name);
    const tooLate = land("too-late", GRACE_MS + 1_000);
    w.clock.t = t0 + GRACE_MS + 2_000;
    const second = await w.run();
    assert.deepEqual(second.released.map((x) => x.claim), [late6.metadata.name]);
    for (const f of ["ipv4", "ipv6"] as const) {
      const name = claimName(at("never"), f);
      assert.deepEqual(second.kept.filter((k) => k.claim === name).map((k) => k.reason), [
        "journal entry: claim absent",
      ]);
    }
    for (const c of tooLate) {
      assert.deepEqual(keptFor(second, c), [
        "journal entry: claim newer than the entry: kept in the node's record",
      ]);
      assert.ok(w.stub.get(c.metadata.name), "a claim made after the doubt ended is not its own");
    }
    assert.deepEqual(await journal.list(), [], "every in-doubt entry ended");
    assert.equal(inDoubt(), true, "an ADD's record is judged once its deadline passed");
    w.clock.t += GRACE_MS;
    const third = await w.run();
    assert.deepEqual(
      keptFor(third, { metadata: { name: claimName(at("killed"), "ipv4") } } as WireClaim),
      [
        "gone from Milo already: dropped from the record",
      ],
    );
    assert.equal(inDoubt(), false, "the killed ADD's record is dropped: its claim never came");
  });
});

Deno.test("reconcile: a Multus-attached pod is live by its container, in the runtime's cache or Multus's", async () => {
  await withTempDir(async (dir) => {
    const multusDir = `${dir}/multus/results`;
    const w = await setup(dir, { resultsDirs: [`${dir}/results`, multusDir] });
    // The runtime cached only Multus itself; the delegate's result is in Multus's cache dir.
    const thin = w.lease("multus-thin", { ifname: "net1" });
    await w.cache("multus-thin", { network: "multus-cni-network", ifname: "eth0" });
    await w.cache("multus-thin", { network: "vpc-7b3e", ifname: "net1", dir: multusDir });
    // Only Multus's cache names it (a runtime whose own cache lies elsewhere).
    const delegate = w.lease("multus-delegate", { ifname: "net1" });
    await w.cache("multus-delegate", { network: "vpc-7b3e", ifname: "net1", dir: multusDir });
    // Only the runtime's entry for Multus itself names the container.
    const runtime = w.lease("multus-runtime", { ifname: "net1" });
    await w.cache("multus-runtime", { network: "multus-cni-network", ifname: "eth0" });
    for (let i = 0; i < 3; i++) {
      const r = await w.run();
      assert.deepEqual(r.errors, []);
      for (const c of [...thin, ...delegate, ...runtime]) {
        assert.deepEqual(keptFor(r, c), ["live: a result cache names its container"]);
      }
      w.clock.t += GRACE_MS;
    }
    assert.deepEqual(
      w.stub.seen("DELETE").map((d) => d.path.split("/").pop()).sort(),
      names(w.orphan),
    );
    assert.equal(w.stub.all().length, 8, "every live pod keeps both claims");
  });
});

Deno.test("reconcile: the defaults read the runtime's and Multus's result caches", () => {
  const node = invocation(new StubMilo(), {
    command: "ADD",
    stateDir: "/tmp/x",
    node: { resultsDirs: undefined },
  }).node;
  assert.deepEqual(node.resultsDirs, ["/var/lib/cni/results", "/var/lib/cni/multus/results"]);
});

Deno.test("reconcile: an emptied cache is a brake; nothing is released until forced", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    const more = ["b", "c", "d"].map((id) => w.lease(id)).flat();
    await w.stub.remove(w.orphan[0].metadata.name);
    await w.stub.remove(w.orphan[1].metadata.name);
    for (const id of ["b", "c", "d"]) await w.cache(id);
    const clean = await w.run();
    assert.equal(clean.brake, null);
    assert.equal(clean.live, 4);
    await Deno.remove(w.node.resultsDirs[0], { recursive: true });
    const r = await w.runTwice();
    assert.equal(r.brake?.reason, "empty");
    assert.match(r.brake!.message, /no live container in any result cache .*missing/);
    assert.deepEqual(r.released, []);
    assert.equal(exitOf(r), 2);
    for (const c of [...w.live, ...more]) {
      assert.deepEqual(keptFor(r, c), ["brake (empty): released nothing"]);
    }
    w.clock.t += GRACE_MS;
    assert.equal((await w.run()).brake?.reason, "empty", "the brake holds run after run");
    assert.equal(w.stub.seen("DELETE").length, 0);
    const forced = await w.run(false, true);
    assert.equal(forced.force, true);
    assert.equal(forced.released.length, 8, "an operator's forced run releases");
  });
});

Deno.test("reconcile: a live set shrunk under half the last clean run's is a brake until it recovers", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    w.stub.remove(w.orphan[0].metadata.name);
    w.stub.remove(w.orphan[1].metadata.name);
    new Holdings(dir).remove(w.addOf("orphan").attachment);
    const ids = ["b", "c", "d", "e", "f"];
    for (const id of ids) {
      w.lease(id);
      await w.cache(id);
    }
    assert.equal((await w.run()).live, 6, "a clean run: its live set is the baseline");
    for (const id of ["b", "c", "d", "e"]) {
      await Deno.remove(`${w.node.resultsDirs[0]}/vpc-7b3e-${id}-eth0`);
    }
    const r = await w.runTwice();
    assert.equal(r.brake?.reason, "shrunk");
    assert.match(r.brake!.message, /shrank from 6 containers .* to 2 /);
    assert.deepEqual(r.released, []);
    await w.cache("b");
    w.clock.t += GRACE_MS;
    const recovered = await w.run();
    assert.equal(recovered.brake, null, "3 of 6 live: no brake");
    assert.equal(recovered.released.length, 6, "the three pods still absent are released");
    const next = await w.run();
    assert.equal(next.live, 3);
    assert.equal(
      JSON.parse(await Deno.readTextFile(stateFileOf(w.node))).baseline.live,
      3,
      "the next clean run moves the baseline",
    );
  });
});

Deno.test("reconcile: claims of another host under this node name, or of no host, are never judged", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await Deno.writeTextFile(`${dir}/other-machine-id`, "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f\n");
    // Neither is in this node's record: another machine, or a plugin before records, made them.
    const other = w.lease("clone", { node: { hostIdFile: `${dir}/other-machine-id` } }, false);
    const legacy = w.lease("legacy", {}, false).map((c) => {
      const { "milo-ipam.io/host": _, ...rest } = c.metadata.annotations!;
      return w.stub.put({ ...c, metadata: { ...c.metadata, annotations: rest } });
    });
    for (let i = 0; i < 3; i++) {
      const r = await w.run();
      // Only the run that lists Milo (the first: the node had no record) sees them.
      assert.equal(r.listed, i === 0);
      if (i === 0) {
        assert.deepEqual(r.otherHosts, [{ host: "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f", claims: 2 }]);
        for (const c of other) {
          assert.match(keptFor(r, c)[0], /^made by host 0f0f.*another host under this node name/);
        }
        for (const c of legacy) assert.match(keptFor(r, c)[0], /^records no host/);
      } else assert.deepEqual(r.otherHosts, []);
      w.clock.t += GRACE_MS;
    }
    for (const c of [...other, ...legacy]) assert.ok(w.stub.get(c.metadata.name), c.metadata.name);
    assert.deepEqual(
      w.stub.seen("DELETE").map((d) => d.path.split("/").pop()).sort(),
      names(w.orphan),
      "only this host's orphan",
    );
  });
});

Deno.test("reconcile: a node whose stateDir was lost judges its own claims again by the liveness rule", async () => {
  const etc = await Deno.makeTempDir();
  await Deno.writeTextFile(`${etc}/machine-id`, "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e\n");
  await withTempDir(async (dir) => {
    const w = await setup(dir, { hostIdFile: `${etc}/machine-id` });
    const live = w.lease("live-2");
    const orphan = w.lease("orphan-2");
    await w.cache("live-2");
    await w.run();
    await Deno.remove(w.node.stateDir, { recursive: true });
    await Deno.mkdir(w.node.resultsDirs[0], { recursive: true });
    await w.cache("live");
    await w.cache("live-2");
    const first = await w.run();
    assert.deepEqual(first.released, [], "a first observation after the loss releases nothing");
    w.clock.t += GRACE_MS;
    const second = await w.run();
    assert.deepEqual(second.released.map((r) => r.claim).sort(), names([...w.orphan, ...orphan]));
    for (const c of [...w.live, ...live]) assert.ok(w.stub.get(c.metadata.name));
    assert.equal(second.host, "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e");
  });
  await Deno.remove(etc, { recursive: true });
});

Deno.test("reconcile: a LIST keeping over 200,000 claims is 105 naming MAX_LIST_ITEMS; nothing released", async () => {
  await withTempDir(async (dir) => {
    const { stub, clock, orphan, run, node } = await setup(dir);
    await run();
    clock.t += GRACE_MS; // the orphan is due: a whole list would release it now
    // Pages of 10,000 tiny claims; the list would end at page 25, with this node's orphan.
    const tiny = Array.from({ length: 10_000 }, () => ({ metadata: { name: "c" } }));
    let pages = 0;
    stub.inject({
      method: "GET",
      path: "/ipclaims",
      times: Number.POSITIVE_INFINITY,
      answer: () => {
        const more = ++pages < 25;
        const items = more ? tiny : orphan;
        return reply(200, { kind: "IPClaimList", metadata: more ? { continue: "n" } : {}, items });
      },
    });
    stub.requests.length = 0;
    const listing = () =>
      reconcile({
        node,
        milo: stub.client(),
        graceMs: GRACE_MS,
        dryRun: false,
        list: true,
        now: () => clock.t,
      });
    await assert.rejects(listing(), (e: Error & { code?: number }) => {
      assert.equal(e.code, 105);
      assert.match(e.message, /more than 200,000 items kept \(MAX_LIST_ITEMS\)/);
      return true;
    });
    assert.equal(pages, 21);
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("reconcile: an idle node never lists Milo but without a record; it reads its share of live claims by name", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    await w.cache("orphan");
    const first = await w.run();
    assert.equal(first.listed, true, "the node had no record yet: it listed once");
    assert.equal(w.stub.seen("GET").filter((r) => r.query.labelSelector !== undefined).length, 1);
    w.stub.requests.length = 0;
    for (let i = 0; i < 3; i++) {
      w.clock.t += GRACE_MS;
      const r = await w.run();
      assert.equal(r.listed, false);
      assert.deepEqual(r.released, []);
      assert.deepEqual(r.remade, [], "every live claim is there");
    }
    const reads = w.stub.requests;
    assert.ok(
      reads.every((r) => r.method === "GET" && r.path.endsWith("-v4") || r.path.endsWith("-v6")),
    );
    // Four live claims verified every 30 minutes over runs 5 minutes apart: one a run.
    assert.equal(reads.length, 3, "one claim read by name a run, no LIST");
    const listed = await reconcile({
      node: w.node,
      milo: w.stub.client(),
      graceMs: GRACE_MS,
      dryRun: false,
      list: true,
      now: () => w.clock.t,
    });
    assert.equal(listed.listed, true, "--list lists again");
  });
});

Deno.test("reconcile's journal never releases a shared-name claim without a uid by its name", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    const journal = new Journal(w.node.stateDir);
    const pod = { ipam: { identity: "pod" }, args: { K8S_POD_NAME: "db-0" } };
    const [c4] = w.lease("gone-pod", pod, false);
    assert.match(c4.metadata.name, /^podid-/);
    delete (c4.metadata as { uid?: string }).uid;
    w.stub.put(c4);
    const a = { ...w.addOf("gone-pod", pod).attachment };
    await journal.record(a, [{ name: c4.metadata.name }], "503", w.clock.t - 60_000);
    const r = await w.run();
    assert.equal(w.stub.seen("DELETE", c4.metadata.name).length, 0, "no DELETE by name alone");
    assert.ok(w.stub.get(c4.metadata.name));
    assert.ok(keptFor(r, c4).includes("journal entry: claim changed"), keptFor(r, c4).join("; "));
  });
});

Deno.test("reconcile's journal ages on one clock: Milo's 2 minutes ahead or behind the node's", async (t) => {
  for (const [skewMs, name] of [[120_000, "ahead"], [-120_000, "behind"]] as const) {
    await t.step(`Milo's clock ${name}`, async () => {
      await withTempDir(async (dir) => {
        const w = await setup(dir);
        w.stub.now = () => w.clock.t + skewMs;
        const journal = new Journal(w.node.stateDir);
        const a = (id: string) => w.addOf(id).attachment;
        // A 30-second pod whose DEL failed while Milo was unreachable: no uid read.
        const [short] = w.lease("short", {}, false);
        w.clock.t += 30_000;
        await journal.record(a("short"), [{ name: short.metadata.name }], "503", w.clock.t);
        // A claim of an attachment made 30 s after its entry (none a DEL of it owes).
        const owedAt = w.clock.t;
        w.clock.t += 30_000;
        const [later] = w.lease("later", {}, false);
        await journal.record(a("later"), [{ name: later.metadata.name }], "503", owedAt);
        w.clock.t += 10_000;
        const r = await w.run();
        assert.deepEqual(r.released.filter((x) => x.via === "journal").map((x) => x.claim), [
          short.metadata.name,
        ]);
        assert.equal(w.stub.get(short.metadata.name), undefined, "the owed release is made");
        assert.deepEqual(keptFor(r, later), [
          "journal entry: claim newer than the entry: kept in the node's record",
        ]);
        assert.ok(w.stub.get(later.metadata.name));
        assert.deepEqual(await journal.list(), []);
      });
    });
  }
});

Deno.test("reconcile's journal releases only this host's claims: a clone's entry without a uid, an entry copied from another host", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    w.stub.now = () => w.clock.t;
    await Deno.writeTextFile(`${dir}/original-id`, "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a\n");
    const original = { node: { hostIdFile: `${dir}/original-id`, node: "node-0" } };
    const journal = new Journal(w.node.stateDir);
    w.clock.t += 60_000;
    // The original machine's pods, running: this node is its clone, with its sandboxes' IDs.
    const [inherited] = w.lease("inherited", original, false);
    const [copied] = w.lease("copied", original, false);
    w.clock.t += 60_000;
    // The clone's DEL of an inherited sandbox failed while Milo was down: no uid read.
    await journal.record(
      w.addOf("inherited").attachment,
      [{ name: inherited.metadata.name }],
      "503",
      w.clock.t,
    );
    // An entry the original wrote (a uid it read), copied with its disk image.
    await journal.record(
      w.addOf("copied", original).attachment,
      [{ name: copied.metadata.name, uid: copied.metadata.uid }],
      "503",
      w.clock.t,
    );
    w.clock.t += 10_000;
    const r = await w.run();
    assert.deepEqual(r.released.filter((x) => x.via === "journal"), []);
    assert.ok(w.stub.get(inherited.metadata.name) && w.stub.get(copied.metadata.name));
    assert.deepEqual(keptFor(r, inherited), [
      "journal entry: claim recorded for host 0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a, not this one: " +
      "left to that host",
    ]);
    assert.deepEqual(keptFor(r, copied), [
      "journal entry written by host 0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a (a copied state " +
      "directory): left to that host; entry dropped",
    ]);
    assert.deepEqual(await journal.list(), [], "neither is this host's to owe");
    assert.equal(w.stub.seen("DELETE").length, 0);
  });
});

Deno.test("reconcile's journal on a clone that kept the machine-id: the original's copied entry is kept, not judged; the clone's entry of an inherited sandbox leaves the original's claim", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    w.stub.now = () => w.clock.t;
    const journal = new Journal(w.node.stateDir);
    w.clock.t += 60_000;
    // node-1's pods, running: the clone has its disk (state directory, machine-id, sandboxes).
    const [inherited] = w.lease("inherited", {}, false);
    const [copied] = w.lease("copied", {}, false);
    const [unnamed] = w.lease("unnamed", {}, false);
    w.clock.t += 60_000;
    // The clone's DEL of an inherited sandbox failed while Milo was down: no uid read.
    await journal.record(
      w.addOf("inherited", { node: { node: "node-b" } }).attachment,
      [{ name: inherited.metadata.name }],
      "503",
      w.clock.t,
    );
    // Another, with the uid of a copied record that named no node (an older plugin's).
    await journal.record(
      w.addOf("unnamed", { node: { node: "node-b" } }).attachment,
      [{ name: unnamed.metadata.name, uid: unnamed.metadata.uid }],
      "503",
      w.clock.t,
    );
    // An entry node-1 wrote (a uid it read), copied with its disk image.
    await journal.record(
      w.addOf("copied").attachment,
      [{ name: copied.metadata.name, uid: copied.metadata.uid }],
      "503",
      w.clock.t,
    );
    w.clock.t += 10_000;
    const r = await runAs(w, { ...w.node, node: "node-b" });
    assert.deepEqual(r.released, []);
    for (const c of [inherited, unnamed]) {
      assert.deepEqual(keptFor(r, c), [
        "journal entry: claim recorded for node node-1 under this host's machine-id, not for " +
        "this node (node-b): left to node node-1's reconcile or the sweep",
      ]);
    }
    assert.deepEqual(keptFor(r, copied), [
      "journal entry written by node node-1 under this host's machine-id (a copied state " +
      "directory, or a node name changed): left to node node-1's reconcile or the sweep; entry kept",
    ]);
    assert.deepEqual(
      (await journal.list()).map((e) => e.entry?.claims.map((c) => c.name)),
      [[copied.metadata.name]],
      "the original's entry stays for its node; the clone owes nothing",
    );
    assert.equal(w.stub.seen("DELETE").length, 0);
    for (const c of [inherited, copied, unnamed]) assert.ok(w.stub.get(c.metadata.name));
  });
});

Deno.test("reconcile reads each cache entry's head only: a torn or fat entry keeps its container live", async () => {
  await withTempDir(async (dir) => {
    const w = await setup(dir);
    const [runtimeDir] = w.node.resultsDirs;
    // libcni writes in place: an entry read while it is written ends anywhere after its head.
    const torn = JSON.stringify({ kind: "cniCacheV1", containerId: "orphan", config: "e30=" });
    await Deno.writeTextFile(`${runtimeDir}/vpc-7b3e-orphan-eth0`, torn.slice(0, -12));
    // A config far past the bound, after the container ID, as libcni orders its fields.
    const fat = w.lease("fat");
    await Deno.writeTextFile(
      `${runtimeDir}/vpc-7b3e-fat-eth0`,
      JSON.stringify({ kind: "cniCacheV1", containerId: "fat", config: "A".repeat(4 << 20) }),
    );
    // Not libcni's order: the container ID past the bound; the entry's name still names it.
    const odd = w.lease("odd");
    await Deno.writeTextFile(
      `${runtimeDir}/vpc-7b3e-odd-eth0`,
      JSON.stringify({
        kind: "cniCacheV1",
        config: "A".repeat(ENTRY_HEAD_BYTES),
        containerId: "x",
      }),
    );
    for (let i = 0; i < 3; i++) {
      const r = await w.run();
      assert.deepEqual(r.errors, []);
      for (const c of [...w.orphan, ...fat, ...odd]) {
        assert.deepEqual(keptFor(r, c), ["live: a result cache names its container"]);
      }
      w.clock.t += GRACE_MS;
    }
    assert.equal(w.stub.seen("DELETE").length, 0);
  });
});

/** A node whose boot id is read from `<dir>/boot_id`; `boot(id)` reboots it. */
async function rebootable(dir: string) {
  const boot = (id: string) => Deno.writeTextFile(`${dir}/boot_id`, `${id}\n`);
  await boot("6c1b3a4e-0d2f-4b8a-9e7c-1f2a3b4c5d6e");
  const w = await setup(dir, { bootIdFile: `${dir}/boot_id` });
  return { ...w, boot };
}

Deno.test("reconcile: a record from an earlier boot whose container no cache names is released at once, past a brake; this boot's wait", async () => {
  await withTempDir(async (dir) => {
    const w = await rebootable(dir);
    const before = ["p1", "p2"].map((id) => w.lease(id)).flat();
    for (const id of ["p1", "p2"]) await w.cache(id);
    assert.equal((await w.run()).live, 3, "a clean run before the reboot");
    // The reboot: every sandbox dies; the runtime's cache of them is dropped.
    await w.boot("0f9e8d7c-6b5a-4948-8372-615049382716");
    await Deno.remove(w.node.resultsDirs[0], { recursive: true });
    w.clock.t += 60_000;
    const fresh = w.lease("fresh-this-boot");
    w.clock.t += GRACE_MS;
    const first = await w.run();
    assert.deepEqual(
      first.released.map((x) => [x.via, x.claim]).sort(),
      names([...w.live, ...w.orphan, ...before]).map((n) => ["boot", n]),
      "every sandbox of the earlier boot is dead: released without waiting or braking",
    );
    for (const c of fresh) assert.ok(w.stub.get(c.metadata.name));
    const second = await w.runTwice();
    assert.equal(second.brake?.reason, "empty", "this boot's absent claims meet the brake");
    for (const c of fresh) {
      assert.deepEqual(keptFor(second, c), ["brake (empty): released nothing"]);
      assert.ok(w.stub.get(c.metadata.name));
    }
  });
});

Deno.test("reconcile: a record from an earlier boot whose container a cache names is kept", async () => {
  await withTempDir(async (dir) => {
    const w = await rebootable(dir);
    await w.boot("0f9e8d7c-6b5a-4948-8372-615049382716");
    const r = await w.run();
    assert.deepEqual(r.released.map((x) => x.claim), names(w.orphan));
    for (const c of w.live) {
      assert.deepEqual(keptFor(r, c), ["live: a result cache names its container"]);
      assert.ok(w.stub.get(c.metadata.name));
    }
  });
});

/** A reconcile run of `w`'s node under the node config `node`. */
const runAs = (w: Awaited<ReturnType<typeof setup>>, node: NodeConfig) =>
  reconcile({
    node,
    milo: w.stub.client(),
    graceMs: GRACE_MS,
    dryRun: false,
    now: () => w.clock.t,
  });

const CLONE_BOOT = "0f9e8d7c-6b5a-4948-8372-615049382716";

Deno.test("reconcile on a clone that kept the machine-id under its own node name releases none of the original's records, by boot or by absence", async () => {
  await withTempDir(async (dir) => {
    const w = await rebootable(dir);
    const holdings = new Holdings(w.node.stateDir);
    /** Rewrites the record of `containerId` without the fields named (an older plugin's). */
    const older = (containerId: string, ...drop: ("node" | "boot")[]) => {
      const key = { cluster: "cluster-a", containerId, ifname: "eth0" };
      const h = { ...holdings.read(key)! };
      for (const k of drop) delete h[k];
      holdings.put(key, h);
    };
    // node-1's records (w.live, w.orphan), one naming no boot, one naming no node.
    const unbooted = w.lease("unbooted");
    older("unbooted", "boot");
    const unnamed = w.lease("unnamed");
    older("unnamed", "node");
    // The clone: node-1's disk (its state directory and machine-id), its own kernel and node name,
    // and a pod of its own (its live set is not empty: no brake).
    await w.boot(CLONE_BOOT);
    const clone: NodeConfig = { ...w.node, node: "node-b" };
    const own = w.lease("own", { node: { bootIdFile: `${dir}/boot_id`, node: "node-b" } });
    await w.cache("own");
    const original = [...w.live, ...w.orphan, ...unbooted];
    for (let i = 0; i < 3; i++) {
      const r = await runAs(w, clone);
      assert.deepEqual(r.released, [], `run ${i}`);
      assert.equal(r.brake, null);
      assert.equal(r.boot, CLONE_BOOT);
      for (const c of original) {
        assert.deepEqual(keptFor(r, c), [
          "recorded by node node-1 under this host's machine-id (a copied state directory, or a " +
          "node name changed): not judged here; left to node node-1's reconcile or the sweep",
        ]);
      }
      // Naming no node, it is judged by its claims' node in Milo: node-1's.
      for (const c of unnamed) {
        assert.deepEqual(
          keptFor(r, c),
          i === 0
            ? [
              "in Milo it is recorded for node node-1 under this host's machine-id: left to node " +
              "node-1's reconcile or the sweep: left alone, dropped from the record",
            ]
            : [],
        );
      }
      for (const c of own) {
        assert.deepEqual(keptFor(r, c), ["live: a result cache names its container"]);
      }
      w.clock.t += GRACE_MS;
    }
    assert.equal(w.stub.seen("DELETE").length, 0);
    for (const c of [...original, ...unnamed, ...own]) assert.ok(w.stub.get(c.metadata.name));
  });
});

Deno.test("reconcile: a record of this node under its raw hostname (another case) is this node's: a reboot releases it", async () => {
  await withTempDir(async (dir) => {
    const w = await rebootable(dir);
    const raw = w.lease("raw", { node: { bootIdFile: `${dir}/boot_id`, node: "Node-1" } });
    await w.boot(CLONE_BOOT);
    const r = await w.run();
    assert.equal(r.boot, CLONE_BOOT);
    assert.deepEqual(
      r.released.filter((x) => x.containerId === "raw").map((x) => [x.via, x.claim]).sort(),
      names(raw).map((n) => ["boot", n]),
    );
    for (const c of raw) assert.equal(w.stub.get(c.metadata.name), undefined);
  });
});

Deno.test("reconcile: a boot id file answering another value each read names no boot: no boot rule; the liveness rule and its brakes apply", async () => {
  await withTempDir(async (dir) => {
    const w = await rebootable(dir);
    const node: NodeConfig = { ...w.node, bootIdFile: "/proc/sys/kernel/random/uuid" };
    const first = await runAs(w, node);
    assert.deepEqual(first.released, [], "no record is taken for an earlier boot's");
    assert.equal(first.boot, null);
    assert.equal(first.warnings.length, 1);
    assert.match(
      first.warnings[0],
      /^bootIdFile \/proc\/sys\/kernel\/random\/uuid answered two values in two reads: it names no boot/,
    );
    for (const c of w.orphan) {
      assert.deepEqual(keptFor(first, c), [
        "absent, waiting for a second observation after the grace period",
      ]);
    }
    w.clock.t += GRACE_MS;
    const second = await runAs(w, node);
    assert.deepEqual(
      second.released.map((x) => [x.via, x.claim]).sort(),
      names(w.orphan).map((n) => ["orphan", n]),
    );
    for (const c of w.live) assert.ok(w.stub.get(c.metadata.name));
    // The brake holds as ever: an emptied cache releases nothing of what is left.
    const later = w.lease("later");
    await Deno.remove(w.node.resultsDirs[0], { recursive: true });
    w.clock.t += GRACE_MS;
    await runAs(w, node);
    w.clock.t += GRACE_MS;
    const braked = await runAs(w, node);
    assert.equal(braked.brake?.reason, "empty");
    assert.deepEqual(braked.released, []);
    for (const c of [...w.live, ...later]) assert.ok(w.stub.get(c.metadata.name));
  });
});

Deno.test("liveness: the container ID is the head's top-level containerId; values before it are skipped", () => {
  const id = (v: unknown) => containerIdOf(JSON.stringify(v));
  assert.equal(id({ kind: "cniCacheV1", containerId: "abc" }), "abc");
  assert.equal(
    id({ a: { containerId: "nested" }, b: ["}", '"{'], c: 1.5e3, d: null, containerId: "top" }),
    "top",
  );
  assert.equal(containerIdOf('{ "container\\u0049d" :\n "esc" }'), "esc");
  assert.equal(id({ containerId: 7, other: 1 }), undefined, "not a string");
  assert.equal(id({ containerId: "" }), undefined, "empty");
  assert.equal(id(["containerId", "x"]), undefined, "not an object");
  assert.equal(containerIdOf("not json"), undefined);
  assert.equal(id({ kind: "cniCacheV1" }), undefined, "none");
  for (const head of ['{"kind":"cniCache', '{"kind":"x","containerId":"ab', '{"a":[1,{"b":"]']) {
    assert.equal(typeof containerIdOf(head), "symbol", `${head}: read on`);
  }
});
