/**
 * The release paths against Milo's real semantics, in-process over the
 * in-memory stub answering as Milo does (a DELETE's uid precondition
 * ignored, Retain re-bound by name): a DELETE whose answer was lost, a
 * newer claim removed in place of the one judged and made again (or taken
 * meanwhile by a third sandbox), and the doubt of an ADD that never
 * settled, kept through every later transition.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimBody, claimName, KEYS } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { Holdings } from "../lib/holdings.ts";
import { Journal } from "../lib/journal.ts";
import { reconcile } from "../lib/reconcile.ts";
import { statusReply } from "../testing/milo_fixtures.ts";
import {
  existingClaim,
  invocation,
  type InvocationOptions,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { type Json, lost, refused, StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const FOREVER = Number.POSITIVE_INFINITY;
const GRACE_MS = 300_000;

/** A pod of a StatefulSet whose network's claims are named after the pod (Retain). */
const POD: Partial<InvocationOptions> = {
  ipam: { classes: { ipv4: "vpc-pods-ipv4" }, identity: "pod" },
  node: { allowIdentities: [{ namespace: "shop" }] },
  args: { K8S_POD_NAME: "db-0", K8S_POD_UID: "uid-db-0" },
};

/** Two nodes over one stub: node A (`dir`) and node B (`dir/b`), each its own host. */
async function twoNodes(dir: string) {
  const stub = new StubMilo();
  await Deno.mkdir(`${dir}/b`);
  Deno.writeTextFileSync(`${dir}/machine-id`, `${"a".repeat(32)}\n`);
  Deno.writeTextFileSync(`${dir}/b/machine-id`, `${"b".repeat(32)}\n`);
  const on = (stateDir: string, node: string) =>
  (
    command: InvocationOptions["command"],
    o: Partial<InvocationOptions> = {},
  ) =>
    invocation(stub, {
      command,
      stateDir,
      ...POD,
      ...o,
      node: { ...POD.node, node, ...o.node },
    });
  return { stub, a: on(dir, "node-a"), b: on(`${dir}/b`, "node-b") };
}

/** The address a claim leases. */
const addressOf = (c: WireClaim | undefined) => c?.status.address ?? c?.status.allocatedCIDR;

Deno.test("DEL: a DELETE whose answer is lost is not sent again once the name was made again; the new holder keeps its claim", async () => {
  await withTempDir(async (dir) => {
    const { stub, a, b } = await twoNodes(dir);
    await add(a("ADD", { containerId: "old" }));
    const name = claimName(a("DEL", { containerId: "old" }).attachment, "ipv4");
    const address = addressOf(stub.get(name));
    let moved: ReturnType<typeof add> | undefined;
    let given: unknown;
    stub.inject({
      method: "DELETE",
      answer: async (_req, s) => {
        // Milo runs the DELETE; its answer is lost. Meanwhile the pod's new sandbox on node B
        // makes the name again (Milo re-binds the retained address), and Milo stays overloaded
        // for creates from then on.
        s.deleteClaim(name);
        moved = add(b("ADD", { containerId: "new" }));
        given = (await moved).output?.ips;
        s.inject({ method: "POST", times: FOREVER, answer: () => statusReply(503) });
        return lost();
      },
    });
    const r = await del(a("DEL", { containerId: "old" }));
    assert.ok(moved, "the race was run");
    const now = stub.get(name);
    assert.equal(now?.metadata.annotations?.[KEYS.containerId], "new", "node B's claim stays");
    assert.deepEqual(given, [{ address: `${address}/32`, gateway: "169.254.1.1" }], "re-bound");
    assert.equal(addressOf(now), address, "on the address its pod was given");
    assert.equal(stub.seen("DELETE").length, 1, "no DELETE sent again blind");
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped ?? "", /made again after a DELETE whose answer was lost/);
    assert.deepEqual(await a("DEL").journal.list(), [], "nothing owed: the old claim is gone");
  });
});

/**
 * Node A's DEL whose DELETE removes node B's newer claim of the name in place
 * of A's (a third party released A's claim between A's GET and DELETE, and
 * B made the name again), with `then` run before A makes it again.
 */
async function removedInPlace(
  dir: string,
  then: (w: Awaited<ReturnType<typeof twoNodes>>, name: string) => void | Promise<void>,
) {
  const w = await twoNodes(dir);
  const { stub, a, b } = w;
  await add(a("ADD", { containerId: "old" }));
  const name = claimName(a("DEL", { containerId: "old" }).attachment, "ipv4");
  let address: string | undefined;
  stub.inject({
    method: "DELETE",
    answer: async () => {
      stub.remove(name); // the sweep, say, with the retained address since swept
      await add(b("ADD", { containerId: "new" }));
      address = addressOf(stub.get(name));
      await then(w, name);
      return undefined; // Milo deletes by name: B's claim
    },
  });
  const r = await del(a("DEL", { containerId: "old" }));
  return { ...w, name, address, r };
}

