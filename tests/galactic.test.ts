/**
 * What milo-ipam does for a galactic config (lib/galactic.ts, lib/evidence.ts)
 * in-process over the stub: gateways required, every claim held (Retain),
 * one slot per attachment value, an old-named slot released by the node's
 * record, and reconcile judging a galactic attachment by its absence only
 * once a cache named it. `tests/process_galactic.test.ts` runs the same
 * rules through the galactic stand-in.
 */
import assert from "node:assert/strict";
import { claimBody, claimName } from "../lib/claims.ts";
import { check } from "../lib/check.ts";
import { del } from "../lib/del.ts";
import { CniError } from "../lib/errors.ts";
import { galacticValue, isGalactic } from "../lib/galactic.ts";
import { Holdings } from "../lib/holdings.ts";
import { reconcile, type ReconcileReport } from "../lib/reconcile.ts";
import { sha256Hex } from "../lib/sha256.ts";
import {
  existingClaim,
  invocation,
  type InvocationOptions,
  withTempDir,
  withVerb,
} from "../testing/stub_invocation.ts";
import { StubMilo, type WireClaim } from "../testing/stub_milo.ts";

/** A galactic master's identifiers (base62, as its masters require). */
const GALACTIC = { vpc: "7b3e", vpcattachment: "a1" };
const GRACE_MS = 300_000;

Deno.test("isGalactic(): vpc and vpcattachment both base62; galacticValue() is the value they encode", () => {
  assert.ok(isGalactic(GALACTIC));
  for (const not of [{}, { vpc: "7b3e" }, { vpc: "vpc-7b3e", vpcattachment: "a1" }]) {
    assert.ok(!isGalactic(not), JSON.stringify(not));
  }
  // kenshaw/baseconv's Digits62 (0-9, a-z, A-Z): leading zeros drop, case is a digit.
  assert.equal(galacticValue("7b3e"), (((7 * 62 + 11) * 62 + 3) * 62 + 14).toString(16));
  assert.equal(galacticValue("007b3e"), galacticValue("7b3e"));
  assert.equal(galacticValue("A"), (36).toString(16));
  assert.equal(galacticValue("0"), "0");
});

Deno.test("a galactic config's ADD without a gateway for a family it leases is 7 naming the key; the node config's default counts", async () => {
  await withVerb("ADD", (stub, inv) => {
    const refused = (o: Partial<InvocationOptions>, key: string) => {
      assert.throws(() => inv({ top: GALACTIC, ...o }), (e: unknown) => {
        assert.ok(e instanceof CniError && e.code === 7, String(e));
        assert.match(e.message, new RegExp(`^field ipam\\.gateways\\.${key}: `));
        assert.match(e.details, /internal\/hostgw\/hostgw\.go/);
        return true;
      });
    };
    refused({ ipam: { gateways: {} } }, "ipv4");
    refused({ ipam: { gateways: { ipv4: "169.254.1.1" } } }, "ipv6");
    refused({ ipam: { gateways: {}, classes: { ipv6: "vpc-pods-ipv6" } } }, "ipv6");
    // A family it does not lease needs none; the node config's default is the platform's.
    inv({
      top: GALACTIC,
      ipam: { gateways: {}, classes: { ipv4: "vpc-pods-ipv4" } },
      node: {
        gateways: { ipv4: "169.254.1.1" },
      },
    });
    // Not a galactic config (no vpc, or not base62): nothing required, as before.
    inv({ ipam: { gateways: {} } });
    inv({ top: { vpc: undefined, vpcattachment: undefined }, ipam: { gateways: {} } });
    assert.equal(stub.seen("POST").length, 0);
    return Promise.resolve();
  });
  // DEL and CHECK of such a config are not refused: a running pod's DEL still releases.
  for (const command of ["DEL", "CHECK"] as const) {
    await withVerb(command, (_stub, inv) => {
      inv({ top: GALACTIC, ipam: { gateways: {} } });
      return Promise.resolve();
    });
  }
});

Deno.test("a galactic config's claims are Retain under every identity; other configs keep their policy", async () => {
  await withVerb("ADD", (_stub, inv) => {
    const policy = (o: Partial<InvocationOptions>) => {
      const i = inv(o);
      const body = claimBody("default", i.conf.network, i.attachment, "ipv4");
      return (body.spec as { reclaimPolicy: string }).reclaimPolicy;
    };
    assert.equal(policy({ top: GALACTIC }), "Retain", "the default identity too");
    assert.equal(policy({}), "Delete", "vpc-7b3e is not base62: no galactic master sends it");
    assert.equal(policy({ top: { vpc: undefined, vpcattachment: undefined } }), "Delete");
    return Promise.resolve();
  });
});

