/**
 * Address spaces and requested addresses are the node's to grant
 * (lib/scope_grant.ts, lib/requested.ts): the node config's grants refused
 * when they conflict, and over the in-memory stub, two namespaces' networks
 * naming one scope with and without its uid: every claim in the one space
 * root pinned, or the ADD refused; claims made before, or under a grant
 * withdrawn, still checked and released.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { check } from "../lib/check.ts";
import { parseNodeConfig } from "../lib/config.ts";
import { del } from "../lib/del.ts";
import { CniError } from "../lib/errors.ts";
import { gc } from "../lib/gc.ts";
import { parseNetwork } from "../lib/network_config.ts";
import { grantedScope, namesScope, refuseGrantConflicts } from "../lib/scope_grant.ts";
import {
  existingClaim,
  invocation,
  type InvocationOptions,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { type Json, StubMilo } from "../testing/stub_milo.ts";

const NODE = {
  milo: { url: "https://milo.example.com/base", tokenFile: "/etc/milo-ipam/token" },
  cluster: "cluster-a",
  node: "n1",
};
const PATH = "/etc/milo-ipam/node.json";

const REF = { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" };
const UID = "0b6f7c1e-52d4-4b7e-9a41-3f0c8d2e6a19";
/** The space root pinned: the Network with its uid, which Milo counts in the space. */
const PINNED = { network: { ...REF, uid: UID } };
const CLASSES = ["vpc-pods-ipv4", "vpc-pods-ipv6"];
/** Root grants namespace shop's network vpc-7b3e that space and its two classes; nobody else. */
const SHOP = {
  allowScopes: [{ namespace: "shop", network: "vpc-7b3e", scope: PINNED, classes: CLASSES }],
};

const scope = (name: string, uid?: string) => ({
  network: { ...REF, name, ...(uid ? { uid } : {}) },
});

