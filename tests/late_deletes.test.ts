/**
 * DELETEs Milo may run after their sender gave up (lib/late_deletes.ts): an
 * attachment's name is marked before its DELETE is sent, the mark dropped
 * once every DELETE was answered and kept otherwise, and an ADD of a marked
 * name refused until it is past; a shared name's claims are read again.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimName } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { DeleteMarks, markingDeletes, recheckAt } from "../lib/late_deletes.ts";
import { statusReply } from "../testing/milo_fixtures.ts";
import {
  invocation,
  type InvocationOptions,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { StubMilo } from "../testing/stub_milo.ts";

const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const LATE_MS = 90_000;

/** A node that leased one IPv4 claim with `o`: its stub, the ADD and the claim's name. */
async function leased<O extends Omit<InvocationOptions, "command">>(o: O) {
  const stub = new StubMilo();
  const a = invocation(stub, { command: "ADD", ...o });
  await add(a);
  return { stub, o, a, name: claimName(a.attachment, "ipv4") };
}

Deno.test("late deletes: an attachment's DELETE is marked before it is sent, and the mark dropped once it was answered", async () => {
  await withTempDir(async (dir) => {
    const { stub, o, name } = await leased({ stateDir: dir, ipam: V4 });
    let seen: unknown;
    stub.inject({
      method: "DELETE",
      answer: () => {
        seen = JSON.parse(Deno.readTextFileSync(`${dir}/deletes/${name}`));
        return undefined;
      },
    });
    const d = invocation(stub, { command: "DEL", ...o });
    await del(d);
    assert.deepEqual(seen, { until: d.deadline + LATE_MS }, "on disk before Milo saw it");
    assert.equal(new DeleteMarks(dir).pending(name, Date.now()), undefined, "answered: dropped");
  });
});

Deno.test("late deletes: a DELETE unanswered keeps the mark, and the same container's ADD is refused (11) until it is past", async () => {
  await withTempDir(async (dir) => {
    const clock = { t: Date.now() };
    const { stub, o, name } = await leased({ stateDir: dir, ipam: V4, now: () => clock.t });
    // Held before it runs: its sender gives up, reads the claim still there, and deletes again.
    const held = stub.holdNextDelete();
    const d = invocation(stub, { command: "DEL", ...o });
    await del(d);
    const until = new DeleteMarks(dir).pending(name, clock.t);
    assert.equal(until, d.deadline + LATE_MS);
    const e = await rejectsWith(add(invocation(stub, { command: "ADD", ...o })), 11);
    assert.match(e.message, /Milo may still run that DELETE until/);
    assert.equal(stub.get(name), undefined, "nothing made under it");
    held();
    clock.t = until!;
    await add(invocation(stub, { command: "ADD", ...o }));
    assert.ok(stub.get(name), "made once the DELETE can no longer run");
  });
});

Deno.test("late deletes: a DELETE that fails keeps the mark; a shared name is never marked", async () => {
  await withTempDir(async (dir) => {
    const { stub, o, a, name } = await leased({ stateDir: dir, ipam: V4 });
    stub.inject({ method: "DELETE", times: 100, answer: () => statusReply(503) });
    await rejectsWith(
      del(invocation(stub, { command: "DEL", ...o, deadline: Date.now() + 300 })),
      11,
    );
    assert.ok(new DeleteMarks(dir).pending(name, Date.now()));
    markingDeletes(a.node).sending("podid-0123456789abcdef0123-v4", Date.now());
    assert.equal(new DeleteMarks(dir).pending("podid-0123456789abcdef0123-v4", 0), undefined);
  });
});

Deno.test("late deletes: a mark keeps the later of two, and prune drops only the past", () =>
  withTempDir((dir) => {
    const marks = new DeleteMarks(dir);
    marks.mark("a", 2_000);
    marks.mark("a", 1_000);
    marks.mark("b", 5_000);
    marks.prune(2_000);
    assert.equal(marks.pending("a", 0), undefined, "past at the prune: dropped");
    assert.equal(marks.pending("b", 2_000), 5_000);
    assert.deepEqual([...Deno.readDirSync(`${dir}/deletes`)].map((e) => e.name), ["b"]);
    return Promise.resolve();
  }));

Deno.test("late deletes: a shared name's claims are read again recheckAfterS after the ADD; an attachment's never (no GET more)", () =>
  withTempDir((dir) => {
    const node = invocation(new StubMilo(), { command: "DEL", stateDir: dir }).node;
    const now = 1_000_000;
    assert.equal(recheckAt(node, ["pod-0123456789abcdef0123-v4"], now), undefined);
    assert.equal(recheckAt(node, ["podid-0123456789abcdef0123-v4"], now), now + LATE_MS);
    assert.equal(recheckAt(node, ["slot-0123456789abcdef0123-v6"], now), now + LATE_MS);
    const off = { ...node, reconcile: { ...node.reconcile, recheckAfterS: 0 } };
    assert.equal(recheckAt(off, ["podid-0123456789abcdef0123-v4"], now), undefined);
    return Promise.resolve();
  }));