Deno.test("one galactic attachment, one slot: DEL of a slot named by an earlier build releases it by the node's record; CHECK says it is missing", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const slot: Partial<InvocationOptions> = {
      top: GALACTIC,
      ipam: { identity: "network", classes: { ipv4: "vpc-pods-ipv4" } },
      node: { allowIdentities: [{ identity: "network" }] },
    };
    const add = inv(slot);
    // The earlier name: the values as written and the interface (lib/claims.ts before).
    const a = add.attachment;
    const old = `slot-${
      sha256Hex(
        ["slot-vpc", a.cluster, a.podNamespace!, a.vpc!, a.vpcattachment!, a.ifname].join("\u0000"),
      ).slice(0, 20)
    }-v4`;
    assert.notEqual(old, claimName(a, "ipv4"));
    const body = claimBody("default", add.conf.network, a, "ipv4");
    const made = stub.materialize({ ...body, metadata: { ...body.metadata as object, name: old } });
    add.holdings.held(a, "add-old", [{ name: old, uid: made.metadata.uid }], Date.now());
    const c = inv({ ...slot, command: "CHECK", top: { ...GALACTIC, prevResult: undefined } });
    await assert.rejects(check(c), (e: unknown) => e instanceof CniError && e.code === 104);
    const r = await del(inv({ ...slot, command: "DEL" }));
    assert.ok(r.claims.includes(old), JSON.stringify(r));
    assert.deepEqual(stub.all(), [], "the old-named slot is released");
  });
});

/** A node with galactic and other attachments recorded an hour ago, and its result cache. */
async function world(dir: string) {
  const stub = new StubMilo();
  const clock = { t: Date.now() };
  stub.now = () => clock.t - 3_600_000;
  const addOf = (cid: string, o: Partial<InvocationOptions> = {}) =>
    invocation(stub, { command: "ADD", stateDir: dir, containerId: cid, ...o });
  const lease = (cid: string, o: Partial<InvocationOptions> = {}, record = true) => {
    const inv = addOf(cid, o);
    const claims = [existingClaim(stub, inv, "ipv4"), existingClaim(stub, inv, "ipv6")];
    const held = claims.map((c) => ({ name: c.metadata.name, uid: c.metadata.uid }));
    if (record) inv.holdings.held(inv.attachment, `add-${cid}`, held, clock.t - 3_600_000);
    return claims;
  };
  const node = addOf("x").node;
  const [cacheDir] = node.resultsDirs;
  await Deno.mkdir(cacheDir, { recursive: true });
  const cache = async (cid: string, present = true) => {
    const path = `${cacheDir}/net-${cid}-eth0`;
    if (!present) return await Deno.remove(path);
    await Deno.writeTextFile(path, JSON.stringify({ kind: "cniCacheV1", containerId: cid }));
  };
  const run = (force = false) =>
    reconcile({
      node,
      milo: stub.client(),
      graceMs: GRACE_MS,
      dryRun: false,
      force,
      now: () => clock.t,
    });
  return { stub, clock, lease, cache, run };
}

const names = (claims: WireClaim[]) => claims.map((c) => c.metadata.name).sort();
const keptWhy = (r: ReconcileReport, claims: WireClaim[]) =>
  claims.map((c) => r.kept.find((k) => k.claim === c.metadata.name)?.reason ?? "(not kept)");

Deno.test("reconcile: a galactic attachment no cache has named is not released by its absence, even forced; once named, it is", async () => {
  await withTempDir(async (dir) => {
    const w = await world(dir);
    const live = w.lease("live", { top: GALACTIC });
    await w.cache("live");
    const vm = w.lease("vm", { top: { ...GALACTIC, vpcattachment: "b2" } });
    // Not a galactic config: judged as before, absent twice a grace apart.
    const plain = w.lease("plain");
    for (let i = 0; i < 3; i++) {
      const r = await w.run(i === 2);
      for (const why of keptWhy(r, vm)) assert.match(why, /^galactic attachment no result cache/);
      w.clock.t += GRACE_MS;
    }
    assert.deepEqual(
      names(w.stub.all()),
      names([...live, ...vm]),
      "the plain orphan went, the VM stayed",
    );
    // Its runtime caches it now (named once), then it goes without a DEL: absent twice, released.
    await w.cache("vm");
    assert.deepEqual(
      keptWhy(await w.run(), vm),
      vm.map(() => "live: a result cache names its container"),
    );
    await w.cache("vm", false);
    await w.run();
    w.clock.t += GRACE_MS;
    const r = await w.run();
    assert.deepEqual(r.released.map((x) => x.claim).sort(), names(vm));
    assert.deepEqual(names(w.stub.all()), names(live));
    assert.ok(!names(plain).some((n) => names(w.stub.all()).includes(n)));
  });
});

Deno.test("reconcile: a galactic claim found in Milo without a record (a lost stateDir) waits for a cache too", async () => {
  await withTempDir(async (dir) => {
    const w = await world(dir);
    await w.cache("live");
    w.lease("live", { top: GALACTIC }, false);
    const vm = w.lease("vm", { top: GALACTIC, containerId: "vm" }, false);
    for (let i = 0; i < 3; i++) {
      const r = await w.run();
      if (i === 0) assert.ok(r.listed, "no record: Milo listed into it");
      for (const why of keptWhy(r, vm)) assert.match(why, /^galactic attachment no result cache/);
      w.clock.t += GRACE_MS;
    }
    const marked = new Holdings(dir).all().map(({ h }) => [h.containerId, h.galactic]);
    assert.deepEqual(
      marked.sort(),
      [["live", GALACTIC], ["vm", GALACTIC]],
      "the record marks them from the claims' annotations",
    );
    assert.equal(w.stub.all().length, 4);
  });
});
