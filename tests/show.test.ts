/**
 * `milo-ipam show` and retained addresses, in-process over the in-memory
 * Milo: an address no claim holds is looked up among the namespace's
 * IPAllocations (one more LIST, only then), `--retained` lists every retained
 * allocation by address (one LIST), and a pod with no claim is told what
 * this node config grants its namespace. Milo's answers are its
 * IPAllocationList (`tests/fixtures/milo/ipallocation-list.json`) or the
 * stub's own allocations, built in that shape.
 */
import assert from "node:assert/strict";
import { claimBody } from "../lib/claims.ts";
import type { NetworkConfig } from "../lib/config.ts";
import { redactedJson } from "../lib/redact.ts";
import { allocationName } from "../lib/milo_objects.ts";
import { parseQuery, show } from "../lib/show.ts";
import type { ShowQuery, ShowReport, ShowRow } from "../lib/_show_report.ts";
import { renderShow } from "../lib/_show_render.ts";
import { fixture, reply, statusReply } from "../testing/milo_fixtures.ts";
import { STUB_BASE, StubMilo } from "../testing/stub_milo.ts";
import { withTempDir } from "../testing/stub_invocation.ts";

/** Milo's clock in these tests: an hour after the fixture's retained allocations were retained. */
const NOW = Date.parse("2026-12-01T10:30:00Z");

/** Milo's IPAllocationList fixture, answered (with Milo's `Date`) to the next LIST of IPAllocations. */
function answerFixture(stub: StubMilo): void {
  stub.inject({
    method: "GET",
    path: /\/ipallocations$/,
    answer: (_req, s) =>
      reply(200, fixture("ipallocation-list.json"), { date: new Date(s.now()).toUTCString() }),
  });
}

