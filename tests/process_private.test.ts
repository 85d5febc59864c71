/**
 * Fail closed, second round, through the installed plugin: the log and the
 * state live in private directories and are never written through a
 * symlink; a token Milo quotes back is scrubbed by value; the plugin talks
 * only to an agent socket of its own user in a private directory, and the
 * agent fixes or refuses its socket's directory; the metrics listener holds a
 * bounded number of connections for a bounded time.
 */
import assert from "node:assert/strict";
import { HEAD_MS, MAX_CONNECTIONS } from "../lib/metrics_server.ts";
import { boundFor, type FakeMilo, fakeMilo } from "../testing/fake_milo.ts";
import { fixture, reply } from "../testing/milo_fixtures.ts";
import { installPlugin } from "../testing/plugin.ts";
import { assertCniError, freePort, TOKEN, until } from "../testing/process.ts";

const IS_ROOT = Deno.uid() === 0;
const IN_CI = Boolean(Deno.env.get("CI"));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A fake Milo answering every request with `status` and a Status quoting `message`. */
function quoting(status: number, message: string): Promise<FakeMilo> {
  return fakeMilo(() =>
    reply(status, {
      kind: "Status",
      status: "Failure",
      message,
      reason: "Unauthorized",
      code: status,
    })
  );
}

Deno.test("private paths: the log is never written through a symlink; shared directories are refused", async () => {
  const fake = await quoting(400, "refused");
  const p = await installPlugin({ miloUrl: fake.url, token: TOKEN });
  try {
    const target = `${p.dir}/elsewhere.sh`;
    await Deno.writeTextFile(target, "#!/bin/sh\n");
    await Deno.remove(p.logFile).catch(() => {});
    await Deno.symlink(target, p.logFile);
    const conf = p.netConf({}, { name: "n$(touch${IFS}/tmp/p)" });
    const r = await p.run({ command: "ADD", containerId: "sym", stdin: conf });
    assertCniError(r, 102);
    assert.equal(await Deno.readTextFile(target), "#!/bin/sh\n", "nothing written through it");
    assert.match(r.stderr, /cannot write log file .*not a regular file/);

    // A symlink to a file that does not exist yet: the plugin must not create it.
    await Deno.remove(p.logFile);
    await Deno.symlink(`${p.dir}/made-by-the-plugin`, p.logFile);
    await p.run({ command: "ADD", containerId: "sym2", stdin: conf });
    assert.equal(
      await Deno.lstat(`${p.dir}/made-by-the-plugin`).then(() => true, () => false),
      false,
    );
  } finally {
    await p.cleanup();
    await fake.close();
  }
});

Deno.test({
  name: IS_ROOT || IN_CI
    ? "private paths: install and the agent refuse a log or state directory others may write"
    : "private paths: install and the agent refuse shared directories (skipped: needs root)",
  ignore: !IS_ROOT && !IN_CI,
}, async () => {
  const fake = await quoting(400, "refused");
  const p = await installPlugin({ miloUrl: fake.url, token: TOKEN, agent: true });
  try {
    const logDir = `${p.dir}/logs`;
    await Deno.mkdir(logDir, { mode: 0o777 });
    await Deno.chmod(logDir, 0o777);
    await p.setNode({ log: { file: `${logDir}/milo-ipam.log`, level: "info" } });
    const started = await p.run({ command: "", args: ["agent"], timeoutMs: 10_000 });
    assertCniError(
      started,
      7,
      /log\.file's directory .*logs is not private: .*writable by its group/,
    );
    await Deno.chmod(logDir, 0o700);
    await Deno.chown(logDir, 65534, 65534);
    const other = await p.run({ command: "", args: ["agent"], timeoutMs: 10_000 });
    assertCniError(other, 7, /logs is not private: .* owned by uid 65534/);
    const { install } = await import("../scripts/install.ts");
    await assert.rejects(
      install({ dir: `${p.dir}/bin2`, config: p.nodeConfig, quiet: true }),
      /log\.file's directory .*owned by uid 65534/,
    );
    await Deno.chown(logDir, 0, 0);
    await p.setNode({ log: { file: `${p.dir}/new-log-dir/milo-ipam.log`, level: "info" } });
    await install({ dir: `${p.dir}/bin2`, config: p.nodeConfig, quiet: true });
    const made = await Deno.stat(`${p.dir}/new-log-dir`);
    assert.equal(made.mode! & 0o777, 0o700, "install makes a missing log directory 0700");
  } finally {
    await p.cleanup();
    await fake.close();
  }
});

