// The sweep's decision, with both APIs stubbed in-process: Milo by a small
// claim store behind the real MiloClient, Kubernetes by the kube-dev handler
// behind the real KubeClient; the clock and the interval's sleep are injected.
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { KubeClient } from "../lib/kube.ts";
import { MiloClient } from "../lib/milo.ts";
import { sweep, type SweepOptions } from "../lib/sweep.ts";
import { NODE_MONITOR_GRACE_MS, terminatingRule } from "../lib/sweep_rules.ts";
import { emptyReport, renderText, type SweepReport } from "../lib/sweep_report.ts";
import { bucketName } from "../lib/milo_quota.ts";
import { KubeDevApi } from "../testing/kube_dev.ts";

const CLUSTER = "cluster-a";
const T0 = Date.parse("2026-12-02T12:00:00Z");
const HOUR = 3_600_000;
const BASE = "https://milo.test";
const CLAIMS = "/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims";

// deno-lint-ignore no-explicit-any
type Json = any;
const status = (code: number, reason: string, name?: string) =>
  Response.json({ kind: "Status", status: "Failure", reason, code, details: { name } }, {
    status: code,
  });

/**
 * Milo's IPClaim API for the calls the sweep makes, with hooks and a request
 * log. Like Milo it deletes by name whatever a DELETE's `preconditions` say
 * (`AllocatingREST.Delete`, `internal/registry/ipam/ipclaim/storage.go`),
 * answers the claim it deleted, refuses a create of a taken name or a pinned
 * address held (409), and dates every answer by its own clock (`now`; no
 * `Date` header while it is undefined).
 */
export class MiloStub {
  readonly claims = new Map<string, Json>();
  readonly log: string[] = [];
  listStatus = 200;
  /** Milo's clock, sent as each answer's `Date` (whole seconds, as Go's net/http writes it). */
  now?: () => number = () => T0;
  onGet?: (name: string) => void;
  onDelete?: (name: string) => void;
  onCreate?: (name: string) => void;
  constructor(readonly maxPage = 500) {}

  add(
    name: string,
    o: {
      podUid?: string;
      pod?: string;
      node?: string | null;
      cluster?: string;
      clusterUid?: string;
    } = {},
  ) {
    const ann: Record<string, string> = { [KEYS.cluster]: o.cluster ?? CLUSTER };
    if (o.clusterUid) ann[KEYS.clusterUid] = o.clusterUid;
    if (o.node !== null) ann[KEYS.node] = o.node ?? "node-1";
    if (o.podUid) ann[KEYS.podUid] = o.podUid;
    if (o.pod) ann[KEYS.pod] = o.pod;
    const claim = {
      apiVersion: "ipam.miloapis.com/v1alpha1",
      kind: "IPClaim",
      metadata: {
        name,
        namespace: "default",
        uid: crypto.randomUUID(),
        creationTimestamp: new Date(T0 - HOUR).toISOString(),
        labels: { [KEYS.cluster]: CLUSTER },
        annotations: ann,
      },
      spec: { className: "vpc-pods-ipv4" },
      status: { phase: "Bound", allocatedCIDR: `10.40.0.${this.claims.size + 1}/32` },
    };
    this.claims.set(name, claim);
    return claim;
  }

  fetch = (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const res = this.#answer(input, init);
    if (this.now) res.headers.set("date", new Date(this.now()).toUTCString());
    return Promise.resolve(res);
  };

  #answer(input: RequestInfo | URL, init: RequestInit): Response {
    const url = new URL(String(input));
    const method = init.method ?? "GET";
    this.log.push(`${method} ${url.pathname.slice(CLAIMS.length) || "/"}${url.search}`);
    const name = url.pathname.slice(CLAIMS.length + 1);
    if (!name && method === "POST") return this.#create(JSON.parse(String(init.body)));
    if (!name) return this.#list(url.searchParams);
    if (method === "GET") {
      this.onGet?.(name);
      const c = this.claims.get(name);
      return c ? Response.json(c) : status(404, "NotFound", name);
    }
    this.onDelete?.(name);
    const c = this.claims.get(name);
    if (!c) return status(404, "NotFound", name);
    this.claims.delete(name);
    return Response.json({ ...c, status: { ...c.status, phase: "Releasing" } });
  }

  #create(body: Json): Response {
    const name = body.metadata.name;
    this.onCreate?.(name);
    if (this.claims.has(name)) return status(409, "AlreadyExists", name);
    const address = body.spec.address;
    const held = (c: Json) => c.status.allocatedCIDR.split("/")[0] === address;
    if (address && [...this.claims.values()].some(held)) return status(409, "Conflict");
    const claim = {
      apiVersion: "ipam.miloapis.com/v1alpha1",
      kind: "IPClaim",
      metadata: {
        ...body.metadata,
        uid: crypto.randomUUID(),
        creationTimestamp: new Date((this.now ?? Date.now)()).toISOString(),
      },
      spec: body.spec,
      status: { phase: "Bound", allocatedCIDR: `${address ?? "10.40.9.9"}/32` },
    };
    this.claims.set(name, claim);
    return Response.json(claim, { status: 201 });
  }

  #list(q: URLSearchParams): Response {
    if (this.listStatus !== 200) return status(this.listStatus, "ServiceUnavailable");
    const [key, value] = (q.get("labelSelector") ?? "").split("=");
    const all = [...this.claims.values()].filter((c) => c.metadata.labels[key] === value);
    const from = Number(q.get("continue") ?? 0);
    const size = Math.min(Number(q.get("limit")), this.maxPage);
    const next = from + size < all.length ? String(from + size) : undefined;
    return Response.json({
      kind: "IPClaimList",
      metadata: next ? { continue: next } : {},
      items: all.slice(from, from + size),
    });
  }
}

