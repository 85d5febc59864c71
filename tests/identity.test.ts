/**
 * Stable addresses in-process: claim identity (attachment, pod, network), the
 * one-holder rule on every verb, Retain's re-bind and its refusal by an older
 * Milo, and requested addresses, over the in-memory stub.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { check } from "../lib/check.ts";
import { claimName } from "../lib/claims.ts";
import { holderOf } from "../lib/holder.ts";
import { del } from "../lib/del.ts";
import { gc } from "../lib/gc.ts";
import { CniError } from "../lib/errors.ts";
import type { Invocation } from "../lib/invocation.ts";
import {
  CLAIMS_PATH,
  type InvocationOptions,
  rejectsWith,
  withVerb as withVerbOf,
} from "../testing/stub_invocation.ts";
import type { StubMilo } from "../testing/stub_milo.ts";
import { statusReply } from "../testing/milo_fixtures.ts";

const POD = { identity: "pod" };
const SLOT = { identity: "network" };
const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const CID_A = "a".repeat(64);
const CID_B = "b".repeat(64);

type Build = (o?: Partial<InvocationOptions>) => Invocation;

/** The node grants stable identities to namespace shop, where these tests' pods run. */
const GRANT = { allowIdentities: [{ namespace: "shop" }] };

/** {@link withVerbOf} on a node with {@link GRANT}. */
const withVerb: typeof withVerbOf = (command, fn) =>
  withVerbOf(
    command,
    (stub, inv, dir) => fn(stub, (o = {}) => inv({ ...o, node: { ...GRANT, ...o.node } }), dir),
  );

/** The first address of an ADD's result. */
const address = (r: Awaited<ReturnType<typeof add>>) =>
  (r.output as { ips: { address: string }[] }).ips[0].address;

const deletes = (stub: StubMilo) => stub.seen("DELETE").length;

/** Sandbox `cid` of pod shop/db-0 with pod UID `uid`, on `ipam`, for `command`. */
function sandbox(
  inv: Build,
  command: InvocationOptions["command"],
  cid: string,
  uid: string,
  ipam: Record<string, unknown> = POD,
  node = "node-1",
) {
  return inv({
    command,
    containerId: cid,
    ipam: { ...V4, ...ipam },
    args: { K8S_POD_NAME: "db-0", K8S_POD_UID: uid },
    node: { node },
  });
}

Deno.test("claim names: the attachment's by default; the pod's and the slot's are shared", () => {
  const base = { cluster: "c", containerId: CID_A, ifname: "eth0", network: "n" };
  const pod = { ...base, identity: "pod" as const, podNamespace: "shop", podName: "db-0" };
  assert.match(claimName(base, "ipv4"), /^pod-[0-9a-f]{20}-v4$/);
  assert.equal(claimName({ ...base, identity: "attachment" }, "ipv4"), claimName(base, "ipv4"));
  assert.notEqual(claimName({ ...base, containerId: CID_B }, "ipv4"), claimName(base, "ipv4"));
  const p = claimName(pod, "ipv6");
  assert.match(p, /^podid-[0-9a-f]{20}-v6$/);
  assert.equal(
    claimName({ ...pod, containerId: CID_B }, "ipv6"),
    p,
    "a new sandbox, the same name",
  );
  for (
    const other of [
      { cluster: "c2" },
      { podNamespace: "web" },
      { podName: "db-1" },
      { network: "n2" },
      { ifname: "net1" },
    ]
  ) {
    assert.notEqual(claimName({ ...pod, ...other }, "ipv6"), p, JSON.stringify(other));
  }
  assert.notEqual(claimName(pod, "ipv4"), p);
  const slot = { ...base, identity: "network" as const };
  assert.match(claimName(slot, "ipv4"), /^slot-[0-9a-f]{20}-v4$/);
  assert.equal(
    claimName({ ...slot, containerId: CID_B, podName: "x" }, "ipv4"),
    claimName(slot, "ipv4"),
  );
  assert.notEqual(claimName({ ...slot, network: "n2" }, "ipv4"), claimName(slot, "ipv4"));
  assert.throws(
    () => claimName({ ...pod, podName: undefined }, "ipv4"),
    (e: CniError) => e.code === 7,
  );
});

