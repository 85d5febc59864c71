/**
 * The reconcile's verification of live claims (lib/_reconcile_verify.ts),
 * in-process over the stub answering as Milo does: a live attachment whose
 * claim Milo lost gets it back on its address, an address another holds is a
 * duplicate (reported, never taken), and each run reads only its share.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimName, KEYS } from "../lib/claims.ts";
import { Holdings } from "../lib/holdings.ts";
import { formatCidr, parseCidr } from "../lib/ip.ts";
import { exitOf, reconcile } from "../lib/reconcile.ts";
import { stateFileOf } from "../lib/liveness.ts";
import { statusReply } from "../testing/milo_fixtures.ts";
import { invocation, type InvocationOptions, withTempDir } from "../testing/stub_invocation.ts";
import { StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const GRACE_MS = 300_000;

/** A node whose pods `ids` were ADDed (the plugin's own ADD) and run (a cache names each). */
async function node(dir: string, ids: string[], o: Partial<InvocationOptions> = {}) {
  const stub = new StubMilo();
  const clock = { t: Date.now() };
  const inv = (command: InvocationOptions["command"], containerId: string) =>
    invocation(stub, { command, stateDir: dir, containerId, now: () => clock.t, ...o });
  for (const id of ids) {
    await add(inv("ADD", id));
    await Deno.mkdir(`${dir}/results`, { recursive: true });
    await Deno.writeTextFile(
      `${dir}/results/vpc-7b3e-${id}-eth0`,
      JSON.stringify({ kind: "cniCacheV1", containerId: id, ifName: "eth0", result: {} }),
    );
  }
  const run = (dryRun = false) =>
    reconcile({
      node: inv("DEL", ids[0]).node,
      milo: stub.client(),
      graceMs: GRACE_MS,
      dryRun,
      now: () => clock.t,
    });
  const names = (id: string) =>
    ["ipv4", "ipv6"].map((f) => claimName(inv("DEL", id).attachment, f as "ipv4"));
  return { stub, clock, inv, run, names };
}

/** The address a claim leases, canonical. */
const addressOf = (c: WireClaim | undefined) =>
  c?.status.allocatedCIDR && formatCidr(parseCidr(c.status.allocatedCIDR)!);

Deno.test("reconcile: a live attachment whose claim Milo lost gets it again, on its address", async () => {
  await withTempDir(async (dir) => {
    const w = await node(dir, ["web"]);
    const [v4, v6] = w.names("web");
    const before = [addressOf(w.stub.get(v4)), addressOf(w.stub.get(v6))];
    // Milo deletes the namespace's claims (its namespace deleted, or a claim deleted by hand).
    w.stub.remove(v4);
    w.stub.remove(v6);
    w.clock.t += 1_800_000;
    const r = await w.run();
    assert.deepEqual(
      r.remade.map((x) => [x.claim, x.via, x.outcome]).sort(),
      [[v4, "verify", "made"], [v6, "verify", "made"]],
    );
    assert.deepEqual([addressOf(w.stub.get(v4)), addressOf(w.stub.get(v6))], before);
    assert.equal(w.stub.get(v4)?.metadata.annotations?.[KEYS.containerId], "web");
    const posted = w.stub.seen("POST").at(-1)!.body as { spec: { address?: string } };
    assert.ok(posted.spec.address, "made again pinned to its address");
    assert.equal(exitOf(r), 0);
    const record = new Holdings(dir).read(w.inv("DEL", "web").attachment);
    assert.deepEqual(
      record?.claims.map((c) => c.uid).sort(),
      [w.stub.get(v4)?.metadata.uid, w.stub.get(v6)?.metadata.uid].sort(),
      "the record names the claims made again",
    );
  });
});