/** Both APIs, a clock, and the run; `between` runs during the interval's sleep. */
export function world(o: { miloPage?: number; kubePage?: number; bystander?: boolean } = {}) {
  const milo = new MiloStub(o.miloPage);
  const kube = new KubeDevApi();
  // Milo's clock: the sweeper's, `miloSkew` ahead (behind when negative).
  milo.now = () => w.clock + w.miloSkew;
  for (const n of ["node-1", "node-2"]) kube.store.addNode(n);
  // A pod without a claim (host network), so a cluster of orphans alone is not an empty list.
  if (o.bystander !== false) {
    kube.store.addPod({ namespace: "kube-system", name: "kube-proxy-1", nodeName: "node-1" });
  }
  const w = {
    milo,
    kube,
    clock: T0,
    miloSkew: 0,
    sleeps: [] as number[],
    between: undefined as (() => void) | undefined,
    onPodGet: undefined as (() => void) | undefined,
    /** A pod on `node` and the claim of its interface. */
    live(name: string, node = "node-1") {
      const pod = kube.store.addPod({ namespace: "shop", name, nodeName: node });
      return milo.add(`c-${name}`, {
        podUid: pod.metadata.uid as string,
        pod: `shop/${name}`,
        node,
      });
    },
    /** A claim whose pod is gone. */
    orphan(name: string, node = "node-1") {
      return milo.add(`c-${name}`, { podUid: crypto.randomUUID(), pod: `shop/${name}`, node });
    },
    run(extra: Partial<SweepOptions> = {}): Promise<SweepReport> {
      const noSleep = () => Promise.resolve();
      const kubeFetch = (input: RequestInfo | URL, init?: RequestInit) => {
        if (String(input).includes("/pods/")) w.onPodGet?.();
        return kube.fetch(input, init);
      };
      return sweep({
        cluster: CLUSTER,
        milo: new MiloClient({
          baseUrl: BASE,
          namespace: "default",
          token: "t",
          requestMs: 1000,
          deadline: Date.now() + 60_000,
          fetch: milo.fetch as typeof fetch,
          sleep: noSleep,
        }),
        kube: new KubeClient({
          server: "https://kube.test",
          token: kube.token,
          fetch: kubeFetch as typeof fetch,
          sleep: noSleep,
          pageLimit: o.kubePage,
        }),
        apply: true,
        graceMs: 600_000,
        intervalMs: 30_000,
        maxRelease: { percent: 100 },
        operationMs: 10_000,
        now: () => w.clock,
        sleep: (ms) => {
          w.sleeps.push(ms);
          w.clock += ms;
          w.between?.();
          return Promise.resolve();
        },
        ...extra,
      });
    },
    deletes: () => milo.log.filter((l) => l.startsWith("DELETE")),
  };
  return w;
}

const row = (r: SweepReport, claim: string) => {
  const x = r.rows.find((x) => x.claim === claim);
  assert.ok(x, `no row for ${claim}: ${JSON.stringify(r.rows)}`);
  return x;
};

Deno.test("an orphan is released; live, pod-UID-less claims are no candidates", async () => {
  const w = world();
  w.live("web-0");
  w.orphan("gone-0");
  w.milo.add("c-docker", { node: "node-1" }); // no pod UID: a non-Kubernetes runtime
  const r = await w.run();
  assert.equal(r.exitCode, 0);
  assert.equal(r.outcome, "done");
  assert.deepEqual(r.rows.map((x) => [x.claim, x.action, x.reason]), [
    ["c-gone-0", "released", "pod-gone"],
  ]);
  assert.equal(row(r, "c-gone-0").why, "pod shop/gone-0 not found");
  assert.deepEqual(w.deletes(), ["DELETE /c-gone-0"]);
  assert.deepEqual([...w.milo.claims.keys()].sort(), ["c-docker", "c-web-0"]);
  assert.equal(r.totals.withoutPodUid, 1);
  assert.equal(r.totals.claims, 3);
  // Its node shows Ready: the observations are a node monitor grace apart (a partition's first
  // seconds look Ready), and the release waits the pod's termination grace after the second.
  assert.deepEqual(w.sleeps, [55_000, 40_000]);
  assert.equal(r.observations.length, 2);
});

Deno.test("UID, not name: a pod recreated under its name frees the old lease only", async () => {
  const w = world();
  const old = w.orphan("web-0"); // the old pod's claim
  old.metadata.name = "c-web-0-old";
  w.milo.claims.delete("c-web-0");
  w.milo.claims.set("c-web-0-old", old);
  w.live("web-0"); // same namespace/name, a new UID, its own claim
  const r = await w.run();
  assert.deepEqual(r.rows.map((x) => [x.claim, x.action]), [["c-web-0-old", "released"]]);
  assert.match(row(r, "c-web-0-old").why, /now has uid/);
  assert.deepEqual(w.deletes(), ["DELETE /c-web-0-old"]);
  assert.ok(w.milo.claims.has("c-web-0"));
});

Deno.test("a mirror pod's config.mirror annotation counts as the static pod existing", async () => {
  const w = world();
  const staticUid = "3f2c8a1e0b7d4e6f9a8b7c6d5e4f3a2b";
  w.kube.store.addPod({
    namespace: "kube-system",
    name: "etcd-node-1",
    nodeName: "node-1",
    staticUid,
  });
  w.milo.add("c-etcd", { podUid: staticUid, pod: "kube-system/etcd-node-1" });
  w.orphan("gone-0");
  const r = await w.run();
  assert.deepEqual(r.rows.map((x) => x.claim), ["c-gone-0"]);
  assert.ok(w.milo.claims.has("c-etcd"));
});

