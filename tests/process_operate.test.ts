/**
 * A bad day's tools through the installed plugin, against milo-dev: the log
 * line of an ADD and of a DEL names the pod and the addresses (an operator
 * greps the log for an address), with and without the agent; `show --node`
 * and `show --pod` with Milo down report what the node itself holds (its
 * records, journal and caches) and say what they could not ask.
 */
import assert from "node:assert/strict";
import type { ShowReport } from "../lib/_show_report.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { assertOk, ipsOf, MODES, PLUGIN_SEED, TOKEN } from "../testing/process.ts";

/**
 * The log lines of `verb` for container `id`, once there is one: the agent
 * logs a call after it has answered it (lib/_agent_socket.ts).
 */
async function linesOf(p: TestPlugin, verb: string, id: string) {
  for (let i = 0;; i++) {
    const lines = (await p.logLines()).filter((l) => l.verb === verb && l.containerId === id);
    if (lines.length || i === 100) return lines;
    await new Promise((r) => setTimeout(r, 50));
  }
}

for (const mode of MODES) {
  Deno.test(`process (${mode}): ADD's and DEL's log lines name the pod and the addresses`, async () => {
    const milo = await startMiloDev({ seed: PLUGIN_SEED });
    const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, agent: mode === "agent" });
    try {
      if (mode === "agent") await p.startAgent();
      const call = (command: string) =>
        p.run({
          command,
          containerId: "c-web0",
          podNamespace: "shop",
          podName: "web-0",
          stdin: p.netConf(),
        });
      const added = await call("ADD");
      assertOk(added);
      const addresses = ipsOf(added).map((i) => i.address);
      assert.equal(addresses.length, 2);
      const [add] = await linesOf(p, "ADD", "c-web0");
      assert.equal(add.pod, "shop/web-0");
      assert.deepEqual(add.addresses, addresses, JSON.stringify(add));
      assert.equal(add.via, mode === "agent" ? "agent" : "direct");
      assertOk(await call("DEL"));
      const [del] = await linesOf(p, "DEL", "c-web0");
      assert.equal(del.pod, "shop/web-0");
      assert.deepEqual(del.addresses, addresses, JSON.stringify(del));
      // The address alone finds both lines.
      const v4 = addresses[0].split("/")[0];
      const text = await Deno.readTextFile(p.logFile);
      assert.equal(text.split("\n").filter((l) => l.includes(`"${v4}/32"`)).length, 2);
    } finally {
      await p.cleanup();
      await milo.stop();
    }
  });
}

/** `milo-ipam show ARGS --output json` and its text, of the install. */
async function show(p: TestPlugin, ...args: string[]) {
  const json = await p.run({ command: "", args: ["show", ...args, "--output", "json"] });
  const text = await p.run({ command: "", args: ["show", ...args] });
  return { code: json.code, report: json.json as unknown as ShowReport, text: text.stdout };
}

Deno.test("process: show --node and --pod with Milo down report the node's records, journal and caches, and what they could not ask", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN });
  try {
    const run = (command: string, id: string, name: string) =>
      p.run({ command, containerId: id, podNamespace: "shop", podName: name, stdin: p.netConf() });
    const web0 = await run("ADD", "c-web0", "web-0");
    assertOk(web0);
    assertOk(await run("ADD", "c-web1", "web-1"));
    await Deno.writeTextFile(
      `${p.resultsDir}/vpc-7b3e-c-web0-eth0`,
      JSON.stringify({ kind: "cniCacheV1", containerId: "c-web0", ifName: "eth0" }),
    );
    await milo.stop();
    // web-1's DEL fails: Milo is down, its release is journaled.
    const del = await run("DEL", "c-web1", "web-1");
    assert.equal(del.json?.code, 11, del.stdout);

    const byNode = await show(p, "--node", "node-a1");
    assert.equal(byNode.code, 1, "Milo was not asked: not a complete answer");
    const r = byNode.report;
    assert.match(r.error?.message ?? "", /Milo unreachable/);
    assert.deepEqual(r.claims, []);
    assert.ok(r.node, JSON.stringify(r));
    assert.match(r.node!.unasked.join("; "), /Milo's claims of node node-a1/);
    const held = r.node!.records.find((x) => x.containerId === "c-web0")!;
    assert.equal(held.pod, "shop/web-0");
    assert.equal(held.state, "held");
    assert.deepEqual(held.addresses, ipsOf(web0).map((i) => i.address));
    assert.deepEqual(held.cachesNaming, [p.resultsDir]);
    assert.equal(held.journaled, false);
    const owed = r.node!.journal.find((x) => x.containerId === "c-web1")!;
    assert.equal(owed.podNamespace, "shop");
    assert.equal(owed.claims.length, 2);
    assert.match(owed.lastError ?? "", /Milo unreachable/);
    assert.match(byNode.text, /\ncould not ask: Milo's claims of node node-a1: Milo unreachable/);
    assert.match(byNode.text, /record held .*shop\/web-0.*10\.40\.0\.\d+\/32/);
    assert.match(byNode.text, /journal owes .*c-web1/);

    const byPod = await show(p, "--pod", "shop/web-0");
    assert.deepEqual(byPod.report.node?.records.map((x) => x.pod), ["shop/web-0"]);
    assert.deepEqual(byPod.report.node?.journal, []);
    // Another node's records are not this node's to show.
    const other = await show(p, "--node", "node-b9");
    assert.deepEqual(other.report.node?.records, []);
    assert.match(other.report.node!.unasked.join("; "), /node node-b9 is not this node/);
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});
