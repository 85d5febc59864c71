/**
 * milo-dev enforces Milo's quota on claim creates by default, as Milo's IPAM
 * server runs milo's `ResourceQuotaEnforcement` admission
 * (`pkg/quota/admission/plugin.go`, `errors.go`): a per-project limit from
 * the seed, every refusal a 403 whose message tells its kind, the wait for
 * the quota controllers (holding the request's APF seat), and the
 * AllowanceBucket that counts what the project holds.
 */

import assert from "node:assert/strict";
import { bucketName } from "../lib/milo_quota.ts";
import { QUOTA_REFUSALS } from "../milo-dev/quota.ts";
import { claimBody, miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { until } from "../testing/process.ts";
import { DEV_SEED } from "../testing/seeds.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const FIX = new URL("./fixtures/milo/", import.meta.url);
const fixture = async (name: string): Promise<Any> =>
  JSON.parse(await Deno.readTextFile(new URL(name, FIX)));
const NS = "/namespaces/default";

/** DEV_SEED with tenant-a's `ipclaims-per-project` at `quota`. */
function seedWithQuota(quota: number): Any {
  const seed: Any = structuredClone(DEV_SEED);
  seed.projects[0].quota = quota;
  return seed;
}

const create = (dev: MiloDev, name: string, opts: Parameters<typeof claimBody>[1] = {}) =>
  miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody(name, opts) });

/** Milo's 403 of a quota refusal of `name` (`NewForbidden` on ipclaims). */
function refusal(name: string, why: keyof typeof QUOTA_REFUSALS): Any {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: `ipclaims.ipam.miloapis.com "${name}" is forbidden: ${QUOTA_REFUSALS[why]}`,
    reason: "Forbidden",
    details: { name, group: "ipam.miloapis.com", kind: "ipclaims" },
    code: 403,
  };
}

/** Waits until milo-dev has received `n` claim creates (the last one now holds its seat). */
async function arrived(dev: MiloDev, n: number): Promise<void> {
  await until(async () => ((await dev.stats()).byMethod.POST ?? 0) >= n, `${n} creates received`);
}

/** The project's AllowanceBucket of IPClaims, as Milo's quota API answers it. */
async function bucket(dev: MiloDev, project = "tenant-a"): Promise<Any> {
  const path = `/apis/quota.miloapis.com/v1alpha1/namespaces/milo-system/allowancebuckets/${
    bucketName(project)
  }`;
  const res = await dev.fetch(`${dev.url}${path}`, {
    headers: { authorization: `Bearer ${dev.token}` },
  });
  return { status: res.status, body: await res.json() };
}

