/**
 * The sequences the simulator (testing/sim, `deno task simulate`) found in
 * the release paths, each pinned in-process over the stub answering as Milo
 * does (docs/simulator.md names a seed that shows each), and a sibling of one
 * found by reading its fix. Those fixed here fail on the code before their
 * fix; those left for a design change are `ignore`d and say so.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimBody, claimName, KEYS } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { Holdings } from "../lib/holdings.ts";
import { Journal } from "../lib/journal.ts";
import { stateFileOf } from "../lib/liveness.ts";
import { type IPClaim, remakeBody } from "../lib/milo_objects.ts";
import { reconcile } from "../lib/reconcile.ts";
import { statusReply } from "../testing/milo_fixtures.ts";
import {
  invocation,
  type InvocationOptions,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { lost, StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const FOREVER = Number.POSITIVE_INFINITY;
const GRACE_MS = 300_000;
const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };

/** A pod whose network's claims are named after the pod (a StatefulSet's: Retain). */
const POD: Partial<InvocationOptions> = {
  ipam: { ...V4, identity: "pod" },
  node: { allowIdentities: [{ namespace: "shop" }] },
  args: { K8S_POD_NAME: "db-0", K8S_POD_UID: "uid-db-0" },
};

/** Writes the libcni cache entry that keeps container `id` live on the node of `dir`. */
function cached(dir: string, id: string): void {
  Deno.mkdirSync(`${dir}/results`, { recursive: true });
  Deno.writeTextFileSync(
    `${dir}/results/net-${id}-eth0`,
    JSON.stringify({ kind: "cniCacheV1", containerId: id, ifName: "eth0" }),
  );
}

/** A reconcile run of the node of `inv`'s config, over `stub`, at `now`. */
function reconcileAt(stub: StubMilo, node: InvocationOptions & { now?: () => number }) {
  const i = invocation(stub, { ...node, command: "DEL" });
  return reconcile({
    node: i.node,
    milo: stub.client(),
    graceMs: GRACE_MS,
    dryRun: false,
    now: node.now,
  });
}

/**
 * An ADD of `o` whose every create goes unanswered (it fails 11, in doubt);
 * answers a DEL of the same attachment.
 */
async function addUnanswered(stub: StubMilo, o: Omit<InvocationOptions, "command">) {
  stub.inject({ method: "POST", times: FOREVER, answer: () => lost() });
  await rejectsWith(add(invocation(stub, { command: "ADD", ...o })), 11);
  stub.clearFaults();
  return invocation(stub, { command: "DEL", ...o });
}

Deno.test("reconcile's journal in doubt waits while another holder has the name: its own create lands once that one goes", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, ...POD, deadline: Date.now() + 2_000 };
    // db-0's old sandbox elsewhere holds the name; this node's new sandbox's create goes
    // unanswered (it may land yet), and its ADD fails "held by another".
    const other = invocation(stub, {
      command: "ADD",
      ...o,
      stateDir: `${dir}/elsewhere`,
      containerId: "old",
      node: { ...POD.node, node: "node-2" },
    });
    await add(other);
    const name = claimName(other.attachment, "ipv4");
    stub.inject({ method: "POST", answer: () => lost() });
    await rejectsWith(add(invocation(stub, { command: "ADD", ...o, containerId: "new" })), 11);
    const d = invocation(stub, { command: "DEL", ...o, containerId: "new" });
    await del(d);
    const [entry] = await d.journal.list();
    assert.equal(entry.entry?.inDoubt, true);
    // The reconcile finds the name another's: it keeps waiting (the code before dropped it).
    await reconcileAt(stub, { command: "DEL", ...o, containerId: "new" });
    assert.deepEqual((await d.journal.list())[0]?.entry?.claims.map((c) => c.name), [name]);
    // The old holder's claim goes; this sandbox's lost create lands on the name.
    stub.deleteClaim(name);
    stub.materialize(claimBody("default", d.conf.network, d.attachment, "ipv4"));
    const r = await reconcileAt(stub, { command: "DEL", ...o, containerId: "new" });
    assert.deepEqual(r.released.map((x) => [x.via, x.claim]), [["journal", name]]);
    assert.equal(stub.get(name), undefined, "the late create is released");
  });
});