Deno.test("pod identity: Retain by the pod's name; a re-created pod gets its address back", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const first = await add(sandbox(inv, "ADD", CID_A, "uid-1"));
    const [post] = stub.seen("POST");
    const body = post.body as { metadata: { name: string }; spec: Record<string, unknown> };
    assert.match(body.metadata.name, /^podid-/);
    assert.equal(body.spec.reclaimPolicy, "Retain");
    await del(sandbox(inv, "DEL", CID_A, "uid-1"));
    assert.equal(stub.all().length, 0);
    stub.allocate = () => ({ allocatedCIDR: "10.40.0.99/32", address: "10.40.0.99" });
    const again = await add(sandbox(inv, "ADD", CID_B, "uid-2"));
    assert.equal(address(again), address(first), "the retained address, re-bound by name");
    const [claim] = stub.all();
    assert.equal(holderOf(claim as never).containerId, CID_B);
    assert.equal(holderOf(claim as never).podUid, "uid-2");
    await check(sandbox(inv, "CHECK", CID_B, "uid-2"));
    await rejectsWith(check(sandbox(inv, "CHECK", CID_A, "uid-1")), 104, /held by another/);
  });
});

Deno.test("pod identity: a second sandbox gets no lease while the first holds it (11, naming it)", async () => {
  await withVerb("ADD", async (stub, inv) => {
    await add(sandbox(inv, "ADD", CID_A, "uid-1"));
    const e = await rejectsWith(
      add(sandbox(inv, "ADD", CID_B, "uid-2", POD, "node-2")),
      11,
      new RegExp(`held by container ${CID_A} on node node-1`),
    );
    assert.match(e.details, /pod-uid=uid-1/);
    assert.equal(deletes(stub), 0, "the ADD released nothing");
    assert.equal(holderOf(stub.all()[0] as never).containerId, CID_A);
  });
});

Deno.test("pod identity: a late DEL of the old sandbox releases nothing of the new holder", async () => {
  await withVerb("ADD", async (stub, inv, dir) => {
    await add(sandbox(inv, "ADD", CID_A, "uid-1"));
    // The old sandbox's claim goes (force-delete: the sweep released it), the new pod takes the name.
    stub.remove(stub.all()[0].metadata.name);
    await add(sandbox(inv, "ADD", CID_B, "uid-2"));
    const held = stub.all()[0];
    // The old sandbox's DEL, with its record (uids) and, in the second round, without.
    for (const round of ["record", "no record"]) {
      if (round === "no record") await Deno.remove(`${dir}/holdings`, { recursive: true });
      const r = await del(sandbox(inv, "DEL", CID_A, "uid-1"));
      assert.deepEqual(r.claims, [], round);
      assert.match(r.skipped ?? "", /held by another sandbox, left alone/, round);
      assert.equal(deletes(stub), 0, round);
      assert.equal(stub.all()[0].metadata.uid, held.metadata.uid, round);
    }
    await del(sandbox(inv, "DEL", CID_B, "uid-2"));
    assert.equal(stub.all().length, 0, "its own holder's DEL releases it");
  });
});

Deno.test("pod identity without the pod's name: ADD and CHECK fail with 7, DEL has nothing", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const nameless = (command: InvocationOptions["command"]) =>
      inv({ command, ipam: { ...V4, ...POD }, args: { K8S_POD_NAME: "" } });
    await rejectsWith(add(nameless("ADD")), 7, /K8S_POD_NAMESPACE and K8S_POD_NAME/);
    await rejectsWith(check(nameless("CHECK")), 7, /K8S_POD_NAME/);
    const r = await del(nameless("DEL"));
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped ?? "", /without the pod's name/);
    assert.equal(stub.requests.length, 0);
  });
});