Deno.test("config: allowScopes and allowRequestedAddresses refused with code 7 naming the field", () => {
  const cases: [string, Json, RegExp][] = [
    ["a grant without a scope", { allowScopes: [{ namespace: "shop" }] }, /allowScopes\.0\.scope/],
    [
      "a mistyped uid key (it would be dropped, the uid lost)",
      { allowScopes: [{ scope: { network: { ...REF, uuid: UID } } }] },
      /field allowScopes\.0\.scope\.network: unknown key uuid; known keys: apiGroup, kind, name, uid/,
    ],
    [
      "a mistyped grant key (it would be dropped, the grant widened)",
      { allowScopes: [{ namespce: "shop", scope: PINNED }] },
      /field allowScopes\.0: unknown key namespce; known keys: namespace, network, scope, classes/,
    ],
    [
      "a reference without its apiGroup",
      { allowScopes: [{ scope: { network: { kind: "Network", name: "x" } } }] },
      /allowScopes\.0\.scope\.network\.apiGroup/,
    ],
    [
      "a namespace that is not one",
      { allowScopes: [{ namespace: "Shop_1", scope: PINNED }] },
      /allowScopes\.0\.namespace: must be a DNS-1123 label/,
    ],
    [
      "an empty class list",
      { allowScopes: [{ scope: PINNED, classes: [] }] },
      /allowScopes\.0\.classes: must name at least one class/,
    ],
    [
      "one namespace's network granted twice",
      { allowScopes: [{ namespace: "shop", network: "n", scope: PINNED }, SHOP_N("shop", "n")] },
      /field allowScopes\.1: it and allowScopes\.0 both grant network "n" of namespace shop/,
    ],
    [
      "a namespace's every network, then one of them",
      { allowScopes: [{ namespace: "shop", scope: PINNED }, SHOP_N("shop", "n")] },
      /allowScopes\.1: it and allowScopes\.0 both grant network "n" of namespace shop/,
    ],
    [
      "a network in every namespace, then a namespace's every network",
      { allowScopes: [{ network: "n", scope: PINNED }, { namespace: "shop", scope: PINNED }] },
      /allowScopes\.1: it and allowScopes\.0 both grant network "n" of namespace shop/,
    ],
    [
      "a namespace's every network, then a network in every namespace",
      { allowScopes: [{ namespace: "shop", scope: PINNED }, { network: "n", scope: PINNED }] },
      /allowScopes\.1: it and allowScopes\.0 both grant network "n" of namespace shop/,
    ],
    [
      "a network in every namespace, then it in one",
      { allowScopes: [{ network: "n", scope: PINNED }, SHOP_N("db", "n")] },
      /allowScopes\.1: it and allowScopes\.0 both grant network "n" of namespace db/,
    ],
    [
      "every network of every namespace beside another grant",
      { allowScopes: [SHOP_N("db", "n"), { scope: PINNED }] },
      /allowScopes\.1: it and allowScopes\.0 both grant network "n" of namespace db/,
    ],
    [
      "one object with two uids",
      {
        allowScopes: [
          { namespace: "a", scope: scope("vpc7b3e", "uid-1") },
          { namespace: "b", scope: scope("vpc7b3e", "uid-2") },
        ],
      },
      /field allowScopes\.1\.scope\.network\.uid: allowScopes\.0\.scope\.network names the same Network "vpc7b3e" with uid uid-1.*two spaces/,
    ],
    [
      "one object with and without its uid",
      {
        allowScopes: [
          { namespace: "a", scope: scope("vpc7b3e", "uid-1") },
          { namespace: "b", scope: scope("vpc7b3e") },
        ],
      },
      /allowScopes\.1\.scope\.network\.uid: .*with uid uid-1/,
    ],
    [
      "a default scope (it no longer applies to networks naming none)",
      { scope: PINNED },
      /field scope: a default scope is no longer read.*allowScopes: \[\{"scope":\{"network":\{"apiGroup"/,
    ],
    [
      "requested addresses as a word",
      { allowRequestedAddresses: "yes" },
      /allowRequestedAddresses: must be true, false or a list of \{namespace, network\} grants/,
    ],
    [
      "a requested-address grant naming nothing",
      { allowRequestedAddresses: [{}] },
      /allowRequestedAddresses\.0: must name a namespace or a network/,
    ],
    [
      "a mistyped requested-address grant key",
      { allowRequestedAddresses: [{ namespace: "db", netwrk: "n" }] },
      /allowRequestedAddresses\.0: unknown key netwrk; known keys: namespace, network/,
    ],
  ];
  for (const [what, over, pattern] of cases) {
    let err: unknown;
    try {
      parseNodeConfig({ ...NODE, ...over }, PATH);
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof CniError, `${what}: accepted`);
    assert.equal(err.code, 7, what);
    assert.match(`${err.message} ${err.details}`, pattern, what);
  }
});

/** A grant of network `network` of namespace `namespace`, in {@link PINNED}. */
function SHOP_N(namespace: string, network: string): Json {
  return { namespace, network, scope: PINNED };
}

Deno.test("refuseGrantConflicts(): grants of distinct networks, and one object's uid twice, are one space each", () => {
  const grants = [
    { namespace: "a", network: "n", scope: PINNED },
    { namespace: "b", network: "n", scope: PINNED },
    { namespace: "a", network: "m", scope: scope("other", "uid-2") },
    { namespace: "c", network: "m", scope: {} },
    { network: "galactic", scope: scope("vpc7b3f", "uid-3") },
  ];
  refuseGrantConflicts(grants, PATH);
  const node = parseNodeConfig(
    { ...NODE, allowScopes: grants, allowRequestedAddresses: true },
    PATH,
  );
  assert.equal(node.allowScopes.length, 5);
  assert.equal(node.allowRequestedAddresses, true);
});

Deno.test("grantedScope(): the grant's scope, uid included, whatever of it the network config names", () => {
  const node = { ...SHOP, path: PATH };
  const shop = { podNamespace: "shop", network: "vpc-7b3e" };
  const classes = { ipv4: "vpc-pods-ipv4" };
  for (const named of [undefined, scope("vpc-7b3e"), PINNED]) {
    assert.deepEqual(grantedScope(node, shop, { classes, scope: named }), PINNED);
  }
  const refusals: [Json, Record<string, unknown>, RegExp][] = [
    [{ podNamespace: "attacker" }, {}, /^field ipam\.scope: .*grants no address space/],
    [{}, { scope: scope("vpc-7b3e", "another") }, /^field ipam\.scope\.network\.uid: /],
    [{}, { scope: scope("vpc-shop-2") }, /^field ipam\.scope\.network\.name: /],
    [
      {},
      { scope: { ...PINNED, region: REF } },
      /^field ipam\.scope\.region: no such scope role is granted/,
    ],
    [{}, { classes: { ipv4: "vpc-db-ipv4" } }, /^field ipam\.classes\.ipv4: class "vpc-db-ipv4"/],
  ];
  for (const [a, net, pattern] of refusals) {
    assert.throws(
      () => grantedScope(node, { ...shop, ...a }, { classes, ...net }),
      (e: unknown) => e instanceof CniError && e.code === 7 && pattern.test(e.message),
      String(pattern),
    );
  }
});

Deno.test("namesScope(): exact is Milo's space; either lets a uid on one side only name the object", () => {
  const unpinned = scope("vpc-7b3e");
  assert.ok(namesScope(PINNED, PINNED, "exact"));
  assert.ok(!namesScope(unpinned, PINNED, "exact"));
  assert.ok(!namesScope(PINNED, unpinned, "exact"));
  assert.ok(namesScope(unpinned, PINNED, "either"));
  assert.ok(namesScope(PINNED, unpinned, "either"));
  assert.ok(!namesScope(scope("vpc-7b3e", "another"), PINNED, "either"));
  assert.ok(!namesScope(scope("vpc-other", UID), PINNED, "either"));
  assert.ok(!namesScope({ ...PINNED, region: REF }, PINNED, "either"));
  assert.ok(namesScope(undefined, {}, "exact"));
});

/** A pod's ADD (or other verb) of network vpc-7b3e on a node granting {@link SHOP}. */
function call(
  stub: StubMilo,
  dir: string,
  command: InvocationOptions["command"],
  o: { ns: string; pod: string; cid: string; scope?: Json | null; node?: Json; top?: Json },
) {
  return invocation(stub, {
    command,
    stateDir: dir,
    containerId: o.cid,
    // `null` leaves scope out of the network config: the grant's applies.
    ipam: { scope: o.scope === null ? undefined : o.scope ?? scope("vpc-7b3e") },
    args: { K8S_POD_NAMESPACE: o.ns, K8S_POD_NAME: o.pod, K8S_POD_UID: `uid-${o.pod}` },
    node: o.node ?? SHOP,
    top: o.top,
  });
}

Deno.test("ADD: two namespaces' networks, with and without the pinned uid: one space, root's, or refused", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    // The README's NAD names the scope without the uid, root pins it: the same space, not two.
    const shop = [
      { ns: "shop", pod: "web-0", cid: "c-web-0" },
      { ns: "shop", pod: "web-1", cid: "c-web-1", scope: PINNED },
      { ns: "shop", pod: "web-2", cid: "c-web-2", scope: null },
    ];
    for (const p of shop) await add(call(stub, dir, "ADD", p));
    const posts = stub.seen("POST");
    assert.equal(posts.length, 6);
    for (const post of posts) {
      assert.deepEqual((post.body as { spec: Json }).spec.scope, PINNED, "the space root pinned");
    }

    // Namespace attacker names shop's network and scope, without and with the uid, and none.
    stub.requests.length = 0;
    for (const named of [scope("vpc-7b3e"), PINNED, null]) {
      const e = await rejectsWith(
        add(call(stub, dir, "ADD", { ns: "attacker", pod: "x-0", cid: "c-x-0", scope: named })),
        7,
        /^field ipam\.scope: node config .* grants no address space to network "vpc-7b3e" of namespace attacker/,
      );
      assert.match(
        e.details,
        /root adds \{"namespace":"attacker","network":"vpc-7b3e",.*allowScopes/,
      );
    }
    // shop's network moved to another space by its NAD: refused, naming what differs.
    await rejectsWith(
      add(call(stub, dir, "ADD", {
        ns: "shop",
        pod: "web-3",
        cid: "c-web-3",
        scope: scope("vpc-7b3e", "b1d5c0de-0000-4000-8000-000000000000"),
      })),
      7,
      /^field ipam\.scope\.network\.uid: not the uid granted to network "vpc-7b3e" of namespace shop \(allowScopes\.0 of node config/,
    );
    await rejectsWith(
      add(call(stub, dir, "ADD", { ns: "shop", pod: "web-3", cid: "c-web-3", scope: scope("db") })),
      7,
      /^field ipam\.scope\.network\.name: /,
    );
    assert.equal(stub.requests.length, 0, "nothing sent to Milo");
  });
});

Deno.test("ADD: a class the grant does not list is refused (7), naming the class and the grant", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const inv = invocation(stub, {
      command: "ADD",
      stateDir: dir,
      ipam: { classes: { ipv4: "vpc-db-ipv4" } },
      node: SHOP,
    });
    const e = await rejectsWith(
      add(inv),
      7,
      /^field ipam\.classes\.ipv4: class "vpc-db-ipv4" is not granted to network "vpc-7b3e" of namespace shop \(allowScopes\.0/,
    );
    assert.match(e.details, /root adds "vpc-db-ipv4" to allowScopes\.0\.classes/);
    assert.equal(stub.requests.length, 0);
  });
});

Deno.test("ADD: a retry finding its attachment's claim in another space than the grant's is a conflict", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const p = { ns: "shop", pod: "web-0", cid: "c-web-0" };
    // Made before root pinned the uid: the network config's scope as it named it.
    const before = call(stub, dir, "ADD", {
      ...p,
      node: { allowScopes: [{ scope: scope("vpc-7b3e") }] },
    });
    existingClaim(stub, before, "ipv4");
    existingClaim(stub, before, "ipv6");
    await rejectsWith(
      add(call(stub, dir, "ADD", p)),
      103,
      /in another address space than the one granted.*DEL the attachment/,
    );
    assert.equal(stub.seen("DELETE").length, 0, "nothing released");
  });
});