Deno.test("reconcile's journal in doubt keeps watching after releasing one late create: a retry's create lands after it", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, ipam: V4, deadline: Date.now() + 2_000 };
    // Two creates of the ADD (the first and its retry) go unanswered.
    const d = await addUnanswered(stub, o);
    await del(d);
    const name = claimName(d.attachment, "ipv4");
    const body = claimBody("default", d.conf.network, d.attachment, "ipv4");
    stub.materialize(body);
    const first = await reconcileAt(stub, { command: "DEL", ...o });
    assert.deepEqual(first.released.map((x) => x.claim), [name]);
    assert.equal((await d.journal.list()).length, 1, "in doubt until its grace ends");
    stub.materialize(body);
    const second = await reconcileAt(stub, { command: "DEL", ...o });
    assert.deepEqual(second.released.map((x) => x.claim), [name]);
    assert.equal(stub.get(name), undefined, "the retry's late create is released too");
  });
});

Deno.test("ADD that succeeded after a create went unanswered stays in doubt: its DEL journals it", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, ipam: V4 };
    // The first create's answer is lost without Milo running it yet; the retry makes the claim.
    stub.inject({ method: "POST", answer: () => lost() });
    const a = invocation(stub, { command: "ADD", ...o });
    await add(a);
    const record = new Holdings(dir).read(a.attachment);
    assert.equal(record?.state, "held");
    assert.deepEqual(record?.doubt?.names, [claimName(a.attachment, "ipv4")]);
    const d = invocation(stub, { command: "DEL", ...o });
    await del(d);
    const [entry] = await d.journal.list();
    assert.equal(entry?.entry?.inDoubt, true, "the lost create may land after this DEL");
    // It lands: the journal releases it.
    stub.materialize(claimBody("default", d.conf.network, d.attachment, "ipv4"));
    const r = await reconcileAt(stub, { command: "DEL", ...o });
    assert.equal(r.released.length, 1);
  });
});

Deno.test("a DEL that succeeds after one that failed in doubt keeps every in-doubt name journaled", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, deadline: Date.now() + 2_000 };
    const names = () => ["ipv4", "ipv6"].map((f) => claimName(d.attachment, f as "ipv4"));
    // The ADD's creates go unanswered; the IPv4 one lands before the DEL.
    const d = await addUnanswered(stub, o);
    stub.materialize(claimBody("default", d.conf.network, d.attachment, "ipv4"));
    // The first DEL releases the IPv4 claim; the IPv6 one's reads fail.
    stub.inject({
      method: "GET",
      path: names()[1],
      times: FOREVER,
      answer: () => statusReply(503),
    });
    await rejectsWith(del(d), 11);
    stub.clearFaults();
    // The runtime's next DEL succeeds.
    await del(invocation(stub, { command: "DEL", ...o }));
    const [entry] = await d.journal.list();
    assert.equal(entry.entry?.inDoubt, true);
    assert.deepEqual(
      entry.entry?.claims.map((c) => c.name).sort(),
      names().sort(),
      "the IPv4 name stays watched: the ADD's other create of it may land yet",
    );
  });
});

Deno.test("reconcile does not make again a claim the attachment's DEL released while it ran", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const clock = { t: Date.now() };
    const o = { stateDir: dir, now: () => clock.t };
    const a = invocation(stub, { command: "ADD", ...o });
    await add(a);
    const [v4, v6] = ["ipv4", "ipv6"].map((f) => claimName(a.attachment, f as "ipv4"));
    cached(dir, a.attachment.containerId);
    // The IPv6 claim is the least recently verified: this run reads it first.
    clock.t += 1_800_000;
    verifiedAt(stateFileOf(a.node), [[v4, a.attachment.containerId, clock.t]]);
    new Holdings(dir).markListed();
    // While the reconcile reads it, the runtime's DEL runs: it releases the IPv6 claim and
    // fails on the IPv4 one (journaled); a runtime keeps the cache entry of a failed DEL.
    stub.inject({
      method: "GET",
      path: v6,
      answer: async () => {
        stub.inject({ method: "DELETE", path: v4, times: FOREVER, answer: () => statusReply(503) });
        await rejectsWith(
          del(invocation(stub, { command: "DEL", ...o, deadline: Date.now() + 2_000 })),
          11,
        );
        stub.clearFaults();
        return undefined;
      },
    });
    const r = await reconcileAt(stub, { command: "DEL", ...o });
    assert.deepEqual(r.remade, []);
    assert.equal(stub.get(v6), undefined, "the DELeted attachment gets nothing back");
  });
});

