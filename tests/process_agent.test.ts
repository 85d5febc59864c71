/**
 * The node agent as a runtime meets it: the exec'd plugin answered over the
 * socket, and doing the work itself when the agent is absent, stuck or dead —
 * latency, never correctness. Metrics, socket permissions, graceful stop.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { MAX_STDIN_BYTES } from "../lib/stdin.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin } from "../testing/plugin.ts";
import { assertOk, freePort, ipsOf, PLUGIN_SEED, TOKEN, until } from "../testing/process.ts";

/**
 * A stuck agent on `path`: it accepts connections, never reads them and never
 * answers. `close` stops it and removes its socket; once it resolves, the
 * path is free for the next listener (a closed listener unlinks its path when
 * its last pending accept ends, which may be after `close()` returned).
 */
function stuckAgent(path: string): { accepted(): number; close(): Promise<void> } {
  const held: Deno.Conn[] = [];
  const listener = Deno.listen({ transport: "unix", path });
  const accepting = (async () => {
    for await (const c of listener) held.push(c);
  })().catch(() => {});
  return {
    accepted: () => held.length,
    close: async () => {
      listener.close();
      await accepting;
      held.forEach((c) => c.close());
      await Deno.remove(path).catch(() => {});
    },
  };
}

const via = async (logFile: string, containerId: string) =>
  (await Deno.readTextFile(logFile)).split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .filter((l) => l.containerId === containerId).map((l) =>
      l.via + (l.fallback ? `:${l.fallback}` : "")
    );

/**
 * The log lines of `containerId` once there are `n` of them: the agent writes
 * its line after the reply, so the plugin may have exited before it is there.
 */
async function logged(logFile: string, containerId: string, n = 1): Promise<string[]> {
  await until(async () => (await via(logFile, containerId)).length >= n, `log of ${containerId}`);
  return await via(logFile, containerId);
}

