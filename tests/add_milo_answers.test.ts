/**
 * ADD against answers only the real Milo gives, over the in-memory stub
 * answering the shared fixtures: the 500 to the later of two overlapping
 * creates of one name, the 403 of a namespace that is missing or being
 * deleted, of a class the token may not use, and of Milo's quota admission.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { KEYS } from "../lib/claims.ts";
import {
  CLAIMS_PATH,
  existingClaim,
  NAME_V4,
  rejectsWith,
  withVerb,
} from "../testing/stub_invocation.ts";
import { nameRaceReply, quotaReply, statusReply } from "../testing/milo_fixtures.ts";
import type { QuotaRefusal } from "../milo-dev/quota.ts";
import { STUB_BASE, type StubMilo, type StubRequest } from "../testing/stub_milo.ts";

const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const withStub = (fn: Parameters<typeof withVerb>[1]) => withVerb("ADD", fn);
const methods = (stub: StubMilo) => stub.requests.map((r) => `${r.method} ${r.path}`);
const nameOf = (req: StubRequest) => (req.body as { metadata: { name: string } }).metadata.name;

/** The other create of the name wins: its claim is stored, and this POST gets Milo's 500. */
function loseRace(stub: StubMilo, winner: () => void, ns = "default"): void {
  stub.inject({
    method: "POST",
    answer: (req) => {
      winner();
      return nameRaceReply(ns, (req.body as { metadata: { name: string } }).metadata.name);
    },
  });
}

Deno.test("ADD: Milo's 500 for the name's overlapping create is a conflict: read at once, its own claim kept", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    let made = "";
    loseRace(stub, () => made = existingClaim(stub, i, "ipv4").metadata.uid!);
    const r = await add(i);
    assert.deepEqual(r.output?.ips, [{ address: "10.40.0.7/32", gateway: "169.254.1.1" }]);
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `GET ${CLAIMS_PATH}/${NAME_V4}`]);
    assert.deepEqual(stub.sleeps, [], "not retried as a transient 500");
    assert.equal(stub.get(NAME_V4)?.metadata.uid, made);
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("ADD: the race won by another holder applies the holder rules: 103 naming it, nothing released", async () => {
  await withStub(async (stub, inv) => {
    const i = inv({ ipam: V4 });
    loseRace(stub, () =>
      existingClaim(stub, i, "ipv4", {
        metadata: { annotations: { [KEYS.cluster]: "cluster-a", [KEYS.containerId]: "other" } },
      }));
    await rejectsWith(add(i), 103, /held by another holder.*container=other/);
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `GET ${CLAIMS_PATH}/${NAME_V4}`]);
  });
  await withStub(async (stub, inv) => {
    const i = inv({
      ipam: { ...V4, identity: "pod" },
      node: { allowIdentities: [{ namespace: "shop" }] },
    });
    loseRace(stub, () =>
      existingClaim(stub, i, "ipv4", {
        metadata: {
          annotations: { [KEYS.cluster]: "cluster-a", [KEYS.containerId]: "c2", [KEYS.node]: "n2" },
        },
      }));
    await rejectsWith(add(i), 11, /held by container c2 on node n2: no second holder/);
    assert.equal(stub.seen("DELETE").length, 0);
  });
});

Deno.test("ADD: the race's claim gone by the GET is 11 (retry the ADD); another name's 500 is retried", async () => {
  await withStub(async (stub, inv) => {
    loseRace(stub, () => {});
    await rejectsWith(add(inv({ ipam: V4 })), 11, /existed when Milo refused its create/);
  });
  await withStub(async (stub, inv) => {
    stub.inject({ method: "POST", answer: () => nameRaceReply("default", "another-claim") });
    const r = await add(inv({ ipam: V4 }));
    assert.deepEqual(r.output?.ips, [{ address: "10.40.0.7/32", gateway: "169.254.1.1" }]);
    assert.deepEqual(methods(stub), [`POST ${CLAIMS_PATH}`, `POST ${CLAIMS_PATH}`]);
    assert.equal(stub.sleeps.length, 1, "an InternalError not about this name is transient");
  });
});

