/** Contract: milo-dev answers each fixture's situation in the fixture's shape. */

import assert from "node:assert/strict";
import { parseCIDR } from "../milo-dev/ipmath.ts";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";
import { DEV_SEED } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const FIX = new URL("./fixtures/milo/", import.meta.url);
const fixture = async (name: string): Promise<Any> =>
  JSON.parse(await Deno.readTextFile(new URL(name, FIX)));
const NS = "/namespaces/default";

/** Same JSON types everywhere; the fixture's keys present (exactly, when `exact`). */
function assertShape(actual: Any, expected: Any, path = "$", exact = true): void {
  const t = (v: Any) => v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
  assert.equal(t(actual), t(expected), `${path}: type ${t(actual)} != ${t(expected)}`);
  if (Array.isArray(expected)) {
    if (expected.length) {
      for (const [i, a] of actual.entries()) assertShape(a, expected[0], `${path}[${i}]`, exact);
    }
  } else if (t(expected) === "object") {
    for (const k of Object.keys(expected)) {
      assert.ok(Object.hasOwn(actual, k), `${path}.${k} missing`);
      assertShape(actual[k], expected[k], `${path}.${k}`, exact);
    }
    if (exact) {
      assert.deepEqual(
        Object.keys(actual).sort(),
        Object.keys(expected).sort(),
        `${path}: keys differ`,
      );
    }
  }
}

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function assertPerRunMeta(m: Any): void {
  assert.match(m.uid, UUID);
  assert.match(m.resourceVersion, /^\d+$/);
  assert.match(m.creationTimestamp, RFC3339);
}

