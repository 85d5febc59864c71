/**
 * Parsing is linear and bounded (issue 38), through the installed plugin as a
 * runtime runs it, with and without the node agent: a network config with an
 * unknown key as long as stdin allows, and a CHECK whose prevResult lists
 * 40,000 addresses, are refused with a clear error within the attacker's own
 * deadline, while another tenant's ADDs go on (through the agent, not around
 * it), the agent's /livez answers, and the agent stays under its memory limit.
 */
import assert from "node:assert/strict";
import { MAX_STDIN_BYTES } from "../lib/stdin.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type RunOptions, type TestPlugin } from "../testing/plugin.ts";
import {
  AGENT_LIMIT_MIB,
  assertCniError,
  assertOk,
  freePort,
  MODES,
  peakKiB,
  PLUGIN_SEED,
  TOKEN,
  until,
} from "../testing/process.ts";

/** The node's `timeouts.totalMs` in these installs (testing/plugin.ts): every call's deadline. */
const TOTAL_MS = 4_000;

/** `conf` with an unknown ipam key as long as stdin allows. */
function withHugeKey(conf: Record<string, unknown>): string {
  const ipam = conf.ipam as Record<string, unknown>;
  const room = MAX_STDIN_BYTES - JSON.stringify({ ...conf, ipam: { ...ipam, k: 1 } }).length;
  return JSON.stringify({ ...conf, ipam: { ...ipam, ["k".repeat(room)]: 1 } });
}

/** `conf` with a prevResult of `n` addresses. */
function withPrevResult(conf: Record<string, unknown>, n: number): string {
  const ips = Array.from({ length: n }, (_, i) => ({ address: i % 2 ? "10.40.0.1" : "fd20::1" }));
  return JSON.stringify({ ...conf, prevResult: { cniVersion: "1.1.0", ips } });
}

/** How the call of `containerId` was answered, from its log line: `agent`, or `direct:<why>`. */
async function via(p: TestPlugin, containerId: string): Promise<string> {
  const line = async () => (await p.logLines()).find((l) => l.containerId === containerId);
  // The agent writes its line after the reply: the plugin may have exited before it is there.
  await until(async () => (await line()) !== undefined, `the log line of ${containerId}`);
  const l = (await line())!;
  return `${l.via}${l.fallback ? `:${l.fallback}` : ""}`;
}

/**
 * Runs `attack` and, while it runs (at least once), another tenant's ADDs one
 * after the other, each beside a `/livez` probe given the kubelet's 5 s.
 */
async function underAttack(p: TestPlugin, attack: RunOptions, metrics?: string) {
  let over = false;
  const attacking = p.run(attack).finally(() => over = true);
  const victims: string[] = [], livez: string[] = [];
  do {
    const id = `victim-${attack.containerId}-${victims.length}`;
    victims.push(id);
    const [add, live] = await Promise.all([
      p.run({
        command: "ADD",
        containerId: id,
        podNamespace: "web",
        podName: id,
        stdin: p.netConf(),
      }),
      metrics
        ? fetch(`http://${metrics}/livez`, { signal: AbortSignal.timeout(5_000) }).then(
          async (r) => (await r.body?.cancel(), `HTTP ${r.status}`),
          (err) => String(err).slice(0, 80),
        )
        : undefined,
    ]);
    assertOk(add);
    if (live) livez.push(live);
  } while (!over);
  return { attacked: await attacking, victims, livez };
}

for (const mode of MODES) {
  Deno.test(`[${mode}] a hostile network config costs its own call only`, async (t) => {
    const milo = await startMiloDev({ seed: PLUGIN_SEED });
    const metrics = mode === "agent" ? `127.0.0.1:${freePort()}` : undefined;
    const p = await installPlugin({
      miloUrl: milo.url,
      token: TOKEN,
      agent: mode === "agent",
      agentMetrics: metrics,
    });
    try {
      assert.equal((p.node.timeouts as { totalMs: number }).totalMs, TOTAL_MS);
      if (mode === "agent") await p.startAgent();
      const attacks: [string, RunOptions, number, RegExp][] = [
        [
          "an unknown key of 1 MiB: refused (7) naming the limit",
          { command: "ADD", containerId: "key", stdin: withHugeKey(p.netConf()) },
          7,
          /ipam\.k+…: a key of \d+ characters; a key is at most 253 \(MAX_KEY_CHARS\)/,
        ],
        [
          "a prevResult of 40,000 addresses: refused (6) naming the bound",
          { command: "CHECK", containerId: "prev", stdin: withPrevResult(p.netConf(), 40_000) },
          6,
          /more than 8192 objects, lists and commas.*docs\/limits\.md/,
        ],
      ];
      for (const [what, attack, code, says] of attacks) {
        await t.step(what, async () => {
          assert.ok((attack.stdin as string).length <= MAX_STDIN_BYTES, "it fits stdin");
          const { attacked, victims, livez } = await underAttack(p, attack, metrics);
          assertCniError(attacked, code, says);
          assert.ok(
            attacked.ms < TOTAL_MS + 1_000,
            `the attacker's call ended ${Math.round(attacked.ms)} ms after it started, past ` +
              `its totalMs (${TOTAL_MS}) + 1 s`,
          );
          if (mode !== "agent") return;
          assert.equal(await via(p, attack.containerId!), "agent", "the agent refused it itself");
          for (const id of victims) assert.equal(await via(p, id), "agent", `${id}'s ADD`);
          assert.deepEqual(livez, livez.map(() => "HTTP 200"), "/livez answered within 5 s");
        });
      }
      if (mode === "agent") {
        const peak = await peakKiB(p.agentPid()!);
        assert.ok(
          peak < AGENT_LIMIT_MIB * 1024,
          `the agent's peak RSS ${(peak / 1024).toFixed(1)} MiB reached its limit`,
        );
      }
    } finally {
      await p.cleanup();
      await milo.stop();
    }
  });
}