Deno.test("DEL: a newer claim the DELETE removed is made again for its holder, on its address", async () => {
  await withTempDir(async (dir) => {
    const { stub, name, address, r } = await removedInPlace(dir, () => {});
    const now = stub.get(name);
    assert.equal(now?.metadata.annotations?.[KEYS.containerId], "new");
    assert.equal(addressOf(now), address);
    assert.match(r.skipped ?? "", /removed a newer claim of that name .*: made again/);
    assert.equal(r.duplicates, undefined);
  });
});

Deno.test("DEL: a newer claim removed in place, then taken by a third sandbox before it is made again: reported as a duplicate", async () => {
  await withTempDir(async (dir) => {
    let third: WireClaim | undefined;
    const { stub, name, r } = await removedInPlace(dir, (w, n) => {
      const address = addressOf(w.stub.get(n));
      // A third sandbox of the same slot waiting for the name takes it once it is gone.
      w.stub.inject({
        method: "POST",
        answer: (req, s) => {
          const body = req.body as Json & { metadata: { annotations: Record<string, string> } };
          if (body.metadata.annotations[KEYS.containerId] !== "new") return undefined;
          s.remove(n);
          third = s.materialize(
            {
              ...body,
              metadata: {
                ...body.metadata,
                annotations: { ...body.metadata.annotations, [KEYS.containerId]: "third" },
              },
            },
            { status: { allocatedCIDR: `${address}`, address: String(address).split("/")[0] } },
          );
          return statusReply(409, { name: n, reason: "AlreadyExists" });
        },
      });
    });
    assert.ok(third, "the third sandbox took the name");
    assert.equal(stub.get(name)?.metadata.annotations?.[KEYS.containerId], "third");
    assert.equal(r.duplicates?.length, 1, "never silent");
    const d = r.duplicates![0];
    assert.equal(d.claim, name);
    assert.match(d.holder, /container=new/);
    assert.match(d.now, /container=third/);
  });
});

Deno.test("DEL: a newer claim removed in place that cannot be made again now is journaled, and reconcile makes it again", async () => {
  await withTempDir(async (dir) => {
    const { stub, a, name, address, r } = await removedInPlace(dir, (w) => {
      w.stub.inject({ method: "POST", times: 16, answer: () => statusReply(503) });
    });
    assert.equal(stub.get(name), undefined, "Milo overloaded: not made again yet");
    assert.match(r.skipped ?? "", /making it again failed.*; owed/);
    const journal = new Journal(dir);
    const owed = await journal.remakes();
    assert.equal(owed.length, 1);
    assert.equal(owed[0].entry?.name, name);
    stub.clearFaults();
    const report = await reconcile({
      node: a("DEL").node,
      milo: stub.client(),
      graceMs: GRACE_MS,
      dryRun: false,
    });
    assert.deepEqual(report.remade, [{ claim: name, via: "journal", outcome: "made" }]);
    const now = stub.get(name);
    assert.equal(now?.metadata.annotations?.[KEYS.containerId], "new", "its holder's claim again");
    assert.equal(addressOf(now), address, "on its address");
    assert.deepEqual(await journal.remakes(), []);
  });
});

/** An attachment whose ADD was killed with its creates in flight: its record says `adding`. */
function killedAdd(dir: string, o: Partial<InvocationOptions> = {}) {
  const i = invocation(new StubMilo(), { command: "ADD", stateDir: dir, ...o });
  const names = [claimName(i.attachment, "ipv4"), claimName(i.attachment, "ipv6")];
  const until = Date.now() - 1_000;
  new Holdings(dir).adding(i.attachment, "killed-add", names, until - 10_000, until - 500);
  return { names, until };
}

Deno.test("DEL after an ADD in doubt journals in doubt whatever stopped it: an error answer, a timeout, a refused connection", async (t) => {
  const faults: [string, () => Response | never][] = [
    ["Milo answers 500", () => statusReply(500)],
    ["every request times out", () => lost()],
    ["the connection is refused", () => refused()],
  ];
  for (const [what, answer] of faults) {
    await t.step(what, () =>
      withTempDir(async (dir) => {
        const { names, until } = killedAdd(dir);
        const stub = new StubMilo();
        stub.inject({ times: FOREVER, answer });
        const i = invocation(stub, { command: "DEL", stateDir: dir, deadline: Date.now() + 3_000 });
        await rejectsWith(del(i), 11, /journaled/);
        const [entry] = await i.journal.list();
        assert.equal(entry.entry?.inDoubt, true, "in doubt");
        assert.equal(entry.entry?.doubtSince, until, "since the ADD's end");
        assert.deepEqual(entry.entry?.claims.map((c) => c.name).sort(), [...names].sort());
      }));
  }
});

