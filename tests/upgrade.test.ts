/**
 * An upgrade and a rollback of a node with live leases, as the DaemonSet
 * rolls one: the agent stopped, another release installed over the same
 * directory with the same node config and state, the agent started again.
 * The other release is this source tree with another RELEASE, bundled apart
 * (as its image would carry it). Every live pod keeps its address, a release
 * the journal owed before the upgrade is made after it, and Milo ends with 0
 * duplicated, 0 leaked and 0 missing leases. Node state in a newer format
 * than a release reads is refused by it, naming the release that wrote it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { moduleBundleArgs } from "../scripts/build.ts";
import { install } from "../scripts/install.ts";
import { KEYS } from "../lib/claims.ts";
import { RELEASE } from "../lib/version.ts";
import { STATE_FORMAT, STATE_FORMAT_FILE } from "../lib/state_format.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { ipsOf, PLUGIN_SEED, TOKEN } from "../testing/process.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const NEXT = `${RELEASE}-next`;

/**
 * This tree's plugin bundled as the build bundles it, with RELEASE = `release`,
 * into a temp dir: another release's bundle.
 */
async function bundleAs(release: string): Promise<string> {
  const src = await Deno.makeTempDir({ prefix: "milo-ipam-release-" });
  for (const f of ["main.ts", "deno.json", "deno.lock"]) {
    await Deno.copyFile(join(ROOT, f), join(src, f));
  }
  await new Deno.Command("cp", { args: ["-r", join(ROOT, "lib"), src] }).output();
  const version = join(src, "lib/version.ts");
  const text = await Deno.readTextFile(version);
  await Deno.writeTextFile(
    version,
    text.replace(`export const RELEASE = "${RELEASE}";`, `export const RELEASE = "${release}";`),
  );
  const out = join(src, "bundle");
  const r = await new Deno.Command(Deno.execPath(), {
    args: moduleBundleArgs(out),
    cwd: src,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(r.success, new TextDecoder().decode(r.stderr));
  return out;
}

async function versionOf(p: TestPlugin): Promise<string> {
  const out = await new Deno.Command(p.installed.path, { args: ["version"], stdout: "piped" })
    .output();
  return new TextDecoder().decode(out.stdout);
}

Deno.test("upgrade: a node with live leases upgraded and rolled back: 0 dup, 0 leaked, 0 missing", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  const next = await bundleAs(NEXT);
  const p = await installPlugin({ miloUrl: milo.url, token: TOKEN, agent: true });
  try {
    const add = async (id: string) => {
      const r = await p.run({ command: "ADD", containerId: id, podName: id, stdin: p.netConf() });
      assert.equal(r.code, 0, `ADD ${id}: ${r.stdout}`);
      return ipsOf(r).map((i) => i.address).sort();
    };
    const del = (id: string) =>
      p.run({ command: "DEL", containerId: id, podName: id, stdin: p.netConf() });
    const check = async (id: string, ips: string[]) => {
      const prev = { cniVersion: "1.1.0", ips: ips.map((address) => ({ address })) };
      const r = await p.run({
        command: "CHECK",
        containerId: id,
        podName: id,
        stdin: p.netConf({}, { prevResult: prev }),
      });
      assert.equal(r.code, 0, `CHECK ${id}: ${r.stdout}`);
    };
    /** Milo's leases against the live pods: each pod's two, nothing else, no address twice. */
    const ledger = async (live: Map<string, string[]>, when: string) => {
      const claims = await milo.listClaims("tenant-a");
      const addresses = claims.map((c) => c.status?.allocatedCIDR);
      assert.equal(new Set(addresses).size, addresses.length, `${when}: 0 duplicated`);
      const held = new Map<string, string[]>();
      for (const c of claims) {
        const id = c.metadata.annotations?.[KEYS.containerId] ?? "?";
        held.set(id, [...(held.get(id) ?? []), c.status?.allocatedCIDR ?? ""].sort());
      }
      for (const id of held.keys()) assert.ok(live.has(id), `${when}: ${id} leaked`);
      for (const [id, ips] of live) {
        const mine = (held.get(id) ?? []).map((a) => a.replace(/\/\d+$/, ""));
        assert.deepEqual(mine, ips.map((a) => a.replace(/\/\d+$/, "")), `${when}: ${id} kept`);
      }
    };
    const restartAs = async (bundleDir?: string) => {
      await p.stopAgent();
      await install({ dir: `${p.dir}/bin`, config: p.nodeConfig, bundleDir, quiet: true });
      await p.startAgent();
    };

    await p.startAgent();
    assert.match(await versionOf(p), new RegExp(`^milo-ipam ${RELEASE} `));
    const live = new Map<string, string[]>();
    for (const id of ["p1", "p2", "p3", "p4", "p5"]) live.set(id, await add(id));
    // p5's DEL fails while Milo does: its release is owed in the journal across the upgrade.
    await milo.setFaults({ errorRate: 1, errorStatuses: [503], methods: ["DELETE"] });
    assert.equal((await del("p5")).code, 1);
    await milo.clearFaults();
    live.delete("p5");
    const owed = [...Deno.readDirSync(`${p.stateDir}/journal`)].filter((e) =>
      e.name.endsWith(".json")
    );
    assert.equal(owed.length, 1, "one release owed");
    const format = JSON.parse(await Deno.readTextFile(`${p.stateDir}/${STATE_FORMAT_FILE}`));
    assert.deepEqual(format, { format: STATE_FORMAT, release: RELEASE });

    // Upgrade.
    await restartAs(next);
    assert.match(await versionOf(p), new RegExp(`^milo-ipam ${NEXT} `));
    for (const [id, ips] of live) await check(id, ips);
    live.set("x", await add("x"));
    // The release owed before the upgrade is made after it.
    const reconcile = await p.run({ command: "", args: ["reconcile"] });
    assert.equal(reconcile.code, 0, reconcile.stdout);
    const left = [...Deno.readDirSync(`${p.stateDir}/journal`)].filter((e) =>
      e.name.endsWith(".json")
    );
    assert.deepEqual(left, [], "the journal owes nothing");
    await ledger(live, "after the upgrade");

    // Rollback.
    await restartAs(undefined);
    assert.match(await versionOf(p), new RegExp(`^milo-ipam ${RELEASE} `));
    for (const [id, ips] of live) await check(id, ips);
    assert.equal((await del("p1")).code, 0);
    live.delete("p1");
    live.set("p6", await add("p6"));
    await ledger(live, "after the rollback");

    // State of a newer format: this release refuses it, the agent does not start, nothing moves.
    await p.stopAgent();
    await Deno.writeTextFile(
      `${p.stateDir}/${STATE_FORMAT_FILE}`,
      JSON.stringify({ format: STATE_FORMAT + 1, release: "9.0.0" }),
    );
    const agent = await new Deno.Command(p.installed.path, {
      args: ["agent"],
      env: { PATH: "/usr/bin:/bin" },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(agent.code, 1);
    assert.match(new TextDecoder().decode(agent.stdout), /written by milo-ipam 9\.0\.0/);
    const refused = await del("p2");
    assert.equal(refused.code, 1);
    assert.equal(refused.json?.code, 7);
    assert.match(
      String(refused.json?.msg),
      new RegExp(
        `format ${STATE_FORMAT + 1}, written by milo-ipam 9\\.0\\.0; this release \\(${RELEASE}\\)`,
      ),
    );
    await ledger(live, "refused: nothing released");
    await Deno.writeTextFile(
      `${p.stateDir}/${STATE_FORMAT_FILE}`,
      JSON.stringify({ format: STATE_FORMAT, release: RELEASE }),
    );

    for (const id of [...live.keys()]) {
      assert.equal((await del(id)).code, 0, `DEL ${id}`);
      live.delete(id);
    }
    await ledger(live, "every pod deleted");
  } finally {
    await p.cleanup();
    await milo.stop();
    await Deno.remove(join(next, ".."), { recursive: true });
  }
});
