/** ADD in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { KEYS, labelValue } from "../lib/claims.ts";
import { formatCidr, parseCidr } from "../lib/ip.ts";
import {
  CLAIMS_PATH,
  CONTAINER_ID,
  existingClaim,
  NAME_V4,
  NAME_V6,
  rejectsWith,
  withVerb,
} from "../testing/stub_invocation.ts";
import { fixture, reply, statusReply } from "../testing/milo_fixtures.ts";
import { type Json, refused, STUB_TOKEN, StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const V6 = { classes: { ipv6: "vpc-pods-ipv6" } };
const FOREVER = Number.POSITIVE_INFINITY;

const withStub = (fn: Parameters<typeof withVerb>[1]) => withVerb("ADD", fn);

const methods = (stub: StubMilo) => stub.requests.map((r) => `${r.method} ${r.path}`);

Deno.test("ADD IPv4: one POST in Milo's create shape, the 201 lease as a /32 result", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    const r = await add(i);
    assert.deepEqual(r.output, {
      cniVersion: "1.1.0",
      ips: [{ address: "10.40.0.7/32", gateway: "169.254.1.1" }],
      routes: [{ dst: "0.0.0.0/0" }],
      dns: {},
    });
    assert.deepEqual(r.claims, [NAME_V4]);
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`]);
    const [post] = stub.requests;
    assert.equal(post.headers.get("authorization"), `Bearer ${STUB_TOKEN}`);
    assert.equal(post.headers.get("content-type"), "application/json");
    const body = post.body as Json & { metadata: Json; spec: Json };
    const shape = fixture<Json & { metadata: Json; spec: Json }>("ipclaim-create-request.json");
    assert.deepEqual(Object.keys(body).sort(), Object.keys(shape).sort());
    assert.deepEqual(Object.keys(body.metadata).sort(), Object.keys(shape.metadata).sort());
    assert.deepEqual(Object.keys(body.spec).sort(), Object.keys(shape.spec).sort());
    assert.deepEqual(body.spec, {
      className: "vpc-pods-ipv4",
      ipFamily: "IPv4",
      scope: {
        network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" },
      },
      reclaimPolicy: "Delete",
    });
    assert.equal(body.metadata.name, NAME_V4);
    assert.equal(body.metadata.namespace, "default");
    assert.deepEqual(body.metadata.labels, {
      [KEYS.cluster]: "cluster-a",
      [KEYS.node]: "node-1",
      [KEYS.network]: "vpc-7b3e",
      [KEYS.family]: "ipv4",
      [KEYS.podNamespace]: "shop",
      [KEYS.podName]: "web-0",
      [KEYS.podUid]: "uid-web-0",
      [KEYS.containerId]: labelValue(CONTAINER_ID),
      [KEYS.ifname]: "eth0",
      [KEYS.vpc]: "vpc-7b3e",
      [KEYS.vpcattachment]: "vpc-7b3e-attach-1",
    });
    assert.match(
      (body.metadata.labels as Json)[KEYS.containerId] as string,
      /^sha256-[0-9a-f]{48}$/,
    );
    assert.deepEqual(body.metadata.annotations, {
      [KEYS.cluster]: "cluster-a",
      [KEYS.node]: "node-1",
      [KEYS.network]: "vpc-7b3e",
      [KEYS.podUid]: "uid-web-0",
      [KEYS.pod]: "shop/web-0",
      [KEYS.containerId]: CONTAINER_ID,
      [KEYS.ifname]: "eth0",
      [KEYS.vpc]: "vpc-7b3e",
      [KEYS.vpcattachment]: "vpc-7b3e-attach-1",
      [KEYS.host]: i.attachment.host,
      [KEYS.addId]: i.callId,
    });
    assert.match(i.attachment.host!, /^[0-9a-f]{32}$/);
    assert.equal(stub.get(NAME_V4)?.status.phase, "Bound");
  });
});

Deno.test("ADD IPv6: a /96 block keeps its length; a /128 class gives its address", async () => {
  await withStub(async (stub, inv) => {
    const r = await add(inv({ ipam: V6 }));
    assert.deepEqual(r.output?.ips, [{ address: "fd20::1:0:3:0:0/96", gateway: "fe80::1" }]);
    assert.deepEqual(r.output?.routes, [{ dst: "::/0" }]);
    assert.equal((stub.requests[0].body as { spec: Json }).spec.ipFamily, "IPv6");
    assert.deepEqual(r.claims, [NAME_V6]);
  });
  await withStub(async (stub, inv) => {
    stub.allocate = () => ({ allocatedCIDR: "fd20::1:0:0:9/128", address: "fd20::1:0:0:9" });
    const r = await add(inv({ ipam: V6 }));
    assert.deepEqual(r.output?.ips, [{ address: "fd20::1:0:0:9/128", gateway: "fe80::1" }]);
  });
});

Deno.test("ADD dual-stack: two claims, one POST per family, IPv4 first; legacy versions", async () => {
  await withStub(async (stub, inv) => {
    const r = await add(inv({ top: { cniVersion: "0.3.1" } }));
    assert.deepEqual(r.output, {
      cniVersion: "0.3.1",
      ips: [
        { version: "4", address: "10.40.0.7/32", gateway: "169.254.1.1" },
        { version: "6", address: "fd20::1:0:3:0:0/96", gateway: "fe80::1" },
      ],
      routes: [{ dst: "0.0.0.0/0" }, { dst: "::/0" }],
      dns: {},
    });
    assert.deepEqual(r.claims, [NAME_V4, NAME_V6]);
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `POST ${CLAIMS_PATH}`]);
    const families = stub.requests.map((q) => (q.body as { spec: Json }).spec.ipFamily).sort();
    assert.deepEqual(families, ["IPv4", "IPv6"]);
    assert.deepEqual(stub.all().map((c) => c.metadata.name).sort(), [NAME_V4, NAME_V6].sort());
  });
});

Deno.test("ADD retried: 409 AlreadyExists, then GET of its own claim returns the same lease", async () => {
  await withStub(async (stub, inv) => {
    const first = await add(inv());
    stub.requests.length = 0;
    const again = await add(inv());
    assert.deepEqual(again, first);
    assert.deepEqual(methods(stub).sort(), [
      `GET ${CLAIMS_PATH}/${NAME_V4}`,
      `GET ${CLAIMS_PATH}/${NAME_V6}`,
      `POST ${CLAIMS_PATH}`,
      `POST ${CLAIMS_PATH}`,
    ]);
    assert.equal(stub.all().length, 2);
  });
});

Deno.test("ADD never adopts a claim of another holder (409, GET: 103), nor deletes it", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    const foreign = existingClaim(stub, i, "ipv4", {
      metadata: {
        annotations: {
          [KEYS.cluster]: "cluster-a",
          [KEYS.containerId]: "other",
          [KEYS.ifname]: "eth0",
        },
      },
    });
    await rejectsWith(
      add(i),
      103,
      /held by another holder \(attachment, node, network, pod differ\).*container=other ifname=eth0/,
    );
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `GET ${CLAIMS_PATH}/${NAME_V4}`]);
    assert.equal(stub.get(NAME_V4)?.metadata.uid, foreign.metadata.uid);
  });
});

Deno.test("ADD of a reused container ID never adopts the claim recorded for another node, host or network", async () => {
  for (
    const [field, over] of [
      ["node", { [KEYS.node]: "node-2" }],
      ["host", { [KEYS.host]: "0123456789abcdef0123456789abcdef" }],
      ["network", { [KEYS.network]: "other-net" }],
      ["node, pod", { [KEYS.node]: "node-2", [KEYS.podUid]: "uid-web-1" }],
    ] as const
  ) {
    await withStub(async (stub, inv) => {
      const i = inv({ ipam: V4 });
      const before = existingClaim(stub, i, "ipv4");
      stub.put({
        ...before,
        metadata: {
          ...before.metadata,
          annotations: { ...before.metadata.annotations, ...over },
        },
      });
      await rejectsWith(add(i), 103, new RegExp(`another holder \\(${field} differ\\)`));
      assert.equal(stub.seen("DELETE").length, 0, field);
      assert.equal(stub.get(NAME_V4)?.metadata.uid, before.metadata.uid, field);
    });
  }
});

Deno.test("ADD of a container ID reused on this host by another pod releases the old claim by uid and makes it again", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    const old = existingClaim(stub, i, "ipv4");
    const ann = { ...old.metadata.annotations, [KEYS.podUid]: "uid-of-the-old-pod" };
    stub.put({ ...old, metadata: { ...old.metadata, annotations: ann } });
    const r = await add(i);
    assert.deepEqual(methods(stub), [
      `POST ${CLAIMS_PATH}`,
      `GET ${CLAIMS_PATH}/${NAME_V4}`,
      `GET ${CLAIMS_PATH}/${NAME_V4}`,
      `DELETE ${CLAIMS_PATH}/${NAME_V4}`,
      `POST ${CLAIMS_PATH}`,
    ]);
    assert.deepEqual(stub.seen("DELETE")[0].body, {
      kind: "DeleteOptions",
      apiVersion: "v1",
      preconditions: { uid: old.metadata.uid },
    });
    const now = stub.get(NAME_V4)!;
    assert.notEqual(now.metadata.uid, old.metadata.uid);
    assert.equal(now.metadata.annotations?.[KEYS.podUid], "uid-web-0", "relabelled by a new claim");
    assert.deepEqual(r.claims, [NAME_V4]);
  });
});

Deno.test("ADD adopts its own claim made before claims recorded their host; another pod's it refuses", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    const old = existingClaim(stub, i, "ipv4");
    const { [KEYS.host]: _, ...legacy } = old.metadata.annotations!;
    stub.put({ ...old, metadata: { ...old.metadata, annotations: legacy } });
    await add(i);
    assert.equal(stub.get(NAME_V4)?.metadata.uid, old.metadata.uid, "an idempotent retry");
    const other = { ...legacy, [KEYS.podUid]: "uid-of-another-pod" };
    stub.put({ ...old, metadata: { ...old.metadata, annotations: other } });
    await rejectsWith(add(i), 103, /another holder \(pod differ\).*host=\?/);
    assert.equal(stub.seen("DELETE").length, 0, "no host recorded: never released");
  });
});

Deno.test("ADD refuses its own claim of another class (103)", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    existingClaim(stub, i, "ipv4", { spec: { className: "vpc-pods-ipv4-old" } });
    await rejectsWith(add(i), 103, /has class vpc-pods-ipv4-old, config says vpc-pods-ipv4/);
    assert.equal(stub.seen("DELETE").length, 0);
    assert.ok(stub.get(NAME_V4));
  });
});

Deno.test("ADD of a claim not Bound: Pending or Releasing is 11, another phase 102", async () => {
  for (const [phase, code] of [["Pending", 11], ["Releasing", 11], ["Failed", 102]] as const) {
    await withStub(async (stub, inv) => {
      const i = inv({ ipam: V4 });
      existingClaim(stub, i, "ipv4", { status: { phase } });
      await rejectsWith(add(i), code, new RegExp(`${NAME_V4} is ${phase}, not Bound`));
      assert.equal(stub.seen("DELETE").length, 0);
    });
  }
  await withStub(async (stub, inv) => {
    stub.inject({
      method: "POST",
      answer: (req, s) =>
        reply(201, s.materialize(req.body as Json, { status: { phase: "Pending" } })),
    });
    await rejectsWith(add(inv({ ipam: V4 })), 11, /is Pending, not Bound/);
  });
});

Deno.test("ADD half failure: the other family's claim is released by uid; the error says so", async () => {
  await withStub(async (stub, inv) => {
    const e = await rejectsWith(
      add(inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4", ipv6: "no-such" } } })),
      102,
      /IPClass "no-such" not found/,
    );
    assert.match(e.details, new RegExp(`rollback: IPv4 claim ${NAME_V4} released`));
    const created = stub.requests.find((r) =>
      r.method === "POST" && (r.body as { spec: Json }).spec.ipFamily === "IPv4"
    );
    assert.ok(created);
    const del = stub.seen("DELETE");
    assert.equal(del.length, 1);
    assert.equal(del[0].path, `${CLAIMS_PATH}/${NAME_V4}`);
    const get = stub.seen("GET", `/ipclaims/${NAME_V4}`);
    assert.equal(get.length, 1, "the uid is compared by a fresh GET first");
    assert.ok(stub.requests.indexOf(get[0]) < stub.requests.indexOf(del[0]));
    const uid = (del[0].body as { preconditions: { uid: string } }).preconditions.uid;
    assert.deepEqual(del[0].body, {
      kind: "DeleteOptions",
      apiVersion: "v1",
      preconditions: { uid },
    });
    assert.match(uid, /^[0-9a-f-]{36}$/);
    assert.equal(stub.all().length, 0);
  });
});

Deno.test("ADD half failure, rollback fails: journaled with the uid, and the error says so", async () => {
  await withStub(async (stub, inv, dir) => {
    const now = Date.parse("2026-12-01T10:20:00Z");
    stub.inject({ method: "DELETE", times: FOREVER, answer: () => statusReply(503) });
    const i = inv({
      ipam: { classes: { ipv4: "vpc-pods-ipv4", ipv6: "no-such" } },
      now: () => now,
    });
    const e = await rejectsWith(add(i), 102);
    assert.match(
      e.details,
      new RegExp(`rollback of IPv4 claim ${NAME_V4} failed \\(Milo unreachable.*\\); journaled`),
    );
    const uid = stub.get(NAME_V4)?.metadata.uid;
    assert.ok(uid, "the claim is still in Milo");
    const [entry] = await i.journal.list();
    assert.ok(entry.path.startsWith(`${dir}/journal/`));
    assert.deepEqual(entry.entry?.claims, [{ name: NAME_V4, uid }]);
    assert.equal(entry.entry?.created, now);
    assert.equal(entry.entry?.containerId, CONTAINER_ID);
    assert.equal(stub.seen("DELETE").length, 8, "the rollback retried within its slice");
  });
});

Deno.test("ADD half failure, the claim is another object by rollback time: left alone", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({
      method: "GET",
      path: `/ipclaims/${NAME_V4}`,
      answer: (_req, s) =>
        reply(200, {
          ...s.get(NAME_V4),
          metadata: { ...s.get(NAME_V4)!.metadata, uid: "newer-uid" },
        }),
    });
    const e = await rejectsWith(
      add(inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4", ipv6: "no-such" } } })),
      102,
    );
    assert.match(e.details, /rollback: IPv4 claim .* is now another object; left alone/);
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("ADD with both families failing rolls nothing back and reports both", async () => {
  await withStub(async (stub, inv) => {
    const e = await rejectsWith(
      add(inv({ ipam: { classes: { ipv4: "nope-4", ipv6: "nope-6" } } })),
      102,
    );
    assert.match(e.details, /nope-4.*nope-6|nope-6.*nope-4/);
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `POST ${CLAIMS_PATH}`]);
  });
});

Deno.test("ADD of an unusable lease is 105 and the claim just made is released by uid", async (t) => {
  const cases: [string, Json, { allocatedCIDR: string; address?: string }, RegExp][] = [
    [
      "unspecified 0.0.0.0/32",
      V4,
      { allocatedCIDR: "0.0.0.0/32", address: "0.0.0.0" },
      /0\.0\.0\.0 is a unspecified/,
    ],
    [
      "loopback",
      V4,
      { allocatedCIDR: "127.0.0.1/32", address: "127.0.0.1" },
      /127\.0\.0\.1 is a loopback/,
    ],
    [
      "address outside allocatedCIDR",
      V4,
      { allocatedCIDR: "10.40.0.7/32", address: "10.40.0.8" },
      /not an address inside 10\.40\.0\.7\/32/,
    ],
    [
      "wrong IPv4 prefix",
      V4,
      { allocatedCIDR: "10.40.0.0/24", address: "10.40.0.7" },
      /prefix \/24 is not the class's \/32/,
    ],
    [
      "wrong IPv6 prefix",
      V6,
      { allocatedCIDR: "fd20:0:0:1::/64" },
      /prefix \/64 is not the class's \/128 or \/96/,
    ],
    ["wrong family", V4, { allocatedCIDR: "fd20::7/128" }, /is not IPv4/],
  ];
  for (const [name, ipam, lease, pattern] of cases) {
    await t.step(name, async () => {
      await withStub(async (stub, inv) => {
        stub.allocate = () => lease;
        const e = await rejectsWith(add(inv({ ipam })), 105, pattern);
        assert.match(
          e.details,
          new RegExp(`status.allocatedCIDR="${lease.allocatedCIDR.replace(/[.]/g, "\\.")}"`),
        );
        assert.match(e.details, /rollback: IPv[46] claim pod-[0-9a-f]{20}-v[46] released/);
        const [del] = stub.seen("DELETE");
        assert.ok(del, "the claim is deleted");
        assert.ok((del.body as { preconditions: { uid: string } }).preconditions.uid);
        assert.equal(stub.all().length, 0);
      });
    });
  }
});

Deno.test("ADD against a persistent 503: code 11 after 8 attempts, backoff injected", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({ method: "POST", times: FOREVER, answer: () => statusReply(503) });
    const started = performance.now();
    await rejectsWith(
      add(inv({ ipam: V4 })),
      11,
      /Milo unreachable or overloaded: POST .*Milo answered 503: the server is currently unable.*after 8 attempt/,
    );
    assert.ok(performance.now() - started < 1_000, "no real waiting");
    assert.equal(stub.seen("POST").length, 8);
    assert.deepEqual(stub.sleeps, [75, 150, 300, 600, 750, 750, 750]);
    assert.equal(stub.all().length, 0);
  });
});

Deno.test("ADD retries 503 (honouring Retry-After, jittered) and a refused connection, then leases", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({
      method: "POST",
      answer: () => statusReply(503, { headers: { "retry-after": "2" } }),
    });
    stub.inject({ method: "POST", answer: () => refused() });
    const r = await add(inv({ ipam: V4 }));
    assert.deepEqual(r.output?.ips, [{ address: "10.40.0.7/32", gateway: "169.254.1.1" }]);
    assert.equal(stub.seen("POST").length, 3);
    assert.deepEqual(stub.sleeps, [1_000, 150], "random 0.5 x Retry-After 2 s, then backoff");
  });
});

Deno.test("ADD against Milo down: code 11, nothing held", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({ times: FOREVER, answer: () => refused() });
    await rejectsWith(add(inv()), 11, /Connection refused/);
    assert.equal(stub.seen("POST").length, 16);
  });
});

Deno.test("ADD: a 409 Conflict with no claim of the name (pinned address taken) is 103 after one GET", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({
      method: "POST",
      answer: () =>
        statusReply(409, { reason: "Conflict", message: "address 10.40.0.9 is already claimed" }),
    });
    await rejectsWith(
      add(inv({ ipam: V4 })),
      103,
      /address 10\.40\.0\.9 is already claimed.*409 Conflict/,
    );
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `GET ${CLAIMS_PATH}/${NAME_V4}`]);
  });
});

Deno.test("two ADDs of one attachment: the second waits for the first's rollback, keeps its lease", async () => {
  await withStub(async (stub, inv) => {
    const v4Posted = Promise.withResolvers<void>();
    const second = Promise.withResolvers<void>();
    let v6Posts = 0;
    stub.inject({
      method: "POST",
      times: FOREVER,
      answer: async (req) => {
        const family = (req.body as { spec: Json }).spec.ipFamily;
        if (family === "IPv4") v4Posted.resolve();
        if (family !== "IPv6" || v6Posts++) return undefined;
        // The first ADD's IPv6 fails once the second ADD is done (or 300 ms on, as it waits).
        await Promise.race([second.promise, new Promise((r) => setTimeout(r, 300))]);
        return statusReply(422);
      },
    });
    const first = add(inv()).then(() => assert.fail("the first ADD must fail"), (e) => e);
    await v4Posted.promise;
    const done = await add(inv()).finally(() => second.resolve());
    const e = await first;
    assert.match(e.details, /rollback: IPv4 claim .* released/);
    const canon = (cidr: string) => formatCidr(parseCidr(cidr)!);
    const returned = (done.output as { ips: { address: string }[] }).ips.map((i) => i.address);
    assert.deepEqual(
      stub.all().map((c) => canon(c.status.allocatedCIDR ?? "")).sort(),
      returned.map(canon).sort(),
      "the lease the second ADD returned is still Milo's",
    );
  });
});

// Issue 21, item 4: a 201 is the claim posted, or the ADD fails with 105. What
// is released follows what the answer may be (lib/add.ts, mustBePosted).

/** Makes the next POST store and answer the claim `mangle` makes of the one posted. */
function answerMangled(stub: StubMilo, mangle: (c: WireClaim) => WireClaim): void {
  stub.inject({
    method: "POST",
    answer: (req, s) => {
      const made = s.materialize(req.body as Json);
      return reply(201, s.put(mangle(structuredClone(made))));
    },
  });
}