Deno.test("journal: an entry's doubt counts from when it began, not from an older entry's creation", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const i = invocation(stub, { command: "DEL", stateDir: dir });
    const t0 = Date.now() - 2 * GRACE_MS;
    // A DEL failed long ago: its entry is old.
    await i.journal.record(i.attachment, [{ name: "pod-old-v4" }], "Milo unreachable", t0);
    // Now an ADD of the attachment ended in doubt, and its DEL succeeded.
    const since = Date.now() - 1_000;
    await i.journal.owe(i.attachment, { claims: [], doubt: { since, names: ["pod-x-v4"] } }, "d", {
      replace: true,
    });
    const [entry] = await i.journal.list();
    assert.equal(entry.entry?.created, t0);
    assert.equal(entry.entry?.doubtSince, since);
    const report = await reconcile({
      node: i.node,
      milo: stub.client(),
      graceMs: GRACE_MS,
      dryRun: false,
    });
    const until = new Date(since + GRACE_MS).toISOString();
    assert.deepEqual(report.kept.map((k) => k.reason), [`journal entry in doubt until ${until}`]);
    assert.equal((await i.journal.list()).length, 1, "still waiting for the create");
  });
});

Deno.test("ADD: a failed ADD keeps an earlier ADD's doubt; the DEL after it journals it, and reconcile releases the late create", async () => {
  await withTempDir(async (dir) => {
    const { names, until } = killedAdd(dir, { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const stub = new StubMilo();
    // The plugin's fallback ADD: Milo answers its create (a refusal), so it settles.
    stub.inject({ method: "POST", times: FOREVER, answer: () => statusReply(403) });
    const fallback = invocation(stub, {
      command: "ADD",
      stateDir: dir,
      ipam: { classes: { ipv4: "vpc-pods-ipv4" } },
    });
    await rejectsWith(add(fallback), 101);
    const record = new Holdings(dir).read(fallback.attachment);
    assert.equal(record?.state, "adding", "the killed ADD's doubt is kept");
    assert.equal(record?.addId, "killed-add");
    stub.clearFaults();
    const d = invocation(stub, {
      command: "DEL",
      stateDir: dir,
      ipam: { classes: { ipv4: "vpc-pods-ipv4" } },
    });
    await del(d);
    const [entry] = await d.journal.list();
    assert.equal(entry.entry?.inDoubt, true);
    assert.equal(entry.entry?.doubtSince, until);
    // The killed agent's create lands after the DEL.
    const late = stub.materialize(claimBody("default", d.conf.network, d.attachment, "ipv4"));
    assert.equal(late.metadata.name, names[0]);
    const report = await reconcile({
      node: d.node,
      milo: stub.client(),
      graceMs: GRACE_MS,
      dryRun: false,
    });
    assert.deepEqual(report.released.map((x) => [x.via, x.claim]), [["journal", names[0]]]);
    assert.equal(stub.get(names[0]), undefined, "the late create is released");
  });
});

Deno.test("ADD: a create refused at connect leaves no doubt; one whose answer was lost does", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const inv = (containerId: string) =>
      invocation(stub, {
        command: "ADD",
        stateDir: dir,
        containerId,
        deadline: Date.now() + 2_000,
      });
    stub.inject({ method: "POST", times: FOREVER, answer: () => refused() });
    await rejectsWith(add(inv("refused")), 11);
    assert.equal(new Holdings(dir).read(inv("refused").attachment), undefined, "never sent");
    stub.clearFaults();
    stub.inject({ method: "POST", times: FOREVER, answer: () => lost() });
    await rejectsWith(add(inv("lost")), 11);
    assert.equal(new Holdings(dir).read(inv("lost").attachment)?.state, "adding", "in doubt");
  });
});

