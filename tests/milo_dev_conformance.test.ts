/**
 * milo-dev answers as Milo (`milo-os/ipam`) where milo-dev once was kinder:
 * namespaces, the same-name race, dry runs, scope validation, address spaces,
 * and claims stored as posted. Each answer is the shared fixture's.
 */

import assert from "node:assert/strict";
import { claimBody, FIXTURE_SCOPE, miloApi, startMiloDev } from "../testing/milo_dev.ts";
import { DEV_SEED } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const FIX = new URL("./fixtures/milo/", import.meta.url);
const fixture = async (name: string): Promise<Any> =>
  JSON.parse(await Deno.readTextFile(new URL(name, FIX)));
const NS = "/namespaces/default";
const NET = { apiGroup: "networking.datumapis.com", kind: "Network" };

Deno.test("milo-dev as Milo: a create into a missing or terminating namespace is 403", async () => {
  const seed: Any = structuredClone(DEV_SEED);
  seed.projects[0].namespaces = ["default", { name: "shop", terminating: true }];
  const dev = await startMiloDev({ seed });
  try {
    const into = (ns: string, body: Any, token?: string) => {
      body.metadata.namespace = ns;
      return miloApi<Any>(dev, "POST", `/namespaces/${ns}/ipclaims`, { body, token });
    };
    const terminating = await into("shop", claimBody("a"));
    assert.deepEqual(
      [terminating.status, terminating.body],
      [403, await fixture("status-403-namespace-terminating.json")],
    );
    const missing = await into("shop", claimBody("a"), "dev-token-b");
    assert.deepEqual(
      [missing.status, missing.body],
      [403, await fixture("status-403-namespace-missing.json")],
    );
    // The order of AllocatingREST.Create: the class (400) before the namespace, the
    // claim against its class (a missing scope role, 400) after it.
    const noClass = await into("shop", claimBody("a", { className: "vpc-pods-ipv9" }));
    assert.equal(noClass.status, 400);
    const noScope = await into("shop", claimBody("a", { scope: null }));
    assert.equal(noScope.status, 403);
    assert.equal((await into("default", claimBody("a"))).status, 201);
    const read = await miloApi<Any>(dev, "GET", "/namespaces/shop/ipclaims/a");
    assert.equal(read.status, 404, "only a create is refused: a read finds nothing");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: the later of two overlapping creates of one name is 500", async () => {
  const dev = await startMiloDev();
  try {
    const req = await fixture("ipclaim-create-request.json");
    const post = () => miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: req });
    await dev.setFaults({ latencyMs: 300, methods: ["POST"] });
    const both = await Promise.all([post(), post()]);
    await dev.clearFaults();
    assert.deepEqual(both.map((r) => r.status).sort(), [201, 500]);
    const lost = both.find((r) => r.status === 500)!;
    assert.deepEqual(lost.body, await fixture("status-500-allocation-exists.json"));
    const after = await post();
    assert.deepEqual([after.status, after.body.reason], [409, "Conflict"], "one after: 409");
    assert.match(after.body.message, /already bound to "pod-3f9a1c2b7d4e5f60a1b2-v4"/);
    assert.equal((await miloApi<Any>(dev, "GET", `${NS}/ipallocations`)).body.items.length, 1);

    // Opts in: the kinder answer (409), which this step is about; Milo's is the 500.
    await dev.setLimits({ sameNameRaceConflict: true });
    await dev.setFaults({ latencyMs: 300, methods: ["POST"] });
    const b = claimBody("twice");
    const kind = await Promise.all(
      [0, 1].map(() => miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: b })),
    );
    assert.deepEqual(kind.map((r) => r.status).sort(), [201, 409]);
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: a dry run skips the reclaim probe, so a held name is 500", async () => {
  const dev = await startMiloDev();
  try {
    const req = await fixture("ipclaim-create-request.json");
    const dry = () => miloApi<Any>(dev, "POST", `${NS}/ipclaims?dryRun=All`, { body: req });
    assert.equal((await dry()).status, 201, "a free name: the next address, nothing held");
    assert.equal((await miloApi(dev, "POST", `${NS}/ipclaims`, { body: req })).status, 201);
    const live = await dry();
    assert.deepEqual(
      [live.status, live.body],
      [500, await fixture("status-500-allocation-exists.json")],
    );
    await miloApi(dev, "DELETE", `${NS}/ipclaims/${req.metadata.name}`);
    req.spec.reclaimPolicy = "Retain";
    assert.equal((await miloApi(dev, "POST", `${NS}/ipclaims`, { body: req })).status, 201);
    await miloApi(dev, "DELETE", `${NS}/ipclaims/${req.metadata.name}`);
    const retained = await dry();
    assert.equal(retained.status, 500, "a retained allocation holds the name too");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: a scope ref needs kind and name (scope.Validate, 422)", async () => {
  const dev = await startMiloDev();
  try {
    const post = (scope: Any) =>
      miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("s", { scope }) });
    for (
      const [scope, why] of [
        [{ network: { apiGroup: NET.apiGroup, name: "n" } }, 'scope role "network" has no kind'],
        [{ network: { ...NET } }, 'scope role "network" has no name'],
        [
          { a: { ...NET }, "": { ...NET, name: "n" } },
          "scope has an entry with an empty role name",
        ],
        [{ b: { name: "x" }, network: { ...NET, name: "n" } }, 'scope role "b" has no kind'],
      ] as const
    ) {
      const r = await post(scope);
      assert.equal(r.status, 422, JSON.stringify(scope));
      assert.equal(r.body.reason, "Invalid");
      assert.deepEqual(r.body.details.causes.map((c: Any) => c.field), ["spec.scope"]);
      assert.ok(r.body.message.endsWith(`: ${why}`), r.body.message);
    }
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: an address is unique per address space, the scope uid included", async () => {
  const dev = await startMiloDev();
  try {
    const make = async (name: string, scope: Any, more: Any = {}) => {
      const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: claimBody(name, { scope, ...more }),
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body.status.address;
    };
    const a = { network: { ...NET, name: "net-a" } };
    const b = { network: { ...NET, name: "net-b" } };
    assert.equal(await make("a-1", a), "10.40.0.1");
    assert.equal(await make("b-1", b), "10.40.0.1", "another network: another space");
    assert.equal(await make("a-2", a), "10.40.0.2");
    const uid1 = { network: { ...a.network, uid: "u-1" } };
    assert.equal(await make("a-uid-1", uid1), "10.40.0.1", "a uid makes another space");
    assert.equal(await make("a-uid-2", { network: { ...a.network, uid: "u-2" } }), "10.40.0.1");
    const pool = await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4");
    assert.equal(pool.body.status.capacity.allocated, "4", "two units, two reserved");
    const pinned = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("pin-a", { scope: a, address: "10.40.0.2" }),
    });
    assert.deepEqual([pinned.status, pinned.body.reason], [409, "Conflict"]);
    assert.equal(await make("pin-b", b, { address: "10.40.0.2" }), "10.40.0.2");

    // A retained address re-binds only into its own space: a new uid is another network.
    assert.equal(await make("db-0", uid1, { reclaimPolicy: "Retain" }), "10.40.0.2");
    await miloApi(dev, "DELETE", `${NS}/ipclaims/db-0`);
    const moved = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("db-0", { scope: { network: { ...a.network, uid: "u-9" } } }),
    });
    assert.deepEqual([moved.status, moved.body.reason], [409, "Conflict"]);
    assert.match(moved.body.message, /it belongs to a different address space/);
    assert.equal(await make("db-0", uid1), "10.40.0.2", "the same space re-binds it");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: a claim is stored as posted (no family or policy filled in)", async () => {
  const dev = await startMiloDev();
  try {
    const body = claimBody("bare");
    delete (body.spec as Any).reclaimPolicy;
    const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body });
    assert.equal(r.status, 201);
    assert.deepEqual(r.body.spec, {
      className: "vpc-pods-ipv4",
      scope: FIXTURE_SCOPE,
      ownerRef: { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: "tenant-a" },
    });
    const got = await miloApi<Any>(dev, "GET", `${NS}/ipclaims/bare`);
    assert.deepEqual(got.body.spec, r.body.spec);
    const noClass = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("none", { className: "" }),
    });
    assert.equal(noClass.status, 422, "neither a class nor a family");
    assert.equal(noClass.body.details.causes[0].field, "spec.className");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: an IPAllocation carries none of its claim's labels", async () => {
  const dev = await startMiloDev();
  try {
    const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("labelled", {
        labels: { "milo-ipam.io/pod-namespace": "db" },
        annotations: { "milo-ipam.io/pod": "db-0" },
      }),
    });
    assert.equal(r.status, 201);
    const allocs = (await miloApi<Any>(dev, "GET", `${NS}/ipallocations`)).body.items;
    assert.equal(allocs.length, 1);
    assert.equal(allocs[0].metadata.labels, undefined);
    assert.equal(allocs[0].metadata.annotations, undefined);
    const selected = await miloApi<Any>(
      dev,
      "GET",
      `${NS}/ipallocations?labelSelector=${encodeURIComponent("milo-ipam.io/pod-namespace=db")}`,
    );
    assert.equal(selected.body.items.length, 0, "a label selector finds no allocation");
  } finally {
    await dev.stop();
  }
});