const withAnnotations = (over: Record<string, string | undefined>) => (c: WireClaim) => {
  const ann: Record<string, string> = { ...c.metadata.annotations };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) delete ann[k];
    else ann[k] = v;
  }
  return { ...c, metadata: { ...c.metadata, annotations: ann } };
};

Deno.test("ADD: a 201 of this name and attachment but not as posted is 105, released by its uid", async (t) => {
  const cases: [string, (c: WireClaim) => WireClaim, RegExp][] = [
    ["another node", withAnnotations({ [KEYS.node]: "node-2" }), /milo-ipam\.io\/node "node-2"/],
    [
      "another pod",
      withAnnotations({ [KEYS.podUid]: "uid-web-9", [KEYS.pod]: "shop/web-9" }),
      /pod-uid "uid-web-9" \(posted "uid-web-0"\)/,
    ],
    [
      "another network",
      withAnnotations({ [KEYS.network]: "other-net" }),
      /milo-ipam\.io\/network "other-net"/,
    ],
    [
      "a holder annotation missing",
      withAnnotations({ [KEYS.podUid]: undefined }),
      /pod-uid \(none\) \(posted "uid-web-0"\)/,
    ],
    [
      "every annotation missing",
      (c) => ({ ...c, metadata: { ...c.metadata, annotations: {} } }),
      /container-id \(none\)/,
    ],
    [
      "an annotation added",
      withAnnotations({ [`${KEYS.cluster}-alias`]: "x" }),
      /cluster-alias "x" \(posted \(none\)\)/,
    ],
    [
      "another class",
      (c) => ({ ...c, spec: { ...c.spec, className: "vpc-pods-ipv4-other" } }),
      /spec\.className "vpc-pods-ipv4-other" \(posted "vpc-pods-ipv4"\)/,
    ],
    [
      "another family",
      (c) => ({ ...c, spec: { ...c.spec, ipFamily: "IPv6" } }),
      /spec\.ipFamily "IPv6" \(posted "IPv4"\)/,
    ],
  ];
  for (const [name, mangle, says] of cases) {
    await t.step(name, async () => {
      await withStub(async (stub, inv) => {
        answerMangled(stub, mangle);
        const e = await rejectsWith(
          add(inv({ ipam: V4 })),
          105,
          new RegExp(`create of IPv4 claim ${NAME_V4} is not the claim posted`),
        );
        assert.match(e.details, says);
        assert.match(e.details, new RegExp(`rollback: IPv4 claim ${NAME_V4} released`));
        const [del] = stub.seen("DELETE");
        assert.ok(del, "the claim just made is released");
        assert.equal(del.path, `${CLAIMS_PATH}/${NAME_V4}`);
        assert.match((del.body as { preconditions: { uid: string } }).preconditions.uid, /-/);
        assert.equal(stub.all().length, 0);
      });
    });
  }
  await t.step("the claim of a reused container ID made again, not as posted", async () => {
    await withStub(async (stub, inv) => {
      const i = inv({ ipam: V4 });
      const old = existingClaim(stub, i, "ipv4");
      const ann = { ...old.metadata.annotations, [KEYS.podUid]: "uid-of-the-old-pod" };
      stub.put({ ...old, metadata: { ...old.metadata, annotations: ann } });
      let posts = 0;
      stub.inject({
        method: "POST",
        times: 2,
        answer: (req, s) => {
          if (posts++ === 0) return undefined; // the first: 409, the old pod's claim
          const made = structuredClone(s.materialize(req.body as Json));
          return reply(201, s.put(withAnnotations({ [KEYS.node]: "node-2" })(made)));
        },
      });
      const e = await rejectsWith(add(i), 105, /is not the claim posted/);
      assert.match(e.details, /rollback: IPv4 claim .* released/);
      assert.equal(stub.seen("DELETE").length, 2, "the old claim, then the one made again");
      assert.equal(stub.all().length, 0);
    });
  });
});

