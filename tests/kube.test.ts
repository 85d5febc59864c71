/**
 * The sweep's Kubernetes side in-process: the read-only client against the
 * API stand-in's handler (pagination, NotFound, retries, refusals), where the
 * credentials come from (service account, kubeconfig), and the command line.
 */
import assert from "node:assert/strict";
import { CniError, QUOTE_CHARS } from "../lib/errors.ts";
import { tokenOf } from "../lib/http.ts";
import { KubeClient } from "../lib/kube.ts";
import { inClusterAccess, kubeconfigAccess, parseKubeconfig } from "../lib/kube_access.ts";
import { formatDuration } from "../lib/sweep_report.ts";
import { parseDuration, parseMaxRelease, parseSweepArgs, sweepCli } from "../lib/sweep_cli.ts";
import { KubeDevApi } from "../testing/kube_dev.ts";
import { kubeFixture } from "../testing/kube_store.ts";
import { freePort } from "../testing/process.ts";
import { makeTestCA } from "../testing/testca.ts";

const noSleep = () => Promise.resolve();

function client(api: KubeDevApi, o: Partial<ConstructorParameters<typeof KubeClient>[0]> = {}) {
  return new KubeClient({
    server: "https://kube.test",
    token: api.token,
    fetch: api.fetch as typeof fetch,
    sleep: noSleep,
    ...o,
  });
}

async function rejectsWith(p: Promise<unknown>, kind: string, msg: RegExp): Promise<CniError> {
  const err = await p.then(() => undefined, (e) => e);
  assert.ok(err instanceof CniError, `expected a CniError, got ${err}`);
  assert.equal(err.outcome, kind, err.message);
  assert.match(err.message, msg);
  return err;
}

Deno.test("pods and nodes are listed over every page; a mirror pod carries its static UID", async () => {
  const api = new KubeDevApi({ maxPage: 3 });
  for (let i = 0; i < 7; i++) api.store.addPod({ namespace: "shop", name: `web-${i}` });
  api.store.addPod({
    namespace: "kube-system",
    name: "etcd-n1",
    nodeName: "n1",
    staticUid: "static-uid",
  });
  for (const n of ["n1", "n2"]) api.store.addNode(n);
  const k = client(api, { pageLimit: 100 });
  const pods = await k.listPods();
  assert.equal(pods.length, 8);
  assert.equal(api.count("/api/v1/pods"), 3, "server pages of 3: 3 requests");
  assert.ok(api.log.every((r) => !r.search || r.search.includes("limit=100")));
  const etcd = pods.find((p) => p.name === "etcd-n1")!;
  assert.equal(etcd.mirrorUid, "static-uid");
  assert.equal(etcd.nodeName, "n1");
  assert.deepEqual(
    (await k.listNodes()).map(({ name, ready }) => ({ name, ready })),
    [{ name: "n1", ready: true }, { name: "n2", ready: true }],
  );
  assert.equal(k.requests, 4);
});