/** DEV_SEED with tenant-a's IPv4 class offered by two /30 pools, named out of order. */
function twoPools(strategy?: "LeastUtilized"): Any {
  const seed: Any = structuredClone(DEV_SEED);
  const p = seed.projects[0];
  if (strategy) p.ipClasses[0].spec.allocationStrategy = strategy;
  p.ipPools = [
    { metadata: { name: "pool-b" }, spec: { cidr: "10.41.0.0/30", classNames: ["vpc-pods-ipv4"] } },
    { metadata: { name: "pool-a" }, spec: { cidr: "10.42.0.0/30", classNames: ["vpc-pods-ipv4"] } },
    p.ipPools[1],
  ];
  return seed;
}

Deno.test("milo-dev as Milo: one pool serves a class (DiscoverPool): 507 when it is full, though another has room", async () => {
  const dev = await startMiloDev({ seed: twoPools() });
  try {
    const post = (name: string, address?: string) =>
      miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody(name, { address }) });
    const got: string[] = [];
    for (let i = 0; i < 4; i++) got.push((await post(`c-${i}`)).body.status.address);
    assert.deepEqual(got, ["10.42.0.0", "10.42.0.1", "10.42.0.2", "10.42.0.3"], "first by key");
    const full = await post("c-4");
    assert.equal(full.status, 507);
    assert.equal(full.body.details.name, "pool-a", "the pool DiscoverPool picked, no fallback");
    const pin = await post("pin", "10.41.0.1");
    assert.deepEqual([pin.status, pin.body.message], [
      400,
      'ipam: address outside pool: 10.41.0.1 is outside pool "project/tenant-a/ipam.miloapis.com/ippools/pool-a"',
    ]);
  } finally {
    await dev.stop();
  }
  const spread = await startMiloDev({ seed: twoPools("LeastUtilized") });
  try {
    const pools: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await miloApi<Any>(spread, "POST", `${NS}/ipclaims`, { body: claimBody(`s-${i}`) });
      pools.push(r.body.status.poolRef.name);
    }
    assert.deepEqual(pools, ["pool-a", "pool-b", "pool-a", "pool-b"], "the least utilised");
  } finally {
    await spread.stop();
  }
});

