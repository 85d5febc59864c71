/** DEL in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import {
  CLAIMS_PATH,
  CONTAINER_ID,
  existingClaim,
  invocation,
  NAME_V4,
  NAME_V6,
  rejectsWith,
  withVerb,
} from "../testing/stub_invocation.ts";
import { reply, statusReply } from "../testing/milo_fixtures.ts";
import { StubMilo } from "../testing/stub_milo.ts";

const FOREVER = Number.POSITIVE_INFINITY;

const withStub = (fn: Parameters<typeof withVerb>[1]) => withVerb("DEL", fn);

/** Both claims of the attachment, as its ADD left them. */
function leased(stub: StubMilo, inv: ReturnType<typeof invocation>) {
  return [existingClaim(stub, inv, "ipv4"), existingClaim(stub, inv, "ipv6")];
}

Deno.test("DEL 200: one DELETE per family by name, no body, nothing printed", async () => {
  await withStub(async (stub, inv) => {
    const i = inv();
    leased(stub, i);
    const r = await del(i);
    assert.equal(r.output, undefined);
    assert.deepEqual(r.claims, [NAME_V4, NAME_V6]);
    assert.deepEqual(
      stub.requests.map((q) => [q.method, q.path, q.body]).sort(),
      [
        ["DELETE", `${CLAIMS_PATH}/${NAME_V4}`, undefined],
        ["DELETE", `${CLAIMS_PATH}/${NAME_V6}`, undefined],
      ],
    );
    assert.equal(stub.all().length, 0);
    assert.deepEqual(await i.journal.list(), []);
  });
});

Deno.test("DEL 202 Accepted counts as released", async () => {
  await withStub(async (stub, inv) => {
    const i = inv();
    const [v4] = leased(stub, i);
    stub.inject({
      method: "DELETE",
      path: NAME_V4,
      answer: () => reply(202, { ...v4, status: { ...v4.status, phase: "Releasing" } }),
    });
    await del(i);
    assert.equal(stub.seen("DELETE").length, 2);
    assert.ok(stub.get(NAME_V4), "the stub left the claim; the 202 alone made it a success");
    assert.equal(stub.get(NAME_V6), undefined);
  });
});

Deno.test("DEL of claims already gone (404 NotFound of the claim) succeeds, and repeats", async () => {
  await withStub(async (stub, inv) => {
    for (let n = 0; n < 2; n++) {
      const r = await del(inv());
      assert.deepEqual(r.claims, [NAME_V4, NAME_V6]);
    }
    assert.equal(stub.seen("DELETE").length, 4);
    assert.deepEqual(await inv().journal.list(), []);
  });
});

Deno.test("DEL: a 404 that is not Milo's NotFound of the claim fails (105) and journals", async (t) => {
  const answers: [string, () => Response][] = [
    ["a NotFound Status of another name", () => statusReply(404, { name: "pod-other-v4" })],
    ["a NotFound without details", () => statusReply(404, { name: "" })],
    [
      "a plain-text 404 (a wrong milo.url)",
      () => new Response("404 page not found", { status: 404 }),
    ],
  ];
  for (const [name, answer] of answers) {
    await t.step(name, async () => {
      await withStub(async (stub, inv) => {
        const i = inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
        existingClaim(stub, i, "ipv4");
        stub.inject({ method: "DELETE", answer });
        await rejectsWith(del(i), 105, /HTTP 404 that is not Milo's NotFound.*journaled/);
        assert.equal(stub.seen("DELETE").length, 1, "a 404 is not retried");
        assert.ok(stub.get(NAME_V4), "the claim is still there");
        const [entry] = await i.journal.list();
        const uid = stub.get(NAME_V4)!.metadata.uid;
        assert.deepEqual(entry.entry?.claims, [{ name: NAME_V4, uid }], "the uid it still has");
      });
    });
  }
});

Deno.test("DEL against 5xx: code 11 after bounded retries, the claims journaled", async () => {
  await withStub(async (stub, inv) => {
    const now = Date.parse("2026-12-01T11:00:00Z");
    const i = inv({ now: () => now });
    leased(stub, i);
    stub.inject({
      method: "DELETE",
      path: NAME_V6,
      times: FOREVER,
      answer: () => statusReply(500),
    });
    const e = await rejectsWith(
      del(i),
      11,
      new RegExp(`release of claim ${NAME_V6} failed: Milo unreachable or overloaded`),
    );
    assert.match(e.details, /after 8 attempt\(s\); journaled for release by milo-ipam reconcile/);
    assert.equal(stub.seen("DELETE", NAME_V6).length, 8);
    assert.equal(stub.seen("GET", NAME_V6).length, 1, "one read for the journal's uid");
    assert.equal(stub.get(NAME_V4), undefined, "the other family was released");
    const list = await i.journal.list();
    assert.equal(list.length, 1);
    assert.ok(e.details.includes(list[0].path));
    assert.deepEqual(list[0].entry, {
      cluster: "cluster-a",
      node: "node-1",
      network: "vpc-7b3e",
      podNamespace: "shop",
      containerId: CONTAINER_ID,
      ifname: "eth0",
      created: now,
      claims: [{ name: NAME_V6, uid: stub.get(NAME_V6)!.metadata.uid }],
      attempts: 0,
      lastError: e.message,
    });
  });
});

Deno.test("DEL that succeeds later drops the journal entry of the attachment", async () => {
  await withStub(async (stub, inv) => {
    const i = inv();
    stub.inject({ method: "DELETE", times: 16, answer: () => statusReply(503) });
    await rejectsWith(del(i), 11);
    assert.equal((await i.journal.list()).length, 1);
    await del(inv());
    assert.deepEqual(await i.journal.list(), []);
  });
});

Deno.test("DEL releases the claim of its derived name even when it records another holder", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    existingClaim(stub, i, "ipv4", {
      metadata: {
        annotations: {
          [KEYS.cluster]: "cluster-a",
          [KEYS.containerId]: "other",
          [KEYS.ifname]: "eth0",
        },
      },
    });
    await del(i);
    assert.deepEqual(stub.requests.map((q) => q.method), ["DELETE"], "no GET: one request");
    assert.equal(stub.get(NAME_V4), undefined);
  });
});