Deno.test("a create answered with another claim fails the ADD (105); that claim is never deleted, the other family's is", async () => {
  // IPv4's create is answered with a claim of another name (someone else's); IPv6's as posted.
  const claims = new Map<string, Record<string, unknown>>();
  const fake = await fakeMilo((req, seen) => {
    const body = seen.body as { metadata: { name: string }; spec: { ipFamily?: string } };
    const name = seen.path.split("/").pop()!;
    if (req.method === "POST") {
      const v4 = body.spec.ipFamily === "IPv4";
      const answer = boundFor(
        v4 ? { ...body, metadata: { ...body.metadata, name: "someone-elses-claim" } } : body,
        v4 ? { address: "10.40.0.9", allocatedCIDR: "10.40.0.9/32" } : {
          allocatedCIDR: "fd20:0:0:1::/96",
        },
      );
      if (!v4) claims.set(body.metadata.name, answer);
      return reply(201, answer);
    }
    const c = claims.get(name);
    if (req.method === "DELETE" && c) claims.delete(name);
    return c ? reply(200, c) : reply(404, fixture("status-404-not-found.json"));
  });
  const p = await installPlugin({ miloUrl: fake.url, token: TOKEN });
  try {
    const r = await p.run({ command: "ADD", containerId: "answer", stdin: p.netConf() });
    assertCniError(r, 105, /answered the create of IPv4 claim .* with another claim/);
    assert.ok(!fake.seen.some((x) => x.path.endsWith("/someone-elses-claim")), "left alone");
    const deleted = fake.seen.filter((x) => x.method === "DELETE").map((x) =>
      x.path.split("/").pop()
    );
    assert.equal(deleted.length, 1, "the IPv6 claim this ADD made is rolled back");
    assert.match(deleted[0]!, /-v6$/);
    assert.equal(claims.size, 0);
    const line = (await p.logLines()).find((l) => l.containerId === "answer");
    assert.equal(line?.code, 105);
  } finally {
    await p.cleanup();
    await fake.close();
  }
});

Deno.test("a token Milo quotes back is scrubbed by value from the error and the log", async () => {
  const fake = await quoting(500, `token ${TOKEN} is expired, and so is ${TOKEN}!`);
  const p = await installPlugin({ miloUrl: fake.url, token: TOKEN });
  try {
    const r = await p.run({ command: "ADD", containerId: "quote", stdin: p.netConf() });
    assertCniError(r, 11);
    assert.match(String(r.json?.details), /token \[redacted\] is expired/);
    const log = await Deno.readTextFile(p.logFile);
    assert.ok(!log.includes(TOKEN), "the log never carries the token");
  } finally {
    await p.cleanup();
    await fake.close();
  }
  const refused = await quoting(401, "this server quotes what it was sent: some-other-secret-text");
  const q = await installPlugin({ miloUrl: refused.url, token: TOKEN });
  try {
    const r = await q.run({ command: "ADD", containerId: "quote", stdin: q.netConf() });
    assertCniError(r, 101);
    assert.ok(!r.stdout.includes("some-other-secret-text"), "a 401's text is not quoted");
  } finally {
    await q.cleanup();
    await refused.close();
  }
});