Deno.test("the client reads Kubernetes' own v1 bodies (tests/fixtures/kube/)", async () => {
  const seen: string[] = [];
  const page2 = {
    ...kubeFixture("podlist.json"),
    metadata: { resourceVersion: "48231" },
    items: [],
  };
  const answers: Record<string, [number, unknown]> = {
    "/api/v1/pods?limit=250": [200, kubeFixture("podlist.json")],
    "/api/v1/nodes?limit=250": [200, kubeFixture("nodelist.json")],
    "/api/v1/namespaces/shop/pods/web-7d4b9c6f5-x2kqp": [200, kubeFixture("pod.json")],
    "/api/v1/namespaces/shop/pods/gone": [404, {
      ...kubeFixture("status-404-pod-not-found.json"),
      message: 'pods "gone" not found',
      details: { name: "gone", kind: "pods" },
    }],
  };
  const k = new KubeClient({
    server: "https://kube.test",
    sleep: noSleep,
    fetch: (input) => {
      const u = new URL(String(input));
      const key = u.pathname + u.search;
      seen.push(key);
      if (u.searchParams.has("continue")) return Promise.resolve(Response.json(page2));
      const [code, body] = answers[key] ?? [500, {}];
      return Promise.resolve(Response.json(body, { status: code }));
    },
  });
  const pods = await k.listPods();
  assert.deepEqual(pods.map((p) => [p.name, p.nodeName, p.phase, p.mirrorUid]), [
    ["etcd-node-1", "node-1", "Running", "0d3b7f2e9a4c6e8b1f5a7c9e3d5b7f91"],
    ["report-29412660-q7d2m", "node-2", "Succeeded", undefined],
    ["web-7d4b9c6f5-lk8tw", undefined, "Pending", undefined],
    ["web-7d4b9c6f5-x2kqp", "node-1", "Running", undefined],
  ]);
  assert.match(seen[1], /continue=eyJ2Ijoib/, "the list's continue token is sent back");
  assert.deepEqual((await k.listNodes()).map((n) => [n.name, n.ready]), [
    ["node-1", true],
    ["node-2", true],
  ]);
  const pod = await k.getPod("shop", "web-7d4b9c6f5-x2kqp");
  assert.equal(pod?.uid, "3f0b6a52-8c1e-4f7e-9a43-2d1b5c7e9f10");
  assert.equal(await k.getPod("shop", "gone"), null);
  const refuse = (file: string) =>
    new KubeClient({
      server: "https://kube.test",
      sleep: noSleep,
      fetch: () => {
        const body = kubeFixture(file);
        return Promise.resolve(Response.json(body, { status: Number(body.code) }));
      },
    }).listPods();
  await rejectsWith(refuse("status-403-forbidden.json"), "auth", /get and list on pods/);
  const expired = await rejectsWith(refuse("status-410-expired.json"), "protocol", /410/);
  assert.match(expired.details, /continue parameter is too old/);
  await rejectsWith(refuse("status-503-unavailable.json"), "transient", /unreachable/);
});

Deno.test("the stand-in's objects are cut from the same fixtures", () => {
  const api = new KubeDevApi();
  const pod = api.store.addPod({ namespace: "shop", name: "web-0", nodeName: "n1" });
  const fixture = kubeFixture("pod.json");
  assert.deepEqual(Object.keys(pod).sort(), ["metadata", "spec", "status"]);
  assert.deepEqual(
    (pod.spec as { containers: unknown }).containers,
    (fixture.spec as { containers: unknown }).containers,
  );
  assert.equal((pod.status as { phase: string }).phase, "Running");
  const node = api.store.addNode("n1");
  assert.equal((node.metadata.labels as Record<string, string>)["kubernetes.io/hostname"], "n1");
  assert.ok(
    (node.status as { nodeInfo?: unknown }).nodeInfo,
    "a Node's status as a kubelet posts it",
  );
});

Deno.test("getPod: the pod, null on its own NotFound, a refusal for a non-DNS name", async () => {
  const api = new KubeDevApi();
  const stored = api.store.addPod({ namespace: "shop", name: "web-0", nodeName: "n1" });
  const k = client(api);
  const pod = await k.getPod("shop", "web-0");
  assert.equal(pod?.uid, stored.metadata.uid);
  assert.equal(pod?.phase, "Running");
  assert.equal(await k.getPod("shop", "web-1"), null);
  await rejectsWith(k.getPod("shop", "../nodes"), "protocol", /not DNS-1123/);
  assert.equal(api.count(), 2, "the refused name was never sent");
});

Deno.test("a 404 that is not the pod's own NotFound is an error, not an absent pod", async () => {
  const notFound = (name: string) =>
    Response.json({ kind: "Status", reason: "NotFound", details: { name } }, { status: 404 });
  const k = new KubeClient({
    server: "https://kube.test",
    fetch: () => Promise.resolve(notFound("other")),
    sleep: noSleep,
  });
  await rejectsWith(k.getPod("shop", "web-0"), "protocol", /answered HTTP 404/);
  const plain = new KubeClient({
    server: "https://kube.test",
    fetch: () => Promise.resolve(new Response("404 page not found", { status: 404 })),
    sleep: noSleep,
  });
  await rejectsWith(plain.getPod("shop", "web-0"), "protocol", /answered HTTP 404/);
});