Deno.test("ADD: a 201 of this name recording another attachment or host is 105 and left alone", async (t) => {
  const cases: [string, Record<string, string>][] = [
    ["another container", { [KEYS.containerId]: "another-container" }],
    ["another interface", { [KEYS.ifname]: "net1" }],
    ["another cluster", { [KEYS.cluster]: "cluster-b" }],
    ["another host", { [KEYS.host]: "0123456789abcdef0123456789abcdef" }],
  ];
  for (const [name, over] of cases) {
    await t.step(name, async () => {
      await withStub(async (stub, inv) => {
        answerMangled(stub, withAnnotations(over));
        const e = await rejectsWith(add(inv({ ipam: V4 })), 105, /is not the claim posted/);
        assert.match(e.details, /records another holder .*: left alone/);
        assert.equal(stub.seen("DELETE").length, 0, "never released by this ADD");
        assert.ok(stub.get(NAME_V4));
      });
    });
  }
});

Deno.test("ADD: a 201 naming another claim is 105; that claim is never deleted, the other family is rolled back", async () => {
  await withStub(async (stub, inv) => {
    const i = inv();
    // Another attachment's claim, which Milo answers in place of the IPv4 claim posted.
    const theirs = existingClaim(stub, inv({ containerId: "c0ffee", ipam: V4 }), "ipv4");
    stub.inject({
      method: "POST",
      answer: (req, s) => {
        if ((req.body as { spec: Json }).spec.ipFamily !== "IPv4") return undefined;
        s.materialize(req.body as Json); // the claim posted is made, unsaid
        return reply(201, theirs);
      },
      times: 2,
    });
    const e = await rejectsWith(
      add(i),
      105,
      new RegExp(
        `answered the create of IPv4 claim ${NAME_V4} with another claim, "${theirs.metadata.name}"`,
      ),
    );
    assert.match(e.details, new RegExp(`metadata\\.name "${theirs.metadata.name}"`));
    assert.match(e.details, new RegExp(`${NAME_V4} may exist .*DEL deletes it by name`));
    assert.match(e.details, new RegExp(`rollback: IPv6 claim ${NAME_V6} released`));
    assert.deepEqual(
      stub.seen("DELETE").map((r) => r.path),
      [`${CLAIMS_PATH}/${NAME_V6}`],
      "only this attachment's IPv6 claim, by its uid",
    );
    assert.equal(stub.get(theirs.metadata.name)?.metadata.uid, theirs.metadata.uid);
    assert.ok(stub.get(NAME_V4), "the claim posted is left for the DEL");
    assert.ok(!JSON.stringify(e).includes("10.40.0."), "no address of the answer is returned");
  });
});

