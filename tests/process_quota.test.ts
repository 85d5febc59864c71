/**
 * Process test: the installed plugin exec'd as a runtime runs it, against
 * milo-dev enforcing Milo's quota (as Milo's IPAM server does by default):
 * an ADD of a project at its `ipclaims-per-project` quota fails with code
 * 100, and what an operator reads (the CNI error, the log line) names the
 * quota and what to do, not the token.
 */
import assert from "node:assert/strict";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin } from "../testing/plugin.ts";
import { assertCniError, assertOk, PLUGIN_SEED, TOKEN } from "../testing/process.ts";

Deno.test("an ADD of a project at its ipclaims-per-project quota: 100, naming Milo's quota and what to do", async () => {
  const seed = structuredClone(PLUGIN_SEED);
  seed.projects[0].quota = 3; // one dual-stack pod, and one claim more
  const milo = await startMiloDev({ seed, tls: true });
  const plugin = await installPlugin({ miloUrl: milo.url, token: TOKEN, caFile: milo.caFile });
  try {
    const stdin = plugin.netConf();
    const add = (containerId: string, podName: string) =>
      plugin.run({ command: "ADD", stdin, containerId, podName });
    const first = await add("pod-1", "web-1");
    assertOk(first);
    const second = await add("pod-2", "web-2");
    assertCniError(second, 100);
    const error = second.json as { msg: string; details: string };
    assert.equal(
      error.msg,
      "Milo's quota refused the claim: the project holds all the IPClaims its " +
        "ipclaims-per-project quota allows",
    );
    assert.match(
      error.details,
      /^POST \/apis\/ipam\.miloapis\.com\/v1alpha1\/namespaces\/default\/ipclaims: HTTP 403 Forbidden \(quota: denied\); raise the project's ipclaims-per-project quota in Milo above the claims its clusters hold \(one per pod and family, and those not yet released: docs\/quota\.md\), or delete claims it no longer needs/,
    );
    assert.doesNotMatch(second.stdout, /token's project|check milo\.tokenFile/);
    // The family Milo granted is released with the ADD: the project holds the first pod's two.
    const held = await milo.listClaims("tenant-a");
    assert.deepEqual(
      held.map((c) => c.metadata.annotations?.["milo-ipam.io/container-id"]).sort(),
      ["pod-1", "pod-1"],
    );
    const line = (await plugin.logLines()).find((l) => l.containerId === "pod-2");
    assert.equal(line?.code, 100);
    assert.equal(line?.msg, error.msg);
    assert.ok((await milo.stats()).quotaRefused.denied >= 1);
  } finally {
    await plugin.cleanup();
    await milo.stop();
  }
});
