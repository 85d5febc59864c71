/**
 * A `network` slot belongs to one namespace and is named by what galactic keys
 * an attachment by (the values of vpc and vpcattachment), and an ADD's error
 * names nothing of a holder in another namespace, over the in-memory stub.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimBody, claimName, KEYS } from "../lib/claims.ts";
import { holderOf } from "../lib/holder.ts";
import { del } from "../lib/del.ts";
import type { Invocation } from "../lib/invocation.ts";
import { type InvocationOptions, rejectsWith, withVerb } from "../testing/stub_invocation.ts";
import type { StubMilo } from "../testing/stub_milo.ts";

const SLOT = { identity: "network", classes: { ipv4: "vpc-pods-ipv4" } };
const CID_DB = "d".repeat(64);
const CID_EVIL = "e".repeat(64);

type Build = (o?: Partial<InvocationOptions>) => Invocation;

/**
 * galactic's own NADs reuse one `name` in every namespace with another VPC
 * (`deploy/containerlab/resources/tenants/ns10/iad/nad.yaml`, `ns20/...`).
 */
function pod(
  inv: Build,
  command: InvocationOptions["command"],
  o: { cid: string; ns: string; pod: string; vpc: string; att: string; node?: string },
) {
  return inv({
    command,
    containerId: o.cid,
    ipam: SLOT,
    top: { name: "private", vpc: o.vpc, vpcattachment: o.att },
    args: { K8S_POD_NAMESPACE: o.ns, K8S_POD_NAME: o.pod, K8S_POD_UID: `uid-${o.pod}` },
    // The node grants the slot identity on this network to every namespace, as galactic's do.
    node: {
      node: o.node ?? "node-1",
      allowIdentities: [{ network: "private", identity: "network" }],
    },
  });
}

const DB = { cid: CID_DB, ns: "db", pod: "db-0", vpc: "10", att: "10", node: "node-db" };
const ns20 = { cid: CID_EVIL, ns: "ns20", pod: "web-0", vpc: "20", att: "20" };

/** The parts of a holder recorded on a claim that an error must not show another namespace. */
function assertNamesNothingOf(text: string, claim: ReturnType<StubMilo["all"]>[number]) {
  const h = holderOf(claim as never);
  for (const [what, v] of Object.entries(h)) {
    if (what === "cluster" || what === "ifname" || what === "network" || !v) continue;
    assert.ok(!text.includes(v), `the error names the holder's ${what} (${v}): ${text}`);
  }
  for (const v of ["db-0", "db/", "node-db"]) assert.ok(!text.includes(v), `${v} in: ${text}`);
}

Deno.test("slot names: a galactic config's from (cluster, namespace, the values of vpc and vpcattachment); the network's name only without a vpc", () => {
  const slot = {
    cluster: "c",
    containerId: CID_DB,
    ifname: "eth0",
    network: "private",
    identity: "network" as const,
    podNamespace: "ns10",
    vpc: "10",
    vpcattachment: "10",
  };
  const name = claimName(slot, "ipv4");
  assert.match(name, /^slot-[0-9a-f]{20}-v4$/);
  assert.equal(
    claimName({ ...slot, network: "another-name", containerId: CID_EVIL, podName: "x" }, "ipv4"),
    name,
    "galactic keys the interface by vpc and vpcattachment, not the conflist's name",
  );
  for (
    const other of [
      { podNamespace: "ns20" },
      { podNamespace: undefined },
      { vpc: "20" },
      { vpcattachment: "11" },
      { vpc: "1A" },
      { vpc: "1a" },
      { cluster: "c2" },
    ]
  ) {
    assert.notEqual(claimName({ ...slot, ...other }, "ipv4"), name, JSON.stringify(other));
  }
  // galactic keys an attachment by the base62 values (internal/crdnames/crdnames.go through
  // intf.Base62ToHex, internal/plumbing/intf/intf.go zero-padded): one attachment, one slot,
  // whatever its spelling or the interface the runtime names (Multus's net1 by annotation order).
  for (const same of [{ vpc: "010" }, { vpcattachment: "0010" }, { ifname: "net1" }]) {
    assert.equal(claimName({ ...slot, ...same }, "ipv4"), name, JSON.stringify(same));
  }
  // Not base62 (no galactic master delegates it): the values as written, and the interface.
  const raw = { ...slot, vpc: "vpc-10" };
  assert.notEqual(claimName({ ...raw, ifname: "net1" }, "ipv4"), claimName(raw, "ipv4"));
  assert.notEqual(claimName({ ...raw, vpc: "vpc-010" }, "ipv4"), claimName(raw, "ipv4"));
  // Without vpc and vpcattachment (a master other than galactic's): the network's name.
  const plain = { ...slot, vpc: undefined, vpcattachment: undefined };
  assert.notEqual(claimName(plain, "ipv4"), name);
  assert.notEqual(claimName({ ...plain, network: "n2" }, "ipv4"), claimName(plain, "ipv4"));
  assert.notEqual(
    claimName({ ...plain, podNamespace: "ns20" }, "ipv4"),
    claimName(plain, "ipv4"),
    "a slot belongs to one namespace with or without a vpc",
  );
  assert.notEqual(
    claimName({ ...slot, vpcattachment: undefined }, "ipv4"),
    name,
    "a vpc without its attachment keys by the network's name",
  );
});