Deno.test("a grant withdrawn, or claims made before the uid was pinned: CHECK, DEL and GC need no grant", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const web0 = { ns: "shop", pod: "web-0", cid: "c-web-0" };
    const added = await add(call(stub, dir, "ADD", web0));
    const ips = (added.output as { ips: { address: string }[] }).ips;
    const withdrawn = { allowScopes: [] };
    const prevResult = { cniVersion: "1.1.0", ips };
    await check(call(stub, dir, "CHECK", { ...web0, node: withdrawn, top: { prevResult } }));
    await del(call(stub, dir, "DEL", { ...web0, node: withdrawn }));
    assert.equal(stub.all().length, 0, "released without the grant");
  });
});

Deno.test("GC releases the stale claims of its network's space, made before the uid was pinned too, with or without the grant", async () => {
  // The network config names no scope (the grant's applies), or, the grant withdrawn, the
  // Network without its uid: the claims' object either way.
  for (const [node, named] of [[SHOP, null], [{ allowScopes: [] }, scope("vpc-7b3e")]] as const) {
    await withTempDir(async (dir) => {
      const stub = new StubMilo();
      stub.now = () => Date.now() - 3_600_000;
      const made = (cid: string, claimScope: Json) => {
        const inv = call(stub, dir, "ADD", { ns: "shop", pod: cid, cid });
        return existingClaim(stub, inv, "ipv4", { spec: { scope: claimScope } }).metadata.name;
      };
      const pinned = made("c-pinned", PINNED);
      const before = made("c-before", scope("vpc-7b3e"));
      const other = made("c-other", scope("vpc-other", UID));
      const live = made("c-live", PINNED);
      stub.now = Date.now;
      const r = await gc(call(stub, dir, "GC", {
        ns: "",
        pod: "",
        cid: "",
        node,
        scope: named,
        top: { "cni.dev/valid-attachments": [{ containerID: "c-live", ifname: "eth0" }] },
      }));
      const what = JSON.stringify(node);
      assert.deepEqual(r.claims.sort(), [before, pinned].sort(), what);
      assert.deepEqual(stub.all().map((c) => c.metadata.name).sort(), [live, other].sort(), what);
    });
  }
});