Deno.test("milo-dev as Milo: a class is claimable only when visible to tenants, not a container, and granted use (AuthorizeClassConsumption)", async () => {
  const seed: Any = structuredClone(DEV_SEED);
  const base = seed.projects[0].ipClasses[0];
  const cls = (name: string, over: Any) => ({
    metadata: { name },
    spec: { ...structuredClone(base.spec), default: false, ...over },
  });
  seed.projects[0].ipClasses.push(
    cls("unset", { visibility: undefined }),
    cls("platform", { visibility: "platform" }),
    cls("container", { poolPer: ["network"] }),
    cls("no-use", { consumers: undefined }),
    cls("shared", { visibility: "shared" }),
  );
  for (const c of seed.projects[0].ipClasses) {
    if (c.spec.visibility === undefined) delete c.spec.visibility;
    if (c.spec.consumers === undefined) delete c.spec.consumers;
  }
  seed.projects[0].ipPools[0].spec.classNames.push("unset", "platform", "container", "no-use");
  seed.projects[0].ipPools[0].spec.classNames.push("shared");
  const dev = await startMiloDev({ seed });
  try {
    const forbidden = await fixture("status-403-forbidden.json");
    for (const name of ["unset", "platform", "container", "no-use"]) {
      const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
        body: claimBody(`c-${name}`, { className: name }),
      });
      const want = structuredClone(forbidden);
      want.message = want.message.replace('"vpc-pods-ipv4"', `"${name}"`);
      want.details.name = name;
      assert.deepEqual([r.status, r.body], [403, want], name);
    }
    const ok = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("c-shared", { className: "shared" }),
    });
    assert.equal(ok.status, 201);
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev as Milo: a requested IPv6 address inside a /96 binds that block (parseRequestedBlock masks it)", async () => {
  const dev = await startMiloDev();
  try {
    const r = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("v6-pin", { className: "vpc-pods-ipv6", address: "fd20:0:0:1:0:2:0:7" }),
    });
    assert.equal(r.status, 201);
    assert.equal(r.body.status.allocatedCIDR, "fd20::1:0:2:0:0/96");
    const again = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("v6-pin-2", { className: "vpc-pods-ipv6", address: "fd20:0:0:1:0:2:0:9" }),
    });
    assert.deepEqual([again.status, again.body.message], [
      409,
      'Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "": ' +
      "ipam: address already allocated: fd20:0:0:1:0:2:0:9",
    ]);
  } finally {
    await dev.stop();
  }
});