Deno.test("reconcile: a lost claim whose address another claim took is a duplicate: reported, never taken", async () => {
  await withTempDir(async (dir) => {
    const w = await node(dir, ["web"], { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const [v4] = w.names("web");
    const address = addressOf(w.stub.get(v4));
    w.stub.remove(v4);
    // First fit: the next ADD anywhere gets the address freed.
    const other = invocation(w.stub, {
      command: "ADD",
      stateDir: `${dir}/other`,
      containerId: "other",
      ipam: { classes: { ipv4: "vpc-pods-ipv4" } },
      node: { node: "node-2" },
    });
    w.stub.allocate = () => ({ allocatedCIDR: address!, address: address!.split("/")[0] });
    await add(other);
    w.clock.t += 1_800_000;
    const r = await w.run();
    assert.deepEqual(r.remade, []);
    assert.equal(r.duplicates.length, 1);
    assert.equal(r.duplicates[0].address, address!.split("/")[0]);
    assert.match(r.duplicates[0].holder, /container=web/);
    assert.equal(w.stub.get(v4), undefined, "nothing taken from the other holder");
    assert.equal(exitOf(r), 1, "a duplicate fails the run");
    const state = JSON.parse(await Deno.readTextFile(stateFileOf(w.inv("DEL", "web").node)));
    assert.equal(state.findings.duplicates.length, 1, "kept for show");
  });
});

Deno.test("reconcile: a claim of a live attachment's name held by another sandbox is a duplicate", async () => {
  await withTempDir(async (dir) => {
    const w = await node(dir, ["web"], { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const [v4] = w.names("web");
    const c = w.stub.get(v4)!;
    w.stub.put({
      ...c,
      metadata: {
        ...c.metadata,
        uid: "another",
        annotations: { ...c.metadata.annotations, [KEYS.containerId]: "intruder" },
      },
    });
    w.clock.t += 1_800_000;
    const r = await w.run();
    assert.equal(r.duplicates.length, 1);
    assert.match(r.duplicates[0].now, /container=intruder/);
    assert.equal(w.stub.seen("POST").length, 1, "only the ADD's create: nothing made");
  });
});

Deno.test("reconcile: each run reads its share of the live claims; a missing one widens the run to all", async () => {
  await withTempDir(async (dir) => {
    const ids = ["a", "b", "c", "d", "e", "f"];
    const w = await node(dir, ids, { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const gets = () => w.stub.seen("GET").filter((r) => r.query.labelSelector === undefined);
    w.clock.t += 1_800_000;
    await w.run(); // the first run lists Milo (no record was listed yet)
    const base = gets().length;
    w.clock.t += 300_000;
    await w.run();
    // Six claims verified every 30 minutes over runs 5 minutes apart: one a run.
    assert.equal(gets().length - base, 1);
    // A claim deleted by hand is found within the verification interval.
    const [f4] = w.names("f");
    w.stub.remove(f4);
    const found: string[] = [];
    for (let i = 0; i < 6 && !found.length; i++) {
      w.clock.t += 300_000;
      found.push(...(await w.run()).remade.map((x) => x.claim));
    }
    assert.deepEqual(found, [f4]);
    // The namespace's claims all deleted: the run's first read misses, and it reads them all.
    for (const id of ids) w.stub.remove(w.names(id)[0]);
    const before = gets().length;
    w.clock.t += 300_000;
    const r = await w.run();
    assert.deepEqual(r.remade.map((x) => x.claim).sort(), ids.map((id) => w.names(id)[0]).sort());
    assert.ok(gets().length - before >= ids.length, "a miss reads every live claim");
  });
});

Deno.test("reconcile: no claim is made again for an attachment its runtime DELeted (a stale cache entry, a journal entry owed)", async () => {
  await withTempDir(async (dir) => {
    const w = await node(dir, ["web"], { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const [v4] = w.names("web");
    // The DEL's release failed: journaled; the runtime left its cache entry.
    w.stub.inject({ method: "DELETE", times: 64, answer: () => statusReply(503) });
    const del = (await import("../lib/del.ts")).del;
    await del(w.inv("DEL", "web")).catch(() => undefined);
    w.stub.clearFaults();
    w.stub.remove(v4); // then the claim went (the sweep, by hand)
    w.clock.t += 1_800_000;
    const r = await w.run();
    assert.deepEqual(r.remade, []);
    assert.equal(w.stub.get(v4), undefined, "a DELeted attachment gets nothing back");
  });
});

Deno.test("reconcile: a lost claim Milo refuses to make again stays reported missing, and is tried again", async () => {
  await withTempDir(async (dir) => {
    const w = await node(dir, ["web"], { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
    const [v4] = w.names("web");
    w.stub.remove(v4);
    w.stub.namespaces.default = "terminating";
    w.clock.t += 1_800_000;
    const r = await w.run();
    assert.deepEqual(r.missing.map((m) => m.claim), [v4]);
    assert.match(r.missing[0].why, /namespace default/);
    assert.equal(exitOf(r), 1);
    w.stub.namespaces.default = "live";
    w.clock.t += 300_000;
    const again = await w.run();
    assert.deepEqual(again.remade.map((x) => x.claim), [v4]);
  });
});

Deno.test("reconcile --dry-run verifies nothing and makes nothing", async () => {
  await withTempDir(async (dir) => {
    const w = await node(dir, ["web"]);
    w.stub.remove(w.names("web")[0]);
    w.clock.t += 1_800_000;
    const r = await w.run(true);
    assert.deepEqual(r.remade, []);
    assert.equal(r.verified, 0);
  });
});

Deno.test("reconcile: a claim made again that Milo re-binds to the name's retained address of another sandbox is released, and that sandbox's claim comes back", async () => {
  await withTempDir(async (dir) => {
    // Two live sandboxes of one slot (network identity: one name, Retain) on this node: each
    // ADD succeeded while the other's claim was gone (deleted behind the node's back).
    const slot = {
      ipam: { identity: "network", classes: { ipv4: "vpc-pods-ipv4" } },
      node: { allowIdentities: [{ identity: "network" }] },
    };
    const w = await node(dir, ["a"], slot);
    const [name] = w.names("a");
    const x = addressOf(w.stub.get(name))!;
    w.stub.remove(name);
    const y = "10.40.0.99/32";
    w.stub.allocate = () => ({ allocatedCIDR: y, address: y.split("/")[0] });
    w.clock.t += 1_000;
    await add(w.inv("ADD", "b"));
    await Deno.writeTextFile(
      `${dir}/results/vpc-7b3e-b-eth0`,
      JSON.stringify({ kind: "cniCacheV1", containerId: "b", ifName: "eth0", result: {} }),
    );
    // b's claim is deleted by hand: Milo keeps its address for the name (Retain).
    w.stub.deleteClaim(name);
    w.clock.t += 1_800_000;
    const r = await w.run();
    // a's repair posts its own address pinned; Milo re-binds the name's retained one (b's).
    const c = w.stub.get(name);
    assert.equal(c?.metadata.annotations?.[KEYS.containerId], "b", "the name is b's again");
    assert.equal(addressOf(c), y, "on b's address");
    assert.ok(r.duplicates.some((d) => d.address === x.split("/")[0]), "a is reported");
  });
});
