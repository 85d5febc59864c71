/**
 * Contract: milo-dev keeps, re-binds, refuses and expires retained
 * allocations as Milo does (`internal/allocator/reclaim.go`, `lease.go`,
 * `sweep.go`; `internal/registry/ipam/ipclaim/retain_postgres_test.go`), and
 * answers pinned addresses in Milo's words.
 */

import assert from "node:assert/strict";
import { validateSeed } from "../milo-dev/seed.ts";
import { MiloClient } from "../lib/milo.ts";
import { claimBody, miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { retainSeed } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const NS = "/namespaces/default";
const GROUP = "ipam.miloapis.com";
const V4_POOL = "vpc-7b3e-pods-v4";
const MISMATCH = "ipam: retained allocation does not match this claim";

type ClaimOpts = Parameters<typeof claimBody>[1];
const retain = (o: ClaimOpts = {}): ClaimOpts => ({ reclaimPolicy: "Retain", ...o });

function api(dev: MiloDev) {
  return {
    create: (name: string, o: ClaimOpts = {}) =>
      miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody(name, o) }),
    del: (name: string) => miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/${name}`),
    alloc: (name: string) => miloApi<Any>(dev, "GET", `${NS}/ipallocations/${name}`),
    delAlloc: (name: string) => miloApi<Any>(dev, "DELETE", `${NS}/ipallocations/${name}`),
    allocs: async () =>
      (await miloApi<Any>(dev, "GET", `${NS}/ipallocations`)).body.items.map((x: Any) =>
        x.metadata.name
      ),
    allocated: async (pool = V4_POOL) =>
      (await miloApi<Any>(dev, "GET", `/ippools/${pool}`)).body.status.capacity.allocated,
  };
}

/** A create that must succeed: the bound claim. */
async function bound(a: ReturnType<typeof api>, name: string, o: ClaimOpts = {}): Promise<Any> {
  const r = await a.create(name, o);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body;
}

/** Creates `name` under Retain and deletes it: the retained allocation's name and CIDR. */
async function retained(a: ReturnType<typeof api>, name: string, o: ClaimOpts = {}) {
  const c = await bound(a, name, retain(o));
  assert.equal((await a.del(name)).status, 200);
  return { alloc: c.status.boundAllocationRef.name, cidr: c.status.allocatedCIDR, claim: c };
}

/** The Status of a 409 Conflict on claim `name` (empty: none in details), exactly. */
function conflictStatus(name: string, why: string): Any {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: `Operation cannot be fulfilled on ipclaims.${GROUP} "${name}": ${why}`,
    reason: "Conflict",
    details: { ...(name ? { name } : {}), group: GROUP, kind: "ipclaims" },
    code: 409,
  };
}

/** A sweep at now + `advance`: [candidates, marked, released, noLease]. */
async function swept(dev: MiloDev, advance: string, want: number[]): Promise<void> {
  const r = await dev.sweep(advance);
  assert.deepEqual([r.candidates, r.marked, r.released, r.noLease], want, `sweep +${advance}`);
}

const NET = (name: string) => ({
  network: { apiGroup: "networking.datumapis.com", kind: "Network", name },
});

Deno.test("milo-dev retain: retained, re-bound, refused by field, released; pinned addresses", async (t) => {
  const dev = await startMiloDev({ seed: retainSeed({ retentionLease: "1h" }) });
  const a = api(dev);
  try {
    await t.step(
      "Retain keeps the allocation: unbound, counted in capacity, on the page",
      async () => {
        assert.equal(await a.allocated(), "2", "the two reserved units");
        const c = await bound(a, "db-0-v4", retain());
        assert.equal(c.status.address, "10.40.0.1");
        assert.equal(c.spec.reclaimPolicy, "Retain");
        const name = c.status.boundAllocationRef.name;
        assert.equal((await a.del("db-0-v4")).body.status.phase, "Releasing");
        assert.equal((await miloApi(dev, "GET", `${NS}/ipclaims/db-0-v4`)).status, 404);
        const al = await a.alloc(name);
        assert.equal(al.status, 200);
        assert.equal(al.body.status.phase, "Ready", "Milo's phase whether bound or retained");
        assert.equal(al.body.spec.claimRef, undefined, "no claimRef while retained");
        assert.equal(al.body.spec.reclaimPolicy, "Retain");
        assert.equal(al.body.status.allocatedCIDR, "10.40.0.1/32");
        assert.equal(al.body.metadata.ownerReferences, undefined);
        assert.deepEqual(
          al.body.status.conditions.map((x: Any) => [x.type, x.status, x.reason]),
          [["Bound", "False", "Retained"]],
        );
        assert.equal(await a.allocated(), "3", "retention frees nothing");
        assert.equal((await dev.stats()).retained, 1);
        const feed = await (await dev.fetch(`${dev.url}/-/utilization?project=tenant-a`)).json();
        const p = feed.projects[0];
        assert.deepEqual(p.retained.map((r: Any) => [r.allocation, r.cidr, r.phase]), [
          [name, "10.40.0.1/32", "Retained"],
        ]);
        assert.equal(p.pools.find((x: Any) => x.name === V4_POOL).retained, "1");
        const page = await (await dev.fetch(`${dev.url}/`)).text();
        assert.ok(page.includes(`"allocation":"${name}"`), "the page's snapshot lists it");
        assert.equal(
          (await bound(a, "other-1")).status.address,
          "10.40.0.2",
          "not the retained one",
        );
      },
    );

    await t.step("a pinned retained or bound address is 409; outside the pools 400", async () => {
      const taken = await a.create("pin-x", { address: "10.40.0.1" });
      assert.deepEqual(
        taken.body,
        conflictStatus("", "ipam: address already allocated: 10.40.0.1"),
      );
      const live = await a.create("pin-y", { address: "10.40.0.2" });
      assert.deepEqual(live.body, conflictStatus("", "ipam: address already allocated: 10.40.0.2"));
      const out = await a.create("pin-z", { address: "10.99.0.1" });
      assert.equal(out.status, 400);
      assert.equal(out.body.reason, "BadRequest");
      assert.equal(
        out.body.message,
        // The pool's storage key, as Milo's selectBlock names it (req.PoolKey).
        `ipam: address outside pool: 10.99.0.1 is outside pool ` +
          `"project/tenant-a/ipam.miloapis.com/ippools/${V4_POOL}"`,
      );
      const bad = await a.create("pin-w", { address: "10.40.0.x" });
      assert.equal(bad.status, 400);
      assert.equal(bad.body.message, 'ipam: invalid address: "10.40.0.x" is not an IP address');
      assert.equal((await bound(a, "pin-v", { address: "10.40.0.9" })).status.address, "10.40.0.9");
    });

    await t.step(
      "a claim of the same name re-binds it: same address and allocation (v4)",
      async () => {
        const c = await bound(a, "db-0-v4", retain());
        assert.equal(c.status.address, "10.40.0.1");
        assert.equal(c.status.allocatedCIDR, "10.40.0.1/32");
        const al = (await a.alloc(c.status.boundAllocationRef.name)).body;
        assert.equal(al.status.phase, "Ready");
        assert.equal(al.status.conditions, undefined);
        assert.deepEqual(al.spec.claimRef, { name: "db-0-v4" });
        assert.equal(await a.allocated(), "5", "re-binding allocates nothing new");
        assert.equal((await dev.stats()).retained, 0);
      },
    );

    await t.step("a /96 block is re-bound the same way (v6)", async () => {
      const v6 = { className: "vpc-pods-ipv6" };
      const { cidr, alloc } = await retained(a, "db-0-v6", v6);
      assert.notEqual((await bound(a, "v6-other", v6)).status.allocatedCIDR, cidr);
      const c = await bound(a, "db-0-v6", retain(v6));
      assert.equal(c.status.allocatedCIDR, cidr);
      assert.equal(c.status.address, undefined);
      assert.equal(c.status.boundAllocationRef.name, alloc);
    });

    await t.step(
      "a different class or address space is a 409 naming it; nothing consumed",
      async () => {
        const { alloc } = await retained(a, "db-1");
        const cls = await a.create("db-1", retain({ className: "vpc-pods-ipv4-b" }));
        assert.deepEqual(
          cls.body,
          conflictStatus(
            "db-1",
            `${MISMATCH}: it was allocated under class "vpc-pods-ipv4" and this claim names "vpc-pods-ipv4-b"`,
          ),
        );
        const scope = await a.create("db-1", retain({ scope: NET("vpc-recreated") }));
        assert.deepEqual(
          scope.body,
          conflictStatus(
            "db-1",
            `${MISMATCH}: it belongs to a different address space; a reference deleted and ` +
              "recreated under the same name is a different space and does not inherit its " +
              "predecessor's addresses",
          ),
        );
        const still = (await a.alloc(alloc)).body;
        assert.equal(still.spec.claimRef, undefined, "a refused reclaim consumes nothing");
      },
    );

    await t.step(
      "Delete frees at once; a live claim's allocation cannot be deleted (409)",
      async () => {
        const before = await a.allocated();
        const c = await bound(a, "tmp-1");
        const name = c.status.boundAllocationRef.name;
        const refused = await a.delAlloc(name);
        // Milo's refuseIfBound (internal/registry/ipam/ipallocation/storage.go): NewConflict.
        assert.deepEqual([refused.status, refused.body], [409, {
          kind: "Status",
          apiVersion: "v1",
          metadata: {},
          status: "Failure",
          message: `Operation cannot be fulfilled on ipallocations.${GROUP} "${name}": this ` +
            'allocation is bound to IPClaim "tmp-1"; delete the claim to release the address, and ' +
            "its reclaimPolicy decides whether the address is freed or retained",
          reason: "Conflict",
          details: { name, group: GROUP, kind: "ipallocations" },
          code: 409,
        }]);
        assert.equal((await a.del("tmp-1")).status, 200);
        assert.equal((await a.alloc(name)).status, 404, "Delete: the allocation is gone");
        assert.equal(await a.allocated(), before);
        const again = await bound(a, "tmp-2", { address: c.status.address });
        assert.equal(again.status.address, c.status.address, "free again at once");
      },
    );

    await t.step("deleting a retained IPAllocation frees its address at once", async () => {
      const { alloc, claim } = await retained(a, "db-2");
      const before = await a.allocated();
      const r = await a.delAlloc(alloc);
      assert.equal(r.status, 200);
      assert.equal(r.body.kind, "IPAllocation");
      assert.equal((await a.alloc(alloc)).status, 404);
      assert.equal(BigInt(await a.allocated()), BigInt(before) - 1n);
      const other = await bound(a, "db-2-other", { address: claim.status.address });
      assert.equal(other.status.address, claim.status.address);
      const fresh = await bound(a, "db-2", retain());
      assert.notEqual(fresh.status.address, claim.status.address, "nothing left to re-bind");
    });

    await t.step(
      "a different prefix length is a 409 naming both (class edited, restart)",
      async () => {
        await retained(a, "db-3");
        const seed = retainSeed({ retentionLease: "1h" });
        for (const c of seed.projects[0].ipClasses.filter((c) => c.spec.ipFamily === "IPv4")) {
          c.spec.prefixLength = 31;
        }
        await Deno.writeTextFile(dev.seedPath, JSON.stringify(seed));
        await dev.restart();
        const r = await a.create("db-3", retain());
        assert.deepEqual(
          r.body,
          conflictStatus("db-3", `${MISMATCH}: it is a /32 and this claim asks for a /31`),
        );
      },
    );
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev retain: the earlier storage's 409, from the seed or the admin port", async (t) => {
  const seed = retainSeed({ retention: { recreate: "Conflict", sweepInterval: "0s" } });
  (seed.projects[0].ipPools[0].spec as Any).maxRetentionLease = "30m";
  const dev = await startMiloDev({ seed });
  const a = api(dev);
  try {
    await t.step("recreate Conflict: re-creating over a retained allocation is 409", async () => {
      assert.deepEqual(await dev.retention(), {
        recreate: "Conflict",
        sweepInterval: "0s",
        leaseGrace: "24h",
      });
      const { alloc, cidr } = await retained(a, "db-0");
      const r = await a.create("db-0", retain());
      assert.deepEqual(
        r.body,
        conflictStatus(
          "db-0",
          `IPAllocation "${alloc}" (${cidr}, class "vpc-pods-ipv4") was retained when the ` +
            "previous claim of this name was deleted and holds its address; this server does " +
            "not re-bind a retained allocation: it is released when its retention lease ends " +
            "or the IPAllocation is deleted",
        ),
      );
      assert.equal((await a.alloc(alloc)).body.spec.claimRef, undefined, "retained");
    });

    await t.step("switched at run time; DELETE /retention goes back to the seed's", async () => {
      assert.equal((await dev.setRetention({ recreate: "Rebind" })).recreate, "Rebind");
      const c = await bound(a, "db-0", retain());
      assert.equal(c.status.address, "10.40.0.1");
      // A live name: Milo's reclaim probe finds its allocation bound (storage.go, phase 1a).
      assert.deepEqual(
        (await a.create("db-0", retain())).body,
        conflictStatus(
          "db-0",
          `${MISMATCH}: an allocation under this identity is already bound to "db-0"`,
        ),
      );
      const back = await dev.fetch(`${dev.adminUrl}/retention`, { method: "DELETE" });
      assert.equal((await back.json()).recreate, "Conflict");
      assert.equal(
        (await a.create("db-0", retain())).body.reason,
        "AlreadyExists",
        "the earlier storage",
      );
      const bad = await dev.fetch(`${dev.adminUrl}/retention`, {
        method: "PUT",
        body: JSON.stringify({ recreate: "Sometimes" }),
      });
      assert.equal(bad.status, 400);
      assert.match((await bad.json()).error, /recreate must be "Rebind" or "Conflict"/);
    });

    await t.step(
      "the pool's maxRetentionLease caps a class with none; no lease: held",
      async () => {
        await retained(a, "cap-v4");
        await retained(a, "keep-v6", { className: "vpc-pods-ipv6" });
        await swept(dev, "29m", [2, 0, 0, 1]);
        await swept(dev, "61m", [2, 0, 1, 1]);
        assert.equal((await dev.stats()).retained, 1, "the v6 one has no lease");
      },
    );
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev retain: the lease sweeper marks, then releases", async (t) => {
  const seed = retainSeed({ retentionLease: "1h", retention: { sweepInterval: "0s" } });
  const dev = await startMiloDev({ seed });
  const a = api(dev);
  try {
    await t.step(
      "within the lease nothing happens; past it Expiring; re-bind withdraws it",
      async () => {
        const { alloc } = await retained(a, "lease-a");
        await swept(dev, "0s", [1, 0, 0, 0]);
        await swept(dev, "61m", [1, 1, 0, 0]);
        await swept(dev, "62m", [1, 0, 0, 0]);
        const al = (await a.alloc(alloc)).body;
        assert.equal(al.status.phase, "Ready");
        const exp = al.status.conditions.find((c: Any) => c.type === "Expiring");
        assert.equal(exp.reason, "RetentionLeaseElapsed");
        assert.match(
          exp.message,
          /^retention lease elapsed; this address will be released at \S+Z/,
        );
        const c = await bound(a, "lease-a", retain());
        assert.equal(c.status.address, "10.40.0.1", "an Expiring allocation still re-binds");
        assert.equal((await a.alloc(alloc)).body.status.conditions, undefined);
      },
    );

    await t.step("past lease and grace (clamped to the lease) it is released", async () => {
      assert.equal((await a.del("lease-a")).status, 200, "re-bound, it keeps its Retain");
      const before = BigInt(await a.allocated());
      const [alloc] = await a.allocs();
      await swept(dev, "119m", [1, 1, 0, 0]);
      await swept(dev, "2h", [1, 0, 1, 0]);
      assert.equal((await a.alloc(alloc)).status, 404);
      assert.equal(BigInt(await a.allocated()), before - 1n);
      const other = await bound(a, "lease-b");
      assert.equal(other.status.address, "10.40.0.1", "another name gets it");
    });
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev retain: the sweeper's timer releases an expired address", async () => {
  const seed = retainSeed({
    retentionLease: "300ms",
    retention: { sweepInterval: "100ms", leaseGrace: "24h" },
  });
  const dev = await startMiloDev({ seed });
  const a = api(dev);
  try {
    const { alloc, claim } = await retained(a, "short-a");
    assert.equal((await a.alloc(alloc)).status, 200);
    const deadline = Date.now() + 10_000;
    while ((await a.alloc(alloc)).status !== 404) {
      assert.ok(Date.now() < deadline, "released within 10 s");
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal((await bound(a, "short-b")).status.address, claim.status.address);
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev retain: seed validation of leases and retention", () => {
  const bad = (mutate: (s: Any) => void, re: RegExp) => {
    const s: Any = retainSeed();
    mutate(s);
    assert.throws(() => validateSeed(s), re);
  };
  bad(
    (s) => s.projects[0].ipClasses[0].spec.retentionLease = "0s",
    /retentionLease must be a positive duration; leave it unset for no expiry, and use reclaimPolicy Delete to release immediately/,
  );
  bad((s) => s.projects[0].ipClasses[0].spec.retentionLease = "soon", /must be a duration/);
  bad((s) => s.projects[0].ipPools[0].spec.maxRetentionLease = "-1h", /maxRetentionLease/);
  bad((s) => s.projects[0].ipClasses[0].spec.reclaimPolicy = "Keep", /Delete or Retain/);
  bad((s) => s.retention = { recreate: "Never" }, /retention.recreate/);
  bad((s) => s.retention = { sweep: "1s" }, /no setting "sweep"/);
  const ok = validateSeed(retainSeed({ retentionLease: "720h" }));
  assert.deepEqual(ok.retention, { recreate: "Rebind", sweepInterval: "5m", leaseGrace: "24h" });
});

Deno.test("a release racing a re-creation of its name, against Milo's unchecked precondition: made again, its address back", async () => {
  const dev = await startMiloDev({ seed: retainSeed({ retentionLease: "1h" }) });
  const a = api(dev);
  const holder = (id: string) => ({ annotations: { "milo-ipam.io/container-id": id } });
  try {
    const old = await bound(a, "db-0", retain(holder("old")));
    let newer: Any;
    const client = new MiloClient({
      baseUrl: dev.url,
      namespace: "default",
      token: dev.token,
      requestMs: 2_000,
      deadline: Date.now() + 10_000,
      fetch: (async (input: RequestInfo | URL, init?: RequestInit) => {
        if (init?.method === "DELETE" && !newer) {
          // Between the release's GET and its DELETE: the old claim goes (its
          // sandbox's own DEL) and the next sandbox makes the name again.
          assert.equal((await a.del("db-0")).status, 200);
          newer = await bound(a, "db-0", retain(holder("new")));
        }
        return await dev.fetch(String(input), init);
      }) as typeof fetch,
    });
    assert.equal(await client.releaseClaim("db-0", old.metadata.uid), "changed");
    const now = (await miloApi<Any>(dev, "GET", `${NS}/ipclaims/db-0`)).body;
    assert.equal(now.metadata.annotations["milo-ipam.io/container-id"], "new");
    assert.equal(now.status.address, newer.status.address, "re-bound: the new holder's address");
    assert.notEqual(now.metadata.uid, newer.metadata.uid, "made again");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev retain: the lease sweeper every 5 minutes, at most 50 retained a pool each pass, oldest first (sweep.go)", async () => {
  const dev = await startMiloDev({
    seed: retainSeed({ retentionLease: "1h", retention: { leaseGrace: "1h" } }),
  });
  const a = api(dev);
  try {
    assert.equal((await dev.retention()).sweepInterval, "5m", "defaultLeaseSweepInterval");
    await dev.setRetention({ sweepInterval: "0s", leaseGrace: "1h" });
    const names = Array.from({ length: 60 }, (_, i) => `r-${String(i).padStart(2, "0")}`);
    for (const n of names) await retained(a, n);
    await swept(dev, "90m", [50, 50, 0, 0]);
    // The same 50 again (loadRetainedAllocations: the oldest, LIMIT 50): the other 10 wait
    // until those are released.
    await swept(dev, "90m", [50, 0, 0, 0]);
    await swept(dev, "3h", [50, 0, 50, 0]);
    await swept(dev, "3h", [10, 0, 10, 0]);
    assert.equal((await dev.stats()).retained, 0);
  } finally {
    await dev.stop();
  }
});
