/** GC in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { KEYS, nodeSelector } from "../lib/claims.ts";
import { formatCidr, parseCidr } from "../lib/ip.ts";
import { parseNetConf } from "../lib/netconf.ts";
import { gc } from "../lib/gc.ts";
import { Holdings } from "../lib/holdings.ts";
import {
  CLAIMS_PATH,
  existingClaim,
  invocation,
  type InvocationOptions,
  NET_CONF,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { reply, statusReply } from "../testing/milo_fixtures.ts";
import { type Json, StubMilo, type WireClaim } from "../testing/stub_milo.ts";

const T0 = Date.now();
const MIN_AGE_S = 60;

/**
 * A world: claims made `ageS` ago (on Milo's clock, which reads T0 now) by
 * ADDs of these attachments, and of other nodes, hosts, networks, clusters.
 */
function world(dir: string, stub: StubMilo, ageS = 3_600) {
  stub.now = () => T0 - ageS * 1000;
  const made = (containerId: string, o: Partial<InvocationOptions> = {}) => {
    const add = invocation(stub, { command: "ADD", stateDir: dir, containerId, ...o });
    return [existingClaim(stub, add, "ipv4"), existingClaim(stub, add, "ipv6")];
  };
  Deno.writeTextFileSync(`${dir}/clone-machine-id`, "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1\n");
  const w = {
    keep: made("keep"),
    gone: made("gone"),
    otherIf: made("keep", { ifname: "net1" }),
    otherNode: made("gone-n2", { node: { node: "node-2" } }),
    otherNet: made("gone-net", { top: { name: "other-net" } }),
    otherCluster: made("gone-cl", { node: { cluster: "cluster-b" } }),
    otherHost: made("gone-host", { node: { hostIdFile: `${dir}/clone-machine-id` } }),
    otherClass: made("gone-class", {
      ipam: { classes: { ipv4: "vpc-pods-ipv4-b", ipv6: "vpc-pods-ipv6-b" } },
    }),
    otherScope: made("gone-scope", {
      ipam: {
        scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "b" } },
      },
    }),
  };
  stub.now = () => T0;
  return w;
}

/** Every claim GC must leave, whatever the valid list: not this node's, host's or network's. */
const others = (w: ReturnType<typeof world>) => [
  ...w.otherNode,
  ...w.otherNet,
  ...w.otherCluster,
  ...w.otherHost,
  ...w.otherClass,
  ...w.otherScope,
];

function gcInv(stub: StubMilo, dir: string, valid: unknown, now = () => T0, extra: Json = {}) {
  return invocation(stub, {
    command: "GC",
    stateDir: dir,
    top: { "cni.dev/valid-attachments": valid, ...extra },
    node: { gc: { minAgeS: MIN_AGE_S } },
    now,
  });
}

const names = (claims: WireClaim[]) => claims.map((c) => c.metadata.name).sort();
const VALID = [{ containerID: "keep", ifname: "eth0" }];

Deno.test("GC releases by uid only this node's attachments absent from valid-attachments", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    stub.requests.length = 0;
    const r = await gc(gcInv(stub, dir, VALID));
    assert.equal(r.output, undefined);
    assert.deepEqual(r.claims.sort(), names([...w.gone, ...w.otherIf]));
    const [list, ...rest] = stub.requests;
    assert.equal(list.method, "GET");
    assert.equal(list.path, CLAIMS_PATH);
    assert.equal(list.query.labelSelector, nodeSelector("cluster-a", "node-1", "vpc-7b3e"));
    const deletes = rest.filter((q) => q.method === "DELETE");
    assert.equal(deletes.length, 4);
    for (const d of deletes) {
      const claim = [...w.gone, ...w.otherIf].find((c) =>
        d.path === `${CLAIMS_PATH}/${c.metadata.name}`
      );
      assert.ok(claim, `only stale claims are deleted: ${d.path}`);
      assert.deepEqual(d.body, {
        kind: "DeleteOptions",
        apiVersion: "v1",
        preconditions: { uid: claim.metadata.uid },
      });
    }
    assert.deepEqual(names(stub.all()), names([...w.keep, ...others(w)]), "nothing else deleted");
  });
});