/** A state file whose claims were last verified at the times given (both key forms). */
function verifiedAt(stateFile: string, at: [string, string, number][]): void {
  const verified: Record<string, number> = {};
  for (const [name, container, t] of at) {
    verified[name] = t;
    verified[`${name} ${container}`] = t;
  }
  Deno.writeTextFileSync(stateFile, JSON.stringify({ absent: {}, seen: {}, verified }));
}

Deno.test("reconcile reports a live claim another sandbox of this node holds, though the other's record names it too", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const clock = { t: Date.now() };
    const slot = {
      stateDir: dir,
      ipam: { ...V4, identity: "network" },
      node: { allowIdentities: [{ namespace: "shop" }] },
      now: () => clock.t,
    };
    const one = invocation(stub, { command: "ADD", ...slot, containerId: "one" });
    await add(one);
    const name = claimName(one.attachment, "ipv4");
    // The slot's claim is deleted behind the node's back; the slot's next pod, on this node,
    // makes it again (Milo re-binds the address): one address, two live sandboxes.
    stub.deleteClaim(name);
    const two = invocation(stub, { command: "ADD", ...slot, containerId: "two" });
    await add(two);
    const p = invocation(stub, { command: "ADD", ...slot, ipam: V4, containerId: "p" });
    await add(p);
    // The order the verification reads them in: two, one, then p (their ADDs' times).
    const holdings = new Holdings(dir);
    const t0 = clock.t;
    for (const [i, at] of [[two, t0], [one, t0 + 2], [p, t0 + 3]] as const) {
      holdings.put(i.attachment, { ...holdings.read(i.attachment)!, at });
      cached(dir, i.attachment.containerId);
    }
    holdings.markListed();
    const duplicates: string[] = [];
    for (const step of [1_800_000, 300_000]) {
      clock.t += step;
      const r = await reconcileAt(stub, { command: "DEL", ...slot, containerId: "one" });
      duplicates.push(...r.duplicates.map((d) => d.holder));
    }
    assert.ok(
      duplicates.some((h) => h.includes("container=one")),
      `the sandbox without its claim is reported: ${duplicates.join("; ") || "nothing"}`,
    );
    assert.equal(stub.get(name)?.metadata.annotations?.[KEYS.containerId], "two");
  });
});

Deno.test("reconcile: a duplicate read every run does not keep the other live claims from being verified", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const clock = { t: Date.now() };
    const o = { stateDir: dir, ipam: V4, now: () => clock.t };
    const ids = ["a", "b", "c", "d", "e", "f"];
    const nameOf = (id: string) =>
      claimName(invocation(stub, { command: "DEL", ...o, containerId: id }).attachment, "ipv4");
    for (const id of ids) {
      await add(invocation(stub, { command: "ADD", ...o, containerId: id }));
      cached(dir, id);
    }
    new Holdings(dir).markListed();
    // All verified lately but "a", whose claim now records another holder (a duplicate: read
    // again every run); and "f"'s claim was deleted behind the node's back.
    clock.t += 1_800_000;
    const node = invocation(stub, { command: "DEL", ...o }).node;
    verifiedAt(stateFileOf(node), ids.map((id) => [nameOf(id), id, id === "a" ? 0 : clock.t]));
    const dup = stub.get(nameOf("a"))!;
    stub.put({
      ...dup,
      metadata: {
        ...dup.metadata,
        uid: "another",
        annotations: { ...dup.metadata.annotations, [KEYS.containerId]: "intruder" },
      },
    });
    stub.remove(nameOf("f"));
    const remade: string[] = [];
    for (let i = 0; i < 3; i++) {
      clock.t += 300_000;
      remade.push(
        ...(await reconcileAt(stub, { command: "DEL", ...o })).remade.map((x) => x.claim),
      );
    }
    assert.deepEqual(remade, [nameOf("f")], "the lost claim is made again");
  });
});