Deno.test("ADD: one that succeeds after a create went unanswered stays in doubt; the DEL journals it, and reconcile releases the late create", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const v4 = { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } };
    // The first create's answer is lost before Milo ran it (queued); the retry makes the claim.
    stub.inject({ method: "POST", times: 1, answer: () => lost() });
    const a = invocation(stub, { command: "ADD", stateDir: dir, ...v4 });
    await add(a);
    const name = claimName(a.attachment, "ipv4");
    const record = new Holdings(dir).read(a.attachment);
    assert.equal(record?.state, "held");
    assert.deepEqual(record?.doubt?.names, [name], "its lost create may land yet");
    assert.equal(record?.doubt?.since, record?.at, "from the ADD's end, not its deadline");
    const d = invocation(stub, { command: "DEL", stateDir: dir, ...v4 });
    await del(d);
    assert.equal(stub.get(name), undefined, "released");
    const [entry] = await d.journal.list();
    assert.equal(entry?.entry?.inDoubt, true, "the DEL owes the doubt");
    // The lost create lands after the DEL: a claim no sandbox holds.
    stub.materialize(claimBody("default", d.conf.network, d.attachment, "ipv4"));
    const report = await reconcile({
      node: d.node,
      milo: stub.client(),
      graceMs: GRACE_MS,
      dryRun: false,
    });
    assert.deepEqual(report.released.map((x) => [x.via, x.claim]), [["journal", name]]);
    assert.equal(stub.get(name), undefined, "the late create is released");
  });
});

Deno.test("ADD: a claim an earlier ADD holds stays recorded when a later ADD of another config fails in doubt", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    await add(invocation(stub, { command: "ADD", stateDir: dir }));
    const v6 = invocation(stub, { command: "DEL", stateDir: dir });
    const v6Name = claimName(v6.attachment, "ipv6");
    assert.ok(stub.get(v6Name));
    // The network config dropped its IPv6 class; the next ADD's create goes unanswered.
    stub.inject({ method: "POST", times: FOREVER, answer: () => lost() });
    const v4only = { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } };
    await rejectsWith(
      add(
        invocation(stub, {
          command: "ADD",
          stateDir: dir,
          deadline: Date.now() + 2_000,
          ...v4only,
        }),
      ),
      11,
    );
    stub.clearFaults();
    // The DEL (with the config of now) still releases the IPv6 claim the node recorded.
    await del(invocation(stub, { command: "DEL", stateDir: dir, ...v4only }));
    assert.equal(stub.get(v6Name), undefined, "the earlier ADD's IPv6 claim is released");
  });
});

Deno.test("reconcile: an absent claim of an earlier boot's ADD in doubt stays recorded until its doubt ends", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const i = invocation(stub, {
      command: "ADD",
      stateDir: dir,
      ipam: { classes: { ipv4: "vpc-pods-ipv4" } },
    });
    const holdings = new Holdings(dir);
    const clock = { t: Date.now() };
    const names = [claimName(i.attachment, "ipv4")];
    // An ADD a reboot killed with its create in flight: the boot rule judges it dead at once.
    const h = holdings.adding(i.attachment, "killed", names, clock.t - 20_000, clock.t - 10_500);
    holdings.put(i.attachment, { ...h, boot: "00000000-0000-4000-8000-000000000000" });
    const run = () =>
      reconcile({
        node: i.node,
        milo: stub.client(),
        graceMs: GRACE_MS,
        dryRun: false,
        now: () => clock.t,
      });
    const first = await run();
    assert.match(first.kept.map((k) => k.reason).join(";"), /absent, its create in doubt until/);
    assert.equal(holdings.read(i.attachment)?.state, "adding", "still recorded");
    const late = existingClaim(stub, i, "ipv4");
    clock.t += 1_000;
    const second = await run();
    assert.deepEqual(second.released.map((x) => [x.via, x.claim]), [["boot", late.metadata.name]]);
    assert.equal(stub.get(late.metadata.name), undefined);
  });
});

Deno.test("two clusters given one name: ADD refuses the other's claim (103), DEL leaves it", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    // Cluster B (a copied overlay still saying cluster-a) made db-0's claim first.
    const b = invocation(stub, {
      command: "ADD",
      stateDir: `${dir}/b`,
      ...POD,
      node: { ...POD.node, clusterUid: "uid-of-cluster-b" },
    });
    await add(b);
    const name = claimName(b.attachment, "ipv4");
    const o = { ...POD, node: { ...POD.node, clusterUid: "uid-of-cluster-a" } };
    await rejectsWith(
      add(invocation(stub, { command: "ADD", stateDir: dir, ...o })),
      103,
      /claim .* is another cluster's: it records cluster uid uid-of-cluster-b.*two clusters share/s,
    );
    // The same attachment's DEL in cluster A (same container, same node name): left alone.
    const d = invocation(stub, {
      command: "DEL",
      stateDir: dir,
      ...POD,
      containerId: b.env.containerId,
      node: { ...POD.node, clusterUid: "uid-of-cluster-a" },
    });
    const r = await del(d);
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped ?? "", /records cluster uid uid-of-cluster-b, not this cluster's/);
    assert.ok(stub.get(name), "cluster B's claim stays");
  });
});