Deno.test("agent: answers calls, serves metrics, falls back when absent, stuck or killed", async (t) => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const metrics = `127.0.0.1:${freePort()}`;
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    agent: true,
    agentMetrics: metrics,
  });
  const conf = p.netConf();
  try {
    await t.step("without an agent the plugin does the work itself", async () => {
      assertOk(await p.run({ command: "ADD", containerId: "alone", stdin: conf }));
      assert.match((await via(p.logFile, "alone"))[0], /^direct:agent socket .*NotFound/);
    });

    await t.step("the agent answers; its socket is root's alone", async () => {
      await p.startAgent();
      const info = await Deno.stat(p.socket!);
      assert.equal(info.mode! & 0o777, 0o600);
      const dir = await Deno.stat(p.socket!.replace(/\/[^/]+$/, ""));
      assert.equal(dir.mode! & 0o077, 0, "the socket's directory admits no one else");
      const add = await p.run({ command: "ADD", containerId: "warm", stdin: conf });
      assertOk(add);
      assert.deepEqual(await logged(p.logFile, "warm"), ["agent"]);
      const again = await p.run({ command: "ADD", containerId: "alone", stdin: conf });
      assertOk(again);
      assert.equal((await milo.listClaims("tenant-a", `${KEYS.containerId}=alone`)).length, 2);
    });

    await t.step(
      "metrics: calls by verb and code, Milo requests by method and status",
      async () => {
        assertOk(await p.run({ command: "DEL", containerId: "warm", stdin: conf }));
        // The agent counts a call after its reply: the plugin may have exited first.
        const counted = [
          /milo_ipam_calls_total\{verb="ADD",code="0"\} 2/,
          /milo_ipam_calls_total\{verb="DEL",code="0"\} 1/,
        ];
        let text = "";
        await until(async () => {
          text = await (await fetch(`http://${metrics}/metrics`)).text();
          return counted.every((re) => re.test(text));
        }, "two ADDs and a DEL counted in the metrics");
        assert.match(text, /milo_ipam_milo_requests_total\{method="POST",status="201"\} 2/);
        assert.match(text, /milo_ipam_call_duration_seconds_count\{verb="ADD"\} 2/);
        assert.match(text, /# TYPE milo_ipam_fallbacks_total counter/);
        const missing = await fetch(`http://${metrics}/other`);
        await missing.body?.cancel();
        assert.equal(missing.status, 404);
      },
    );

    await t.step(
      "a killed caller's ADD stops and is undone; its DEL is never undone by a late retry",
      async () => {
        // POST commits, then its answer hangs past requestMs; the plugin is killed at 600 ms.
        await milo.setFaults({ hangRate: 1, hangMs: 1500, faultPoint: "after", methods: ["POST"] });
        let add;
        try {
          add = await p.run({ command: "ADD", containerId: "killed", stdin: conf, timeoutMs: 600 });
        } finally {
          await milo.clearFaults();
        }
        assert.notEqual(add.code, 0, "the killed ADD did not succeed");
        assertOk(await p.run({ command: "DEL", containerId: "killed", stdin: conf }));
        const selector = `${KEYS.containerId}=killed`;
        assert.equal((await milo.listClaims("tenant-a", selector)).length, 0);
        // Past the hang and the agent's retry: an agent that went on would have re-created it.
        await new Promise((r) => setTimeout(r, 2_500));
        assert.equal((await milo.listClaims("tenant-a", selector)).length, 0, "no late claim");
        const lines = (await p.logLines()).filter((l) => l.containerId === "killed");
        const add2 = lines.find((l) => l.verb === "ADD");
        assert.match(String(add2?.msg), /stopped, the caller is gone/);
        const undo = lines.find((l) => l.verb === "DEL" && l.why);
        assert.equal(undo?.why, "undo: the ADD's caller is gone");
        assert.equal(undo?.outcome, "ok");
      },
    );

    await t.step("a second agent refuses to start beside a live one", async () => {
      const r = await p.run({ command: "", args: ["agent"] });
      assert.equal(r.code, 1);
      assert.match(r.json?.msg as string, /another agent answers/);
    });

    await t.step("SIGTERM finishes the call in flight, then removes the socket", async () => {
      await milo.setFaults({ latencyMs: 800 });
      try {
        const call = p.run({ command: "ADD", containerId: "inflight", stdin: conf });
        await new Promise((r) => setTimeout(r, 300));
        await p.stopAgent("SIGTERM");
        assertOk(await call);
      } finally {
        await milo.clearFaults();
      }
      assert.deepEqual(await via(p.logFile, "inflight"), ["agent"]);
      assert.equal(await Deno.stat(p.socket!).then(() => true, () => false), false);
    });

    await t.step("a killed agent's stale socket: the plugin falls back and counts it", async () => {
      await p.startAgent();
      await p.stopAgent("SIGKILL");
      assert.ok(await Deno.stat(p.socket!).then(() => true, () => false), "stale socket left");
      assertOk(await p.run({ command: "ADD", containerId: "dead", stdin: conf }));
      assert.match((await via(p.logFile, "dead"))[0], /^direct:agent socket .*ConnectionRefused/);
      await p.startAgent();
      const text = await (await fetch(`http://${metrics}/metrics`)).text();
      assert.match(text, /milo_ipam_fallbacks_total [1-9]/);
      await p.stopAgent();
    });

    await t.step("a stuck agent (accepts, never answers) costs at most requestMs", async () => {
      const stuck = stuckAgent(p.socket!);
      try {
        const r = await p.run({ command: "ADD", containerId: "stuck", stdin: conf });
        assertOk(r);
        assert.match((await via(p.logFile, "stuck"))[0], /^direct:agent did not answer within/);
        assert.ok(r.ms < 1000 + 4000, `within requestMs + totalMs (${Math.round(r.ms)} ms)`);
      } finally {
        await stuck.close();
      }
    });

    await t.step(
      "an agent that never accepts, its backlog full: the plugin falls back at once",
      async () => {
        // Nobody accepts on this listener: connections queue in the kernel until its backlog is
        // full, and then a connect fails at once instead of waiting.
        const listener = Deno.listen({ transport: "unix", path: p.socket! });
        const queued: Deno.Conn[] = [];
        try {
          let full = false;
          for (let i = 0; i < 10_000 && !full; i++) {
            try {
              queued.push(await Deno.connect({ transport: "unix", path: p.socket! }));
            } catch (err) {
              assert.ok(err instanceof Deno.errors.WouldBlock, `a full backlog: ${err}`);
              full = true;
            }
          }
          assert.ok(full, `the backlog filled within 10,000 connections (${queued.length})`);
          const r = await p.run({ command: "ADD", containerId: "backlog", stdin: conf });
          assertOk(r);
          assert.match((await via(p.logFile, "backlog"))[0], /^direct:agent socket .*WouldBlock/);
        } finally {
          queued.forEach((c) => c.close());
          listener.close();
          await Deno.remove(p.socket!).catch(() => {});
        }
      },
    );

    await t.step(
      "a stuck agent that never reads a ~1 MB stdin costs at most requestMs too",
      async () => {
        // A valid config (milo-ipam ignores the master's `args`) far larger than the socket's
        // buffers, under the 1 MiB stdin limit: sending it waits on an agent that never reads.
        const bare = JSON.stringify(p.netConf({}, { args: { padding: "" } })).length;
        const big = JSON.stringify(
          p.netConf({}, { args: { padding: "x".repeat(1_000_000 - bare) } }),
        );
        assert.equal(new TextEncoder().encode(big).byteLength, 1_000_000);
        assert.ok(big.length <= MAX_STDIN_BYTES);
        const stuck = stuckAgent(p.socket!);
        try {
          // The runner's own timeout only ends a plugin that never would.
          const r = await p.run({
            command: "ADD",
            containerId: "stuck-big",
            stdin: big,
            timeoutMs: 15_000,
          });
          assert.ok(r.ms < 4000 + 1000, `exit within totalMs + 1 s (${Math.round(r.ms)} ms)`);
          assertOk(r);
          assert.ok(r.json, `one JSON result: ${r.stdout}`);
          assert.equal(
            r.stdout.trim().split("\n").length,
            1,
            "exactly one JSON document on stdout",
          );
          assert.equal(ipsOf(r).length, 2);
          assert.match(
            (await via(p.logFile, "stuck-big"))[0],
            /^direct:agent did not answer within 1000 ms/,
          );
          assert.ok(stuck.accepted() > 0, "the plugin reached the stuck agent");
        } finally {
          await stuck.close();
        }
      },
    );
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});