Deno.test("DEL as the agent's undo releases only while the ADD it undoes is the attachment's last", async () => {
  await withStub(async (stub, inv) => {
    const i = inv();
    leased(stub, i);
    const claims = [{ name: NAME_V4 }, { name: NAME_V6 }];
    i.holdings.held(i.attachment, "add-by-the-plugin", claims, Date.now());
    const later = await del(inv({ undoOf: "add-by-the-agent" }));
    assert.deepEqual(later.claims, []);
    assert.match(later.skipped!, /undo of ADD add-by-the-agent: a later ADD .* nothing released/);
    assert.equal(stub.requests.length, 0, "nothing sent");
    assert.equal(stub.all().length, 2);

    i.holdings.remove(i.attachment);
    const none = await del(inv({ undoOf: "add-by-the-agent" }));
    assert.match(none.skipped!, /the ADD left no lease/);
    assert.equal(stub.all().length, 2);

    // The agent's ADD found the plugin's lease (the plugin took the call over, its frame lost).
    i.holdings.held(i.attachment, "add-by-the-agent", claims, Date.now());
    const found = await del(inv({ undoOf: "add-by-the-agent" }));
    assert.deepEqual(found.claims, []);
    assert.match(found.skipped!, /made by an earlier ADD: left alone/);
    assert.equal(stub.all().length, 2, "the lease the plugin printed stays");

    // It made the IPv6 claim (the claim records it) and found the IPv4 one: only IPv6 goes.
    const madeBy = (name: string) => {
      const c = stub.get(name)!;
      const annotations = { ...c.metadata.annotations, [KEYS.addId]: "add-by-the-agent" };
      stub.put({ ...c, metadata: { ...c.metadata, annotations } });
    };
    madeBy(NAME_V6);
    i.holdings.held(i.attachment, "add-by-the-agent", claims, Date.now());
    const some = await del(inv({ undoOf: "add-by-the-agent" }));
    assert.deepEqual(some.claims, [NAME_V6]);
    assert.deepEqual([!!stub.get(NAME_V4), !!stub.get(NAME_V6)], [true, false]);
    assert.deepEqual(i.holdings.read(i.attachment)?.claims.map((c) => c.name), [NAME_V4]);

    stub.remove(NAME_V4);
    leased(stub, i);
    madeBy(NAME_V4);
    madeBy(NAME_V6);
    i.holdings.held(i.attachment, "add-by-the-agent", claims, Date.now());
    const own = await del(inv({ undoOf: "add-by-the-agent" }));
    assert.deepEqual(own.claims, [NAME_V4, NAME_V6]);
    assert.equal(own.skipped, undefined);
    assert.equal(stub.all().length, 0, "its own ADD is undone");
    assert.equal(i.holdings.read(i.attachment), undefined, "and its record removed");
  });
});