Deno.test("network identity: the slot's next pod gets the slot's address once the first is gone", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const first = await add(sandbox(inv, "ADD", CID_A, "uid-1", SLOT));
    assert.match(stub.all()[0].metadata.name, /^slot-/);
    const other = inv({
      containerId: CID_B,
      ipam: { ...V4, ...SLOT },
      args: { K8S_POD_NAME: "tap-vm-7", K8S_POD_UID: "uid-7" },
    });
    await rejectsWith(add(other), 11, /network identity\) is held by container/);
    await del(sandbox(inv, "DEL", CID_A, "uid-1", SLOT));
    stub.allocate = () => ({ allocatedCIDR: "10.40.0.99/32", address: "10.40.0.99" });
    const next = await add({ ...other, callId: crypto.randomUUID() });
    assert.equal(address(next), address(first));
  });
});

Deno.test("an older Milo refusing to re-bind a retained name: 103 naming the claim, no other name tried", async () => {
  await withVerb("ADD", async (stub, inv) => {
    stub.retained = "conflict";
    await add(sandbox(inv, "ADD", CID_A, "uid-1"));
    await del(sandbox(inv, "DEL", CID_A, "uid-1"));
    const name = stub.seen("DELETE")[0].path.split("/").pop()!;
    const e = await rejectsWith(
      add(sandbox(inv, "ADD", CID_B, "uid-2")),
      103,
      /retained allocation of this name and refuses to re-bind it/,
    );
    assert.match(e.message, new RegExp(name));
    const posts = stub.seen("POST").map((r) =>
      (r.body as { metadata: { name: string } }).metadata.name
    );
    assert.deepEqual(posts, [name, name], "never a new address under another name");
    assert.equal(stub.all().length, 0);
  });
});

Deno.test("GC under pod identity: the gone sandbox's claim by its uid, the live holder's kept", async () => {
  await withVerb("ADD", async (stub, inv) => {
    await add(sandbox(inv, "ADD", CID_A, "uid-1"));
    const valid = (cid: string) => ({
      "cni.dev/valid-attachments": [{ containerID: cid, ifname: "eth0" }],
    });
    const gcOf = (cid: string) =>
      gc(
        inv({
          command: "GC",
          ipam: { ...V4, ...POD },
          node: { gc: { minAgeS: 0 } },
          top: valid(cid),
        }),
      );
    await gcOf(CID_A);
    assert.equal(stub.all().length, 1, "its holder is valid");
    await gcOf(CID_B);
    assert.equal(stub.all().length, 0, "its holder is not");
    const [del] = stub.seen("DELETE");
    assert.ok((del.body as { preconditions?: { uid?: string } }).preconditions?.uid);
  });
});

Deno.test("requested addresses: refused unless the node allows them (7 naming the key)", async () => {
  await withVerb("ADD", async (stub, inv) => {
    await rejectsWith(
      add(inv({ ipam: V4, args: { IP: "10.40.0.50/24" } })),
      7,
      /^CNI_ARGS IP: requested addresses are the node's to grant.*namespace shop/,
    );
    await rejectsWith(
      add(inv({ ipam: V4, top: { runtimeConfig: { ips: ["10.40.0.50/24"] } } })),
      7,
      /^runtimeConfig.ips: .*allowRequestedAddresses/,
    );
    assert.equal(stub.requests.length, 0);
  });
});

Deno.test("requested addresses: pinned as spec.address; taken is 103; malformed or mismatched is 7", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const allow = { allowRequestedAddresses: true };
    const dual = { classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" } };
    const r = await add(inv({
      ipam: dual,
      node: allow,
      top: { runtimeConfig: { ips: ["10.40.0.50/24", "fd20:0:0:1:0:77::/64"] } },
      args: { IP: "10.40.0.50,fd20:0:0:1:0:77::" },
    }));
    assert.deepEqual((r.output as { ips: { address: string }[] }).ips.map((i) => i.address), [
      "10.40.0.50/32",
      "fd20::1:0:77:0:0/96",
    ]);
    const specs = stub.seen("POST").map((p) =>
      (p.body as { spec: { address?: string } }).spec.address
    );
    assert.deepEqual(specs.sort(), ["10.40.0.50", "fd20::1:0:77:0:0"]);
    const other = (o: Partial<InvocationOptions>) =>
      inv({ containerId: CID_B, ipam: V4, node: allow, ...o });
    await rejectsWith(
      add(other({ args: { IP: "10.40.0.50" } })),
      103,
      /requested address 10.40.0.50 is taken/,
    );
    await rejectsWith(add(other({ args: { IP: "10.40.0.400" } })), 7, /not an IP address/);
    await rejectsWith(add(other({ args: { IP: "fd00::1" } })), 7, /no ipv6 class/);
    await rejectsWith(
      add(other({ args: { IP: "10.40.0.51,10.40.0.52" } })),
      7,
      /two IPv4 addresses/,
    );
    await rejectsWith(
      add(other({ args: { IP: "10.40.0.51" }, top: { runtimeConfig: { ips: ["10.40.0.52"] } } })),
      7,
      /request different addresses/,
    );
    assert.equal(stub.seen("POST").length, 3, "only the taken address reached Milo");
  });
});

