/**
 * `milo-ipam show` and retained addresses through the installed plugin,
 * against milo-dev: a pod of a stable identity deleted leaves its addresses
 * retained; `show ADDRESS` names the retained allocation holding one (one
 * more LIST, only when no claim holds it), `show --retained` lists them with
 * the total, both say when Milo releases one once its lease has elapsed, and
 * the pod's return re-binds them.
 */
import assert from "node:assert/strict";
import { claimName } from "../lib/claims.ts";
import { allocationName } from "../lib/milo_objects.ts";
import type { ShowReport } from "../lib/_show_report.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { assertOk, ipsOf, PLUGIN_SEED, TOKEN } from "../testing/process.ts";

/** The process tests' seed, its pod classes with a 1-hour retention lease. */
function leasedSeed() {
  const seed = structuredClone(PLUGIN_SEED);
  for (const c of seed.projects[0].ipClasses) {
    if (c.metadata.name.startsWith("vpc-pods-")) {
      (c.spec as Record<string, unknown>).retentionLease = "1h";
    }
  }
  return seed;
}

/** `milo-ipam show ARGS` of the install: exit code, stdout, and the report of `--output json`. */
async function show(p: TestPlugin, ...args: string[]) {
  const r = await p.run({ command: "", args: ["show", ...args] });
  return {
    code: r.code,
    stdout: r.stdout,
    stderr: r.stderr,
    report: r.json as unknown as ShowReport,
  };
}

Deno.test("process: show names the retained allocation an address no claim holds, and lists them", async () => {
  const milo = await startMiloDev({ seed: leasedSeed() });
  const p = await installPlugin({
    miloUrl: milo.url,
    token: TOKEN,
    nodeConfig: { allowIdentities: [{ namespace: "db", identity: "pod" }] },
  });
  try {
    const db = p.netConf({ identity: "pod" });
    const add = (containerId: string, podNamespace: string, podName: string, stdin: unknown) =>
      p.run({ command: "ADD", containerId, podNamespace, podName, stdin });
    const added = await add("c-db0", "db", "db-0", db);
    assertOk(added);
    const web = await add("c-web0", "shop", "web-0", p.netConf());
    assertOk(web);
    const [v4, v6] = ipsOf(added).map((i) => i.address);
    const webV4 = ipsOf(web)[0].address.split("/")[0];
    const del = await p.run({
      command: "DEL",
      containerId: "c-db0",
      podNamespace: "db",
      podName: "db-0",
      stdin: db,
    });
    assertOk(del);

    // An address a claim holds: one LIST, of claims.
    await milo.resetStats();
    const held = await show(p, webV4, "--output", "json");
    assert.equal(held.code, 0, held.stderr);
    assert.deepEqual(held.report.claims.map((c) => c.pod), ["shop/web-0"]);
    assert.equal(held.report.requests, 1);
    assert.equal(held.report.retained, undefined);
    assert.equal((await milo.stats()).listsByKind.ipallocations?.lists ?? 0, 0);

    // db-0's IPv4 address: no claim holds it; its retained allocation, by Milo's name.
    const named = {
      cluster: "cluster-a",
      containerId: "c-db0",
      ifname: "eth0",
      identity: "pod" as const,
      network: "vpc-7b3e",
      podNamespace: "db",
      podName: "db-0",
    };
    const alloc = (family: "ipv4" | "ipv6") => allocationName("default", claimName(named, family));
    const byAddr = await show(p, v4.split("/")[0], "--output", "json");
    assert.equal(byAddr.code, 0, byAddr.stderr);
    assert.deepEqual(byAddr.report.claims, []);
    assert.equal(byAddr.report.requests, 2);
    assert.equal((await milo.stats()).listsByKind.ipallocations?.lists, 1);
    const [row] = byAddr.report.retained!;
    assert.deepEqual(
      [byAddr.report.retained!.length, row.allocation, row.address, row.family, row.expiring],
      [1, alloc("ipv4"), v4, "IPv4", false],
    );
    assert.ok(row.retainedSince && row.retainedForS !== undefined && row.retainedForS < 120);
    const text = await show(p, v4.split("/")[0]);
    assert.match(text.stdout, /^no claims for address /);
    assert.match(text.stdout, /1 retained allocation holds it/);
    assert.match(text.stdout, new RegExp(`retained allocation ${alloc("ipv4")}`));
    assert.match(text.stdout, /lease {5}Milo names no end until the lease elapses/);
    assert.match(text.stdout, /re-bound by a new claim of the same name/);
    assert.match(text.stdout, /Milo records no pod namespace, pod or node for it/);

    // Every retained allocation of the namespace: one LIST, by address, the total.
    await milo.resetStats();
    const all = await show(p, "--retained", "--output", "json");
    assert.equal(all.code, 0, all.stderr);
    assert.equal(all.report.requests, 1);
    assert.deepEqual(all.report.retained!.map((r) => [r.address, r.allocation]), [
      [v4, alloc("ipv4")],
      [v6, alloc("ipv6")],
    ]);
    assert.equal((await milo.stats()).listsByKind.ipclaims?.lists ?? 0, 0, "no claims listed");

    // Past its lease (1h) and before its release (lease + grace clamped to the lease): Expiring.
    await milo.sweep("90m");
    const expiring = await show(p, "--retained", "--output", "json");
    for (const r of expiring.report.retained!) {
      assert.equal(r.expiring, true);
      const releaseMs = Date.parse(r.releaseAt ?? "");
      const due = Date.parse(r.retainedSince!) + 2 * 3_600_000;
      assert.ok(Math.abs(releaseMs - due) < 1_000, `${r.releaseAt} vs ${r.retainedSince}`);
    }
    const table = await show(p, "--retained");
    assert.match(table.stdout, /^2 retained allocations in namespace default/);
    assert.match(table.stdout, /total 2 retained \(2 past their lease\)/);
    assert.match(table.stdout, /elapsed: Milo releases it at \d{4}-\d\d-\d\dT[\d:]+Z/);

    // db-0 returns: its claims re-bind both addresses; nothing is retained.
    const back = await add("c-db0-b", "db", "db-0", db);
    assertOk(back);
    assert.deepEqual(ipsOf(back).map((i) => i.address), [v4, v6]);
    const none = await show(p, "--retained", "--output", "json");
    assert.deepEqual(none.report.retained, []);
    assert.match((await show(p, "--retained")).stdout, /^no retained allocations in namespace/);
    const again = await show(p, v4.split("/")[0], "--output", "json");
    assert.deepEqual(again.report.claims.map((c) => c.pod), ["db/db-0"]);
    assert.equal(again.report.requests, 1);
  } finally {
    await p.cleanup();
    await milo.stop();
  }
});
