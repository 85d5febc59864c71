/**
 * ADD against answers only the real Milo gives, over the in-memory stub
 * answering the shared fixtures: the 500 to the later of two overlapping
 * creates of one name, and the 403 of a namespace that is missing or being
 * deleted.
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
import { nameRaceReply, statusReply } from "../testing/milo_fixtures.ts";
import { STUB_BASE, type StubMilo } from "../testing/stub_milo.ts";

const V4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const withStub = (fn: Parameters<typeof withVerb>[1]) => withVerb("ADD", fn);
const methods = (stub: StubMilo) => stub.requests.map((r) => `${r.method} ${r.path}`);

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
    await rejectsWith(add(inv({ ipam: V4 })), 101, /check the token's project and the class/);
  });
});