Deno.test("requested addresses: granted per namespace and network as identities are; true grants every one", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const grants = [{ namespace: "db" }, { namespace: "vms", network: "vpc-vms" }];
    const pin = (ns: string, cid: string, allow: unknown = grants, network = "vpc-7b3e") =>
      add(inv({
        containerId: cid,
        ipam: V4,
        node: { allowRequestedAddresses: allow },
        top: { name: network },
        args: { K8S_POD_NAMESPACE: ns, K8S_POD_NAME: `${ns}-0`, IP: `10.40.0.${cid.length}` },
      }));
    await pin("db", "a");
    await pin("vms", "bb", grants, "vpc-vms");
    const e = await rejectsWith(
      pin("shop", "ccc"),
      7,
      /^CNI_ARGS IP: requested addresses are the node's to grant, and node config \S+ does not grant them to namespace shop on network "vpc-7b3e"/,
    );
    assert.match(
      e.details,
      /root adds \{"namespace":"shop","network":"vpc-7b3e"\} to allowRequestedAddresses/,
    );
    await rejectsWith(pin("vms", "dddd"), 7, /does not grant them to namespace vms on network/);
    await pin("shop", "eeeee", true);
    const pinned = stub.seen("POST").map((p) =>
      (p.body as { spec: { address?: string } }).spec.address
    );
    assert.deepEqual(pinned, ["10.40.0.1", "10.40.0.2", "10.40.0.5"]);
  });
});

Deno.test("requested addresses: an IPv6 address inside a /96 binds that block, as Milo binds it; nothing rolled back", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const r = await add(inv({
      ipam: { classes: { ipv6: "vpc-pods-ipv6" } },
      node: { allowRequestedAddresses: true },
      args: { IP: "fd20:0:0:1:0:77:0:5" },
    }));
    // Milo masks the address to the class's /96 (parseRequestedBlock): the lease is that block.
    assert.deepEqual((r.output as { ips: { address: string }[] }).ips.map((i) => i.address), [
      "fd20::1:0:77:0:0/96",
    ]);
    assert.equal(stub.seen("DELETE").length, 0, "nothing rolled back");
    assert.equal(stub.all().length, 1);
  });
});

Deno.test("requested addresses: where the network says IPv6 is a /96, an address that is not its block's first is refused before Milo (7, naming it)", async () => {
  await withVerb("ADD", async (stub, inv) => {
    await rejectsWith(
      add(inv({
        ipam: { classes: { ipv6: "vpc-pods-ipv6" }, prefixLengths: { ipv6: 96 } },
        node: { allowRequestedAddresses: true },
        args: { IP: "fd20:0:0:1:0:77:0:5" },
      })),
      7,
      /^CNI_ARGS IP: fd20::1:0:77:0:5 lies inside the \/96 block fd20::1:0:77:0:0\/96, which Milo binds whole.*request fd20::1:0:77:0:0 $/,
    );
    assert.equal(stub.requests.length, 0);
    const r = await add(inv({
      ipam: { classes: { ipv6: "vpc-pods-ipv6" }, prefixLengths: { ipv6: 96 } },
      node: { allowRequestedAddresses: true },
      args: { IP: "fd20:0:0:1:0:77::" },
    }));
    assert.deepEqual((r.output as { ips: { address: string }[] }).ips.map((i) => i.address), [
      "fd20::1:0:77:0:0/96",
    ]);
  });
});