Deno.test("a static pod whose mirror pod is missing is left to its node; on a gone node it goes", async () => {
  const w = world();
  // kubelet names a static pod <manifest name>-<node name>; no mirror pod made it to the API.
  w.milo.add("c-etcd", { podUid: "static-hash-1", pod: "kube-system/etcd-node-1", node: "node-1" });
  w.milo.add("c-etcd-3", {
    podUid: "static-hash-3",
    pod: "kube-system/etcd-node-3",
    node: "node-3",
  });
  w.orphan("gone-0");
  const r = await w.run();
  assert.equal(row(r, "c-etcd").action, "kept");
  assert.match(row(r, "c-etcd").why, /may be a static pod of node-1 .*that node's reconcile/);
  assert.ok(w.milo.claims.has("c-etcd"));
  assert.equal(row(r, "c-etcd-3").action, "released", "its node is gone too");
  assert.equal(row(r, "c-gone-0").action, "released");
});

Deno.test("a pod gone from the API on a node that is not Ready is left to that node; Ready again, it goes", async () => {
  const w = world();
  // Force-deleted while its node was partitioned: the node controller marks the node Unknown.
  w.orphan("partitioned", "node-2");
  w.orphan("gone-0");
  w.kube.store.setNodeReady("node-2", "Unknown");
  const r = await w.run();
  assert.equal(row(r, "c-partitioned").action, "kept");
  assert.match(row(r, "c-partitioned").why, /node node-2 is not Ready: .*that node's reconcile/);
  assert.ok(w.milo.claims.has("c-partitioned"));
  assert.equal(row(r, "c-gone-0").action, "released", "a Ready node's pod UID gone: released");
  w.kube.store.setNodeReady("node-2", "True");
  const again = await w.run();
  assert.equal(row(again, "c-partitioned").action, "released");
});

Deno.test("a node recorded under another name: its not-Ready and static-pod guards still hold", async () => {
  const w = world();
  // The plugin recorded the raw hostname; the kubelet registered the node lowercased.
  w.orphan("partitioned", "Node-2");
  w.milo.add("c-etcd", { podUid: "static-1", pod: "kube-system/etcd-node-1", node: "Node-1" });
  w.kube.store.setNodeReady("node-2", "Unknown");
  const r = await w.run();
  assert.equal(row(r, "c-partitioned").reason, "pod-gone", "the API knows Node-2 as node-2");
  assert.match(row(r, "c-partitioned").why, /node node-2 is not Ready: .*that node's reconcile/);
  assert.match(row(r, "c-etcd").why, /may be a static pod of node-1 /);
  assert.deepEqual(w.deletes(), []);
});

Deno.test("a node the API does not know: its claims go only while every node is Ready, never a static pod's", async () => {
  const w = world();
  w.orphan("gone-0", "node-9"); // deleted, or registered under --hostname-override
  w.milo.add("c-nameless", { podUid: crypto.randomUUID(), pod: "shop/nameless", node: null });
  // kubelet names a static pod after the node it registered: node-1, whatever the claim says.
  w.milo.add("c-etcd", {
    podUid: "static-1",
    pod: "kube-system/etcd-node-1",
    node: "ip-10-0-0-1",
  });
  w.kube.store.setNodeReady("node-2", "False");
  const r = await w.run();
  assert.equal(row(r, "c-gone-0").reason, "pod-and-node-gone");
  for (const claim of ["c-gone-0", "c-nameless"]) {
    assert.match(
      row(r, claim).why,
      /is unknown to the API and 1 node\(s\) are not Ready \(node-2\): .*reconcile/,
      claim,
    );
  }
  assert.match(row(r, "c-etcd").why, /may be a static pod of node-1 /);
  assert.deepEqual(w.deletes(), []);
  w.kube.store.setNodeReady("node-2", "True");
  const again = await w.run();
  assert.deepEqual(w.deletes().sort(), ["DELETE /c-gone-0", "DELETE /c-nameless"]);
  assert.equal(row(again, "c-etcd").action, "kept");
});

Deno.test("pagination: claims, pods and nodes over several pages, each page once per observation", async () => {
  const w = world({ miloPage: 2, kubePage: 2, bystander: false });
  w.kube.store.addNode("node-3");
  for (let i = 0; i < 4; i++) w.live(`web-${i}`, `node-${1 + i % 3}`);
  for (let i = 0; i < 3; i++) w.orphan(`gone-${i}`, "node-3");
  const r = await w.run();
  assert.equal(r.totals.claims, 7);
  assert.deepEqual(r.observations.map((o) => [o.claims, o.pods, o.nodes, o.candidates]), [
    [7, 4, 3, 3],
    [7, 4, 3, 3],
  ]);
  assert.equal(r.totals.released, 3);
  const lists = w.milo.log.filter((l) => l.startsWith("GET /?"));
  assert.equal(lists.length, 8); // 4 pages × 2 observations
  assert.equal(lists.filter((l) => l.includes("continue=")).length, 6);
  assert.equal(w.kube.count("/api/v1/pods"), 4); // 2 pages × 2
  assert.equal(w.kube.count("/api/v1/nodes"), 4);
  assert.equal(w.kube.log.filter((l) => l.search.includes("continue=")).length, 4);
  // Re-check: a pod GET per candidate, again after the termination hold for the one that waited
  // it (the others' re-checks come after it), one claim GET and one DELETE each, nothing else.
  assert.equal(w.kube.log.filter((l) => l.path.includes("/pods/")).length, 4);
  assert.equal(w.milo.log.filter((l) => /^GET \/c-/.test(l)).length, 3);
  assert.equal(r.requests.milo, 8 + 6);
  // And one GET of the kube-system namespace: its UID names the cluster.
  assert.equal(r.requests.kubernetes, 1 + 8 + 4);
});

Deno.test("a candidate whose pod reappears in the second observation is kept", async () => {
  const w = world();
  const c = w.orphan("web-0");
  w.between = () =>
    w.kube.store.addPod({
      namespace: "shop",
      name: "web-0",
      uid: c.metadata.annotations[KEYS.podUid],
      nodeName: "node-1",
    });
  const r = await w.run();
  assert.equal(row(r, "c-web-0").action, "kept");
  assert.match(row(r, "c-web-0").why, /not a candidate in the second observation/);
  assert.deepEqual(w.deletes(), []);
});

Deno.test("a candidate of the second observation only is kept", async () => {
  const w = world();
  w.live("web-0");
  w.between = () => w.kube.store.removePod("shop", "web-0");
  let r = await w.run({ maxRelease: { count: 5 } });
  assert.deepEqual(r.rows, [], "no candidate in the first observation: no second one");
  w.kube.store.addPod({ namespace: "shop", name: "web-1", nodeName: "node-1" });
  w.live("web-0");
  w.orphan("gone-0");
  r = await w.run({ maxRelease: { count: 5 } });
  assert.equal(row(r, "c-web-0").why, "a candidate in the second observation only");
  assert.deepEqual(w.deletes(), ["DELETE /c-gone-0"]);
});

Deno.test("a claim whose uid changed by the re-check's GET is kept, no DELETE sent", async () => {
  const w = world();
  w.orphan("gone-0");
  w.milo.onGet = (name) => {
    w.milo.claims.get(name).metadata.uid = "new-uid";
    w.milo.onGet = undefined;
  };
  const r = await w.run();
  assert.equal(row(r, "c-gone-0").action, "kept");
  assert.equal(row(r, "c-gone-0").why, "claim uid changed on re-check");
  assert.equal(w.milo.claims.get("c-gone-0").metadata.uid, "new-uid");
  assert.deepEqual(w.deletes(), []);
});

Deno.test("a newer claim of the name made between the re-check's GET and DELETE: Milo deletes it, the sweep makes it again", async (t) => {
  // Milo deletes by name whatever the DELETE's uid precondition says; the answer is the claim it
  // deleted, whose uid tells the sweep it was not the one it judged.
  const newer = (w: ReturnType<typeof world>) => {
    w.orphan("gone-0");
    w.milo.onDelete = (name) => {
      w.milo.claims.get(name).metadata.uid = "uid-of-the-newer-claim";
      w.milo.onDelete = undefined;
    };
  };
  await t.step("made again at its address", async () => {
    const w = world();
    newer(w);
    const address = w.milo.claims.get("c-gone-0").status.allocatedCIDR;
    const r = await w.run();
    assert.equal(r.exitCode, 0, r.message);
    assert.equal(row(r, "c-gone-0").action, "kept");
    assert.match(
      row(r, "c-gone-0").why,
      /^claim uid changed on re-check: the DELETE removed a newer claim of that name \(uid uid-of-the-newer-claim\): made again$/,
    );
    const again = w.milo.claims.get("c-gone-0");
    assert.equal(again.status.allocatedCIDR, address, "its address pinned");
    assert.equal(again.metadata.annotations[KEYS.pod], "shop/gone-0", "its holder's record");
    assert.deepEqual(w.milo.log.filter((l) => /^(DELETE|POST)/.test(l)), [
      "DELETE /c-gone-0",
      "POST /",
    ]);
  });
  await t.step(
    "its address taken before the sweep could make it again: failed, naming both",
    async () => {
      const w = world();
      newer(w);
      const address = w.milo.claims.get("c-gone-0").status.allocatedCIDR;
      // A first-fit create of another pod takes the freed address between the DELETE and the POST.
      w.milo.onCreate = () => {
        w.milo.onCreate = undefined;
        w.milo.add("c-other").status.allocatedCIDR = address;
      };
      const r = await w.run();
      assert.equal(r.exitCode, 3, r.message);
      assert.equal(row(r, "c-gone-0").action, "failed");
      assert.match(
        row(r, "c-gone-0").why,
        /removed a newer claim of that name \(uid uid-of-the-newer-claim\), and making it again failed/,
      );
      assert.ok(!w.milo.claims.has("c-gone-0"));
    },
  );
});

Deno.test("the final pod GET showing the same UID (or its mirror on the claim's node) keeps the lease", async () => {
  for (const mirror of [false, true]) {
    const w = world();
    const c = w.orphan("web-0");
    const uid = c.metadata.annotations[KEYS.podUid];
    // The pod, or the mirror pod its node's kubelet made for it (a static pod stays on its node).
    const node = mirror ? "node-1" : "node-2";
    w.onPodGet = () =>
      w.kube.store.addPod({
        namespace: "shop",
        name: "web-0",
        nodeName: node,
        ...(mirror ? { staticUid: uid } : { uid }),
      });
    const r = await w.run();
    assert.equal(row(r, "c-web-0").action, "kept");
    assert.match(
      row(r, "c-web-0").why,
      new RegExp(`pod exists on re-check \\(node ${node}, phase Running\\)`),
    );
    assert.deepEqual(w.milo.log.filter((l) => /\/c-/.test(l)), []);
  }
});

Deno.test("a mirror UID vouches only for its own static pod: a forged annotation, another name or node, keeps nothing", async () => {
  const forged = [
    ["a user's pod annotated with the gone pod's UID", { namespace: "shop", name: "web-0" }],
    ["a pod of another namespace, annotated", { namespace: "attacker", name: "pending" }],
  ] as const;
  for (const [what, where] of forged) {
    const w = world();
    const c = w.orphan("web-0");
    const uid = c.metadata.annotations[KEYS.podUid];
    w.kube.store.addPod({
      ...where,
      nodeName: "node-1",
      phase: "Pending",
      annotations: { "kubernetes.io/config.mirror": uid },
    });
    const r = await w.run();
    assert.equal(row(r, "c-web-0").action, "released", what);
  }
  // A kubelet's mirror pod, but of another static pod (another name) or on another node.
  for (const [name, node] of [["etcd-node-1", "node-1"], ["web-0", "node-2"]]) {
    const w = world();
    const c = w.orphan("web-0");
    const uid = c.metadata.annotations[KEYS.podUid];
    w.kube.store.addPod({ namespace: "shop", name, nodeName: node, staticUid: uid });
    const r = await w.run();
    assert.equal(row(r, "c-web-0").action, "released", `${name} on ${node}`);
  }
});

Deno.test("younger than grace, created after the run started, no creation time: kept", async () => {
  const w = world();
  w.orphan("young").metadata.creationTimestamp = new Date(T0 - 60_000).toISOString();
  w.orphan("future").metadata.creationTimestamp = new Date(T0 + 5_000).toISOString();
  delete (w.orphan("undated").metadata as { creationTimestamp?: string }).creationTimestamp;
  w.orphan("old");
  w.between = () => w.orphan("during"); // made between the observations
  let r = await w.run({ graceMs: 600_000 });
  assert.equal(row(r, "c-young").why, "younger than --grace");
  assert.equal(row(r, "c-future").why, "created after the run started");
  assert.equal(row(r, "c-undated").why, "the claim has no creation time");
  assert.equal(row(r, "c-during").why, "a candidate in the second observation only");
  assert.deepEqual(w.deletes(), ["DELETE /c-old"]);
  w.between = undefined;
  w.milo.claims.get("c-future").metadata.creationTimestamp = new Date(w.clock + 5_000)
    .toISOString();
  r = await w.run({ graceMs: 0 }); // grace 0 still never takes a claim newer than the run
  assert.equal(row(r, "c-future").why, "created after the run started");
  assert.deepEqual(r.rows.filter((x) => x.action === "released").map((x) => x.claim), [
    "c-during",
    "c-young",
  ]);
});

Deno.test("a claim stamped in the second the run started is newer than the run", async () => {
  const w = world();
  w.clock = T0 + 700; // the run starts at 12:00:00.700
  const stamp = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
  w.orphan("same-second").metadata.creationTimestamp = stamp(T0); // 12:00:00Z, maybe at .900
  w.orphan("second-before").metadata.creationTimestamp = stamp(T0 - 1_000);
  const r = await w.run({ graceMs: 0 });
  assert.equal(row(r, "c-same-second").why, "created after the run started");
  assert.deepEqual(w.deletes(), ["DELETE /c-second-before"]);
});

Deno.test("grace is measured on Milo's clock, behind or ahead of the sweeper's", async (t) => {
  const MIN = 60_000;
  const stamp = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
  for (const skew of [-15 * MIN, 15 * MIN]) {
    await t.step(`Milo ${skew < 0 ? "behind" : "ahead"} by 15 minutes`, async () => {
      const w = world();
      w.miloSkew = skew;
      const milo = T0 + skew; // Milo's clock as the run starts
      // Made 5 s before the run on Milo's clock: a just-ADDed pod the pod list has not shown yet.
      w.orphan("fresh").metadata.creationTimestamp = stamp(milo - 5_000);
      w.orphan("old").metadata.creationTimestamp = stamp(milo - 20 * MIN);
      const r = await w.run({ graceMs: 10 * MIN });
      assert.equal(row(r, "c-fresh").action, "kept");
      assert.equal(row(r, "c-fresh").why, "younger than --grace");
      // The second observation a node monitor grace (55 s) after the first.
      assert.equal(row(r, "c-fresh").ageMs, 60_000, "on Milo's clock, at the second observation");
      assert.equal(row(r, "c-old").action, "released");
      assert.equal(row(r, "c-old").ageMs, 20 * MIN + 55_000);
      assert.deepEqual(w.deletes(), ["DELETE /c-old"]);
    });
  }
  await t.step(
    "Milo behind: a claim of the run's start second on Milo's clock is newer than the run",
    async () => {
      const w = world();
      w.miloSkew = -15 * MIN;
      w.orphan("same-second").metadata.creationTimestamp = stamp(T0 - 15 * MIN);
      w.orphan("second-before").metadata.creationTimestamp = stamp(T0 - 15 * MIN - 1_000);
      const r = await w.run({ graceMs: 0 });
      assert.equal(row(r, "c-same-second").why, "created after the run started");
      assert.deepEqual(w.deletes(), ["DELETE /c-second-before"]);
    },
  );
});

Deno.test("Milo's answers without a usable Date: no claim's age is known, every candidate kept", async () => {
  for (const date of [undefined, "not a date"]) {
    const w = world();
    w.milo.now = undefined;
    if (date) {
      const plain = w.milo.fetch;
      w.milo.fetch = async (input, init) => {
        const res = await plain(input, init);
        res.headers.set("date", date);
        return res;
      };
    }
    w.orphan("gone-0");
    const r = await w.run({ graceMs: 0 });
    assert.equal(r.exitCode, 0, r.message);
    assert.equal(row(r, "c-gone-0").action, "kept", String(date));
    assert.equal(
      row(r, "c-gone-0").why,
      "Milo's LIST answer carried no usable Date header: the claim's age on Milo's clock is unknown",
    );
    assert.equal(row(r, "c-gone-0").ageMs, null);
    assert.deepEqual(w.deletes(), []);
  }
});

Deno.test("a pod with the claim's UID keeps it in every phase, scheduled or not", async () => {
  const w = world();
  for (const phase of ["Pending", "Succeeded", "Failed", "Unknown"]) {
    const pod = w.kube.store.addPod({ namespace: "shop", name: `p-${phase}`, phase });
    w.milo.add(`c-${phase}`, { podUid: pod.metadata.uid as string, pod: `shop/p-${phase}` });
  }
  w.orphan("gone");
  const r = await w.run();
  assert.deepEqual(r.rows.map((x) => x.claim), ["c-gone"]);
  assert.deepEqual(w.deletes(), ["DELETE /c-gone"]);
});

Deno.test("a claim of another cluster is never a candidate, whatever its label says", async () => {
  const w = world();
  w.milo.add("c-foreign", { podUid: crypto.randomUUID(), pod: "shop/x", cluster: "cluster-b" });
  w.live("web-0");
  const r = await w.run();
  assert.deepEqual(r.rows, []);
  assert.equal(r.totals.foreign, 1);
  assert.equal(r.totals.claims, 1);
  assert.deepEqual(w.deletes(), []);
  assert.deepEqual(w.sleeps, []); // no candidate: no second observation
});

Deno.test("a pod on a vanished node is kept while the pod exists; pod and node gone goes", async () => {
  const w = world();
  w.kube.store.addNode("node-9");
  w.live("stuck", "node-9");
  w.orphan("gone", "node-9");
  w.kube.store.removeNode("node-9");
  w.milo.add("c-nameless", { podUid: crypto.randomUUID() }); // no pod annotation to re-check
  const r = await w.run();
  assert.deepEqual(r.rows.map((x) => [x.claim, x.reason, x.action]), [
    ["c-gone", "pod-and-node-gone", "released"],
    ["c-nameless", "pod-gone", "kept"],
    ["c-stuck", "node-gone", "kept"],
  ]);
  assert.match(row(r, "c-stuck").why, /exists; only its node is gone/);
  assert.equal(row(r, "c-nameless").why, "no pod namespace/name recorded to re-check");
});

Deno.test("observations less than --interval apart release nothing", async () => {
  const w = world();
  w.orphan("gone-0");
  const r = await w.run({ sleep: () => Promise.resolve() }); // the clock does not move
  assert.equal(row(r, "c-gone-0").why, "observations less than --interval apart");
  assert.deepEqual(w.deletes(), []);
});

Deno.test("dry run: reports would-release, re-checks, deletes nothing", async () => {
  const w = world();
  w.orphan("gone-0");
  w.live("web-0");
  const r = await w.run({ apply: false });
  assert.equal(r.exitCode, 0);
  assert.equal(r.apply, false);
  assert.equal(row(r, "c-gone-0").action, "would-release");
  assert.equal(r.totals.wouldRelease, 1);
  assert.equal(r.totals.released, 0);
  assert.deepEqual(w.deletes(), []);
  assert.equal(w.milo.claims.size, 2);
  assert.match(r.message, /^dry run: would release 1 of 1/);
});

Deno.test("max-release N and P% count pods: more than allowed brakes, else releases", async () => {
  const cases: [SweepOptions["maxRelease"], number, number][] = [
    [{ count: 1 }, 2, 1],
    [{ count: 2 }, 0, 2],
    [{ percent: 25 }, 0, 2], // 25% of 4 pods is 1: the floor of 2 pods
    [{ percent: 0 }, 0, 2],
  ];
  for (const [maxRelease, exit, limit] of cases) {
    const w = world();
    w.orphan("gone-0");
    w.orphan("gone-1");
    w.live("web-0");
    w.live("web-1");
    const r = await w.run({ maxRelease });
    assert.equal(r.exitCode, exit, JSON.stringify(maxRelease));
    assert.equal(w.deletes().length, exit ? 0 : 2);
    assert.equal(r.settings.maxReleaseLimit, limit);
    assert.deepEqual([r.totals.pods, r.totals.podsToRelease], [4, 2]);
    if (exit) {
      assert.equal(r.outcome, "brake");
      assert.match(
        r.message,
        /^brake: the claims of 2 pods would be released, more than --max-release 1 allows \(1 of the 4 pods with claims\); nothing released$/,
      );
      assert.ok(r.rows.every((x) => x.action === "kept" && x.why.startsWith("brake: ")));
    }
  }
});

Deno.test("max-release P% scales with the pods with claims past the floor", async () => {
  // 80 pods with claims, 12 of them gone: 25% is 20, 15% is 12, 10% is 8, 1% is 0 (the floor: 2).
  for (const [percent, limit, exit] of [[25, 20, 0], [15, 12, 0], [10, 8, 2], [1, 2, 2]]) {
    const w = world();
    for (let i = 0; i < 68; i++) w.live(`web-${i}`);
    for (let i = 0; i < 12; i++) w.orphan(`gone-${i}`);
    const r = await w.run({ maxRelease: { percent } });
    assert.equal(r.settings.maxReleaseLimit, limit, `${percent}%`);
    assert.equal(r.exitCode, exit, `${percent}%`);
    assert.equal(w.deletes().length, exit ? 0 : 12, `${percent}%`);
  }
});

Deno.test("max-release P%: its floor of 2 pods brakes a small cluster losing most of its pods", async () => {
  // A 4-pod cluster whose pod list lost 3 pods (a bad API answer): 25% is 1, the floor 2.
  const w = world();
  for (let i = 0; i < 3; i++) w.orphan(`gone-${i}`);
  w.live("web-0");
  const r = await w.run({ maxRelease: { percent: 25 } });
  assert.equal(r.exitCode, 2, r.message);
  assert.equal(r.settings.maxReleaseLimit, 2);
  assert.deepEqual([r.totals.pods, r.totals.podsToRelease], [4, 3]);
  assert.match(
    r.message,
    /the claims of 3 pods would be released, .*\(2 of the 4 pods with claims\)/,
  );
  assert.deepEqual(w.deletes(), []);
});

Deno.test("a 4-claim cluster: a deleted dual-stack pod never trips the default brake", async () => {
  const w = world();
  const dual = (name: string, podUid: string) => {
    for (const f of ["v4", "v6"]) w.milo.add(`c-${name}-${f}`, { podUid, pod: `shop/${name}` });
  };
  const pod = w.kube.store.addPod({ namespace: "shop", name: "web-0", nodeName: "node-1" });
  dual("web-0", pod.metadata.uid as string);
  dual("gone-0", crypto.randomUUID());
  const r = await w.run({ maxRelease: { percent: 25 } });
  assert.equal(r.exitCode, 0, r.message);
  assert.deepEqual(w.deletes().sort(), ["DELETE /c-gone-0-v4", "DELETE /c-gone-0-v6"]);
  assert.deepEqual([r.totals.claims, r.totals.pods, r.totals.podsToRelease], [4, 2, 1]);
  assert.equal(r.settings.maxReleaseLimit, 2, "25% of 2 pods, the floor of 2");
  // A count is of pods too: one pod's two claims are one.
  dual("gone-1", crypto.randomUUID());
  const one = await w.run({ maxRelease: { count: 1 } });
  assert.equal(one.exitCode, 0, one.message);
  assert.equal(one.totals.released, 2);
});

Deno.test("brakes: empty pod or node list, Kubernetes or Milo list errors", async () => {
  const cases: [string, (w: ReturnType<typeof world>) => void, RegExp][] = [
    ["empty pods", (w) => w.kube.faults.emptyLists = true, /pod list is empty while .* 2 claim/],
    ["empty nodes", (w) => {
      w.kube.store.removeNode("node-1");
      w.kube.store.removeNode("node-2");
    }, /node list is empty/],
    ["kube 503", (w) => w.kube.faults.failLists = true, /Kubernetes pod list failed: .*503/],
    ["kube 403", (w) => w.kube.faults.forbidden = true, /forbids this \(403\)/],
    ["milo 503", (w) => w.milo.listStatus = 503, /Milo LIST .* failed: Milo unreachable/],
    ["milo 401", (w) => w.milo.listStatus = 401, /Milo LIST .* failed: Milo rejected/],
    ["2nd observation", (w) => w.between = () => w.kube.faults.emptyLists = true, /pod list/],
    ["milo 503, 2nd observation", (w) => w.between = () => w.milo.listStatus = 503, /Milo LIST/],
  ];
  for (const [what, fault, reason] of cases) {
    const w = world();
    w.orphan("gone-0");
    w.live("web-0");
    fault(w);
    const r = await w.run();
    assert.equal(r.exitCode, 2, what);
    assert.equal(r.outcome, "brake", what);
    assert.match(r.message, reason, what);
    assert.deepEqual(w.deletes(), [], what);
    assert.equal(w.milo.claims.size, 2, what);
  }
});

Deno.test("a failed re-check is reported per candidate and exits 3", async () => {
  const w = world();
  w.orphan("gone-0");
  w.orphan("gone-1");
  w.onPodGet = () => w.kube.faults.forbidden = true;
  const r = await w.run();
  assert.equal(r.exitCode, 3);
  assert.equal(r.outcome, "partial");
  assert.equal(r.totals.failed, 2);
  assert.match(row(r, "c-gone-0").why, /forbids this \(403\)/);
  assert.deepEqual(w.deletes(), []);
});

Deno.test("a list past what the sweep holds is a brake, naming the bound; nothing released", async () => {
  const cases: [string, (w: ReturnType<typeof world>) => Partial<SweepOptions>, RegExp][] = [
    [
      "Milo's claims: the candidates kept",
      () => ({ candidateBound: { bytes: 2 ** 30, items: 1 } }),
      /Milo LIST .* failed: the sweep's candidates of Milo's IPClaimList exceeds what this process holds of a list: more than 1 items kept \(MAX_LIST_ITEMS\)/,
    ],
    ["Kubernetes pods", (w) => ({
      kube: new KubeClient({
        server: "https://kube.test",
        token: w.kube.token,
        fetch: w.kube.fetch as typeof fetch,
        sleep: () => Promise.resolve(),
        podListBound: { bytes: 2 ** 30, items: 1 },
      }),
    }), /pod list failed: .*more than 1 items kept \(POD_LIST_BOUND\.items\)/],
  ];
  for (const [what, clients, reason] of cases) {
    const w = world();
    w.orphan("gone-0");
    w.orphan("gone-1");
    w.live("web-0");
    const r = await w.run(clients(w));
    assert.equal(r.outcome, "brake", what);
    assert.equal(r.exitCode, 2, what);
    assert.match(r.message, reason, what);
    assert.deepEqual(w.deletes(), [], what);
    assert.equal(w.milo.claims.size, 3, what);
  }
});

Deno.test("Milo's whole list in one answer of 70 MB: read as a stream, every claim counted", async () => {
  const w = world();
  w.orphan("gone-0");
  // Claims carrying 700 KB of another party's fields each (managedFields), as Milo answers them.
  const pad = [{ manager: "other", fieldsV1: { f: "m".repeat(700_000) } }];
  for (let i = 0; i < 100; i++) Object.assign(w.live(`web-${i}`).metadata, { managedFields: pad });
  const r = await w.run({ maxRelease: { count: 1 } });
  assert.equal(r.exitCode, 0, r.message);
  assert.equal(r.totals.claims, 101);
  assert.deepEqual(w.deletes(), ["DELETE /c-gone-0"]);
});

Deno.test("140 pending pods with 256 KiB of annotations each do not stop the sweep", async () => {
  const w = world();
  w.orphan("gone-0");
  w.live("web-0");
  // The most annotations the API server accepts (keys and values, TotalAnnotationSizeLimitB).
  const key = "example.com/blob";
  const annotations = { [key]: "a".repeat(256 * 1024 - key.length) };
  for (let i = 0; i < 140; i++) {
    w.kube.store.addPod({ namespace: "tenant", name: `fat-${i}`, phase: "Pending", annotations });
  }
  const r = await w.run();
  assert.equal(r.exitCode, 0, r.message);
  assert.equal(row(r, "c-gone-0").action, "released");
  assert.equal(r.observations[0].pods, 142);
  assert.equal(w.kube.count("/api/v1/pods"), 2, "one page of 250 per observation");
});

Deno.test("a pod force-deleted from a partitioned node, its node Ready again: released only once its kubelet has ended it", async () => {
  const w = world();
  // db-0 was force-deleted while node-1 was partitioned, and its StatefulSet made it again on
  // node-2, with the template's termination grace of 5 minutes.
  w.kube.store.setNodeReady("node-1", "Unknown", new Date(w.clock - 600_000));
  w.orphan("db-0", "node-1");
  w.kube.store.addPod({ namespace: "shop", name: "db-0", nodeName: "node-2", graceS: 300 });
  const first = await w.run();
  assert.equal(row(first, "c-db-0").action, "kept", "its node is not Ready");
  // node-1 comes back: its kubelet hears the pod is gone and ends the orphan within its grace,
  // whose sandbox (and address) lives until then.
  const back = w.clock;
  w.kube.store.setNodeReady("node-1", "True", new Date(back));
  const sandboxEnds = back + 300_000;
  let deletedAt: number | undefined;
  w.milo.onDelete = () => deletedAt = w.clock;
  const r = await w.run();
  assert.equal(row(r, "c-db-0").action, "released");
  assert.ok(deletedAt! >= sandboxEnds, `released at +${deletedAt! - back} ms, not before +300 s`);
});

Deno.test("a pod gone from a node whose Ready changed between the observations is judged by the next run", async () => {
  const w = world();
  w.orphan("flapping", "node-2");
  let flips = 0;
  w.between = () => {
    // node-2 lost and found again between the two observations (a short partition).
    if (flips++) return;
    w.kube.store.setNodeReady("node-2", "Unknown", new Date(w.clock - 20_000));
    w.kube.store.setNodeReady("node-2", "True", new Date(w.clock - 5_000));
  };
  const r = await w.run();
  assert.equal(row(r, "c-flapping").action, "kept");
  assert.match(row(r, "c-flapping").why, /node-2 became Ready again between the observations/);
  assert.deepEqual(w.deletes(), []);
});

Deno.test("terminatingRule(): a node partitioned just before the first observation still looks Ready: kept", () => {
  const view = (at: number) => ({
    at,
    nodes: new Set(["node-1"]),
    notReady: new Set<string>(),
    readySince: new Map([["node-1", "2026-12-01T00:00:00Z"]]),
  });
  const c = { pod: "shop/db-0", node: "node-1", known: "node-1", podExists: false };
  assert.match(
    terminatingRule(c, view(T0), view(T0 + 30_000), NODE_MONITOR_GRACE_MS)!,
    /a partition's first 55 s look Ready too: observations 30 s apart/,
  );
  assert.equal(terminatingRule(c, view(T0), view(T0 + 55_000), NODE_MONITOR_GRACE_MS), null);
});

Deno.test("two clusters given one name: a claim recording another cluster's kube-system uid brakes the sweep", async () => {
  const w = world();
  w.orphan("gone-0");
  // Cluster B, a copied overlay that still says cluster-a: its live pod and node are unknown here.
  w.milo.add("c-b-web", {
    podUid: crypto.randomUUID(),
    pod: "shop/b-web",
    node: "b-node-1",
    clusterUid: "uid-of-cluster-b",
  });
  const r = await w.run();
  assert.equal(r.outcome, "brake");
  assert.equal(r.exitCode, 2);
  assert.match(
    r.message,
    new RegExp(
      `1 claim\\(s\\) named for cluster ${CLUSTER} record another cluster's kube-system uid ` +
        `\\(uid-of-cluster-b: 1\\), not this one's \\(${w.kube.store.clusterUid}\\): two clusters ` +
        `share the name ${CLUSTER}`,
    ),
  );
  assert.deepEqual(w.deletes(), [], "nothing released, this cluster's orphan neither");
  // Claims that record this cluster's own uid are judged as ever.
  w.milo.claims.delete("c-b-web");
  w.milo.add("c-own", {
    podUid: crypto.randomUUID(),
    pod: "shop/own",
    clusterUid: w.kube.store.clusterUid,
  });
  const again = await w.run();
  assert.equal(again.outcome, "done");
  assert.deepEqual(w.deletes().sort(), ["DELETE /c-gone-0", "DELETE /c-own"]);
});

Deno.test("a node config naming another cluster's uid brakes the sweep before anything is read", async () => {
  const w = world();
  w.orphan("gone-0");
  const r = await w.run({ clusterUid: "uid-of-another-cluster" });
  assert.equal(r.outcome, "brake");
  assert.match(
    r.message,
    /the node config's clusterUid uid-of-another-cluster is not this cluster's/,
  );
  assert.deepEqual(w.deletes(), []);
  assert.equal(w.milo.log.length, 0, "Milo not even listed");
});

Deno.test("a sweep without get on the kube-system namespace brakes and says what to grant", async () => {
  const w = world();
  w.orphan("gone-0");
  w.kube.faults.forbidden = true;
  const r = await w.run();
  assert.equal(r.outcome, "brake");
  assert.match(r.message, /the kube-system namespace \(its UID names the cluster\) failed/);
  assert.deepEqual(w.deletes(), []);
});

Deno.test("the report says how close the project is to its IPClaim quota, where Milo says", async () => {
  const w = world();
  w.orphan("gone-0");
  const project = "https://milo.test/apis/resourcemanager.miloapis.com/v1alpha1/projects/p-1/" +
    "control-plane";
  const buckets: string[] = [];
  const fetchBoth = (input: RequestInfo | URL, init?: RequestInit) => {
    const url = String(input);
    if (!url.includes("/allowancebuckets/")) {
      return w.milo.fetch(url.replace(project, "https://milo.test"), init);
    }
    buckets.push(new URL(url).pathname.split("/").pop()!);
    return Promise.resolve(
      Response.json({ status: { limit: 100, allocated: 97, available: 3 } }),
    );
  };
  const milo = new MiloClient({
    baseUrl: project,
    namespace: "default",
    token: "t",
    requestMs: 1000,
    deadline: Date.now() + 60_000,
    fetch: fetchBoth as typeof fetch,
    sleep: () => Promise.resolve(),
  });
  const r = await w.run({ milo });
  assert.deepEqual(r.quota, { limit: 100, allocated: 97, available: 3 });
  assert.deepEqual(buckets, [bucketName("p-1")], "one GET, after the run");
  assert.match(
    renderText(r),
    /\nquota: 97 of 100 IPClaims the project's ipclaims-per-project allows are held \(97%\), 3 left\n/,
  );
  const noProject = await world().run();
  assert.deepEqual(noProject.quota, {
    unknown: "milo.url names no project (…/projects/P/control-plane)",
  });
});

Deno.test("renderText() writes a value's control, format and separator characters as escapes", () => {
  const r = emptyReport(
    { cluster: "cluster-a", apply: false, graceMs: 1, intervalMs: 1, maxRelease: { count: 1 } },
    0,
  );
  r.rows.push({
    claim: "pod-aaaa-v4",
    uid: "u",
    address: "10.40.0.9/32",
    pod: "shop/web-0\r\x1b[2K\u2028fake",
    podUid: "p",
    node: "node-a1\u202e",
    reason: "pod-gone",
    ageMs: 0,
    action: "kept",
    why: "x\ny",
  });
  const lines = renderText(r).split("\n");
  for (const l of lines) assert.doesNotMatch(l, /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u, l);
  const row = lines.find((l) => l.startsWith("pod-aaaa-v4"))!;
  assert.ok(row.includes("shop/web-0\\u000d\\u001b[2K\\u2028fake"), row);
  assert.ok(row.includes("node-a1\\u202e") && row.endsWith("x\\u000ay"), row);
});