Deno.test("ADD into a namespace Milo refuses: 101 naming it and what to do, not retried", async () => {
  for (
    const [state, said] of [[undefined, "does not exist"], ["terminating", "is being deleted"]]
  ) {
    await withStub(async (stub, inv) => {
      stub.namespaces = state ? { "tenant-ns": "terminating" } : {};
      const e = await rejectsWith(
        add(inv({
          ipam: V4,
          node: { milo: { url: STUB_BASE, tokenFile: "/stub/token", namespace: "tenant-ns" } },
        })),
        101,
        new RegExp(
          `Milo refuses claims in namespace tenant-ns: it ${said} in the token's project.*` +
            "milo\\.namespace in the node config",
        ),
      );
      assert.doesNotMatch(
        `${e.message} ${e.details}`,
        /collect|outlive|token's project and the class/,
      );
      assert.equal(stub.seen("POST").length, 1);
      assert.deepEqual(stub.sleeps, []);
    });
  }
});

Deno.test("ADD: a 403 of the class (not the namespace) still says to check the project and class", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({ method: "POST", answer: () => statusReply(403) });
    const e = await rejectsWith(
      add(inv({ ipam: V4 })),
      101,
      /the class \(403\): check the token's project and the class.*visibility consumer or shared.*use on it/,
    );
    assert.doesNotMatch(`${e.message} ${e.details}`, /quota/);
    assert.equal(stub.seen("POST").length, 1, "not retried");
  });
  await withStub(async (stub, inv) => {
    // Any other 403 (the token's project or verbs) stays an authorization error.
    stub.inject({
      method: "POST",
      answer: () => statusReply(403, { message: "ipclaims.ipam.miloapis.com is forbidden" }),
    });
    await rejectsWith(add(inv({ ipam: V4 })), 101, /forbids this request \(403\)/);
  });
});

/**
 * Milo's quota admission (milo's `ResourceQuotaEnforcement`): each kind of
 * 403, what the ADD answers, whether the create is sent again within the
 * deadline, and what the operator is told.
 */
const QUOTA_CASES: {
  why: QuotaRefusal;
  code: number;
  retried: boolean;
  says: RegExp;
}[] = [
  {
    why: "denied",
    code: 100,
    retried: false,
    says:
      /Milo's quota refused the claim.*ipclaims-per-project.*raise the project's ipclaims-per-project quota in Milo/,
  },
  {
    why: "timeout",
    code: 11,
    retried: true,
    says: /quota admission did not decide within its 30 s wait.*quota: timeout/,
  },
  {
    why: "conflict",
    code: 11,
    retried: true,
    says: /still cleaning up a refused quota claim.*quota: stale.*ipclaims-per-project/,
  },
  {
    why: "misconfigured",
    code: 102,
    retried: false,
    says: /quota enforcement of IPClaims is misconfigured.*tell Milo's operator/,
  },
  {
    why: "internal",
    code: 11,
    retried: true,
    says: /could not check the claim against its quota.*quota: internal/,
  },
];

for (const c of QUOTA_CASES) {
  Deno.test(`ADD: Milo's quota 403 (${c.why}) is code ${c.code}, ${c.retried ? "sent again within the deadline" : "not retried"}, naming the quota`, async () => {
    await withStub(async (stub, inv) => {
      stub.inject({ method: "POST", times: 100, answer: (req) => quotaReply(nameOf(req), c.why) });
      const e = await rejectsWith(add(inv({ ipam: V4 })), c.code, c.says);
      assert.doesNotMatch(e.message, /token's project|unreachable or overloaded/);
      assert.equal(stub.seen("POST").length > 1, c.retried);
      assert.equal(stub.all().length, 0, "nothing made");
    });
    if (!c.retried) return;
    await withStub(async (stub, inv) => {
      // Asked again, Milo's quota admission grants it.
      stub.inject({ method: "POST", answer: (req) => quotaReply(nameOf(req), c.why) });
      const r = await add(inv({ ipam: V4 }));
      assert.deepEqual(r.output?.ips, [{ address: "10.40.0.7/32", gateway: "169.254.1.1" }]);
      assert.equal(stub.seen("POST").length, 2);
    });
  });
}

Deno.test("ADD dual-stack: one family's quota denial rolls back the other's claim, code 100", async () => {
  await withStub(async (stub, inv) => {
    stub.inject({
      method: "POST",
      answer: (req) => nameOf(req).endsWith("-v6") ? quotaReply(nameOf(req), "denied") : undefined,
      times: 2,
    });
    await rejectsWith(
      add(inv({ ipam: { classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" } } })),
      100,
      /Milo's quota refused the claim/,
    );
    assert.equal(stub.all().length, 0, "the IPv4 claim made is released");
  });
});