Deno.test("milo-dev quota: a project at its ipclaims-per-project limit is Milo's 403; a deleted claim frees a unit", async () => {
  const dev = await startMiloDev({ seed: seedWithQuota(2) });
  try {
    assert.equal((await create(dev, "q-1")).status, 201);
    assert.equal((await create(dev, "q-2")).status, 201);
    const denied = await create(dev, "pod-3f9a1c2b7d4e5f60a1b2-v4");
    assert.deepEqual(
      [denied.status, denied.body],
      [403, await fixture("status-403-quota-denied.json")],
    );
    // A create of the denied name before Milo's cleanup deleted its ResourceClaim.
    const again = await create(dev, "pod-3f9a1c2b7d4e5f60a1b2-v4");
    assert.deepEqual(again.body, refusal("pod-3f9a1c2b7d4e5f60a1b2-v4", "conflict"));
    assert.deepEqual((await dev.stats()).quotaRefused, { denied: 1, conflict: 1 });
    // Validation comes first (AllocatingREST.Create calls createValidation after it), and a
    // dry run is not admitted (Validate skips it).
    assert.equal((await create(dev, "Not_A_Name")).status, 422);
    const dry = await miloApi<Any>(dev, "POST", `${NS}/ipclaims?dryRun=All`, {
      body: claimBody("q-dry"),
    });
    assert.equal(dry.status, 201);
    // A name that holds its unit passes again (errAlreadyGranted) to Milo's own answer.
    const held = await create(dev, "q-1");
    assert.deepEqual([held.status, held.body.reason], [409, "Conflict"]);
    const b = await bucket(dev);
    assert.equal(b.status, 200);
    assert.equal(b.body.metadata.name, bucketName("tenant-a"));
    assert.deepEqual(b.body.spec, {
      consumerRef: { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: "tenant-a" },
      resourceType: "ipam.miloapis.com/ipclaims",
    });
    assert.deepEqual(
      [b.body.status.limit, b.body.status.allocated, b.body.status.available],
      [2, 2, 0],
    );
    assert.equal((await miloApi(dev, "DELETE", `${NS}/ipclaims/q-2`)).status, 200);
    assert.equal((await create(dev, "q-3")).status, 201, "the deleted claim's unit is free");
    const other = await bucket(dev, "tenant-b");
    assert.equal(other.status, 404, "a project reads its own bucket only");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev quota: a create that fails after its grant holds the unit until Milo drops the orphan", async () => {
  const dev = await startMiloDev({ seed: seedWithQuota(1) });
  try {
    // Quota admission comes before the class: the unknown class is 400 after the grant.
    const failed = await create(dev, "q-1", { className: "vpc-pods-ipv9" });
    assert.equal(failed.status, 400);
    assert.equal((await bucket(dev)).body.status.allocated, 1);
    assert.deepEqual((await create(dev, "q-2")).body, refusal("q-2", "denied"));
    await dev.setQuota({ orphanMaxAgeMs: 0 });
    assert.equal((await create(dev, "q-3")).status, 201, "the orphan is gone");
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev quota: no decision within ClaimWaitTimeout is the timeout 403; a misconfigured policy refuses every create", async () => {
  const dev = await startMiloDev();
  try {
    await dev.setQuota({ grantDelayMs: 400, waitTimeoutMs: 100 });
    const t0 = performance.now();
    const late = await create(dev, "q-late");
    assert.deepEqual(late.body, refusal("q-late", "timeout"));
    assert.ok(performance.now() - t0 >= 100, "answered once the wait ran out");
    await dev.setQuota({ misconfigured: true });
    assert.deepEqual((await create(dev, "q-m")).body, refusal("q-m", "misconfigured"));
    await dev.setQuota({});
    assert.equal((await create(dev, "q-ok")).status, 201);
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev quota: a create waiting for its grant holds its APF seat; a GET and a DELETE past the seats wait, or are 429", async () => {
  const dev = await startMiloDev();
  try {
    assert.equal((await create(dev, "q-0")).status, 201);
    await dev.setLimits({ concurrency: 1 });
    await dev.setQuota({ grantDelayMs: 2_000 });
    const waiting = create(dev, "q-1");
    await arrived(dev, 2);
    const get = await miloApi<Any>(dev, "GET", `${NS}/ipclaims/q-0`);
    assert.equal(get.status, 200, "served once the create's seat is free");
    assert.equal((await waiting).status, 201);
    assert.ok((await dev.stats()).queued >= 1, "the GET waited in the queue");
    await dev.setLimits({ concurrency: 1, queueLength: 0 });
    const again = create(dev, "q-2");
    await arrived(dev, 3);
    const refused = await Promise.all([
      dev.fetch(`${dev.url}/apis/ipam.miloapis.com/v1alpha1${NS}/ipclaims/q-0`, {
        headers: { authorization: `Bearer ${dev.token}` },
      }),
      dev.fetch(`${dev.url}/apis/ipam.miloapis.com/v1alpha1${NS}/ipclaims/q-1`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${dev.token}` },
      }),
    ]);
    for (const r of refused) {
      assert.equal(r.status, 429);
      assert.equal(await r.text(), "Too many requests, please try again later.\n");
      assert.equal(r.headers.get("content-type"), "text/plain; charset=utf-8");
      assert.ok(r.headers.get("retry-after"));
    }
    assert.equal((await again).status, 201);
    assert.equal((await dev.stats()).throttled, 2);
    assert.equal(
      (await miloApi(dev, "GET", `${NS}/ipclaims/q-1`)).status,
      200,
      "the refused DELETE touched nothing",
    );
  } finally {
    await dev.stop();
  }
});