Deno.test("the documented node config grants its NetworkAttachmentDefinitions' network one space, uid included", async () => {
  const text = await Deno.readTextFile(new URL("../docs/configuration.md", import.meta.url));
  const galacticPage = await Deno.readTextFile(new URL("../docs/galactic.md", import.meta.url));
  const blocks = [...text.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => m[1]);
  const node = parseNodeConfig(JSON.parse(blocks.find((b) => b.startsWith('{\n  "milo"'))!), PATH);
  const granted = node.allowScopes[0].scope;
  assert.ok(granted.network.uid, "the example pins the Network's uid");
  const ipamExample = JSON.parse(`{${blocks.find((b) => b.startsWith('"ipam": {'))!}}`).ipam;
  const galactic = /```yaml\n[\s\S]*?"ipam": (\{[\s\S]*?\n {10}\})/.exec(
    galacticPage.slice(galacticPage.indexOf("\n## A NAD galactic accepts")),
  );
  assert.ok(galactic, "the Galactic section's NAD");
  for (const ipam of [ipamExample, JSON.parse(galactic[1])]) {
    const net = parseNetwork(ipam, node);
    const shop = { podNamespace: "shop", network: "vpc7b3e" };
    assert.deepEqual(grantedScope(node, shop, net), granted);
  }
});