Deno.test("GC respects gc.minAgeS on Milo's clock", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub, 30);
    const young = await gc(gcInv(stub, dir, VALID));
    assert.deepEqual(young.claims, []);
    assert.equal(stub.seen("DELETE").length, 0);
    stub.now = () => T0 + 29_000;
    assert.deepEqual((await gc(gcInv(stub, dir, VALID))).claims, []);
    assert.equal(stub.seen("DELETE").length, 0);
    stub.now = () => T0 + 30_000;
    const atAge = await gc(gcInv(stub, dir, VALID));
    assert.deepEqual(atAge.claims.sort(), names([...w.gone, ...w.otherIf]));
  });
});

Deno.test("GC: a node clock running ahead of Milo's releases no young claim", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    world(dir, stub, 30);
    const fast = await gc(gcInv(stub, dir, VALID, () => T0 + 60_000));
    assert.deepEqual(fast.claims, [], "30 s old on Milo's clock, 90 s by the node's");
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("GC: a LIST answer without Milo's Date releases nothing (105)", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    stub.inject({
      method: "GET",
      path: "/ipclaims",
      answer: () => reply(200, { kind: "IPClaimList", metadata: {}, items: w.gone }),
    });
    await rejectsWith(gc(gcInv(stub, dir, VALID)), 105, /no Date header/);
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("GC keeps an attachment whose ADD on this node may be in flight (adding, within a call's budget)", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    const at = invocation(stub, { command: "ADD", stateDir: dir, containerId: "gone" }).attachment;
    new Holdings(dir).adding(at, "add-in-flight", [], T0 - 5_000, T0 + 5_000);
    const r = await gc(gcInv(stub, dir, VALID));
    assert.deepEqual(r.claims.sort(), names(w.otherIf));
    for (const c of w.gone) assert.ok(stub.get(c.metadata.name));
    // Past the ADD's deadline and its watchdog's 0.5 s, it was killed.
    const later = await gc(gcInv(stub, dir, VALID, () => T0 + 5_500));
    assert.deepEqual(later.claims.sort(), names(w.gone));
  });
});

Deno.test("GC keeps a claim replaced since the LIST (uid changed), one without a creation time or holder", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    const [v4, v6] = w.gone;
    stub.inject({
      method: "GET",
      path: `/ipclaims/${v4.metadata.name}`,
      answer: () => reply(200, { ...v4, metadata: { ...v4.metadata, uid: "a-newer-claim" } }),
    });
    stub.put({ ...v6, metadata: { ...v6.metadata, creationTimestamp: undefined } });
    const [k4] = w.keep;
    stub.put({
      ...k4,
      metadata: { ...k4.metadata, name: "no-holder", annotations: { [KEYS.cluster]: "cluster-a" } },
    });
    const r = await gc(gcInv(stub, dir, []));
    assert.deepEqual(r.claims.sort(), names([v4, ...w.keep, ...w.otherIf]));
    assert.ok(!stub.seen("DELETE").some((d) => d.path.endsWith(v4.metadata.name)));
    assert.ok(stub.get(v4.metadata.name) && stub.get(v6.metadata.name) && stub.get("no-holder"));
  });
});

Deno.test("GC goes on past a failed release and reports it", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    const bad = w.gone[0].metadata.name;
    stub.inject({ method: "DELETE", path: bad, answer: () => statusReply(403) });
    await rejectsWith(gc(gcInv(stub, dir, VALID)), 101, new RegExp(`release of ${bad} failed`));
    assert.deepEqual(
      names([...w.gone, ...w.otherIf].filter((c) => stub.get(c.metadata.name))),
      [bad],
    );
  });
});

Deno.test("GC without valid-attachments is code 7 and sends nothing", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    for (const list of [undefined, null]) {
      await rejectsWith(
        Promise.resolve().then(() => gcInv(stub, dir, list)),
        7,
        /cni\.dev\/valid-attachments: missing; GC releases nothing/,
      );
    }
    await rejectsWith(
      Promise.resolve().then(() => gcInv(stub, dir, "keep")),
      7,
      /must be a list/,
    );
    const inv = gcInv(stub, dir, VALID);
    await rejectsWith(gc({ ...inv, conf: { ...inv.conf, validAttachments: undefined } }), 7);
    assert.equal(stub.requests.length, 0);
  });
});

