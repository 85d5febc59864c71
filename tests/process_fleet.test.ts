/**
 * What one node costs Milo, through the installed plugin and its agent: a
 * node without a record of its claims lists them once, at a random moment of
 * its first reconcile interval; an idle node sends Milo nothing after that.
 */
import assert from "node:assert/strict";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin } from "../testing/plugin.ts";
import { assertOk, PLUGIN_SEED, TOKEN, until } from "../testing/process.ts";

const INTERVAL_S = 10;

Deno.test("fleet: an idle agent never lists Milo and reads one claim a run; without a record it lists once", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    agent: true,
  });
  try {
    await p.setNode({ agent: { socket: p.socket, reconcileIntervalS: INTERVAL_S } });
    const conf = p.netConf();
    for (const cid of ["idle-1", "idle-2"]) {
      assertOk(await p.run({ command: "ADD", containerId: cid, stdin: conf }));
      const entry = {
        kind: "cniCacheV1",
        containerId: cid,
        ifName: "eth0",
        networkName: "vpc-7b3e",
      };
      await Deno.writeTextFile(`${p.resultsDir}/vpc-7b3e-${cid}-eth0`, JSON.stringify(entry));
    }
    const claimLists = async () => (await milo.stats()).listsByKind?.ipclaims?.lists ?? 0;
    await milo.resetStats();
    await p.startAgent();
    await until(
      async () => await claimLists() >= 1,
      "the one LIST of a node without a record",
      (INTERVAL_S + 2) * 1000,
    );
    await until(
      async () => (await p.logLines()).some((l) => l.verb === "RECONCILE"),
      "the agent's reconcile logged",
    );
    assert.equal(await claimLists(), 1, "one LIST");
    await milo.resetStats();
    const before = (await p.logLines()).filter((l) => l.verb === "RECONCILE").length;
    await new Promise((r) => setTimeout(r, (INTERVAL_S + 1.5) * 1000));
    const s = await milo.stats();
    const runs = (await p.logLines()).filter((l) => l.verb === "RECONCILE").length - before;
    assert.ok(runs >= 1, `the timer ran (${runs} reconcile run(s))`);
    // Each run reads one live claim by name (its check that Milo still has the node's leases),
    // and lists nothing.
    assert.equal(await claimLists(), 0, "no LIST");
    assert.ok(
      s.total <= runs + 1 && (s.byMethod.GET ?? 0) === s.total,
      `an idle node sent ${s.total} request(s) in ${runs} run(s): ${JSON.stringify(s.byMethod)}`,
    );
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});