Deno.test({
  name: IS_ROOT || IN_CI
    ? "agent socket: the plugin talks only to its own user's socket in a private directory"
    : "agent socket trust (skipped: needs root)",
  ignore: !IS_ROOT && !IN_CI,
}, async () => {
  const fake = await quoting(400, "refused");
  const p = await installPlugin({ miloUrl: fake.url, token: TOKEN, agent: true });
  const socketDir = p.socket!.slice(0, p.socket!.lastIndexOf("/"));
  try {
    // Something else listens at the socket path, in a directory others may write.
    await Deno.mkdir(socketDir, { recursive: true });
    await Deno.chmod(socketDir, 0o777);
    let received = 0;
    const impostor = Deno.listen({ transport: "unix", path: p.socket! });
    const taking = (async () => {
      for await (const c of impostor) {
        received++;
        c.close();
      }
    })().catch(() => {});
    const r = await p.run({ command: "ADD", containerId: "impostor", stdin: p.netConf() });
    assertCniError(r, 102);
    const line = (await p.logLines()).find((l) => l.containerId === "impostor");
    assert.match(String(line?.fallback), /not trusted: .* writable by its group or others/);
    assert.equal(received, 0, "the plugin never connected");
    impostor.close();
    await taking;
    await Deno.remove(p.socket!).catch(() => {});

    // The agent fixes its own directory's mode, and refuses another user's directory.
    await p.startAgent();
    assert.equal((await Deno.stat(socketDir)).mode! & 0o777, 0o700, "the agent fixed the mode");
    await p.stopAgent();
    await Deno.chown(socketDir, 65534, 65534);
    const refused = await p.run({ command: "", args: ["agent"], timeoutMs: 10_000 });
    assertCniError(refused, 7, /socket's directory .* owned by uid 65534/);
  } finally {
    await Deno.chown(socketDir, 0, 0).catch(() => {});
    await p.cleanup();
    await fake.close();
  }
});

Deno.test("agent metrics: connections are bounded in number and in time", async () => {
  const fake = await quoting(400, "refused");
  const metrics = `127.0.0.1:${freePort()}`;
  const p = await installPlugin({
    miloUrl: fake.url,
    token: TOKEN,
    agent: true,
    agentMetrics: metrics,
  });
  const held: Deno.Conn[] = [];
  try {
    await p.startAgent();
    const [hostname, port] = [metrics.split(":")[0], Number(metrics.split(":")[1])];
    for (let i = 0; i < MAX_CONNECTIONS * 4; i++) {
      const c = await Deno.connect({ hostname, port });
      await c.write(new TextEncoder().encode("GET /metr"));
      held.push(c);
    }
    // One read per connection, pending while the agent keeps it open.
    const closedAt: (number | undefined)[] = held.map(() => undefined);
    held.forEach((c, i) =>
      c.read(new Uint8Array(16)).then(() => {}, () => {}).finally(() => closedAt[i] = Date.now())
    );
    const shut = () => closedAt.filter((t) => t !== undefined).length;
    await until(
      () => Promise.resolve(shut() >= MAX_CONNECTIONS * 3),
      `the oldest connections closed past ${MAX_CONNECTIONS} (${shut()} of ${held.length})`,
    );
    assert.ok(
      closedAt.slice(0, MAX_CONNECTIONS * 3).every((t) => t !== undefined),
      "the connections closed to make room are the oldest",
    );
    await sleep(HEAD_MS + 500);
    assert.equal(shut(), held.length, "half-sent requests are closed after the head time");
    await until(async () => {
      const res = await fetch(`http://${metrics}/metrics`);
      return res.ok && (await res.text()).includes("milo_ipam_calls_total");
    }, "a scrape is answered afterwards");
    const other = await fetch(`http://${metrics}/other`);
    await other.body?.cancel();
    assert.equal(other.status, 404);
  } finally {
    for (const c of held) {
      try {
        c.close();
      } catch { /* closed */ }
    }
    await p.cleanup();
    await fake.close();
  }
});

Deno.test("agent metrics: on the node's addresses, the installed agent answers /metrics only with the token its sandbox reads", async () => {
  const fake = await quoting(400, "refused");
  const secrets = await Deno.makeTempDir({ prefix: "milo-ipam-scrape-" });
  const tokenFile = `${secrets}/token`;
  await Deno.writeTextFile(tokenFile, "scraper-token\n", { mode: 0o600 });
  const port = freePort();
  const p = await installPlugin({
    miloUrl: fake.url,
    token: TOKEN,
    agent: true,
    agentMetrics: `0.0.0.0:${port}`,
    agentMetricsTokenFile: tokenFile,
  });
  try {
    await p.startAgent();
    const get = async (path: string, authorization?: string) => {
      const r = await fetch(`http://127.0.0.1:${port}${path}`, {
        headers: authorization ? { authorization } : {},
      });
      return { status: r.status, body: await r.text() };
    };
    assert.equal((await get("/metrics")).status, 401);
    assert.equal((await get("/metrics", "Bearer another")).status, 401);
    const r = await get("/metrics", "Bearer scraper-token");
    assert.equal(r.status, 200, r.body);
    assert.match(r.body, /^milo_ipam_build_info\{/m);
    assert.equal((await get("/livez")).status, 200, "the probes need no token");
  } finally {
    await p.cleanup();
    await fake.close();
    await Deno.remove(secrets, { recursive: true });
  }
});