/** Runs `query` against `stub` with a node config in a temp dir (`extra`: more node config keys). */
async function run(stub: StubMilo, query: ShowQuery, extra = {}): Promise<ShowReport> {
  return await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/token`, "stub-token\n");
    await Deno.mkdir(`${dir}/state`);
    await Deno.writeTextFile(
      `${dir}/node.json`,
      JSON.stringify({
        milo: { url: STUB_BASE, tokenFile: `${dir}/token` },
        cluster: "cluster-a",
        node: "node-a1",
        log: { file: `${dir}/log/milo-ipam.log` },
        resultsDirs: [`${dir}/results`],
        stateDir: `${dir}/state`,
        hostIdFile: `${dir}/machine-id`,
        ...extra,
      }),
    );
    await Deno.writeTextFile(`${dir}/machine-id`, "a".repeat(32) + "\n");
    return await show(query, `${dir}/node.json`, () => Promise.resolve(stub.client()));
  });
}

function stubAt(now = NOW): StubMilo {
  const stub = new StubMilo();
  stub.now = () => now;
  return stub;
}

const lists = (stub: StubMilo, kind: string) => stub.seen("GET", `/${kind}`).length;

Deno.test("show ADDRESS no claim holds: the retained allocation holding it, one more LIST", async () => {
  const stub = stubAt();
  answerFixture(stub);
  const r = await run(stub, { by: "address", address: "10.40.0.9" });
  assert.equal(r.error, null, JSON.stringify(r.error));
  assert.deepEqual(r.claims, []);
  assert.equal(r.requests, 3, "the claims' LIST, then the IPAllocations', then the quota's GET");
  assert.deepEqual([lists(stub, "ipclaims"), lists(stub, "ipallocations")], [1, 1]);
  assert.deepEqual(r.retained, [{
    allocation: "alloc-5d23d6382c1736c8",
    uid: "2f7c9a1e-6b3d-4e58-9c0a-7d1e2f3a4b5c",
    address: "10.40.0.9/32",
    family: "IPv4",
    pool: "vpc-7b3e-pods-v4",
    className: "vpc-pods-ipv4",
    scope: { network: "vpc-7b3e" },
    createdAt: "2026-11-30T16:40:11Z",
    retainedSince: "2026-12-01T09:00:00Z",
    retainedForS: 5_400,
    expiring: true,
    releaseAt: "2026-12-01T11:00:00Z",
    expiringMessage: undefined,
  }]);
  const text = renderShow(r);
  assert.match(text, /^no claims for address 10\.40\.0\.9 /);
  assert.match(text, /1 retained allocation holds it \(one more LIST, of every IPAllocation/);
  assert.match(text, /retained allocation alloc-5d23d6382c1736c8 \(uid 2f7c9a1e/);
  assert.match(text, /address {3}10\.40\.0\.9\/32 IPv4 pool vpc-7b3e-pods-v4 class vpc-pods-ipv4/);
  assert.match(text, /retained {2}since 2026-12-01T09:00:00Z \(1h30m ago\)/);
  assert.match(
    text,
    /lease {5}elapsed: Milo releases it at 2026-12-01T11:00:00Z unless it is re-bound/,
  );
  assert.match(
    text,
    /re-bind {3}re-bound by a new claim of the same name .*stable identity returns/,
  );
  assert.match(text, /Milo records no pod namespace, pod or node for it/);

  // JSON: version 1, the claims as before, `retained` added.
  const json = JSON.parse(redactedJson(r));
  assert.deepEqual([json.kind, json.version, json.claims], ["ShowReport", 1, []]);
  assert.equal(json.retained[0].releaseAt, "2026-12-01T11:00:00Z");
});

Deno.test("show ADDRESS: a retained IPv6 block holds its addresses; a bound allocation is no retained one", async () => {
  const stub = stubAt();
  answerFixture(stub);
  const v6 = await run(stub, { by: "address", address: "fd20:0:0:1:0:5:0:1" });
  assert.deepEqual(v6.retained?.map((x) => [x.allocation, x.address, x.expiring]), [
    ["alloc-c82f0b9ccabc942d", "fd20:0:0:1:0:5::/96", false],
  ]);
  assert.match(renderShow(v6), /lease {5}Milo names no end until the lease elapses/);
  // 10.40.0.7 is bound to a claim in the answer (claimRef set): not retained, and not a holder
  // this LIST names (its claim is the claims' LIST's to show).
  answerFixture(stub);
  const bound = await run(stub, { by: "address", address: "10.40.0.7" });
  assert.deepEqual(bound.retained, []);
  assert.match(renderShow(bound), /no retained allocations hold it/);
});

Deno.test("show ADDRESS a claim holds: one request, no IPAllocation LIST", async () => {
  const stub = stubAt();
  stub.materialize(fixture("ipclaim-create-request.json"));
  const r = await run(stub, { by: "address", address: "10.40.0.7" });
  assert.equal(r.error, null, JSON.stringify(r.error));
  assert.equal(r.claims.length, 1);
  assert.equal(r.requests, 2, "the LIST and the quota's GET");
  assert.equal(lists(stub, "ipallocations"), 0);
  assert.equal(r.retained, undefined, "no IPAllocation LIST made");
  assert.doesNotMatch(renderShow(r), /retained/);
});

Deno.test("show --retained: every retained allocation by address, with the total; one LIST", async () => {
  const stub = stubAt();
  answerFixture(stub);
  const r = await run(stub, { by: "retained" });
  assert.equal(r.error, null, JSON.stringify(r.error));
  assert.equal(r.requests, 2, "the LIST and the quota's GET");
  assert.deepEqual([lists(stub, "ipclaims"), lists(stub, "ipallocations")], [0, 1]);
  assert.deepEqual(
    r.retained?.map((x) => [x.address, x.allocation, x.retainedSince, x.releaseAt ?? null]),
    [
      ["10.40.0.6/32", "alloc-afecd11aa5ab1fed", "2026-12-01T10:12:40Z", null],
      ["10.40.0.9/32", "alloc-5d23d6382c1736c8", "2026-12-01T09:00:00Z", "2026-12-01T11:00:00Z"],
      ["fd20:0:0:1:0:5::/96", "alloc-c82f0b9ccabc942d", "2026-12-01T09:00:00Z", null],
    ],
    "by address (the answer is by name); the bound one left out",
  );
  const text = renderShow(r);
  assert.match(
    text,
    /^3 retained allocations in namespace default \(one LIST of every IPAllocation/,
  );
  const rows = text.split("\n").filter((l) => /^(10\.|fd20)/.test(l));
  assert.equal(rows.length, 3);
  assert.match(
    rows[0],
    /^10\.40\.0\.6\/32 +alloc-afecd11aa5ab1fed +2026-12-01T10:12:40Z \(17m20s ago\) +not elapsed$/,
  );
  assert.match(rows[1], /elapsed: Milo releases it at 2026-12-01T11:00:00Z/);
  assert.match(text, /total 3 retained \(1 past their lease\)/);
  assert.match(text, /Milo records no pod namespace, pod or node for it/);
});

Deno.test("show: a Retain claim deleted leaves its allocation, by Milo's name, retained since the delete", async () => {
  const stub = stubAt();
  const body = fixture<{ metadata: { name: string }; spec: Record<string, unknown> }>(
    "ipclaim-create-request.json",
  );
  body.metadata.name = "podid-8e41c07a2d9b35f1e6a4-v4";
  body.spec.reclaimPolicy = "Retain";
  const client = stub.client();
  const made = await client.createClaim(body);
  stub.materialize(fixture("ipclaim-create-request.json"));
  stub.now = () => NOW + 65_000;
  assert.equal(await client.deleteClaim(body.metadata.name), "released");
  stub.now = () => NOW + 125_000;
  const all = await run(stub, { by: "retained" });
  assert.deepEqual(all.retained?.map((x) => [x.allocation, x.address, x.retainedForS]), [
    [allocationName("default", body.metadata.name), made!.status.allocatedCIDR, 60],
  ]);
  const byAddr = await run(stub, { by: "address", address: made!.status.address! });
  assert.equal(byAddr.retained?.length, 1);
  assert.equal(
    byAddr.retained?.[0].retainedSince,
    new Date(NOW + 65_000).toISOString().slice(0, 19) + "Z",
  );
});

Deno.test("show: a token that may not list IPAllocations is told what it lacks", async () => {
  const stub = stubAt();
  stub.inject({ method: "GET", path: /\/ipallocations$/, answer: () => statusReply(403) });
  const r = await run(stub, { by: "retained" });
  assert.match(r.error?.message ?? "", /forbids this token to list ipallocations \(403\)/);
  assert.match(r.error?.details ?? "", /grant the token's role list on ipallocations/);
  assert.match(renderShow(r), /^milo-ipam show --retained: Milo forbids/);
  assert.doesNotMatch(JSON.stringify(r), /stub-token/);
  // A refused token is a refused token, whichever LIST.
  stub.inject({ method: "GET", path: /\/ipallocations$/, answer: () => statusReply(401) });
  const refused = await run(stub, { by: "retained" });
  assert.match(refused.error?.message ?? "", /rejected the token \(401\)/);
});

Deno.test("show --pod with no claim: what this node config grants its namespace; one request", async () => {
  const stub = stubAt();
  const grants = {
    allowIdentities: [{ namespace: "db", identity: "pod" }, { network: "vms-net" }],
  };
  const db = await run(stub, { by: "pod", namespace: "db", name: "db-0" }, grants);
  assert.equal(db.error, null, JSON.stringify(db.error));
  assert.equal(db.requests, 2, "the LIST and the quota's GET");
  assert.equal(lists(stub, "ipallocations"), 0);
  assert.deepEqual(db.grants, grants.allowIdentities);
  const text = renderShow(db);
  assert.match(text, /^no claims for pod db\/db-0 in cluster cluster-a/);
  assert.match(text, /grants namespace db stable identities \(allowIdentities \{"namespace":"db"/);
  assert.match(text, /milo-ipam show --retained/);
  const shop = await run(stub, { by: "pod", namespace: "shop", name: "web-0" }, {
    allowIdentities: [{ namespace: "db", identity: "pod" }],
  });
  assert.deepEqual(shop.grants, []);
  assert.match(renderShow(shop), /grants no stable identity to namespace shop/);
  // A pod with claims is shown as before: no grants.
  stub.materialize(fixture("ipclaim-create-request.json"), {
    metadata: {
      labels: {
        "milo-ipam.io/cluster": "cluster-a",
        "milo-ipam.io/pod-namespace": "shop",
        "milo-ipam.io/pod-name": "web-0",
      },
      annotations: { "milo-ipam.io/pod": "shop/web-0" },
    },
  });
  const held = await run(stub, { by: "pod", namespace: "shop", name: "web-0" });
  assert.equal(held.claims.length, 1);
  assert.equal(held.grants, undefined);
});

Deno.test("show: --retained on its command line, alone", () => {
  assert.deepEqual(parseQuery([], undefined, undefined, true), { by: "retained" });
  assert.match(parseQuery(["10.40.0.6"], undefined, undefined, true) as string, /exactly one/);
  assert.match(parseQuery([], "db/db-0", undefined, true) as string, /--retained/);
});

Deno.test("show: this node's last verification found a duplicate: the address and the node say so first", async () => {
  const stub = stubAt();
  const finding = {
    at: NOW,
    duplicates: [{
      claim: "pod-aaaa-v4",
      address: "10.40.0.9",
      holder: "pod=shop/web-0 container=c1 ifname=eth0 node=node-a1 host=h (live on this node)",
      now: "another claim holds 10.40.0.9",
    }],
    missing: [],
  };
  const withFindings = async (query: ShowQuery) =>
    await withTempDir(async (dir) => {
      await Deno.mkdir(`${dir}/state`, { recursive: true });
      await Deno.writeTextFile(
        `${dir}/state/reconcile-state.json`,
        JSON.stringify({ absent: {}, findings: finding }),
      );
      await Deno.writeTextFile(`${dir}/token`, "stub-token\n");
      await Deno.writeTextFile(
        `${dir}/node.json`,
        JSON.stringify({
          milo: { url: STUB_BASE, tokenFile: `${dir}/token` },
          cluster: "cluster-a",
          node: "node-a1",
          log: { file: `${dir}/log/milo-ipam.log` },
          resultsDirs: [`${dir}/results`],
          stateDir: `${dir}/state`,
          hostIdFile: `${dir}/machine-id`,
        }),
      );
      await Deno.writeTextFile(`${dir}/machine-id`, "a".repeat(32) + "\n");
      return await show(query, `${dir}/node.json`, () => Promise.resolve(stub.client()));
    });
  const byAddress = await withFindings({ by: "address", address: "10.40.0.9" });
  assert.deepEqual(byAddress.findings?.duplicates, finding.duplicates);
  assert.match(renderShow(byAddress), /^DUPLICATE ADDRESS 10\.40\.0\.9 \(this node's verification/);
  const other = await withFindings({ by: "address", address: "10.40.0.10" });
  assert.equal(other.findings, undefined, "another address: not named");
  const byPod = await withFindings({ by: "pod", namespace: "shop", name: "web-0" });
  assert.equal(byPod.findings?.duplicates.length, 1);
  const byNode = await withFindings({ by: "node", node: "node-a1" });
  assert.equal(byNode.findings?.duplicates.length, 1);
});

Deno.test("show says how close the project is to its IPClaim quota, where Milo says", async () => {
  const stub = stubAt();
  stub.materialize(fixture("ipclaim-create-request.json"));
  stub.quotaLimit = 4;
  const r = await run(stub, { by: "address", address: "10.40.0.7" });
  assert.deepEqual(r.quota, { limit: 4, allocated: 1, available: 3 });
  assert.match(
    renderShow(r),
    /\nquota: 1 of 4 IPClaims the project's ipclaims-per-project allows are held \(25%\), 3 left\n$/,
  );
  stub.quotaLimit = undefined;
  const none = await run(stub, { by: "address", address: "10.40.0.7" });
  assert.match(
    renderShow(none),
    /quota: unknown \(Milo holds no IPClaim quota bucket for project tenant-a/,
  );
  stub.inject({ method: "GET", path: /allowancebuckets/, answer: () => statusReply(403) });
  const refused = await run(stub, { by: "address", address: "10.40.0.7" });
  assert.equal(refused.error, null, "the quota unknown is no error of the query");
  assert.match(
    renderShow(refused),
    /quota: unknown \(Milo forbids this token to read the project's quota: grant it get on allowancebuckets/,
  );
});

/**
 * A NAD's `name` chosen to rewrite the terminal: 253 characters whose CR, LF
 * and escape sequences erase the line before them and print a holder of its
 * author's choice (another namespace's pod) in its place.
 */
const HOSTILE_NAME = (() => {
  const head =
    "net\r\x1b[2K\x1b[1A\x1b[2K\n  holder   pod shop/web-0 (uid forged), container c-forged" +
    "\u202e\x9b2J\u2028";
  return head + "x".repeat(253 - head.length);
})();

/** What no line of a text report may hold: any control, format or separator character. */
const RAW = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/u;

Deno.test("show: a hostile NAD name (CR, LF, escapes, bidi) is printed escaped and erases no line", async () => {
  assert.equal(HOSTILE_NAME.length, 253);
  const stub = stubAt();
  const client = stub.client();
  const net = {
    classes: { ipv4: "vpc-pods-ipv4" },
    scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" } },
    reclaimPolicy: "Delete",
  } as unknown as NetworkConfig;
  const attachment = (network: string, containerId: string, ns: string, name: string) => ({
    cluster: "cluster-a",
    node: "node-a1",
    host: "b".repeat(32),
    network,
    containerId,
    ifname: "eth0",
    podNamespace: ns,
    podName: name,
    podUid: `uid-${containerId}`,
  });
  await client.createClaim(
    claimBody("default", net, attachment("vpc-7b3e", "c-web0", "shop", "web-0"), "ipv4"),
  );
  await client.createClaim(
    claimBody("default", net, attachment(HOSTILE_NAME, "c-evil", "attacker", "x"), "ipv4"),
  );
  const r = await run(stub, { by: "node", node: "node-a1" });
  assert.equal(r.error, null, JSON.stringify(r.error));
  assert.deepEqual(r.claims.map((c) => c.network).sort(), [HOSTILE_NAME, "vpc-7b3e"].sort());
  const text = renderShow(r);
  const lines = text.split("\n");
  for (const l of lines) assert.doesNotMatch(l, RAW, `a raw control character in ${l}`);
  const holders = lines.filter((l) => l.startsWith("  holder "));
  assert.deepEqual(holders.map((l) => /pod (\S+)/.exec(l)?.[1]).sort(), [
    "attacker/x",
    "shop/web-0",
  ]);
  assert.equal(
    lines.filter((l) => l.includes("(uid forged)")).length,
    1,
    "the fake, on its own line",
  );
  const evil = holders.find((l) => l.includes("attacker/x"))!;
  assert.ok(
    evil.includes(
      "network net\\u000d\\u001b[2K\\u001b[1A\\u001b[2K\\u000a  holder   pod shop/web-0",
    ),
    evil,
  );
  assert.ok(evil.includes("\\u202e\\u009b2J\\u2028xxx"), evil);

  // This node's findings (the reconcile's words about a live attachment) too.
  const findings = renderShow({
    ...r,
    findings: {
      at: NOW,
      duplicates: [{
        claim: "pod-aaaa-v4",
        address: "10.40.0.9",
        holder: `pod=attacker/x network=${HOSTILE_NAME} (live on this node)`,
        now: `claim pod-bbbb-v4 of ${HOSTILE_NAME}`,
      }],
      missing: [{ claim: "pod-cccc-v4", address: "10.40.0.10", why: HOSTILE_NAME }],
    },
  });
  for (const l of findings.split("\n")) assert.doesNotMatch(l, RAW, l);
  assert.match(findings, /^DUPLICATE ADDRESS 10\.40\.0\.9 .*net\\u000d\\u001b\[2K/);
  assert.match(findings, /\nLIVE WITHOUT ITS CLAIM 10\.40\.0\.10 .*: net\\u000d\\u001b/);
  // JSON is JSON: the value as Milo holds it.
  assert.ok(JSON.parse(redactedJson(r)).claims.some((c: ShowRow) => c.network === HOSTILE_NAME));
});