/** The bundle's files that `main.js` reaches by static imports (the thin client's graph). */
async function staticGraph(dir: string): Promise<Set<string>> {
  const seen = new Set<string>();
  const visit = async (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = await Deno.readTextFile(`${dir}/${file}`);
    for (const m of text.matchAll(/import(?:[^("']*?from)?\s*"\.\/([\w-]+\.js)"/g)) {
      await visit(m[1]);
    }
  };
  await visit("main.js");
  return seen;
}

Deno.test("agent: a call it answers loads only the thin client's modules", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, agent: true });
  try {
    await p.startAgent();
    const support = `${p.dir}/bin/.milo-ipam`;
    const entry = await Deno.readTextFile(`${support}/milo-ipam.js`);
    const dir = `${support}/${/\.\/(bundle-[0-9a-f]+)\/main\.js/.exec(entry)![1]}`;
    const thin = await staticGraph(dir);
    const lazy = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => !thin.has(n));
    assert.ok(lazy.length > 0 && thin.size < lazy.length, `thin: ${[...thin]}`);
    // FIFOs without a writer: a process that so much as opens one of them hangs.
    for (const n of lazy) {
      await Deno.remove(`${dir}/${n}`);
      const made = await new Deno.Command("mkfifo", { args: [`${dir}/${n}`] }).output();
      assert.ok(made.success, `mkfifo ${n}`);
    }
    const conf = p.netConf();
    assertOk(await p.run({ command: "ADD", containerId: "thin", stdin: conf, timeoutMs: 10_000 }));
    assertOk(await p.run({ command: "DEL", containerId: "thin", stdin: conf, timeoutMs: 10_000 }));
    assert.deepEqual(await logged(p.logFile, "thin", 2), ["agent", "agent"]);
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});

/**
 * 32 dual-stack ADDs at once through one agent: 64 creates offered against
 * 16 a second (4 s at the ceiling), under the production timeouts (a call's
 * requests end 8 s after its process starts). Answers every ADD's result,
 * Milo's counters over the storm, and the agent's metrics.
 */
async function bootStorm(limits: Record<string, unknown> = {}) {
  const milo = await startMiloDev({ seed: PLUGIN_SEED, allocationsPerSecond: 16 });
  await milo.setLimits(limits);
  const metrics = `127.0.0.1:${freePort()}`;
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    agent: true,
    agentMetrics: metrics,
    nodeConfig: { timeouts: { requestMs: 2_000, totalMs: 10_000 } },
  });
  try {
    await p.startAgent();
    await milo.resetStats();
    const conf = p.netConf();
    const ids = Array.from({ length: 32 }, (_, i) => `storm-${i}`);
    const adds = await Promise.all(
      ids.map((id) => p.run({ command: "ADD", containerId: id, stdin: conf, timeoutMs: 20_000 })),
    );
    adds.forEach((r) => assertOk(r));
    for (const id of ids) assert.deepEqual(await logged(p.logFile, id), ["agent"], id);
    const stats = await milo.stats();
    const text = await (await fetch(`http://${metrics}/metrics`)).text();
    return { stats, text };
  } finally {
    await p.cleanup();
    await milo.stop();
  }
}