Deno.test("network identity: two NADs of one name in two namespaces and two VPCs get two claims", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const a = await add(pod(inv, "ADD", DB));
    const b = await add(pod(inv, "ADD", ns20));
    const claims = stub.all();
    assert.equal(claims.length, 2, "one claim per namespace and VPC, no second holder refused");
    assert.notEqual(claims[0].metadata.name, claims[1].metadata.name);
    assert.deepEqual(
      claims.map((c) => c.metadata.annotations?.[KEYS.vpc]).sort(),
      ["10", "20"],
    );
    assert.notDeepEqual(a.output, b.output);
  });
});

Deno.test("network identity: another namespace's NAD with the same name, vpc and attachment cannot reach the slot", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const first = await add(pod(inv, "ADD", DB));
    const [held] = stub.all();
    // evil copies db's NAD into its namespace: the same name, class, scope, vpc and attachment.
    const evil = { ...DB, cid: CID_EVIL, ns: "evil", pod: "evil-0", node: "node-1" };
    const mine = await add(pod(inv, "ADD", evil));
    assert.notDeepEqual(mine.output, first.output, "evil gets an address of its own");
    assert.equal(stub.all().length, 2);
    // Its DEL releases its own claim only; db's slot is untouched, and stays db's.
    await del(pod(inv, "DEL", evil));
    const left = stub.all();
    assert.deepEqual(left.map((c) => c.metadata.uid), [held.metadata.uid]);
    assert.equal(holderOf(left[0] as never).pod, "db/db-0");
    // Squatting first does not stop the owner: evil's slot is another claim.
    await add(pod(inv, "ADD", evil));
    await del(pod(inv, "DEL", DB));
    await add(pod(inv, "ADD", { ...DB, cid: "f".repeat(64) }));
  });
});

/**
 * Stores a claim of the name `inv` derives, recording a pod of namespace db as
 * its holder (made by hand, or left by an earlier naming).
 */
function heldByDb(stub: StubMilo, inv: Invocation, over: Partial<Invocation["attachment"]> = {}) {
  const named = claimBody("default", inv.conf.network, inv.attachment, "ipv4");
  const holder = claimBody("default", inv.conf.network, {
    ...inv.attachment,
    containerId: CID_DB,
    node: "node-db",
    host: "host-db",
    podNamespace: "db",
    podName: "db-0",
    podUid: "uid-db-0",
    ...over,
  }, "ipv4");
  const meta = holder.metadata as Record<string, unknown>;
  return stub.materialize({
    ...named,
    metadata: { ...meta, name: (named.metadata as { name: string }).name },
  });
}

Deno.test("an ADD's error names no pod, node, host or container of a holder in another namespace", async (t) => {
  await t.step("network identity (11)", async () => {
    await withVerb("ADD", async (stub, inv) => {
      const evil = pod(inv, "ADD", { ...ns20, ns: "evil" });
      const claim = heldByDb(stub, evil);
      const e = await rejectsWith(add(evil), 11, /held by a pod of another namespace/);
      assertNamesNothingOf(`${e.message} ${e.details}`, claim);
      assert.equal(stub.all()[0].metadata.uid, claim.metadata.uid, "left alone");
      // Within its namespace the holder is named in full.
      stub.remove(claim.metadata.name);
      const same = pod(inv, "ADD", { ...ns20, ns: "db" });
      heldByDb(stub, same);
      await rejectsWith(add(same), 11, new RegExp(`held by container ${CID_DB} on node node-db`));
    });
  });
  await t.step("attachment identity (103)", async () => {
    await withVerb("ADD", async (stub, inv) => {
      const evil = inv({
        containerId: CID_DB,
        ipam: { classes: { ipv4: "vpc-pods-ipv4" } },
        args: { K8S_POD_NAMESPACE: "evil", K8S_POD_NAME: "evil-0", K8S_POD_UID: "uid-evil" },
      });
      const claim = heldByDb(stub, evil);
      const e = await rejectsWith(add(evil), 103, /held by a pod of another namespace/);
      assertNamesNothingOf(`${e.message} ${e.details}`, claim);
      assert.equal(stub.all()[0].metadata.uid, claim.metadata.uid, "left alone");
    });
  });
});