Deno.test("503 is retried a bounded number of times, then a transient error", async () => {
  const api = new KubeDevApi();
  api.faults.failLists = true;
  const waits: number[] = [];
  const k = client(api, { sleep: (ms) => (waits.push(ms), Promise.resolve()) });
  const err = await rejectsWith(k.listPods(), "transient", /unreachable or overloaded/);
  assert.match(err.details, /503.*gave up after 5 attempt/);
  assert.equal(api.count(), 5);
  assert.equal(waits.length, 4);
  assert.ok(waits.every((w, i) => w <= 3_000 && (i === 0 || w >= waits[0] / 2)), `${waits}`);
});

Deno.test("401, 403, a redirect, a malformed list and an oversized body are refused", async () => {
  const api = new KubeDevApi();
  await rejectsWith(client(api, { token: "wrong" }).listNodes(), "auth", /rejected.*401/);
  api.faults.forbidden = true;
  await rejectsWith(client(api).listNodes(), "auth", /get and list on pods and nodes/);
  const answer = (res: Response) =>
    new KubeClient({ server: "https://kube.test", fetch: () => Promise.resolve(res) });
  const moved = new Response(null, { status: 302, headers: { location: "http://evil/" } });
  await rejectsWith(answer(moved).listNodes(), "protocol", /redirect \(302\)/);
  const bad = Response.json({ kind: "NodeList", items: [{ metadata: {} }] });
  await rejectsWith(answer(bad).listNodes(), "protocol", /malformed NodeList/);
  const broken = new Response('{"kind":"NodeList","items":[{"metadata":{"name":"n1"}},');
  await rejectsWith(answer(broken).listNodes(), "protocol", /NodeList is not valid JSON/);
  const big = new KubeClient({
    server: "https://kube.test",
    maxBodyBytes: 100,
    fetch: () => Promise.resolve(Response.json({ kind: "Status", pad: "x".repeat(200) })),
  });
  await rejectsWith(big.getPod("shop", "web-0"), "protocol", /exceeds 100 bytes/);
  const fat = new KubeClient({
    server: "https://kube.test",
    maxItemBytes: 100,
    fetch: () =>
      Promise.resolve(Response.json({ items: [{ metadata: { name: "x".repeat(200) } }] })),
  });
  await rejectsWith(fat.listNodes(), "protocol", /NodeList has a value over 100 bytes \(item 0\)/);
});

Deno.test("a list page is read as a stream: its size is no bound, a stalled one times out", async () => {
  const api = new KubeDevApi();
  const annotations = { "example.com/blob": "a".repeat(256 * 1024 - 16) };
  for (let i = 0; i < 200; i++) {
    api.store.addPod({ namespace: "shop", name: `fat-${i}`, annotations });
  }
  const k = client(api, { maxBodyBytes: 1024 * 1024 });
  assert.equal((await k.listPods()).length, 200, "one page of 52 MB, over any body cap");
  assert.equal(api.count("/api/v1/pods"), 1);
  // A page that sends its start and then nothing: given up after the request timeout.
  let attempts = 0;
  const stalled = new KubeClient({
    server: "https://kube.test",
    requestMs: 200,
    sleep: noSleep,
    fetch: (_input, init) => {
      attempts++;
      // As fetch does, the request's signal aborts its body.
      const signal = init!.signal!;
      const body = new ReadableStream<Uint8Array>({
        start: (c) => {
          c.enqueue(new TextEncoder().encode('{"kind":"NodeList","items":['));
          signal.addEventListener("abort", () => c.error(signal.reason));
        },
      });
      return Promise.resolve(new Response(body, { status: 200 }));
    },
  });
  const err = await rejectsWith(stalled.listNodes(), "transient", /unreachable or overloaded/);
  assert.match(err.details, /timed out after 200 ms; gave up after 5 attempt/);
  assert.equal(attempts, 5, "a page that failed is asked again from its start");
});

