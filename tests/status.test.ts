/** STATUS in-process: the handler over a real MiloClient answering from the in-memory stub. */
import assert from "node:assert/strict";
import { API_PATH } from "../lib/milo.ts";
import { status, STATUS_PROBE } from "../lib/status.ts";
import { invocation, rejectsWith, withTempDir } from "../testing/stub_invocation.ts";
import { reply, statusReply } from "../testing/milo_fixtures.ts";
import { type Json, refused, StubMilo } from "../testing/stub_milo.ts";

function statusOf(stub: StubMilo, ipam: Json = {}) {
  return withTempDir((dir) => status(invocation(stub, { command: "STATUS", stateDir: dir, ipam })));
}

Deno.test("STATUS ok: one GET of a claim name milo-ipam never makes, 404; no LIST, no IPClass", async () => {
  const stub = new StubMilo();
  assert.deepEqual(await statusOf(stub), { claims: [] });
  assert.deepEqual(stub.requests.map((r) => `${r.method} ${r.path}`), [
    `GET ${API_PATH}/namespaces/default/ipclaims/${STATUS_PROBE}`,
  ]);
  assert.ok(!/^(pod|podid|slot)-/.test(STATUS_PROBE));
});

Deno.test("STATUS ok whatever the tenant can list: Milo shows a tenant no IPClass", async () => {
  const stub = new StubMilo();
  const classes = await stub.fetch(`https://milo.test${API_PATH}/ipclasses`, {
    headers: { authorization: "Bearer stub-token-8c1d2e" },
  });
  assert.deepEqual((await classes.json()).items, [], "the stub lists none, as Milo");
  assert.deepEqual(await statusOf(stub, { classes: { ipv4: "no-such-class" } }), { claims: [] });
});

Deno.test("STATUS: a claim of the probe's name (someone made one) still proves Milo usable", async () => {
  const stub = new StubMilo();
  stub.materialize({ metadata: { name: STATUS_PROBE }, spec: { className: "vpc-pods-ipv4" } });
  assert.deepEqual(await statusOf(stub), { claims: [] });
});

Deno.test("STATUS: Milo down, overloaded or refusing the token is 50 with the cause", async () => {
  const down = new StubMilo();
  down.inject({ times: Number.POSITIVE_INFINITY, answer: () => refused() });
  await rejectsWith(statusOf(down), 50, /Milo is not usable: Milo unreachable.*Connection refused/);
  assert.equal(down.requests.length, 8);
  const busy = new StubMilo();
  busy.inject({ times: Number.POSITIVE_INFINITY, answer: () => statusReply(503) });
  await rejectsWith(statusOf(busy), 50, /not usable.*503/);
  const apf = new StubMilo();
  apf.inject({
    times: Number.POSITIVE_INFINITY,
    answer: () =>
      new Response("Too many requests, please try again later.\n", {
        status: 429,
        headers: { "content-type": "text/plain; charset=utf-8", "retry-after": "1" },
      }),
  });
  await rejectsWith(statusOf(apf), 50, /not usable: Milo unreachable or overloaded.*429/);
  const auth = new StubMilo();
  auth.inject({ answer: () => statusReply(401) });
  await rejectsWith(statusOf(auth), 50, /not usable: Milo rejected the token \(401\)/);
  assert.equal(auth.requests.length, 1, "a 401 is not retried");
  const forbidden = new StubMilo();
  forbidden.inject({ answer: () => statusReply(403) });
  await rejectsWith(statusOf(forbidden), 50, /not usable: Milo forbids this request \(403\)/);
});

Deno.test("STATUS: a 404 that is not Milo's NotFound of the probe (a wrong milo.url) is 50", async () => {
  const stub = new StubMilo();
  stub.inject({ answer: () => reply(404, "404 page not found") });
  await rejectsWith(statusOf(stub), 50, /not usable.*HTTP 404 that is not Milo's NotFound/);
});
