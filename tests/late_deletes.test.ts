/**
 * The node's marks of the DELETEs it sent (lib/late_deletes.ts): written
 * before a DELETE goes, lasting until no attempt of it can still run at Milo,
 * and what an ADD makes of them (when its claims are read again).
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimName } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { DeletesSent, markingDeletes, recheckAt } from "../lib/late_deletes.ts";
import { invocation, withTempDir } from "../testing/stub_invocation.ts";
import { StubMilo } from "../testing/stub_milo.ts";

const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const LATE_MS = 90_000;

Deno.test("late deletes: a DELETE is marked before it is sent, until its call's deadline plus recheckAfterS", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const o = { stateDir: dir, ipam: V4 };
    const a = invocation(stub, { command: "ADD", ...o });
    await add(a);
    const name = claimName(a.attachment, "ipv4");
    let seen: unknown;
    stub.inject({
      method: "DELETE",
      answer: () => {
        // The mark is on disk before Milo sees the DELETE.
        seen = JSON.parse(Deno.readTextFileSync(`${dir}/deletes/${name}`));
        return undefined;
      },
    });
    const d = invocation(stub, { command: "DEL", ...o });
    await del(d);
    assert.deepEqual(seen, { until: d.deadline + LATE_MS });
    const sent = new DeletesSent(dir);
    assert.equal(sent.pending(name, d.deadline + LATE_MS - 1), true);
    assert.equal(sent.pending(name, d.deadline + LATE_MS), false);
    assert.throws(() => Deno.statSync(`${dir}/deletes/${name}`), Deno.errors.NotFound, "dropped");
  });
});

Deno.test("late deletes: a mark keeps the latest of two DELETEs, and prune drops only the past", async () => {
  await withTempDir((dir) => {
    const node = invocation(new StubMilo(), { command: "DEL", stateDir: dir }).node;
    const mark = markingDeletes(node);
    mark("a", 2_000);
    mark("a", 1_000);
    mark("b", 5_000);
    const sent = new DeletesSent(dir);
    sent.prune(2_000 + LATE_MS);
    assert.equal(sent.pending("a", 2_000 + LATE_MS - 1), false, "past at the prune: dropped");
    assert.equal(sent.pending("b", 2_000 + LATE_MS), true);
    assert.deepEqual([...Deno.readDirSync(`${dir}/deletes`)].map((e) => e.name), ["b"]);
    return Promise.resolve();
  });
});

Deno.test("late deletes: an ADD's claims are read again after a shared name, or a name one of this node's DELETEs may still reach; else never", async () => {
  await withTempDir((dir) => {
    const node = invocation(new StubMilo(), { command: "DEL", stateDir: dir }).node;
    const now = 1_000_000;
    assert.equal(recheckAt(node, ["pod-0123456789abcdef0123-v4"], now), undefined);
    assert.equal(recheckAt(node, ["podid-0123456789abcdef0123-v4"], now), now + LATE_MS);
    markingDeletes(node)("pod-0123456789abcdef0123-v4", now - 1_000);
    assert.equal(recheckAt(node, ["pod-0123456789abcdef0123-v4"], now), now + LATE_MS);
    const off = { ...node, reconcile: { ...node.reconcile, recheckAfterS: 0 } };
    assert.equal(recheckAt(off, ["podid-0123456789abcdef0123-v4"], now), undefined);
    return Promise.resolve();
  });
});

Deno.test("late deletes: a fresh container's ADD asks Milo for nothing more later (no recheck recorded)", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const a = invocation(stub, { command: "ADD", stateDir: dir, ipam: V4 });
    await add(a);
    assert.equal(a.holdings.read(a.attachment)?.recheckAt, undefined);
  });
});