Deno.test("a DELETE Milo runs after the name was made again: the new holder's claim is read again once no DELETE sent before can run, and made again", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const clock = { t: Date.now() };
    const at = { stateDir: dir, ...POD, now: () => clock.t };
    // An older live attachment: verification's least recently read, so a run's one read is
    // not the new claim's.
    await add(invocation(stub, { command: "ADD", ...at, ipam: V4, containerId: "other" }));
    cached(dir, "other");
    // db-0's sandbox is replaced on this node: the name (pod identity, Retain) is made again.
    await add(invocation(stub, { command: "ADD", ...at, containerId: "old" }));
    const old = invocation(stub, { command: "DEL", ...at, containerId: "old" });
    const name = claimName(old.attachment, "ipv4");
    assert.ok(stub.get(name));
    // Held before it runs; its sender times out, reads the claim (still there) and sends a
    // second DELETE, which runs. The held one runs later.
    const held = stub.holdNextDelete();
    await del(old);
    clock.t += 5_000;
    await add(invocation(stub, { command: "ADD", ...at, containerId: "new" }));
    cached(dir, "new");
    const address = stub.get(name)?.status.allocatedCIDR;
    held();
    assert.equal(stub.get(name), undefined, "the held DELETE removed the new holder's claim");
    clock.t += 90_000;
    const r = await reconcileAt(stub, { command: "DEL", ...at, containerId: "new" });
    assert.deepEqual(r.remade.map((x) => x.claim), [name]);
    const c = stub.get(name);
    assert.equal(c?.metadata.annotations?.[KEYS.containerId], "new");
    assert.equal(c?.status.allocatedCIDR, address, "on its address (Retain kept it for the name)");
  });
});

Deno.test({
  name:
    "an ADD that succeeds keeps the doubt of the journal entry it drops: an earlier ADD's late create outlives the next DEL",
  // add.ts drops the attachment's journal entry once the ADD succeeded; an entry in doubt
  // carries creates of an earlier ADD that may still land (the code before dropped them).
  fn: async () => {
    await withTempDir(async (dir) => {
      const stub = new StubMilo();
      const o = { stateDir: dir, ipam: V4, deadline: Date.now() + 2_000 };
      const d = await addUnanswered(stub, o);
      await del(d);
      // The runtime starts the same container again: its ADD succeeds, then it is DELeted.
      await add(invocation(stub, { command: "ADD", ...o, deadline: Date.now() + 10_000 }));
      await del(invocation(stub, { command: "DEL", ...o }));
      // The first ADD's lost create lands now: the node must still owe its release.
      stub.materialize(claimBody("default", d.conf.network, d.attachment, "ipv4"));
      const entries = await new Journal(dir).list();
      assert.equal(entries.length, 1, "the earlier ADD's doubt is still journaled");
    });
  },
});

Deno.test({
  name:
    "a claim verification makes again whose create went unanswered lands after the attachment's DEL: the node still owes it",
  // The repair's create is the record's doubt, which the DEL journals (the code before kept
  // none: a create Milo ran late outlived the DEL that followed).
  fn: async () => {
    await withTempDir(async (dir) => {
      const stub = new StubMilo();
      const clock = { t: Date.now() };
      const o = { stateDir: dir, ipam: V4, now: () => clock.t };
      const a = invocation(stub, { command: "ADD", ...o });
      await add(a);
      const name = claimName(a.attachment, "ipv4");
      cached(dir, a.attachment.containerId);
      new Holdings(dir).markListed();
      stub.remove(name); // deleted behind the node's back
      const body = stub.requests.find((r) => r.method === "POST")!.body as Record<string, unknown>;
      // Verification makes it again: its first create goes unanswered, the retry makes it.
      stub.inject({ method: "POST", answer: () => lost() });
      clock.t += 1_800_000;
      const r = await reconcileAt(stub, { command: "DEL", ...o });
      assert.equal(r.remade.length, 1);
      await del(invocation(stub, { command: "DEL", ...o }));
      assert.equal(stub.get(name), undefined);
      // The unanswered create lands now.
      stub.materialize(body);
      const entries = await new Journal(dir).list();
      assert.ok(
        entries.some((e) => e.entry?.claims.some((c) => c.name === name)),
        "the node still owes its release",
      );
    });
  },
});