Deno.test("a failed ADD undoes only what it made: a claim it found its own stays (an earlier ADD's lease)", async () => {
  await withStub(async (stub, inv) => {
    await add(inv());
    const v4 = stub.get(NAME_V4)!.metadata.uid;
    // The same attachment's ADD again (the agent's, after the plugin leased by itself): v6 fails.
    stub.inject({ method: "GET", path: NAME_V6, times: FOREVER, answer: () => refused() });
    await rejectsWith(add(inv()), 11, /Connection refused/);
    assert.equal(stub.get(NAME_V4)?.metadata.uid, v4, "the v4 lease the runtime was given stays");
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("a create whose answer was lost and whose retry finds the claim: made by this ADD, undone on failure", async () => {
  await withStub(async (stub, inv) => {
    let lost = 0;
    stub.inject({
      method: "POST",
      times: FOREVER,
      answer: (req, s) => {
        const body = req.body as Json & { metadata: Json; spec: Json };
        if (body.spec.ipFamily === "IPv6") return refused();
        // The IPv4 create lands, its answer is lost (a dropped connection): the retry finds it.
        if (lost++ === 0) {
          s.materialize(body);
          return refused();
        }
        return undefined;
      },
    });
    await rejectsWith(add(inv()), 11, /Connection refused/);
    assert.equal(stub.get(NAME_V4), undefined, "the IPv4 claim this ADD made is rolled back");
  });
});