Deno.test("milo-dev contract: claims, pools, lists, Status bodies", async (t) => {
  const dev = await startMiloDev();
  try {
    const createReq = await fixture("ipclaim-create-request.json");
    const boundV4 = await fixture("ipclaim-bound-ipv4.json");
    const boundV6 = await fixture("ipclaim-bound-ipv6-block.json");

    await t.step(
      "ipclaim-bound-ipv4: 7th claim of the pool gets 10.40.0.7, exact shape",
      async () => {
        for (let i = 1; i <= 6; i++) {
          const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
            body: claimBody(`filler-${i}`),
          });
          assert.equal(r.status, 201, JSON.stringify(r.body));
          assert.equal(r.body.status.address, `10.40.0.${i}`);
        }
        const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: createReq });
        assert.equal(r.status, 201);
        assertShape(r.body, boundV4);
        assertPerRunMeta(r.body.metadata);
        const strip = (o: Any) => {
          const c = structuredClone(o);
          for (const k of ["uid", "resourceVersion", "creationTimestamp"]) delete c.metadata[k];
          delete c.status.boundAllocationRef;
          return c;
        };
        assert.deepEqual(strip(r.body), strip(boundV4));
        assert.match(r.body.status.boundAllocationRef.name, /^alloc-[0-9a-f]{16}$/);
        assert.match(r.headers.get("server-timing") ?? "", /^milo;dur=\d+(\.\d+)?/);
        const got = await miloApi<Any>(dev, "GET", `${NS}/ipclaims/${createReq.metadata.name}`);
        assert.equal(got.status, 200);
        assert.deepEqual(got.body, r.body);
        const alloc = await miloApi<Any>(
          dev,
          "GET",
          `${NS}/ipallocations/${r.body.status.boundAllocationRef.name}`,
        );
        assert.equal(alloc.status, 200);
        assert.equal(alloc.body.kind, "IPAllocation");
        assert.deepEqual(alloc.body.spec, {
          ipFamily: "IPv4",
          poolRef: { name: "vpc-7b3e-pods-v4" },
          className: "vpc-pods-ipv4",
          purpose: "Claim",
          claimRef: { name: createReq.metadata.name },
          scope: createReq.spec.scope,
          reclaimPolicy: "Delete",
          ownerRef: { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: "tenant-a" },
        });
        assert.deepEqual(
          { ...alloc.body.status, scopeDigest: "" },
          { phase: "Ready", allocatedCIDR: "10.40.0.7/32", address: "10.40.0.7", scopeDigest: "" },
        );
        assert.match(alloc.body.status.scopeDigest, /^[0-9a-f]{64}$/);
        assert.equal(alloc.body.metadata.ownerReferences, undefined);
      },
    );

    await t.step("ipclaim-bound-ipv6-block: /96 block, no status.address", async () => {
      const body = structuredClone(createReq);
      body.metadata.name = boundV6.metadata.name;
      body.spec.className = "vpc-pods-ipv6";
      body.spec.ipFamily = "IPv6";
      await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: { ...body, metadata: { name: "v6-filler-1" } },
      });
      await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: { ...body, metadata: { name: "v6-filler-2" } },
      });
      const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      assertShape(r.body, boundV6);
      assertPerRunMeta(r.body.metadata);
      assert.equal(r.body.status.address, undefined);
      assert.equal(r.body.status.phase, "Bound");
      assert.equal(r.body.status.poolRef.name, "vpc-7b3e-pods-v6");
      assert.deepEqual(r.body.spec, boundV6.spec);
      const a = parseCIDR(r.body.status.allocatedCIDR)!;
      const b = parseCIDR(boundV6.status.allocatedCIDR)!;
      assert.deepEqual(a, b, `${r.body.status.allocatedCIDR} is the same block as the fixture's`);
    });

    await t.step("ipclaim-list: IPClaimList with labelSelector and fieldSelector", async () => {
      const list = await fixture("ipclaim-list.json");
      const r = await miloApi<Any>(
        dev,
        "GET",
        `${NS}/ipclaims?labelSelector=${encodeURIComponent("example.com/cluster=cluster-a")}`,
      );
      assert.equal(r.status, 200);
      assertShape({ ...r.body, items: [] }, list);
      assert.match(r.body.metadata.resourceVersion, /^\d+$/);
      assert.deepEqual(r.body.items.map((o: Any) => o.metadata.name).sort(), [
        boundV4.metadata.name,
        boundV6.metadata.name,
      ]);
      for (const it of r.body.items) {
        assertShape(it, it.spec.ipFamily === "IPv4" ? boundV4 : boundV6);
      }
      const sel = async (q: string) =>
        (await miloApi<Any>(dev, "GET", `${NS}/ipclaims?${q}`)).body.items.map((o: Any) =>
          o.metadata.name
        ).sort();
      assert.deepEqual(await sel("fieldSelector=spec.className%3Dvpc-pods-ipv6"), [
        boundV6.metadata.name,
        "v6-filler-1",
        "v6-filler-2",
      ]);
      assert.deepEqual(
        await sel(
          "fieldSelector=status.poolRef.name%3D%3Dvpc-7b3e-pods-v6,metadata.name!%3Dv6-filler-1",
        ),
        [
          boundV6.metadata.name,
          "v6-filler-2",
        ],
      );
      assert.deepEqual(await sel(`fieldSelector=metadata.name%3D${boundV4.metadata.name}`), [
        boundV4.metadata.name,
      ]);
      assert.deepEqual(await sel("fieldSelector=metadata.namespace%3Dother"), []);
      assert.deepEqual(
        await sel(`labelSelector=${encodeURIComponent("!example.com/cluster")}`).then((
          x: string[],
        ) => x.length),
        8,
      );
      assert.deepEqual(
        await sel(
          `labelSelector=${
            encodeURIComponent("example.com/node in (node-2,node-1),example.com/cluster!=b")
          }`,
        ),
        [
          boundV4.metadata.name,
          boundV6.metadata.name,
        ],
      );
      const bad = await miloApi<Any>(dev, "GET", `${NS}/ipclaims?fieldSelector=spec.address%3Dx`);
      assert.equal(bad.status, 400);
      assert.equal(bad.body.kind, "Status");
    });

    await t.step("ippool: capacity and utilization exact (fixture numbers)", async () => {
      const pool = await fixture("ippool.json");
      const r = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
      assert.equal(r.status, 200);
      assertShape(r.body, pool, "$", false);
      assert.deepEqual(r.body.spec, pool.spec);
      assert.deepEqual(r.body.status, pool.status);
      const list = await miloApi<Any>(dev, "GET", "/ippools");
      assert.equal(list.body.kind, "IPPoolList");
      const v6 = list.body.items.find((p: Any) => p.metadata.name === "vpc-7b3e-pods-v6");
      assert.deepEqual(v6.status.capacity, {
        total: "4294967296",
        allocated: "4",
        available: "4294967292",
      });
      assert.equal(v6.status.utilizationPercent, 0);
    });

    await t.step("ipclasses: a tenant sees none, as Milo's platform-project catalog", async () => {
      const none = await miloApi<Any>(dev, "GET", "/ipclasses");
      assert.deepEqual([none.status, none.body.kind, none.body.items], [200, "IPClassList", []]);
      const one = await miloApi<Any>(dev, "GET", "/ipclasses/vpc-pods-ipv6");
      assert.deepEqual([one.status, one.body.reason, one.body.details.kind], [
        404,
        "NotFound",
        "ipclasses",
      ]);
      // Opts in: the shape of the classes milo-dev serves, which a Milo tenant never reads.
      await dev.setLimits({ tenantClasses: true });
      try {
        const cls = await miloApi<Any>(dev, "GET", "/ipclasses/vpc-pods-ipv6");
        assert.equal(cls.body.kind, "IPClass");
        assert.deepEqual(cls.body.spec, {
          ipFamily: "IPv6",
          uniqueWithin: ["network"],
          allowedPrefixLengths: { min: 96, max: 96 },
          defaultPrefixLength: 96,
          strategy: "FirstFit",
          visibility: "consumer",
        });
        assert.deepEqual(cls.body.status, {
          phase: "Ready",
          offeringPools: 1,
          requiredScopeRoles: ["network"],
        });
        const list = await miloApi<Any>(dev, "GET", "/ipclasses");
        assert.equal(list.body.items.length, 2);
      } finally {
        await dev.setLimits({});
      }
    });

    await t.step("dryRun=All computes the next address and holds nothing", async () => {
      const a = await miloApi<Any>(dev, "POST", `${NS}/ipclaims?dryRun=All`, {
        body: claimBody("dry"),
      });
      assert.equal(a.status, 201);
      assert.equal(a.body.status.address, "10.40.0.8");
      const b = await miloApi<Any>(dev, "POST", `${NS}/ipclaims?dryRun=All`, {
        body: claimBody("dry"),
      });
      assert.equal(b.body.status.address, "10.40.0.8");
      assert.equal((await miloApi<Any>(dev, "GET", `${NS}/ipclaims/dry`)).status, 404);
      const pool = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
      assert.equal(pool.body.status.capacity.allocated, "9");
    });

    await t.step(
      "ipclaim-releasing: DELETE answers 200 Releasing and frees the address",
      async () => {
        const rel = await fixture("ipclaim-releasing.json");
        const r = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/${boundV4.metadata.name}`);
        assert.equal(r.status, 200);
        assertShape(r.body, rel, "$", false);
        assert.deepEqual(
          { ...r.body.status, boundAllocationRef: null },
          { ...rel.status, boundAllocationRef: null },
        );
        assert.deepEqual(
          {
            className: r.body.spec.className,
            ipFamily: r.body.spec.ipFamily,
            reclaimPolicy: r.body.spec.reclaimPolicy,
          },
          rel.spec,
        );
        assert.equal(
          (await miloApi<Any>(dev, "GET", `${NS}/ipclaims/${boundV4.metadata.name}`)).status,
          404,
        );
        const allocs = await miloApi<Any>(
          dev,
          "GET",
          `${NS}/ipallocations?fieldSelector=spec.poolRef.name%3Dvpc-7b3e-pods-v4`,
        );
        assert.equal(allocs.body.items.length, 6);
        const again = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("reuse"),
        });
        assert.equal(again.body.status.address, "10.40.0.7", "freed at once, FirstFit reuses it");
      },
    );

    await t.step("status-404 / 409 / 422 / 400 / 401 bodies equal the fixtures", async () => {
      const name = boundV4.metadata.name;
      const r404 = await miloApi<Any>(dev, "GET", `${NS}/ipclaims/${name}`);
      assert.equal(r404.status, 404);
      assert.deepEqual(r404.body, await fixture("status-404-not-found.json"));
      const d404 = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/${name}`);
      assert.deepEqual([d404.status, d404.body], [404, await fixture("status-404-not-found.json")]);

      assert.equal(
        (await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: createReq })).status,
        201,
      );
      // The fixture's AlreadyExists is the earlier claim storage's answer to a live
      // name; the re-binding Milo's reclaim probe answers Conflict (milo_dev_retain).
      await dev.setRetention({ recreate: "Conflict" });
      const r409 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: createReq });
      await dev.fetch(`${dev.adminUrl}/retention`, { method: "DELETE" }).then((r) =>
        r.body?.cancel()
      );
      assert.deepEqual([r409.status, r409.body], [
        409,
        await fixture("status-409-already-exists.json"),
      ]);
      const rebinding = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: createReq });
      assert.deepEqual([rebinding.status, rebinding.body.reason], [409, "Conflict"]);

      const r422 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("Pod_1") });
      assert.deepEqual([r422.status, r422.body], [422, await fixture("status-422-invalid.json")]);

      const r400 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: claimBody("x", { className: "vpc-pods-ipv9" }),
      });
      assert.deepEqual([r400.status, r400.body], [
        400,
        await fixture("status-400-bad-request.json"),
      ]);

      const r401 = await miloApi<Any>(dev, "GET", `${NS}/ipclaims`, { token: null });
      assert.deepEqual([r401.status, r401.body], [
        401,
        await fixture("status-401-unauthorized.json"),
      ]);
      const bad = await miloApi<Any>(dev, "GET", `${NS}/ipclaims`, { token: "nope" });
      assert.deepEqual([bad.status, bad.body], [
        401,
        await fixture("status-401-unauthorized.json"),
      ]);
    });

    await t.step(
      "other 400s: scope role missing, family mismatch, prefix length; 409 pinned taken or reserved",
      async () => {
        const shape = await fixture("status-400-bad-request.json");
        const scope = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("noscope", { scope: null }),
        });
        assert.equal(scope.status, 400);
        assertShape(scope.body, shape);
        assert.equal(
          scope.body.message,
          'scope is missing role "network" required by uniqueWithin (class "vpc-pods-ipv4")',
        );
        const fam = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("fam", { ipFamily: "IPv6" }),
        });
        assert.equal(fam.status, 400);
        assertShape(fam.body, shape);
        const pl = claimBody("pl");
        (pl.spec as Any).prefixLength = 24;
        assert.equal((await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: pl })).status, 400);
        const pin = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("pin", { address: "10.40.0.100" }),
        });
        assert.equal(pin.status, 201);
        assert.equal(pin.body.status.address, "10.40.0.100");
        const taken = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("pin2", { address: "10.40.0.100" }),
        });
        assert.equal(taken.status, 409);
        assert.equal(taken.body.reason, "Conflict");
        const reserved = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("pin3", { address: "10.40.0.255" }),
        });
        // Milo's reservations are allocation rows every address space excludes (inScope).
        assert.deepEqual([reserved.status, reserved.body.message], [
          409,
          'Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "": ' +
          "ipam: address already allocated: 10.40.0.255",
        ]);
        const badLabel = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
          body: claimBody("lbl", { labels: { "milo-ipam.io/node": "x".repeat(64) } }),
        });
        assert.equal(badLabel.status, 422);
        assert.equal(badLabel.body.details.causes[0].field, "metadata.labels");
      },
    );

    await t.step("status-503 via faults, with Retry-After", async () => {
      await dev.setFaults({ errorRate: 1, errorStatuses: [503], retryAfterSeconds: 1 });
      try {
        const r = await miloApi<Any>(dev, "GET", `${NS}/ipclaims`);
        assert.deepEqual([r.status, r.body], [503, await fixture("status-503-unavailable.json")]);
        assert.equal(r.headers.get("retry-after"), "1");
        assert.match(r.headers.get("server-timing") ?? "", /^milo;dur=/);
      } finally {
        await dev.clearFaults();
      }
    });

    await t.step("project path form answers the same objects", async () => {
      const direct = await miloApi<Any>(dev, "GET", `${NS}/ipclaims/${createReq.metadata.name}`);
      const viaProject = await miloApi<Any>(
        dev,
        "GET",
        `${NS}/ipclaims/${createReq.metadata.name}`,
        {
          project: "tenant-a",
        },
      );
      assert.equal(viaProject.status, 200);
      assert.deepEqual(viaProject.body, direct.body);
      assert.equal(viaProject.body.spec.ownerRef.name, "tenant-a");
    });
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev contract: status-403 (class not consumable) and status-507 (exhausted)", async () => {
  const seed: Any = structuredClone(DEV_SEED);
  seed.projects[0].ipPools[0].spec.cidr = "10.40.0.0/29";
  seed.projects[1].ipClasses[0].spec.consumers = ["tenant-a"];
  const dev = await startMiloDev({ seed });
  try {
    const r403 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("x"),
      token: "dev-token-b",
    });
    assert.deepEqual([r403.status, r403.body], [403, await fixture("status-403-forbidden.json")]);
    const created: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody(`c${i}`) });
      assert.equal(r.status, 201);
      created.push(r.body.status.address);
    }
    assert.deepEqual(created, [
      "10.40.0.1",
      "10.40.0.2",
      "10.40.0.3",
      "10.40.0.4",
      "10.40.0.5",
      "10.40.0.6",
    ]);
    const r507 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("c7") });
    assert.deepEqual([r507.status, r507.body], [507, await fixture("status-507-exhausted.json")]);
    const pool = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
    assert.deepEqual(pool.body.status.capacity, { total: "8", allocated: "8", available: "0" });
    assert.equal(pool.body.status.utilizationPercent, 100);
    const dry = await miloApi<Any>(dev, "POST", `${NS}/ipclaims?dryRun=All`, {
      body: claimBody("c8"),
    });
    assert.equal(dry.status, 507);
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev contract: checkedPreconditions makes DELETE honour them (409 Conflict)", async () => {
  const dev = await startMiloDev();
  try {
    // Opts in: Kubernetes' precondition check, the behaviour this test is about; Milo skips it.
    await dev.setLimits({ checkedPreconditions: true });
    const del = (name: string, body?: unknown) =>
      miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/${name}`, { body });
    const created = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("pre-1") });
    assert.equal(created.status, 201);
    const { uid, resourceVersion } = created.body.metadata;
    const options = (preconditions: Any) => ({
      kind: "DeleteOptions",
      apiVersion: "v1",
      preconditions,
    });

    const badUid = await del("pre-1", options({ uid: "3f1c0000-0000-4000-8000-000000000000" }));
    assert.deepEqual([badUid.status, badUid.body], [409, {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message: `Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "pre-1": ` +
        `Precondition failed: UID in precondition: 3f1c0000-0000-4000-8000-000000000000, ` +
        `UID in object meta: ${uid}`,
      reason: "Conflict",
      details: { name: "pre-1", group: "ipam.miloapis.com", kind: "ipclaims" },
      code: 409,
    }]);
    const badRv = await del("pre-1", options({ uid, resourceVersion: "1" }));
    assert.equal(badRv.status, 409);
    assert.match(
      badRv.body.message,
      new RegExp(
        `Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: ${resourceVersion}$`,
      ),
    );
    const dry = await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/pre-1?dryRun=All`, {
      body: options({ uid: "other" }),
    });
    assert.equal(dry.status, 409);
    const kept = await miloApi<Any>(dev, "GET", `${NS}/ipclaims/pre-1`);
    assert.deepEqual(
      [kept.status, kept.body],
      [200, created.body],
      "a failed precondition leaves the claim",
    );

    const notJson = await dev.fetch(
      `${dev.url}/apis/ipam.miloapis.com/v1alpha1${NS}/ipclaims/pre-1`,
      {
        method: "DELETE",
        headers: { authorization: `Bearer ${dev.token}`, "content-type": "application/json" },
        body: "{not json",
      },
    );
    assert.deepEqual([notJson.status, (await notJson.json()).reason], [400, "BadRequest"]);
    assert.equal((await del("pre-1", [])).status, 400);
    assert.equal((await del("pre-1", options("uid"))).status, 400);
    assert.equal((await del("pre-1", options({ uid: 7 }))).status, 400);
    assert.equal((await miloApi<Any>(dev, "GET", `${NS}/ipclaims/pre-1`)).status, 200);

    const ok = await del("pre-1", options({ uid, resourceVersion }));
    assert.equal(ok.status, 200);
    assert.equal(ok.body.status.phase, "Releasing");
    const gone = await del("pre-1", options({ uid }));
    assert.equal(gone.status, 404, "a missing claim is 404 before any precondition");

    await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("pre-2") });
    const noPre = await del("pre-2", { kind: "DeleteOptions", propagationPolicy: "Background" });
    assert.equal(noPre.status, 200, "DeleteOptions without preconditions deletes as before");
    await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("pre-3") });
    assert.equal((await del("pre-3", options(null))).status, 200);
  } finally {
    await dev.stop();
  }
});