Deno.test("a DEL that finds its recorded claim gone journals it in doubt: the release that removed it in place makes it again after the DEL, and reconcile releases that", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, ...POD };
    const a = invocation(stub, { command: "ADD", ...o, containerId: "a" });
    await add(a);
    const name = claimName(a.attachment, "ipv4");
    const c = stub.get(name)!;
    // Another's release deletes it in place of the claim it judged (Milo deletes by name) ...
    stub.deleteClaim(name);
    await del(invocation(stub, { command: "DEL", ...o, containerId: "a" }));
    const [entry] = await new Journal(dir).list();
    assert.equal(entry?.entry?.inDoubt, true, "the gone claim may come back");
    // ... and makes it again, for its holder, after that holder's DEL.
    stub.materialize(remakeBody("default", c as unknown as IPClaim));
    const r = await reconcileAt(stub, { command: "DEL", ...o, containerId: "a" });
    assert.deepEqual(r.released.map((x) => x.claim), [name]);
    assert.equal(stub.get(name), undefined);
  });
});

Deno.test("an ADD whose claim was gone before its rollback stays in doubt: the release that removed it makes it again after the DEL, and reconcile releases that", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, ...POD };
    const dual = { ...POD.ipam, classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" } };
    const a = invocation(stub, { command: "ADD", ...o, ipam: dual });
    const v4 = claimName(a.attachment, "ipv4");
    const v6 = claimName(a.attachment, "ipv6");
    let gone: WireClaim | undefined;
    stub.inject({
      method: "POST",
      path: "/ipclaims",
      times: 2,
      answer: async (req) => {
        if ((req.body as { metadata: { name: string } }).metadata.name !== v6) return undefined;
        for (let i = 0; i < 100 && !stub.get(v4); i++) await new Promise((r) => setTimeout(r, 1));
        // The IPv4 claim is deleted in place by another's release meanwhile; IPv6 is refused.
        gone = stub.deleteClaim(v4);
        return statusReply(507);
      },
    });
    await rejectsWith(add(a), 100);
    assert.ok(gone, "the IPv4 claim was made, then deleted by another");
    await del(invocation(stub, { command: "DEL", ...o, ipam: dual }));
    const [entry] = await new Journal(dir).list();
    assert.equal(entry?.entry?.inDoubt, true, "the claim made and gone may come back");
    stub.materialize(remakeBody("default", gone as unknown as IPClaim));
    const r = await reconcileAt(stub, { command: "DEL", ...o, ipam: dual });
    assert.deepEqual(r.released.map((x) => x.claim), [v4]);
  });
});

Deno.test("reconcile verifies a live claim whose shared name another attachment's journal entry names", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const clock = { t: Date.now() };
    const o = { stateDir: dir, ...POD, now: () => clock.t };
    await add(invocation(stub, { command: "ADD", ...o, containerId: "old" }));
    const name = claimName(invocation(stub, { command: "DEL", ...o }).attachment, "ipv4");
    // The old sandbox's claim goes behind its back: its DEL journals the name in doubt.
    stub.deleteClaim(name);
    await del(invocation(stub, { command: "DEL", ...o, containerId: "old" }));
    assert.equal((await new Journal(dir).list()).length, 1);
    await add(invocation(stub, { command: "ADD", ...o, containerId: "new" }));
    cached(dir, "new");
    // The new sandbox's claim goes too (a DELETE landing late, a tool).
    stub.deleteClaim(name);
    clock.t += 90_000;
    const r = await reconcileAt(stub, { command: "DEL", ...o, containerId: "new" });
    assert.deepEqual(r.remade.map((x) => x.claim), [name], "the old entry does not hide it");
    assert.equal(stub.get(name)?.metadata.annotations?.[KEYS.containerId], "new");
  });
});