Deno.test("the service-account token is scrubbed by value from what the API server quotes back", async () => {
  const token = tokenOf("sa-token-9d2f4e6a8b0c1d3e5f7a\n")!; // as lib/kube_access.ts reads it
  const quoting = (status: number, message: string) =>
    new KubeClient({
      server: "https://kube.test",
      token,
      sleep: noSleep,
      fetch: () => Promise.resolve(Response.json({ kind: "Status", message }, { status })),
    });
  for (
    const [status, message] of [
      [400, `bad request from ${token}`],
      [422, `${"x".repeat(QUOTE_CHARS - 10)}${token}`],
      [500, `token ${token.slice(0, 12)}`],
    ] as const
  ) {
    const err = await quoting(status, message).listNodes().then(() => undefined, (e) => e);
    assert.ok(err instanceof CniError);
    const text = `${err.message} ${err.details}`;
    assert.ok(!text.includes(token.slice(0, 8)), `${status}: ${text}`);
  }
});

Deno.test("a list that never ends is cut at maxPages", async () => {
  const api = new KubeDevApi({ maxPage: 1 });
  for (let i = 0; i < 5; i++) api.store.addNode(`n${i}`);
  await rejectsWith(client(api, { maxPages: 3 }).listNodes(), "protocol", /within 3 pages/);
});

Deno.test("the API server must be https, or http on loopback", () => {
  assert.throws(() => new KubeClient({ server: "http://10.0.0.1:6443" }), /is not https/);
  new KubeClient({ server: "http://127.0.0.1:8080" });
  new KubeClient({ server: "https://10.0.0.1:6443" });
});

const KUBECONFIG = `
apiVersion: v1
kind: Config
current-context: prod
clusters:
  - name: staging
    cluster: { server: "https://staging:6443" }
  - name: prod
    cluster:
      server: https://prod:6443
      certificate-authority: certs/ca.crt
users:
  - name: sweeper
    user:
      tokenFile: /var/run/token
contexts:
  - name: staging
    context: { cluster: staging, user: sweeper }
  - name: prod
    context: { cluster: prod, user: sweeper }
`;

Deno.test("kubeconfig: the current context, relative paths, refused options", () => {
  const refs = parseKubeconfig(KUBECONFIG, "/etc/sweep");
  assert.equal(refs.server, "https://prod:6443");
  assert.equal(refs.ca.file, "/etc/sweep/certs/ca.crt");
  assert.equal(refs.token.file, "/var/run/token");
  const fail = (text: string, msg: RegExp) =>
    assert.throws(
      () => parseKubeconfig(text, "/"),
      (e) => e instanceof CniError && msg.test(e.message),
    );
  fail(KUBECONFIG.replace("current-context: prod", "current-context: dev"), /"dev" not found/);
  fail(
    KUBECONFIG.replace(
      "server: https://prod:6443",
      "server: https://prod:6443\n      insecure-skip-tls-verify: true",
    ),
    /insecure-skip-tls-verify is refused/,
  );
  fail(
    KUBECONFIG.replace("tokenFile: /var/run/token", "exec: { command: aws }"),
    /user.exec is not/,
  );
  fail("[not yaml", /not a valid kubeconfig/);
});