Deno.test("requested addresses: a 201 binding another address is rolled back (105)", async () => {
  await withVerb("ADD", async (stub, inv) => {
    stub.inject({
      method: "POST",
      path: CLAIMS_PATH,
      answer: (req, s) => {
        const body = req.body as { spec: Record<string, unknown> };
        const made = s.materialize({
          ...req.body as Record<string, unknown>,
          spec: { ...body.spec },
        }, {
          status: { allocatedCIDR: "10.40.0.9/32", address: "10.40.0.9" },
        });
        return new Response(JSON.stringify(made), { status: 201 });
      },
    });
    await rejectsWith(
      add(inv({ ipam: V4, node: { allowRequestedAddresses: true }, args: { IP: "10.40.0.50" } })),
      105,
      /holds 10.40.0.9, not the requested 10.40.0.50/,
    );
    assert.equal(stub.all().length, 0, "released by its uid");
  });
});

Deno.test("a retained allocation that does not match the claim: 103 with Milo's reason", async () => {
  await withVerb("ADD", async (stub, inv) => {
    const said = 'Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "x": ipam: ' +
      'retained allocation does not match this claim: it was allocated under class "a" and ' +
      'this claim names "b"';
    stub.inject({
      method: "POST",
      answer: () => statusReply(409, { reason: "Conflict", message: said }),
    });
    await rejectsWith(
      add(sandbox(inv, "ADD", CID_A, "uid-1")),
      103,
      /retained allocation of this name does not match the claim.*under class "a"/,
    );
    assert.equal(stub.all().length, 0);
  });
});

Deno.test("pod identity: a DEL from another host with the same container ID releases nothing", async () => {
  await withVerb("ADD", async (stub, inv, dir) => {
    // Host two's sandbox holds db-0's claim; host one's sandbox had the same container ID.
    await Deno.writeTextFile(`${dir}/host-two`, "host-two\n");
    const two = { ...POD };
    await add(inv({
      command: "ADD",
      containerId: CID_A,
      ipam: { ...V4, ...two },
      args: { K8S_POD_NAME: "db-0", K8S_POD_UID: "uid-2" },
      node: { hostIdFile: `${dir}/host-two` },
    }));
    const held = stub.all()[0];
    const r = await del(sandbox(inv, "DEL", CID_A, "uid-1"));
    assert.deepEqual(r.claims, []);
    assert.match(r.skipped ?? "", /left alone: .*recorded for host host-two, not this one/);
    assert.equal(deletes(stub), 0);
    assert.equal(stub.all()[0].metadata.uid, held.metadata.uid);
  });
});

Deno.test("a shared-name claim without a uid is never released by its name (GC)", async () => {
  await withVerb("ADD", async (stub, inv) => {
    await add(sandbox(inv, "ADD", CID_A, "uid-1"));
    const [claim] = stub.all();
    delete (claim.metadata as { uid?: string }).uid;
    stub.put(claim);
    const gcOf = gc(inv({
      command: "GC",
      ipam: { ...V4, ...POD },
      node: { gc: { minAgeS: 0 } },
      top: { "cni.dev/valid-attachments": [] },
    }));
    await gcOf;
    assert.equal(deletes(stub), 0, "no DELETE by name alone");
    assert.equal(stub.all().length, 1);
  });
});

/**
 * The re-binding Milo probes for a retained allocation before it allocates
 * (`internal/registry/ipam/ipclaim/storage.go`, phase 1a): a live claim's
 * name finds its allocation bound and is refused as 409 Conflict "already
 * bound" (`internal/allocator/reclaim.go`), never AlreadyExists.
 */