Deno.test("GC accepts the older cni.dev/attachments name", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    const node = gcInv(stub, dir, []).node;
    const conf = parseNetConf(
      JSON.stringify({ ...NET_CONF, "cni.dev/attachments": VALID }),
      node,
      "GC",
    );
    const inv = gcInv(stub, dir, []);
    const r = await gc({ ...inv, conf });
    assert.deepEqual(r.claims.sort(), names([...w.gone, ...w.otherIf]));
  });
});

Deno.test("GC: a LIST that keeps going is cut once it keeps 64 MiB (105 naming MAX_LIST_BYTES), nothing released", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    // Pages of this node's stale claims, each with 4 KB of a milo-ipam.io/ annotation (kept)
    // and Milo's managedFields (dropped as read); after 80 pages the list would end.
    const padded = w.gone.map((c) => ({
      ...c,
      metadata: {
        ...c.metadata,
        annotations: { ...c.metadata.annotations, "milo-ipam.io/note": "n".repeat(4_000) },
        managedFields: [{ manager: "milo", f: "m".repeat(3800) }],
      },
    }));
    const items = Array.from({ length: 180 }, (_, i) => padded[i % padded.length]);
    let pages = 0;
    stub.inject({
      method: "GET",
      path: "/ipclaims",
      times: Number.POSITIVE_INFINITY,
      answer: (_req, s) => {
        const more = ++pages < 80;
        const body = {
          kind: "IPClaimList",
          metadata: more ? { continue: `p${pages}` } : {},
          items,
        };
        return reply(200, body, { date: new Date(s.now()).toUTCString() });
      },
    });
    const e = await rejectsWith(
      gc(gcInv(stub, dir, VALID)),
      105,
      /IPClaimList exceeds what this process holds of a list: more than 64 MiB kept \(MAX_LIST_BYTES\)/,
    );
    assert.ok(pages < 80, `cut after ${pages} pages`);
    assert.match(e.details, /^cut after \d+ items, \d+ bytes kept$/);
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("GC drops the claims it released from the node's record", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    const gone = invocation(stub, { command: "ADD", stateDir: dir, containerId: "gone" });
    const held = w.gone.map((c) => ({ name: c.metadata.name, uid: c.metadata.uid }));
    gone.holdings.held(gone.attachment, "add-gone", held, T0 - 60_000);
    await gc(gcInv(stub, dir, VALID));
    assert.equal(gone.holdings.read(gone.attachment), undefined);
  });
});

Deno.test("GC keeps a claim whose container a result cache names (another runtime's, or Multus's)", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    // Multus's cache, as libcni writes it after the delegate's ADD: the runtime's list lacks it.
    await Deno.mkdir(`${dir}/results`);
    await Deno.writeTextFile(
      `${dir}/results/vpc-7b3e-gone-eth0`,
      JSON.stringify({ kind: "cniCacheV1", containerId: "gone", ifName: "eth0" }),
    );
    const r = await gc(gcInv(stub, dir, VALID));
    assert.deepEqual(r.claims.sort(), names(w.otherIf));
    for (const c of w.gone) assert.ok(stub.get(c.metadata.name), "its container is cached: live");
  });
});

Deno.test("GC releases under the attachment's lock: an ADD of it meanwhile waits, and Milo keeps what it printed", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const w = world(dir, stub);
    const [g4] = w.gone;
    let adding: Promise<{ output?: Json }> | undefined;
    // The runtime ADDs the attachment again (a restarted container keeps its ID) while GC,
    // having judged it from the LIST, reads its claim before the DELETE.
    stub.inject({
      method: "GET",
      path: `/ipclaims/${g4.metadata.name}`,
      answer: async () => {
        adding = add(invocation(stub, { command: "ADD", stateDir: dir, containerId: "gone" }));
        for (let i = 0; i < 50; i++) await new Promise((r) => setTimeout(r, 0));
        return undefined;
      },
    });
    await gc(gcInv(stub, dir, VALID));
    const canonical = (cidr?: string) => cidr ? formatCidr(parseCidr(cidr)!) : "(no claim)";
    const printed = ((await adding!).output?.ips as { address: string }[])
      .map((ip) => canonical(ip.address)).sort();
    const held = w.gone.map((c) => canonical(stub.get(c.metadata.name)?.status.allocatedCIDR))
      .sort();
    assert.deepEqual(held, printed, "every address the ADD printed is its claim in Milo");
  });
});