/** What `lateDeleteLeft` answers. */
type Late = {
  stub: StubMilo;
  clock: { t: number };
  at: Partial<InvocationOptions> & { stateDir: string; now: () => number };
  name: string;
  address?: string;
};

/**
 * A slot of db-0 on the node of `dir` whose old sandbox's DELETE runs late:
 * "new" made the name (its container cached: live), the late DELETE removed
 * its claim, and "third" made the name again on the same address (Retain).
 * `beforeLate` runs before the DELETE lands. Answers the stub, the clock, the
 * node's options, the name and its address.
 */
async function lateDeleteLeft(dir: string, beforeLate = (_: Late) => Promise.resolve()) {
  const stub = new StubMilo();
  const clock = { t: Date.now() };
  const at = { stateDir: dir, ...POD, now: () => clock.t };
  await add(invocation(stub, { command: "ADD", ...at, containerId: "old" }));
  const name = claimName(invocation(stub, { command: "DEL", ...at }).attachment, "ipv4");
  const held = stub.holdNextDelete();
  await del(invocation(stub, { command: "DEL", ...at, containerId: "old" }));
  clock.t += 5_000;
  await add(invocation(stub, { command: "ADD", ...at, containerId: "new" }));
  cached(dir, "new");
  const address = stub.get(name)?.status.allocatedCIDR?.split("/")[0];
  const late = { stub, clock, at, name, address };
  await beforeLate(late);
  held();
  assert.equal(stub.get(name), undefined, "the late DELETE removed the new holder's claim");
  await add(invocation(stub, { command: "ADD", ...at, containerId: "third" }));
  cached(dir, "third");
  assert.equal(stub.get(name)?.status.allocatedCIDR?.split("/")[0], address, "the same address");
  clock.t += 10_000;
  return late;
}

Deno.test("a DEL before its claim was read again reports the duplicate a late DELETE left: another holder made the name on its address; read again, nothing", async () => {
  for (const round of ["recheck due", "read again"]) {
    await withTempDir(async (dir) => {
      const { stub, at, name, address } = await lateDeleteLeft(dir, async (x) => {
        if (round !== "read again") return;
        x.clock.t += 90_000;
        const r = await reconcileAt(x.stub, { command: "DEL", ...x.at, containerId: "new" });
        assert.equal(r.verified, 1, round);
      });
      const r = await del(invocation(stub, { command: "DEL", ...at, containerId: "new" }));
      assert.match(r.skipped ?? "", /held by another sandbox, left alone/, round);
      if (round === "read again") {
        // Removed after it was read again: no DELETE sent before its ADD did that.
        assert.equal(r.duplicates, undefined, round);
        return;
      }
      assert.equal(r.duplicates?.length, 1, round);
      const d = r.duplicates![0];
      assert.equal(d.claim, name);
      assert.equal(d.address.split("/")[0], address);
      assert.match(d.holder, /container=new .*\(until its DEL\)/);
      assert.match(d.now, /container=third/);
    });
  }
});

Deno.test("a DEL that failed before it could read its claim leaves the late DELETE's duplicate to the journal, which reports it", async () => {
  await withTempDir(async (dir) => {
    const { stub, at, name, address } = await lateDeleteLeft(dir);
    // The new sandbox's DEL finds Milo unreachable (a runtime that never repeats it): journaled.
    stub.inject({ method: "GET", times: FOREVER, answer: () => statusReply(503) });
    await rejectsWith(del(invocation(stub, { command: "DEL", ...at, containerId: "new" })), 11);
    stub.clearFaults();
    const r = await reconcileAt(stub, { command: "DEL", ...at, containerId: "new" });
    assert.equal(r.duplicates.length, 1, JSON.stringify(r.duplicates));
    assert.equal(r.duplicates[0].address.split("/")[0], address);
    assert.match(r.duplicates[0].now, /container=third/);
    assert.equal(stub.get(name)?.metadata.annotations?.[KEYS.containerId], "third", "left alone");
  });
});
