/** STATUS in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { API_PATH } from "../lib/milo.ts";
import { status } from "../lib/status.ts";
import { invocation, rejectsWith, withTempDir } from "../testing/stub_invocation.ts";
import { statusReply } from "../testing/milo_fixtures.ts";
import { type Json, refused, StubMilo } from "../testing/stub_milo.ts";

function statusOf(stub: StubMilo, ipam: Json = {}) {
  return withTempDir((dir) => status(invocation(stub, { command: "STATUS", stateDir: dir, ipam })));
}

Deno.test("STATUS ok: one GET of the IPClasses, nothing printed", async () => {
  const stub = new StubMilo();
  assert.deepEqual(await statusOf(stub), { claims: [] });
  assert.deepEqual(stub.requests.map((r) => `${r.method} ${r.path}`), [
    `GET ${API_PATH}/ipclasses`,
  ]);
});

Deno.test("STATUS: a configured class missing from Milo is 50 naming it and those present", async () => {
  const stub = new StubMilo();
  delete stub.classes["vpc-pods-ipv6"];
  await rejectsWith(
    statusOf(stub),
    50,
    /IPClass vpc-pods-ipv6 not found in Milo.*classes present: vpc-pods-ipv4$/,
  );
  assert.deepEqual(await statusOf(stub, { classes: { ipv4: "vpc-pods-ipv4" } }), { claims: [] });
  stub.classes = {};
  await rejectsWith(statusOf(stub), 50, /vpc-pods-ipv4, vpc-pods-ipv6 not found.*present: none/);
});

Deno.test("STATUS: Milo down, overloaded or refusing the token is 50 with the cause", async () => {
  const down = new StubMilo();
  down.inject({ times: Number.POSITIVE_INFINITY, answer: () => refused() });
  await rejectsWith(statusOf(down), 50, /Milo is not usable: Milo unreachable.*Connection refused/);
  assert.equal(down.requests.length, 8);
  const busy = new StubMilo();
  busy.inject({ times: Number.POSITIVE_INFINITY, answer: () => statusReply(503) });
  await rejectsWith(statusOf(busy), 50, /not usable.*503/);
  const auth = new StubMilo();
  auth.inject({ answer: () => statusReply(401) });
  await rejectsWith(statusOf(auth), 50, /not usable: Milo rejected the token \(401\)/);
  assert.equal(auth.requests.length, 1, "a 401 is not retried");
});