Deno.test("agent: a boot storm at 2x Milo's allocation ceiling, Milo queueing it: every ADD, <= 1.3 requests per claim", async () => {
  const { stats } = await bootStorm();
  assert.equal(stats.allocations, 64, "one claim per family per ADD");
  assert.ok(stats.queued > 0, "Milo's priority and fairness queued creates past its ceiling");
  assert.ok(
    stats.total / stats.allocations <= 1.3,
    `${stats.total} requests (${JSON.stringify(stats.byMethod)}, ${stats.throttled} answered ` +
      `429) for ${stats.allocations} claims`,
  );
});

Deno.test("agent: a boot storm at 2x the ceiling, Milo refusing past it: every ADD, <= 1.2 POSTs per claim", async () => {
  // Opts in: no queue, every create past the ceiling refused at once (429), as a priority level
  // whose queues are full answers: the limiter's cut and paced rate are what is under test.
  const { stats, text } = await bootStorm({ queueLength: 0 });
  const posts = stats.byMethod.POST ?? 0;
  assert.equal(stats.allocations, 64, "one claim per family per ADD");
  assert.ok(stats.throttled > 0, "the storm met the ceiling");
  assert.ok(
    posts / stats.allocations <= 1.2,
    `${posts} POSTs (${stats.throttled} refused) for ${stats.allocations} claims`,
  );
  assert.match(text, /milo_ipam_milo_throttled_total\{event="cut"\} [1-9]/);
  assert.match(text, /milo_ipam_milo_rate_limit \d/, "a finite rate after the storm");
});

Deno.test("agent: the runtime's DEL after an ADD Milo failed gets its slots and releases what landed, every time", async () => {
  // Milo makes each create and answers 503 (Retry-After 1 s) to it, as a master's ADD meets it;
  // the master (galactic's, or libcni's runtime) then DELs the attachment at once.
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    agent: true,
    // Short deadlines for these calls: the node lets its networks go down to them.
    nodeConfig: {
      timeouts: { requestMs: 1000, totalMs: 4000, minRequestMs: 300, minTotalMs: 1500 },
    },
  });
  const conf = p.netConf({ timeouts: { requestMs: 300, totalMs: 1_500 } });
  const claimsOf = (id: string) => milo.listClaims("tenant-a", `${KEYS.containerId}=${id}`);
  try {
    await p.startAgent();
    // First a DEL that Milo refuses (journaled): its refusals are the release flow's last news.
    assertOk(await p.run({ command: "ADD", containerId: "refused", stdin: conf }));
    await milo.setFaults({ errorRate: 1, errorStatuses: [503], methods: ["DELETE"] });
    try {
      const r = await p.run({ command: "DEL", containerId: "refused", stdin: conf });
      assert.equal(r.json?.code, 11, r.stdout);
    } finally {
      await milo.clearFaults();
    }
    for (let i = 0; i < 5; i++) {
      const id = `failed-add-${i}`;
      await milo.setFaults({
        errorRate: 1,
        errorStatuses: [503],
        methods: ["POST"],
        faultPoint: "after",
      });
      try {
        const add = await p.run({ command: "ADD", containerId: id, stdin: conf });
        assert.equal(add.json?.code, 11, `ADD ${i}: ${add.stdout}`);
        // The flow's pause after the refusals lets one create probe at a time: one or both land.
        assert.ok((await claimsOf(id)).length >= 1, "a create landed");
        const del = await p.run({ command: "DEL", containerId: id, stdin: conf });
        assertOk(del);
      } finally {
        await milo.clearFaults();
      }
      assert.deepEqual(await claimsOf(id), [], `round ${i}: the DEL released what landed`);
      assert.deepEqual(await logged(p.logFile, id, 2), ["agent", "agent"]);
    }
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});
