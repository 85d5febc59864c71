/** Tenancy: tokens map to projects; a project sees only its own world. */

import assert from "node:assert/strict";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
const NS = "/namespaces/default";
const B = { token: "dev-token-b" };

Deno.test("milo-dev tenancy: isolation, 401, 403", async () => {
  const dev = await startMiloDev();
  try {
    const a = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: claimBody("shared-name") });
    assert.equal(a.status, 201);
    assert.equal(a.body.status.address, "10.40.0.1");

    assert.deepEqual(await dev.listClaims("tenant-b"), []);
    assert.equal((await miloApi<Any>(dev, "GET", `${NS}/ipclaims/shared-name`, B)).status, 404);
    assert.equal((await miloApi<Any>(dev, "DELETE", `${NS}/ipclaims/shared-name`, B)).status, 404);
    assert.equal(
      (await miloApi<Any>(dev, "GET", `${NS}/ipclaims/shared-name`)).status,
      200,
      "still there for tenant-a",
    );
    const allocB = await miloApi<Any>(dev, "GET", `${NS}/ipallocations`, B);
    assert.deepEqual(allocB.body.items, []);

    const b = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("shared-name"),
      ...B,
    });
    assert.equal(b.status, 201, "same name in another project is another claim");
    assert.equal(b.body.status.poolRef.name, "vpc-9c1d-pods-v4");
    assert.equal(b.body.spec.ownerRef.name, "tenant-b");
    assert.equal(b.body.status.address, "10.50.0.1");

    const poolsB = await miloApi<Any>(dev, "GET", "/ippools", B);
    assert.deepEqual(poolsB.body.items.map((p: Any) => p.metadata.name), ["vpc-9c1d-pods-v4"]);
    assert.equal((await miloApi<Any>(dev, "GET", "/ippools/vpc-7b3e-pods-v4", B)).status, 404);
    assert.equal((await miloApi<Any>(dev, "GET", "/ipclasses/vpc-pods-ipv6", B)).status, 404);
    const v6 = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("v6", { className: "vpc-pods-ipv6" }),
      ...B,
    });
    assert.equal(v6.status, 400);
    assert.equal(v6.body.message, 'IPClass "vpc-pods-ipv6" not found');

    const mismatch = await miloApi<Any>(dev, "GET", `${NS}/ipclaims`, {
      project: "tenant-a",
      ...B,
    });
    assert.equal(mismatch.status, 403);
    assert.equal(mismatch.body.reason, "Forbidden");
    assert.equal(mismatch.body.code, 403);
    const write = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody("x"),
      project: "tenant-a",
      ...B,
    });
    assert.equal(write.status, 403);
    const unknownProject = await miloApi<Any>(dev, "GET", `${NS}/ipclaims`, {
      project: "tenant-z",
    });
    assert.equal(unknownProject.status, 403);
    const ownProject = await miloApi<Any>(dev, "GET", `${NS}/ipclaims`, {
      project: "tenant-b",
      ...B,
    });
    assert.deepEqual(ownProject.body.items.map((o: Any) => o.metadata.name), ["shared-name"]);

    for (const token of [null, "", "dev-token-c"]) {
      const r = await miloApi<Any>(dev, "GET", "/ippools", { token });
      assert.equal(r.status, 401);
      assert.equal(r.body.reason, "Unauthorized");
    }
    const basic = await dev.fetch(`${dev.url}/apis/ipam.miloapis.com/v1alpha1/ippools`, {
      headers: { authorization: "Basic ZGV2OmRldg==" },
    });
    assert.equal(basic.status, 401);
    await basic.body?.cancel();

    const owner = claimBody("owner");
    (owner.spec as Any).ownerRef = { apiGroup: "x", kind: "Cluster", name: "evil", uid: "keep-me" };
    const o = await miloApi<Any>(dev, "POST", `${NS}/ipclaims`, { body: owner });
    assert.deepEqual(o.body.spec.ownerRef, {
      apiGroup: "resourcemanager.miloapis.com",
      kind: "Project",
      name: "tenant-a",
      uid: "keep-me",
    });
  } finally {
    await dev.stop();
  }
});
