/** DEL in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { KEYS } from "../lib/claims.ts";
import { parseNodeConfig } from "../lib/config.ts";
import { del } from "../lib/del.ts";
import { invoke } from "../lib/invoke.ts";
import { Journal } from "../lib/journal.ts";
import { MiloClient } from "../lib/milo.ts";
import {
  CLAIMS_PATH,
  CONTAINER_ID,
  existingClaim,
  invocation,
  NAME_V4,
  NAME_V6,
  NET_CONF,
  rejectsWith,
  withVerb,
} from "../testing/stub_invocation.ts";
import { reply, statusReply } from "../testing/milo_fixtures.ts";
import { type Json, STUB_BASE, StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const FOREVER = Number.POSITIVE_INFINITY;

const withStub = (fn: Parameters<typeof withVerb>[1]) => withVerb("DEL", fn);

/** Both claims of the attachment, as its ADD left them. */
function leased(stub: StubMilo, inv: ReturnType<typeof invocation>) {
  return [existingClaim(stub, inv, "ipv4"), existingClaim(stub, inv, "ipv6")];
}

Deno.test("DEL 200: per family a GET of the claim, then its DELETE by uid; nothing printed", async () => {
  await withStub(async (stub, inv) => {
    const i = inv();
    const [v4, v6] = leased(stub, i);
    const r = await del(i);
    assert.equal(r.output, undefined);
    assert.deepEqual(r.claims, [NAME_V4, NAME_V6]);
    const precondition = (c: typeof v4) => ({
      kind: "DeleteOptions",
      apiVersion: "v1",
      preconditions: { uid: c.metadata.uid },
    });
    assert.deepEqual(
      stub.requests.map((q) => [q.method, q.path, q.body]).sort(),
      [
        ["DELETE", `${CLAIMS_PATH}/${NAME_V4}`, precondition(v4)],
        ["DELETE", `${CLAIMS_PATH}/${NAME_V6}`, precondition(v6)],
        ["GET", `${CLAIMS_PATH}/${NAME_V4}`, undefined],
        ["GET", `${CLAIMS_PATH}/${NAME_V6}`, undefined],
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
    assert.equal(stub.seen("GET").length, 4, "one GET per family and DEL");
    assert.equal(stub.seen("DELETE").length, 0);
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
        assert.equal(stub.seen("GET").length, 1, "the uid journaled is the one its GET found");
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
    // Milo may have run a DELETE answered 500: each next one only once a GET finds the same claim.
    assert.equal(stub.seen("GET", NAME_V6).length, 8, "its GETs gave the journal's uid");
    assert.equal(stub.get(NAME_V4), undefined, "the other family was released");
    const list = await i.journal.list();
    assert.equal(list.length, 1);
    assert.ok(e.details.includes(list[0].path));
    assert.deepEqual(list[0].entry, {
      cluster: "cluster-a",
      node: "node-1",
      network: "vpc-7b3e",
      host: i.attachment.host,
      podNamespace: "shop",
      pod: "shop/web-0",
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
    stub.inject({ times: 16, answer: () => statusReply(503) });
    await rejectsWith(del(i), 11);
    assert.equal((await i.journal.list()).length, 1);
    await del(inv());
    assert.deepEqual(await i.journal.list(), []);
  });
});

Deno.test("DEL leaves a claim of its derived name that records another holder", async () => {
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
    const r = await del(i);
    assert.deepEqual(stub.requests.map((q) => q.method), ["GET"], "read, and left");
    assert.ok(stub.get(NAME_V4));
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped!, /held by another sandbox, left alone: .*container other/);
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

/** `claim` stored again with its `milo-ipam.io/` annotations changed (`undefined` removes one). */
function recorded(stub: StubMilo, claim: WireClaim, over: Record<string, string | undefined>) {
  const annotations = { ...claim.metadata.annotations };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) delete annotations[k];
    else annotations[k] = v;
  }
  return stub.put({ ...claim, metadata: { ...claim.metadata, annotations } });
}

Deno.test("DEL leaves this attachment's claim recorded for another host (a cloned machine's DEL), or without a host for another node", async (t) => {
  const cases: [string, Record<string, string | undefined>, RegExp | undefined][] = [
    [
      "another host",
      { [KEYS.host]: "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a" },
      /left alone: pod-\S+-v4 \(recorded for host 0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a, not this one: left to that host\)/,
    ],
    [
      "no host, another node",
      { [KEYS.host]: undefined, [KEYS.node]: "node-9" },
      /left alone: pod-\S+-v4 \(records no host, and node node-9, not this one: left to that node or the sweep\)/,
    ],
    [
      "no host, this node (made before claims recorded hosts)",
      { [KEYS.host]: undefined },
      undefined,
    ],
    [
      "this host, another node (a machine cloned with this one's machine-id)",
      { [KEYS.node]: "node-a" },
      /left alone: pod-\S+-v4 \(recorded for node node-a under this host's machine-id, not for this node \(node-1\): left to node node-a's reconcile or the sweep\)/,
    ],
    [
      "this host, this node under its raw hostname (another case)",
      { [KEYS.node]: "Node-1" },
      undefined,
    ],
  ];
  for (const [name, over, left] of cases) {
    await t.step(name, async () => {
      await withStub(async (stub, inv) => {
        const i = inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
        recorded(stub, existingClaim(stub, i, "ipv4"), over);
        const r = await del(i);
        if (left) {
          assert.deepEqual(r.claims, []);
          assert.match(r.skipped!, left);
          assert.ok(stub.get(NAME_V4), "the other machine's lease stays");
          assert.equal(stub.seen("DELETE").length, 0);
        } else {
          assert.deepEqual(r.claims, [NAME_V4]);
          assert.equal(stub.get(NAME_V4), undefined);
        }
      });
    });
  }
});

Deno.test("DEL on a clone that kept the machine-id releases nothing a copied record of the original's node names", async () => {
  await withStub(async (stub, inv) => {
    // The original (node-a, this machine-id) leased both families and recorded them.
    const original = inv({ node: { node: "node-a" } });
    await add({ ...original, env: { ...original.env, command: "ADD" } });
    assert.equal(stub.all().length, 2);
    // The clone (node-1), with the original's state directory, tears the sandbox down under a
    // network config naming IPv4 only: the record names IPv6 too.
    const i = inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const r = await del(i);
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped!, /left alone: pod-\S+-v4 \(recorded for node node-a under this host's/);
    assert.equal(stub.all().length, 2, "the original's leases stay");
    assert.equal(stub.seen("DELETE").length, 0);
    assert.ok(
      !stub.seen("GET").some((g) => g.path.endsWith(NAME_V6)),
      "its record is not the clone's",
    );
  });
});

Deno.test("DEL releases what the node recorded whatever the network config says now: a class dropped, the identity switched", async (t) => {
  const changes: [string, Json][] = [
    ["classes.ipv6 dropped", { classes: { ipv4: "vpc-pods-ipv4" } }],
    ["identity switched to pod", { identity: "pod" }],
  ];
  for (const [name, ipam] of changes) {
    await t.step(name, async () => {
      await withStub(async (stub, inv) => {
        const added = inv();
        await add({ ...added, env: { ...added.env, command: "ADD" } });
        assert.equal(stub.all().length, 2);
        const i = inv({ ipam });
        const r = await del(i);
        assert.deepEqual(stub.all(), [], "both claims the ADD made are released");
        assert.ok(r.claims.includes(NAME_V4) && r.claims.includes(NAME_V6));
        assert.equal(i.holdings.read(i.attachment), undefined, "and the record removed");
      });
    });
  }
});

Deno.test("DEL keeps in the node's record what it could neither release nor journal", async () => {
  await withStub(async (stub, inv, dir) => {
    const i = inv();
    await add({ ...inv(), env: { ...i.env, command: "ADD" } });
    stub.inject({
      method: "DELETE",
      path: NAME_V6,
      times: FOREVER,
      answer: () => statusReply(503),
    });
    await Deno.writeTextFile(`${dir}/journal`, "not a directory");
    const e = await rejectsWith(del(i), 11, /could not be journaled/);
    assert.match(e.details, /could not be journaled/);
    assert.equal(stub.get(NAME_V4), undefined);
    assert.deepEqual(i.holdings.read(i.attachment)?.claims.map((c) => c.name), [NAME_V4, NAME_V6]);

    await Deno.remove(`${dir}/journal`);
    await rejectsWith(del(i), 11, /journaled for release/);
    // V4, recorded and now gone, is watched in doubt: a DELETE of another may have removed it,
    // and that release makes it again (here it was this DEL's own, which the record cannot tell).
    assert.deepEqual(
      (await i.journal.list()).map((x) => [x.entry?.claims, x.entry?.inDoubt]),
      [[[{ name: NAME_V6, uid: stub.get(NAME_V6)!.metadata.uid }, { name: NAME_V4 }], true]],
    );
    assert.deepEqual(
      i.holdings.read(i.attachment)?.claims.map((c) => c.name),
      [NAME_V6],
      "what is released leaves the record; what is journaled stays until reconcile made it",
    );
  });
});

Deno.test("DEL of a claim under a name other sandboxes make again, with reclaimPolicy Delete: left, and said why", async () => {
  await withStub(async (stub, inv) => {
    const pod = { ipam: { classes: { ipv4: "vpc-pods-ipv4" }, identity: "pod" } };
    const i = inv(pod);
    const c = existingClaim(stub, i, "ipv4", { spec: { reclaimPolicy: "Delete" } });
    const r = await del(i);
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped!, /reclaimPolicy Delete under a name other sandboxes make again/);
    assert.equal(stub.seen("DELETE").length, 0, "Milo cannot delete only this object: no DELETE");
    assert.ok(stub.get(c.metadata.name));
  });
});

/** Runs a DEL through `invoke` as the plugin does, with the node config `node` over the stub's. */
async function invokeDel(
  stub: StubMilo,
  dir: string,
  node: Json,
  ipam: Json = {},
  args = "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=uid-web-0",
) {
  const cfg = parseNodeConfig(
    {
      milo: { url: STUB_BASE, tokenFile: `${dir}/token` },
      cluster: "cluster-a",
      node: "node-1",
      log: { level: "off" },
      stateDir: dir,
      resultsDirs: [`${dir}/results`],
      hostIdFile: `${dir}/machine-id`,
      ...node,
    },
    "/stub/node.json",
  );
  const vars: Record<string, string> = {
    CNI_COMMAND: "DEL",
    CNI_CONTAINERID: CONTAINER_ID,
    CNI_IFNAME: "eth0",
    CNI_ARGS: args,
  };
  const stdin = { ...NET_CONF, ipam: { ...(NET_CONF.ipam as Json), ...ipam } };
  return await invoke(
    { env: (n) => vars[n], stdin: new TextEncoder().encode(JSON.stringify(stdin)), started: 0 },
    {
      nodeConfig: () => Promise.resolve(cfg),
      openMilo: (n, requestMs, deadline) =>
        MiloClient.open(n, requestMs, deadline).then(() =>
          stub.client({ requestMs, deadline: Date.now() + 5_000 })
        ),
    },
  );
}

Deno.test("DEL that fails before it reaches Milo (token or CA unreadable) journals the claims it can name", async (t) => {
  const unreadable: [string, Json, RegExp][] = [
    ["the token file gone (a reboot cleared /run)", {}, /milo\.tokenFile/],
    ["the CA file gone", { caFile: "/nonexistent/ca.crt" }, /milo\.caFile/],
  ];
  for (const [name, milo, says] of unreadable) {
    await t.step(name, async () => {
      await withStub(async (stub, inv, dir) => {
        // An ADD of both families recorded them; the network config now names one.
        await Deno.writeTextFile(`${dir}/token`, "stub-token-8c1d2e\n");
        const a = inv();
        await add({ ...a, env: { ...a.env, command: "ADD" } });
        await Deno.remove(`${dir}/token`);
        if (milo.caFile) await Deno.writeTextFile(`${dir}/token`, "stub-token-8c1d2e\n");
        const node = { milo: { url: STUB_BASE, tokenFile: `${dir}/token`, ...milo } };
        const r = await invokeDel(stub, dir, node, { classes: { ipv4: "vpc-pods-ipv4" } });
        assert.equal(r.exitCode, 1);
        assert.equal(r.stdout?.code, 7);
        assert.match(String(r.stdout?.msg), says);
        assert.match(String(r.stdout?.details), /journaled for release by milo-ipam reconcile/);
        const [entry] = await new Journal(dir).list();
        const uids = Object.fromEntries(stub.all().map((c) => [c.metadata.name, c.metadata.uid]));
        assert.deepEqual(entry.entry?.claims, [
          { name: NAME_V4, uid: uids[NAME_V4] },
          { name: NAME_V6, uid: uids[NAME_V6] },
        ]);
        assert.equal(entry.entry?.host, a.attachment.host);
        assert.equal(stub.all().length, 2, "nothing was sent");
      });
    });
  }
  await t.step(
    "a network config over JSON_BOUND (a NAD grown since the ADD): journaled",
    async () => {
      await withStub(async (stub, inv, dir) => {
        await Deno.writeTextFile(`${dir}/token`, "stub-token-8c1d2e\n");
        const a = inv();
        await add({ ...a, env: { ...a.env, command: "ADD" } });
        const node = { milo: { url: STUB_BASE, tokenFile: `${dir}/token` } };
        const r = await invokeDel(stub, dir, node, { junk: Array(10_000).fill(0) });
        assert.equal(r.stdout?.code, 6);
        assert.match(String(r.stdout?.msg), /more than 8192 objects, lists and commas/);
        assert.match(String(r.stdout?.details), /journaled for release by milo-ipam reconcile/);
        const [entry] = await new Journal(dir).list();
        assert.deepEqual(entry.entry?.claims.map((c) => c.name), [NAME_V4, NAME_V6]);
        assert.equal(stub.all().length, 2, "nothing was sent");
      });
    },
  );
  await t.step(
    "nothing to name (pod identity without the pod's name, no record): nothing journaled",
    async () => {
      await withStub(async (stub, _inv, dir) => {
        const r = await invokeDel(stub, dir, {}, { identity: "pod" }, "K8S_POD_UID=uid-web-0");
        assert.equal(r.stdout?.code, 7);
        assert.doesNotMatch(String(r.stdout?.details), /journaled/);
        assert.deepEqual(await new Journal(dir).list(), []);
      });
    },
  );
});

Deno.test("DEL with Milo unreachable: one short error (Milo's host once, details bounded), the journal named", async () => {
  await withStub(async (stub, inv, dir) => {
    await Deno.writeTextFile(`${dir}/token`, "stub-token-8c1d2e\n");
    const a = inv();
    await add({ ...a, env: { ...a.env, command: "ADD" } });
    // Deno's words for a refused connection quote the whole URL of the request.
    stub.inject({
      times: Infinity,
      answer: (req) => {
        throw new TypeError(
          `error sending request for url (${STUB_BASE}${req.path}): client error (Connect): ` +
            "tcp connect error: Connection refused (os error 111)",
        );
      },
    });
    const node = { milo: { url: STUB_BASE, tokenFile: `${dir}/token` } };
    const r = await invokeDel(stub, dir, node);
    assert.equal(r.stdout?.code, 11);
    const json = JSON.stringify(r.stdout);
    assert.ok(json.length <= 1024, `${json.length} bytes: ${json}`);
    assert.equal(json.split("milo.test").length - 1, 1, `Milo's host once: ${json}`);
    assert.doesNotMatch(json, /resourcemanager/, "the URL's base is not quoted");
    assert.match(String(r.stdout?.msg), new RegExp(`release of claim ${NAME_V4} failed`));
    assert.match(String(r.stdout?.details), /Connection refused \(os error 111\)/);
    assert.match(
      String(r.stdout?.details),
      new RegExp(`also \\[11\\] .*${NAME_V6}.*\\(the same\\)`),
    );
    assert.match(String(r.stdout?.details), /; journaled for release by milo-ipam reconcile \(/);
  });
});
