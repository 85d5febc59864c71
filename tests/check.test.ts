/** CHECK in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { check } from "../lib/check.ts";
import { KEYS } from "../lib/claims.ts";
import {
  CLAIMS_PATH,
  CONTAINER_ID,
  existingClaim,
  invocation,
  NAME_V4,
  NAME_V6,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { type Json, refused, StubMilo } from "../testing/stub_milo.ts";

/** The prevResult the ADD of the default leases printed. */
const PREV = {
  cniVersion: "1.1.0",
  interfaces: [{ name: "eth0", sandbox: "/var/run/netns/test" }],
  ips: [
    { address: "10.40.0.7/32", gateway: "169.254.1.1", interface: 0 },
    { address: "fd20::1:0:3:0:0/96", gateway: "fe80::1", interface: 0 },
  ],
};

/**
 * A CHECK of the dual-stack attachment with `prevResult`; `prepare` shapes
 * the claims in the stub first (by default both Bound as leased).
 */
async function checkWith(
  prevResult: unknown,
  prepare: (stub: StubMilo, inv: ReturnType<typeof invocation>) => void = leaseBoth,
) {
  return await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const inv = invocation(stub, {
      command: "CHECK",
      stateDir: dir,
      top: prevResult === undefined ? {} : { prevResult },
    });
    prepare(stub, inv);
    stub.requests.length = 0;
    try {
      return { stub, result: await check(inv) };
    } catch (err) {
      return { stub, error: err };
    }
  });
}

function leaseBoth(stub: StubMilo, inv: ReturnType<typeof invocation>) {
  existingClaim(stub, inv, "ipv4");
  existingClaim(stub, inv, "ipv6");
}

const failure = (r: { error?: unknown }, code: number, pattern: RegExp) =>
  rejectsWith(r.error ? Promise.reject(r.error) : Promise.resolve(), code, pattern);

Deno.test("CHECK ok: one GET per family, nothing printed", async () => {
  const r = await checkWith(PREV);
  assert.equal(r.error, undefined);
  assert.deepEqual(r.result, { claims: [NAME_V4, NAME_V6] });
  assert.deepEqual(r.stub.requests.map((q) => `${q.method} ${q.path}`).sort(), [
    `GET ${CLAIMS_PATH}/${NAME_V4}`,
    `GET ${CLAIMS_PATH}/${NAME_V6}`,
  ]);
});

Deno.test("CHECK: a missing claim is 104", async () => {
  const r = await checkWith(PREV, (stub, inv) => {
    existingClaim(stub, inv, "ipv4");
  });
  await failure(r, 104, new RegExp(`no IPv6 lease in Milo: claim ${NAME_V6} is missing`));
});

Deno.test("CHECK: a different address is 104 naming both", async () => {
  const prev = { ...PREV, ips: [{ address: "10.40.0.250/32" }, PREV.ips[1]] };
  const r = await checkWith(prev);
  await failure(
    r,
    104,
    /IPv4 address differs: prevResult has 10\.40\.0\.250\/32, Milo's claim .* holds 10\.40\.0\.7\/32/,
  );
});

Deno.test("CHECK: the master's mask does not matter, the address does (galactic-tap's /25)", async () => {
  for (
    const [v4, v6] of [
      ["10.40.0.7/25", "fd20::1:0:3:0:0/96"],
      ["10.40.0.7/24", "fd20::1:0:3:0:0/64"],
      ["10.40.0.7/32", "fd20::1:0:3:0:0/128"],
    ]
  ) {
    const prev = { ...PREV, ips: [{ address: v4 }, { address: v6 }] };
    const r = await checkWith(prev);
    assert.equal(r.error, undefined, `${v4} ${v6}: ${r.error}`);
  }
  const other4 = { ...PREV, ips: [{ address: "10.40.0.8/25" }, PREV.ips[1]] };
  await failure(
    await checkWith(other4),
    104,
    /IPv4 address differs: prevResult has 10\.40\.0\.8\/25, .* holds 10\.40\.0\.7\/32/,
  );
  // Inside the block, but not its first address: not the pod's.
  const other6 = { ...PREV, ips: [PREV.ips[0], { address: "fd20::1:0:3:0:1/96" }] };
  await failure(await checkWith(other6), 104, /IPv6 address differs/);
});

Deno.test("CHECK: a claim not Bound is 104", async () => {
  const r = await checkWith(PREV, (stub, inv) => {
    existingClaim(stub, inv, "ipv4", { status: { phase: "Releasing" } });
    existingClaim(stub, inv, "ipv6");
  });
  await failure(r, 104, new RegExp(`IPv4 claim ${NAME_V4} is Releasing, not Bound`));
});

Deno.test("CHECK: a claim of another holder is 104 naming it", async () => {
  const r = await checkWith(PREV, (stub, inv) => {
    existingClaim(stub, inv, "ipv4");
    existingClaim(stub, inv, "ipv6", {
      metadata: {
        annotations: {
          [KEYS.cluster]: "cluster-a",
          [KEYS.containerId]: CONTAINER_ID,
          [KEYS.ifname]: "eth1",
        },
      },
    });
  });
  await failure(
    r,
    104,
    new RegExp(`claim ${NAME_V6} is held by another holder \\(attachment, .*ifname=eth1`),
  );
});

Deno.test("CHECK: this attachment's claim recorded for another pod is 104 naming the pod", async () => {
  const r = await checkWith(PREV, (stub, inv) => {
    existingClaim(stub, inv, "ipv4");
    const v6 = existingClaim(stub, inv, "ipv6");
    const annotations = { ...v6.metadata.annotations, [KEYS.podUid]: "uid-of-an-old-pod" };
    stub.put({ ...v6, metadata: { ...v6.metadata, annotations } });
  });
  await failure(r, 104, /held by another holder \(pod differ\).*pod-uid=uid-of-an-old-pod/);
});

Deno.test("CHECK: prevResult without the family's address is 104 (none)", async () => {
  const r = await checkWith({ ...PREV, ips: [PREV.ips[0]] });
  await failure(r, 104, /IPv6 address differs: prevResult has none/);
  const empty = await checkWith({ cniVersion: "1.1.0", interfaces: PREV.interfaces });
  await failure(empty, 104, /IPv4 address differs: prevResult has none/);
});

Deno.test("CHECK without prevResult compares only Milo's claims", async () => {
  const r = await checkWith(undefined);
  assert.deepEqual(r.result, { claims: [NAME_V4, NAME_V6] });
  const missing = await checkWith(undefined, () => Promise.resolve());
  await failure(missing, 104, /is missing/);
});

Deno.test("CHECK: both mismatches reported together; Milo down is 11", async () => {
  const both = await checkWith(PREV, () => Promise.resolve());
  const e = await failure(both, 104, /missing/);
  assert.match(`${e.message} ${e.details}`, new RegExp(`${NAME_V4}.*${NAME_V6}`));
  const down = await checkWith(PREV, (stub) => {
    stub.inject({ times: Number.POSITIVE_INFINITY, answer: () => refused() });
    return Promise.resolve();
  });
  await failure(down, 11, /Connection refused/);
});

Deno.test("CHECK: an unusable lease in Milo's claim is 105", async () => {
  const r = await checkWith(PREV, (stub, inv) => {
    existingClaim(stub, inv, "ipv4", {
      status: { allocatedCIDR: "127.0.0.1/32", address: "127.0.0.1" } as Json,
    });
    existingClaim(stub, inv, "ipv6");
  });
  await failure(r, 105, /127\.0\.0\.1 is a loopback address/);
  assert.equal(r.stub.seen("DELETE").length, 0, "CHECK never releases");
});