Deno.test("kubeconfig credentials: base64 data, a token file, a cert without key refused", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "abc.def\n");
    const cfg = (user: string) =>
      JSON.stringify({
        "current-context": "x",
        clusters: [{
          name: "c",
          cluster: { server: "https://k:6443", "certificate-authority-data": btoa("CA-PEM") },
        }],
        users: [{ name: "u", user: JSON.parse(user) }],
        contexts: [{ name: "x", context: { cluster: "c", user: "u" } }],
      });
    await Deno.writeTextFile(`${dir}/a`, cfg(`{"tokenFile":"token"}`));
    const a = await kubeconfigAccess(`${dir}/a`);
    assert.deepEqual([a.server, a.ca, a.token, a.source], [
      "https://k:6443",
      "CA-PEM",
      "abc.def",
      `${dir}/a`,
    ]);
    await Deno.writeTextFile(`${dir}/b`, cfg(`{"client-certificate-data":"${btoa("C")}"}`));
    await rejectsWith(kubeconfigAccess(`${dir}/b`), "config", /certificate without key/);
    await Deno.writeTextFile(`${dir}/token`, "s3cr3t-new\ns3cr3t-old\n");
    const err = await rejectsWith(
      kubeconfigAccess(`${dir}/a`),
      "config",
      /does not hold exactly one token/,
    );
    assert.ok(!`${err.message} ${err.details}`.includes("s3cr3t"), "the token is never quoted");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("in-cluster access: the service account's files and the service env", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "sa-token");
    await Deno.writeTextFile(`${dir}/ca.crt`, "SA-CA");
    const env = (v: Record<string, string>) => (n: string) => v[n];
    const a = await inClusterAccess(
      env({ KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" }),
      dir,
    );
    assert.deepEqual([a.server, a.token, a.ca], ["https://[fd00::1]:443", "sa-token", "SA-CA"]);
    await rejectsWith(inClusterAccess(env({}), dir), "config", /not running in a Kubernetes pod/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("durations, --max-release and the arguments", () => {
  assert.equal(parseDuration("10m"), 600_000);
  assert.equal(parseDuration("1h30m"), 5_400_000);
  assert.equal(parseDuration("500ms"), 500);
  assert.equal(parseDuration("2.5"), 2_500);
  assert.equal(parseDuration("10 m"), undefined);
  assert.equal(parseDuration("-1s"), undefined);
  assert.equal(formatDuration(5_400_000), "1h30m");
  assert.equal(formatDuration(30_000), "30s");
  assert.equal(formatDuration(1_500), "1500ms");
  assert.deepEqual(parseMaxRelease("12"), { count: 12 });
  assert.deepEqual(parseMaxRelease("2.5%"), { percent: 2.5 });
  assert.equal(parseMaxRelease("101%"), undefined);
  const a = parseSweepArgs([]);
  assert.deepEqual([a.apply, a.graceMs, a.intervalMs, a.maxRelease, a.output], [
    false,
    600_000,
    30_000,
    { percent: 25 },
    "text",
  ]);
  for (const bad of [["--grace", "forever"], ["--interval", "2h"], ["--output", "yaml"], ["--x"]]) {
    assert.throws(
      () => parseSweepArgs(bad),
      (e) => e instanceof CniError && e.outcome === "config",
    );
  }
});

Deno.test("sweepCli: a failure before any observation is one JSON report, exit 1", async () => {
  let out = "";
  const code = await sweepCli(["--output", "json", "--config", "/nonexistent/node.json"], {
    env: () => undefined,
    write: (t) => void (out += t),
  });
  assert.equal(code, 1);
  const r = JSON.parse(out);
  assert.equal(r.kind, "SweepReport");
  assert.equal(r.outcome, "error");
  assert.match(r.error.message, /cannot read .*\/nonexistent\/node\.json/);
  let text = "";
  assert.equal(await sweepCli(["--grace", "x"], { write: (t) => void (text += t) }), 1);
  assert.match(text, /usage: milo-ipam sweep/);
});

Deno.test("kubeconfig client certificate: sent in the TLS handshake of a server that requires one", async () => {
  const dir = await Deno.makeTempDir();
  const port = freePort();
  let server: Deno.ChildProcess | undefined;
  try {
    const tls = await makeTestCA(`${dir}/tls`);
    server = new Deno.Command("openssl", {
      args: ["s_server", "-accept", `127.0.0.1:${port}`, "-cert", tls.certFile, "-key", tls.keyFile]
        .concat(["-CAfile", tls.caFile, "-Verify", "1", "-www", "-quiet"]),
      stdout: "null",
      stderr: "null",
    }).spawn();
    await waitForPort(port);
    const user = {
      "client-certificate": `tls/${tls.clientCertFile.split("/").pop()}`,
      "client-key-data": btoa(await Deno.readTextFile(tls.clientKeyFile)),
    };
    const cfg = (u: object) =>
      JSON.stringify({
        "current-context": "x",
        clusters: [{
          name: "c",
          cluster: { server: `https://127.0.0.1:${port}`, "certificate-authority": "tls/ca.pem" },
        }],
        users: [{ name: "u", user: u }],
        contexts: [{ name: "x", context: { cluster: "c", user: "u" } }],
      });
    await Deno.writeTextFile(`${dir}/with-cert`, cfg(user));
    await Deno.writeTextFile(`${dir}/without`, cfg({}));
    const withCert = await kubeconfigAccess(`${dir}/with-cert`);
    assert.match(withCert.cert ?? "", /BEGIN CERTIFICATE/);
    assert.match(withCert.key ?? "", /PRIVATE KEY/);
    const list = (path: string) =>
      kubeconfigAccess(path).then((a) => {
        const k = KubeClient.open(a, { sleep: noSleep });
        return k.listNodes().finally(() => k.close());
      });
    // The server's answer is an HTML page, not a NodeList: reaching it proves the handshake passed.
    await rejectsWith(list(`${dir}/with-cert`), "protocol", /NodeList|JSON|HTTP/);
    const refused = await list(`${dir}/without`).then(() => undefined, (e) => e);
    assert.ok(refused instanceof CniError, String(refused));
    assert.notEqual(refused.outcome, "protocol", `${refused.message}: ${refused.details}`);
  } finally {
    try {
      server?.kill("SIGKILL");
      await server?.status;
    } catch { /* already gone */ }
    await Deno.remove(dir, { recursive: true });
  }
});

/** Waits (at most 5 s) until something accepts on 127.0.0.1:`port`. */
async function waitForPort(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`nothing listens on 127.0.0.1:${port} after 5 s`);
}

// Bounded answers: the Kubernetes API's Status texts are quoted at most
// QUOTE_CHARS each, like Milo's.

{
  const q = "Q".repeat(100_000), r = "R".repeat(100_000);
  const status = (code: number, extra: Record<string, unknown>) => () =>
    Promise.resolve(
      Response.json({ kind: "Status", code, message: q, ...extra }, { status: code }),
    );
  const cases = [
    {
      what: "a 422 (message and reason)",
      fetch: status(422, { reason: r }),
      kind: "protocol",
      msg: /answered HTTP 422/,
    },
    {
      what: "a 404 that is not the pod's own NotFound",
      fetch: status(404, { reason: "NotFound", details: { name: "other" } }),
      kind: "protocol",
      msg: /answered HTTP 404/,
    },
    {
      what: "a 503 retried to exhaustion",
      fetch: status(503, { reason: "ServiceUnavailable" }),
      kind: "transient",
      msg: /unreachable or overloaded/,
      details: /^HTTP 503: Q+…; gave up after 5 attempt\(s\)$/,
    },
    {
      what: "a malformed pod (an annotation key in the issue path)",
      fetch: () =>
        Promise.resolve(Response.json({
          metadata: { name: "web-0", namespace: "shop", uid: "u", annotations: { [q]: 1 } },
        })),
      kind: "protocol",
      msg: /malformed Pod/,
    },
  ];
  for (const t of cases) {
    Deno.test(`bounded answers: Kubernetes ${t.what} with 100 000-character texts quotes at most QUOTE_CHARS`, async () => {
      let sent = 0;
      const k = new KubeClient({
        server: "https://kube.test",
        fetch: () => (sent++, t.fetch()),
        sleep: noSleep,
      });
      const err = await rejectsWith(k.getPod("shop", "web-0"), t.kind, t.msg);
      assert.equal(sent, t.kind === "transient" ? 5 : 1);
      if (t.details) assert.match(err.details, t.details, `${err.details.length} chars`);
      for (const ch of ["Q", "R"]) {
        const runs = `${err.message}\n${err.details}`.match(new RegExp(`${ch}+`, "g")) ?? [];
        const n = Math.max(0, ...runs.map((run) => run.length));
        assert.ok(n <= QUOTE_CHARS, `${ch} quoted ${n} chars`);
      }
    });
  }
}

// Issue 21, item 3, and issue 31, item 6: the pod and node lists are bounded by
// what they keep across their pages, not by their size on the wire.

Deno.test("the pod and node lists are bounded by what they keep, in bytes and items", async (t) => {
  const world = () => {
    const api = new KubeDevApi({ maxPage: 2 });
    for (let i = 0; i < 10; i++) api.store.addPod({ namespace: "shop", name: `web-${i}` });
    for (let i = 0; i < 10; i++) api.store.addNode(`n${i}`);
    return api;
  };
  const big = { bytes: 1024 ** 3, items: 1_000_000 };
  const cases = [
    {
      what: "pods, bytes",
      o: { podListBound: { ...big, bytes: 1_000 } },
      list: (k: KubeClient) => k.listPods(),
      says:
        /PodList exceeds what this process holds of a list: more than 1000 bytes kept \(POD_LIST_BOUND\.bytes\)/,
    },
    {
      what: "pods, items",
      o: { podListBound: { ...big, items: 5 } },
      list: (k: KubeClient) => k.listPods(),
      says:
        /PodList exceeds what this process holds of a list: more than 5 items kept \(POD_LIST_BOUND\.items\)/,
    },
    {
      what: "nodes, bytes",
      o: { nodeListBound: { ...big, bytes: 300 } },
      list: (k: KubeClient) => k.listNodes(),
      says:
        /NodeList exceeds what this process holds of a list: more than 300 bytes kept \(NODE_LIST_BOUND\.bytes\)/,
    },
    {
      what: "nodes, items",
      o: { nodeListBound: { ...big, items: 5 } },
      list: (k: KubeClient) => k.listNodes(),
      says:
        /NodeList exceeds what this process holds of a list: more than 5 items kept \(NODE_LIST_BOUND\.items\)/,
    },
  ];
  for (const c of cases) {
    await t.step(c.what, async () => {
      const api = world();
      const err = await rejectsWith(c.list(client(api, c.o)), "protocol", c.says);
      assert.equal(err.code, 105);
      assert.ok(api.log.length < 5, `cut before the list's end (5 pages): ${api.log.length}`);
      assert.match(err.details, /^cut after \d+ items, \d+ bytes kept$/);
    });
  }
});

Deno.test("the default list bounds: 250,000 pods and 25,000 nodes", async () => {
  const pages = (item: (i: number) => unknown, perPage: number, last: number) => {
    let n = 0;
    return new KubeClient({
      server: "https://kube.test",
      sleep: noSleep,
      fetch: () => {
        const more = ++n < last;
        const items = Array.from({ length: perPage }, (_, i) => item(n * perPage + i));
        return Promise.resolve(
          Response.json({ items, metadata: more ? { continue: String(n) } : {} }),
        );
      },
    });
  };
  const pod = (i: number) => ({ metadata: { name: `p${i}`, namespace: "n", uid: `u${i}` } });
  await rejectsWith(
    pages(pod, 50_000, 8).listPods(),
    "protocol",
    /more than 250,000 items kept \(POD_LIST_BOUND\.items\)/,
  );
  const node = (i: number) => ({ metadata: { name: `n${i}` } });
  await rejectsWith(
    pages(node, 5_000, 8).listNodes(),
    "protocol",
    /more than 25,000 items kept \(NODE_LIST_BOUND\.items\)/,
  );
});