function liveNamesConflict(stub: StubMilo) {
  stub.inject({
    method: "POST",
    path: CLAIMS_PATH,
    times: 100,
    answer: (req, s) => {
      const name = (req.body as { metadata: { name: string } }).metadata.name;
      if (!s.get(name)) return undefined;
      return statusReply(409, {
        name,
        reason: "Conflict",
        message: `Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "${name}": ` +
          "ipam: retained allocation does not match this claim: an allocation under this " +
          `identity is already bound to "/ipam.miloapis.com/ipclaims/default/${name}"`,
      });
    },
  });
}

Deno.test("a re-binding Milo answers a live name with Conflict: the ADD reads it and applies the holder rules", async (t) => {
  await t.step("attachment identity: a repeated ADD finds its own claim", async () => {
    await withVerb("ADD", async (stub, inv) => {
      liveNamesConflict(stub);
      const first = await add(sandbox(inv, "ADD", CID_A, "uid-1", {}));
      const again = await add(sandbox(inv, "ADD", CID_A, "uid-1", {}));
      assert.equal(address(again), address(first));
      assert.equal(stub.all().length, 1);
    });
  });
  await t.step("pod identity: a second sandbox gets 11 naming the holder", async () => {
    await withVerb("ADD", async (stub, inv) => {
      liveNamesConflict(stub);
      await add(sandbox(inv, "ADD", CID_A, "uid-1"));
      await rejectsWith(
        add(sandbox(inv, "ADD", CID_B, "uid-2", POD, "node-2")),
        11,
        /held by container a{64} on node node-1/,
      );
      assert.equal(holderOf(stub.all()[0]).containerId, CID_A);
      assert.equal(deletes(stub), 0);
    });
  });
  await t.step("the name gone by the time it is read: 11, retry", async () => {
    await withVerb("ADD", async (stub, inv) => {
      stub.inject({
        method: "POST",
        path: CLAIMS_PATH,
        answer: (req) => {
          const name = (req.body as { metadata: { name: string } }).metadata.name;
          return statusReply(409, {
            name,
            reason: "Conflict",
            message: `ipam: retained allocation does not match this claim: an allocation under ` +
              `this identity is already bound to "/ipam.miloapis.com/ipclaims/default/${name}"`,
          });
        },
      });
      await rejectsWith(add(sandbox(inv, "ADD", CID_A, "uid-1")), 11, /existed .* gone now/);
    });
  });
});

Deno.test("stable identities are the node's to grant: an ADD without the grant is 7 naming the key, sends nothing", async () => {
  await withVerbOf("ADD", async (stub, inv) => {
    const ask = (
      ipam: Record<string, unknown>,
      node: Record<string, unknown> = {},
      ns = "shop",
      command: "ADD" | "DEL" = "ADD",
      containerId?: string,
    ) =>
      inv({
        command,
        ipam: { ...V4, ...ipam },
        node,
        args: { K8S_POD_NAMESPACE: ns, K8S_POD_NAME: "db-0" },
        containerId,
      });
    for (const ipam of [POD, SLOT]) {
      const e = await rejectsWith(
        add(ask(ipam)),
        7,
        /field ipam\.identity: "(pod|network)" is the node's to grant.*namespace shop on network "vpc-7b3e"/,
      );
      assert.match(e.details, /allowIdentities in the node config/);
      assert.match(e.details, /retentionLease/);
    }
    const only = (g: Record<string, unknown>) => ({ allowIdentities: [g] });
    await rejectsWith(add(ask(POD, only({ namespace: "db" }))), 7, /namespace shop/);
    await rejectsWith(add(ask(POD, only({ namespace: "shop", network: "other" }))), 7);
    await rejectsWith(add(ask(SLOT, only({ namespace: "shop", identity: "pod" }))), 7);
    assert.equal(stub.requests.length, 0, "refused before any request");
    await add(ask(POD, only({ namespace: "shop", identity: "pod" })));
    // Another sandbox: a DEL releases what its attachment's ADD recorded, whatever the config says.
    await add(ask(SLOT, only({ network: "vpc-7b3e" }), "web", "ADD", CID_B));
    // A grant withdrawn: the DEL still releases what the ADD made.
    await del(ask(POD, {}, "shop", "DEL"));
    assert.equal(stub.seen("DELETE").length, 1);
  });
});
