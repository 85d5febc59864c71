import assert from "node:assert/strict";
import { readNodeConfig } from "../lib/config_file.ts";
import { permissionFlags } from "../lib/permissions.ts";
import { compileArgs, launcherScript } from "../scripts/build.ts";
import { grantsFor } from "../scripts/sandbox.ts";

const NODE = {
  milo: { url: "https://milo.example.com/base", tokenFile: "/etc/milo-ipam/token" },
  cluster: "cluster-a",
  node: "n1",
};

Deno.test("permission flags come from one list and grant only what is named", () => {
  const flags = permissionFlags({
    net: ["milo:443", "milo:443"],
    read: ["/b", "/a"],
    write: ["/log"],
  });
  assert.ok(flags.includes("--allow-net=milo:443"));
  assert.ok(flags.includes("--allow-read=/a,/b"));
  assert.ok(flags.includes("--allow-write=/log"));
  assert.ok(!flags.some((f) => f === "--allow-all" || f === "-A" || f === "--allow-net"));
});

Deno.test("install grants come from the node config, for launcher and binary alike", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/node.json`;
    const write = (v: Record<string, unknown>) => Deno.writeTextFile(path, JSON.stringify(v));
    await write({
      ...NODE,
      milo: { ...NODE.milo, caFile: "/etc/milo-ipam/ca.crt", proxy: "http://proxy.example:3128" },
      log: { file: `${dir}/log/milo-ipam.log` },
      stateDir: `${dir}/state`,
    });
    const g = await grantsFor({ dir: `${dir}/bin`, config: path });
    assert.deepEqual(g.net.sort(), [
      "milo.example.com:443",
      "proxy.example:3128",
      "unix:/run/milo-ipam/agent.sock",
    ]);
    assert.ok(g.read.includes("/etc/milo-ipam/token") && g.read.includes("/etc/milo-ipam/ca.crt"));
    assert.ok(g.read.includes(path));
    assert.ok(g.read.includes(`${dir}/bin/.milo-ipam`), "the bundle's chunks load on demand");
    for (const f of ["/var/lib/cni/results", "/var/lib/cni/multus/results", "/etc/machine-id"]) {
      assert.ok(g.read.includes(f), `reads ${f}: the result caches and the host identity`);
    }
    assert.deepEqual(g.write.sort(), [
      "/run/milo-ipam",
      "/run/milo-ipam/agent.sock",
      `${dir}/log/milo-ipam.log`,
      `${dir}/log/milo-ipam.log.1`, // the rotated log
      `${dir}/state`,
    ]);
    assert.deepEqual(g.nonCniDirs, ["/run/milo-ipam"], "the exec'd plugin keeps the socket alone");
    const flags = permissionFlags(g);
    assert.ok(flags.some((f) => f.startsWith("--allow-env=") && f.includes("HTTPS_PROXY")));
    const script = launcherScript("/opt/deno", "/opt/milo-ipam.js", flags);
    for (const f of flags) assert.ok(script.includes(`'${f}'`), f);
    assert.match(script, /'run' '--no-config'.*'\/opt\/milo-ipam\.js' "\$@"/);
    // The compiled form: the same flags, and no code cache in the shared temporary directory.
    const compiled = compileArgs("main.ts", "chunks", flags, "/out/milo-ipam");
    const runtime = script.match(/'run' (.*) '\/opt\/milo-ipam\.js'/)![1].split(" ")
      .map((f) => f.slice(1, -1)).filter((f) =>
        !["--no-lock", "--no-remote", "--no-npm"].includes(f)
      );
    for (const f of runtime) assert.ok(compiled.includes(f), f);
    assert.ok(compiled.includes("--no-code-cache"));
    await write({
      ...NODE,
      milo: { ...NODE.milo, tokenFile: `${dir}/state/token` },
      stateDir: `${dir}/state`,
    });
    await assert.rejects(grantsFor({ dir, config: path }), /token.*inside/);
    await write({
      ...NODE,
      agent: { socket: `${dir}/state/agent.sock` },
      stateDir: `${dir}/state`,
    });
    assert.deepEqual((await grantsFor({ dir, config: path })).nonCniDirs, [], "stateDir stays");
    await write({ ...NODE, stateDir: `${dir}/bin` });
    await assert.rejects(grantsFor({ dir: `${dir}/bin`, config: path }), /\.milo-ipam lies inside/);
    await write({ ...NODE, log: { file: NODE.milo.tokenFile } });
    await assert.rejects(grantsFor({ dir, config: path }), /inside/);
    await assert.rejects(grantsFor({ dir, config: `${dir}/absent.json` }), /cannot read/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("install without a node config named: the default, else the legacy path with a warning; grants on both, and only then", async () => {
  const { INSTALL_GLOBAL } = await import("../lib/paths.ts");
  const g = globalThis as Record<string, unknown>;
  const dir = await Deno.makeTempDir();
  try {
    const paths = { default: `${dir}/etc/node.json`, legacy: `${dir}/net.d/milo-ipam.conf` };
    await Deno.mkdir(`${dir}/net.d`);
    await Deno.writeTextFile(paths.legacy, JSON.stringify(NODE));
    const reads = async (config?: string) =>
      (await grantsFor({ dir: `${dir}/bin`, config, nodeConfigPaths: paths })).read;
    const unnamed = await reads();
    assert.ok(unnamed.includes(paths.default) && unnamed.includes(paths.legacy));
    const named = await reads(paths.legacy);
    assert.ok(named.includes(paths.legacy) && !named.includes(paths.default));
    await assert.rejects(
      grantsFor({
        dir: `${dir}/bin`,
        nodeConfigPaths: { default: `${dir}/none.json`, legacy: `${dir}/none.conf` },
      }),
      /neither .*none\.json nor .*none\.conf/,
    );
    await Deno.writeTextFile(paths.legacy, JSON.stringify({ ...NODE, stateDir: `${dir}/etc` }));
    await assert.rejects(grantsFor({ dir: `${dir}/bin`, nodeConfigPaths: paths }), /inside/);
    await Deno.writeTextFile(paths.legacy, JSON.stringify(NODE));

    const env = () => undefined;
    g[INSTALL_GLOBAL] = { nodeConfig: paths.default, legacyNodeConfig: paths.legacy };
    const old = await readNodeConfig(env);
    assert.equal(old.path, paths.legacy);
    assert.ok(old.warning!.includes(paths.legacy) && /runtimes scan/.test(old.warning!));
    await Deno.mkdir(`${dir}/etc`);
    await Deno.writeTextFile(paths.default, JSON.stringify({ ...NODE, cluster: "new" }));
    const now = await readNodeConfig(env);
    assert.equal(now.cluster, "new");
    assert.equal(now.warning, undefined);
    g[INSTALL_GLOBAL] = { nodeConfig: `${dir}/etc/absent.json` };
    await assert.rejects(readNodeConfig(env), /no node config/, "no fallback for a named file");
    g[INSTALL_GLOBAL] = { nodeConfig: paths.legacy, nodeConfigNetDir: `${dir}/net.d` };
    const inNetDir = await readNodeConfig(env);
    assert.equal(inNetDir.path, paths.legacy);
    assert.match(inNetDir.warning!, /lies in .*net\.d, the directory runtimes scan/);
  } finally {
    delete g[INSTALL_GLOBAL];
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("compileFailure() says why deno compile was unavailable: the root cause and what it fetched", async () => {
  const { compileFailure } = await import("../scripts/install.ts");
  const output = [
    "Compile c.ts to c.bin",
    "Download https://dl.deno.land/release/v2.9.6/denort-x86_64-unknown-linux-gnu.zip",
    "\x1b[1m\x1b[31merror\x1b[0m: Writing deno compile executable to temporary file '/t/c.tmp'",
    "",
    "Caused by:",
    "    0: Setting up base binary.",
    "    1: error sending request for url (https://dl.deno.land/release/v2.9.6/denort-x86_64-" +
    "unknown-linux-gnu.zip): client error (Connect): dns error: failed to lookup address information",
    "    2: client error (Connect)",
    "    3: failed to lookup address information: Name or service not known",
    "",
    "Stack backtrace:",
    "   0: <unknown>",
  ].join("\n");
  assert.equal(
    compileFailure(output),
    "error: Writing deno compile executable to temporary file '/t/c.tmp': Setting up base " +
      "binary: failed to lookup address information: Name or service not known (fetching " +
      "https://dl.deno.land/release/v2.9.6/denort-x86_64-unknown-linux-gnu.zip); set DENORT_BIN " +
      "to a denort of this Deno release",
  );
  assert.equal(compileFailure("error: something else"), "error: something else");
});
