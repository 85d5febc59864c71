import assert from "node:assert/strict";
import { parseNodeConfig, validateNodeConfig, withNodeName } from "../lib/config.ts";
import { readNodeConfig } from "../lib/config_file.ts";
import { parseNetConf } from "../lib/netconf.ts";
import { CniError } from "../lib/errors.ts";

const NODE = {
  milo: { url: "https://milo.example.com/base", tokenFile: "/etc/milo-ipam/token" },
  cluster: "cluster-a",
  node: "n1",
};
const node = (over: Record<string, unknown> = {}) =>
  parseNodeConfig({ ...NODE, ...over }, "/etc/milo-ipam/node.json");
const ipam = { type: "milo-ipam", classes: { ipv4: "vpc-pods-ipv4" } };
const conf = (over: Record<string, unknown> = {}, top: Record<string, unknown> = {}) =>
  JSON.stringify({ cniVersion: "1.0.0", name: "vpc", ipam: { ...ipam, ...over }, ...top });

function throwsCni(fn: () => unknown, code: number, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof CniError);
    assert.equal(e.code, code);
    assert.match(`${e.message} ${e.details}`, pattern);
    return true;
  });
}

Deno.test("config: node settings and defaults; the ipam block wins for per-network keys", () => {
  const n = node({
    milo: { ...NODE.milo, namespace: "tenant-ns" },
    classes: { ipv4: "node-default-v4", ipv6: "node-default-v6" },
    timeouts: { requestMs: 1500, totalMs: 8000 },
  });
  const c = parseNetConf(conf({ timeouts: { requestMs: 1200 } }), n, "ADD");
  assert.equal(n.milo.namespace, "tenant-ns");
  assert.equal(n.node, "n1");
  assert.equal(n.log.file, "/var/log/milo-ipam/milo-ipam.log");
  assert.equal(n.stateDir, "/var/lib/milo-ipam");
  assert.deepEqual(c.network.classes, { ipv4: "vpc-pods-ipv4", ipv6: "node-default-v6" });
  assert.deepEqual(c.network.timeouts, { requestMs: 1200, totalMs: 8000 });
  assert.equal(c.network.reclaimPolicy, "Delete");
});

Deno.test("config: a network config may not set node settings, unless equal to the node's", () => {
  const n = node();
  for (
    const [over, key] of [
      [{ milo: { url: "https://evil.example.com" } }, "milo"],
      [{ milo: { tokenFile: "/tmp/t" } }, "milo"],
      [{ log: { file: "/etc/milo-ipam/token" } }, "log"],
      [{ node: "other" }, "node"],
      [{ cluster: "cluster-b" }, "cluster"],
      [{ stateDir: "/tmp" }, "stateDir"],
      [{ resultsDir: "/tmp" }, "resultsDir"],
      [{ resultsDirs: ["/tmp"] }, "resultsDirs"],
      [{ hostIdFile: "/tmp/id" }, "hostIdFile"],
      [{ milo: { namespace: "kube-system" } }, "milo"],
      [{ allowIdentities: [{ namespace: "evil" }] }, "allowIdentities"],
      [{ allowScopes: [{ namespace: "evil", scope: {} }] }, "allowScopes"],
      [{ allowRequestedAddresses: true }, "allowRequestedAddresses"],
    ] as const
  ) {
    throwsCni(() => parseNetConf(conf(over), n, "ADD"), 7, new RegExp(`ipam\\.${key}.*node`));
  }
  const same = parseNetConf(conf({ milo: { url: NODE.milo.url }, cluster: "cluster-a" }), n, "DEL");
  assert.equal(same.network.classes.ipv4, "vpc-pods-ipv4");
});

Deno.test("config: Retain is refused with code 7 naming the key, from the network or the node config", () => {
  const n = node();
  throwsCni(
    () => parseNetConf(conf({ reclaimPolicy: "Retain" }), n, "ADD"),
    7,
    /ipam\.reclaimPolicy: Retain is not allowed.*set by the network config/,
  );
  throwsCni(
    () => parseNetConf(conf({}), node({ reclaimPolicy: "Retain" }), "ADD"),
    7,
    /ipam\.reclaimPolicy: Retain.*set by the node config/,
  );
  const c = parseNetConf(conf({ reclaimPolicy: "Delete" }), n, "ADD");
  assert.equal(c.network.reclaimPolicy, "Delete");
});

Deno.test("config: resultsDirs, or resultsDir beside Multus's cache, or both defaults", () => {
  assert.deepEqual(node().resultsDirs, ["/var/lib/cni/results", "/var/lib/cni/multus/results"]);
  assert.deepEqual(node({ resultsDir: "/run/cni/results" }).resultsDirs, [
    "/run/cni/results",
    "/var/lib/cni/multus/results",
  ]);
  assert.deepEqual(node({ resultsDirs: ["/a", "/b", "/c"] }).resultsDirs, ["/a", "/b", "/c"]);
  throwsCni(() => node({ resultsDir: "/a", resultsDirs: ["/b"] }), 7, /resultsDirs or resultsDir/);
  throwsCni(() => node({ resultsDirs: [] }), 7, /resultsDirs: must name at least one/);
  throwsCni(() => node({ resultsDirs: ["rel"] }), 7, /resultsDirs\.0: must be an absolute path/);
  assert.equal(node().hostIdFile, "/etc/machine-id");
});

Deno.test("config: a network's timeouts stay within the node's", () => {
  // The node lets its networks be as fast as 300 ms and 1 s (its floor).
  const n = node({
    timeouts: { requestMs: 1000, totalMs: 5000, minRequestMs: 300, minTotalMs: 1000 },
  });
  throwsCni(() => parseNetConf(conf({ timeouts: { totalMs: 9000 } }), n, "ADD"), 7, /at most 5000/);
  throwsCni(() => parseNetConf(conf({ timeouts: { requestMs: 2000 } }), n, "ADD"), 7, /requestMs/);
  const c = parseNetConf(conf({ timeouts: { requestMs: 300, totalMs: 1000 } }), n, "ADD");
  assert.deepEqual(c.network.timeouts, { requestMs: 300, totalMs: 1000 });
});

Deno.test("config: a network's timeouts have the node's floor: 1 s and 2 s, or the node's own if lower", () => {
  const n = node();
  throwsCni(
    () => parseNetConf(conf({ timeouts: { requestMs: 50 } }), n, "ADD"),
    7,
    /field ipam\.timeouts\.requestMs: must be at least 1000, the node's floor.*timeouts\.minRequestMs in the node config/,
  );
  throwsCni(
    () => parseNetConf(conf({ timeouts: { totalMs: 1500 } }), n, "ADD"),
    7,
    /ipam\.timeouts\.totalMs: must be at least 2000.*timeouts\.minTotalMs/,
  );
  // A network config cannot lower the floor itself.
  throwsCni(
    () => parseNetConf(conf({ timeouts: { requestMs: 50, minRequestMs: 50 } }), n, "ADD"),
    7,
    /ipam\.timeouts/,
  );
  // Any other verb is held to the floor: a DEL releases what an ADD made before it was set.
  for (const verb of ["DEL", "CHECK"] as const) {
    const held = parseNetConf(conf({ timeouts: { requestMs: 50, totalMs: 100 } }), n, verb);
    assert.deepEqual(held.network.timeouts, { requestMs: 1000, totalMs: 2000 });
  }
  const ok = parseNetConf(conf({ timeouts: { requestMs: 1000, totalMs: 2000 } }), n, "ADD");
  assert.deepEqual(ok.network.timeouts, { requestMs: 1000, totalMs: 2000 });
  // A node whose own limits are lower holds its networks to those.
  const fast = node({ timeouts: { requestMs: 500, totalMs: 1500 } });
  assert.deepEqual(parseNetConf(conf(), fast, "ADD").network.timeouts, {
    requestMs: 500,
    totalMs: 1500,
  });
  throwsCni(() => parseNetConf(conf({ timeouts: { requestMs: 400 } }), fast, "ADD"), 7, /500/);
  // Root may lower the floor for its networks, and never above its own limits.
  const lowered = node({
    timeouts: { requestMs: 2000, totalMs: 10000, minRequestMs: 50, minTotalMs: 100 },
  });
  const c = parseNetConf(conf({ timeouts: { requestMs: 50, totalMs: 100 } }), lowered, "ADD");
  assert.deepEqual(c.network.timeouts, { requestMs: 50, totalMs: 100 });
  throwsCni(
    () => node({ timeouts: { requestMs: 1000, totalMs: 4000, minRequestMs: 2000 } }),
    7,
    /field timeouts: minRequestMs and minTotalMs must not exceed/,
  );
});

/** Config errors: what is wrong, the code, and the field the message names. */
const CONFIG_ERRORS: [string, () => unknown, number, RegExp][] = [
  ["no class", () => parseNetConf(conf({ classes: {} }), node(), "ADD"), 7, /ipam\.classes/],
  [
    "a gateway of the other family",
    () => parseNetConf(conf({ gateways: { ipv4: "fe80::1" } }), node(), "ADD"),
    7,
    /gateways\.ipv4/,
  ],
  [
    "an empty network name",
    () => parseNetConf(conf({}, { name: "" }), node(), "ADD"),
    7,
    /field name/,
  ],
  [
    "a vpc too long",
    () => parseNetConf(conf({}, { vpc: "v".repeat(300) }), node(), "ADD"),
    7,
    /field vpc/,
  ],
  ["stdin not an object", () => parseNetConf("[1]", node(), "ADD"), 6, /JSON object/],
  ["stdin not JSON", () => parseNetConf("{", node(), "ADD"), 6, /not valid JSON/],
  ["a cluster not a string", () => node({ cluster: 5 }), 7, /field cluster/],
  [
    "plain http beyond loopback",
    () => node({ milo: { ...NODE.milo, url: "http://milo.example.com" } }),
    7,
    /milo\.url/,
  ],
  [
    "a namespace not DNS-1123",
    () => node({ milo: { ...NODE.milo, namespace: "../x" } }),
    7,
    /DNS-1123/,
  ],
  [
    "a request timeout above the total",
    () => node({ timeouts: { requestMs: 9000, totalMs: 1000 } }),
    7,
    /requestMs/,
  ],
  [
    "an identity grant of nothing",
    () => node({ allowIdentities: [{}] }),
    7,
    /allowIdentities.*a namespace, a network or an identity/,
  ],
  [
    "an identity grant's namespace not DNS-1123",
    () => node({ allowIdentities: [{ namespace: "A_b" }] }),
    7,
    /DNS-1123/,
  ],
  [
    "an identity grant's key misspelt",
    () => node({ allowIdentities: [{ namespce: "db", identity: "pod" }] }),
    7,
    /field allowIdentities\.0: unknown key namespce; known keys: namespace, network, identity/,
  ],
  [
    "an identity grant of an unknown identity",
    () => node({ allowIdentities: [{ network: "n", identity: "x" }] }),
    7,
    /field allowIdentities\.0\.identity: must be one of "pod", "network"/,
  ],
  ["a type", () => node({ cluster: 5 }), 7, /field cluster: must be a string/],
  ["an array", () => node({ allowIdentities: "x" }), 7, /field allowIdentities: must be an array/],
  ["an object", () => node({ timeouts: 5 }), 7, /field timeouts: must be an object/],
  [
    "a level",
    () => node({ log: { level: "loud" } }),
    7,
    /field log\.level: must be one of "debug", "info", "warn", "error", "off"/,
  ],
  [
    "a network's reclaim policy",
    () => parseNetConf(conf({ reclaimPolicy: "Keep" }), node(), "ADD"),
    7,
    /field ipam\.reclaimPolicy: must be one of "Delete", "Retain"/,
  ],
];

Deno.test("config: errors name the field", async (t) => {
  for (const [what, fn, code, pattern] of CONFIG_ERRORS) {
    await t.step(what, () => throwsCni(fn, code, pattern));
  }
});

Deno.test("config: the old node config path is read, with a warning, when the default is absent", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const paths = { path: `${dir}/etc/milo-ipam/node.json`, legacy: `${dir}/net.d/milo-ipam.conf` };
    const env = () => undefined;
    await assert.rejects(readNodeConfig(env, paths), /no node config/);
    await Deno.mkdir(`${dir}/net.d`);
    await Deno.writeTextFile(paths.legacy, JSON.stringify(NODE));
    const old = await readNodeConfig(env, paths);
    assert.equal(old.path, paths.legacy);
    assert.match(old.warning!, /runtimes scan/);
    await Deno.mkdir(`${dir}/etc/milo-ipam`, { recursive: true });
    await Deno.writeTextFile(paths.path, JSON.stringify({ ...NODE, cluster: "new" }));
    const now = await readNodeConfig(env, paths);
    assert.equal(now.cluster, "new");
    assert.equal(now.warning, undefined);
    const named = await readNodeConfig(
      (k) => k === "MILO_IPAM_CONFIG" ? paths.legacy : undefined,
      paths,
    );
    assert.equal(named.cluster, "cluster-a");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("config: a file read again applies its change, its node name fallback and errors anew", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/node.json`;
    const env = (name: string) => ({ MILO_IPAM_CONFIG: path, NODE_NAME: "from-env" })[name];
    const { node: _node, ...unnamed } = NODE;
    await Deno.writeTextFile(path, JSON.stringify(unnamed));
    const first = await readNodeConfig(env);
    assert.equal(first.node, "from-env");
    const other = await readNodeConfig((n) => n === "NODE_NAME" ? "other" : env(n));
    assert.equal(other.node, "other", "the fallback is resolved on every read");
    assert.equal(first.node, "from-env", "an earlier answer is not changed");
    await Deno.writeTextFile(path, JSON.stringify({ ...unnamed, cluster: "cluster-b" }));
    assert.equal((await readNodeConfig(env)).cluster, "cluster-b");
    await Deno.writeTextFile(path, JSON.stringify({ ...unnamed, cluster: 5 }));
    await assert.rejects(readNodeConfig(env), /field cluster/);
    await assert.rejects(readNodeConfig(env), /field cluster/, "an invalid file stays an error");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("config: the node name is the API's: the config's or NODE_NAME as given, else the hostname as the kubelet registers it", () => {
  const { node: _node, ...unnamed } = NODE;
  const path = "/etc/milo-ipam/node.json";
  const none = () => undefined;
  // k8s.io/component-helpers node/util/hostname.go GetHostname: trimmed, lowercased.
  const named = (env: (n: string) => string | undefined, host: string, v: object = unnamed) =>
    withNodeName(validateNodeConfig(v, path), env, () => host).node;
  assert.equal(named(none, " Node-17.Example.COM\n"), "node-17.example.com");
  assert.equal(named((n) => n === "NODE_NAME" ? "Node-17" : undefined, "x"), "Node-17");
  assert.equal(named(none, "HOST", NODE), "n1");
  throwsCni(() => named(none, "  "), 7, /hostname is empty.*set node in the node config/);
});

Deno.test("config: plain http is accepted for loopback only", () => {
  for (const url of ["http://127.0.0.1:8080", "http://[::1]:80", "http://localhost:1"]) {
    assert.equal(node({ milo: { ...NODE.milo, url } }).milo.url, url);
  }
});

Deno.test("config: GC needs the attachment list (or its older name); CHECK parses prevResult", () => {
  const n = node();
  throwsCni(() => parseNetConf(conf({}, { cniVersion: "1.1.0" }), n, "GC"), 7, /valid-attachments/);
  throwsCni(
    () =>
      parseNetConf(conf({}, { cniVersion: "1.1.0", "cni.dev/valid-attachments": null }), n, "GC"),
    7,
    /valid-attachments/,
  );
  const old = parseNetConf(
    conf({}, { cniVersion: "1.1.0", "cni.dev/attachments": [{ containerID: "c", ifname: "e" }] }),
    n,
    "GC",
  );
  assert.equal(old.validAttachments?.size, 1);
  throwsCni(() => parseNetConf(conf({}, { cniVersion: "1.0.0" }), n, "GC"), 1, /GC/);
  const chk = parseNetConf(
    conf({}, { prevResult: { ips: [{ address: "10.0.0.1/32" }] } }),
    n,
    "CHECK",
  );
  assert.equal(chk.prevResult?.get("ipv4")?.[0].ip, "10.0.0.1");
});

Deno.test("config: a control or format character in the network name is refused at ADD, taken by DEL", () => {
  const n = node();
  const hostile = conf({}, { name: "net\r\n  holder   pod shop/web-0" });
  throwsCni(() => parseNetConf(hostile, n, "ADD"), 7, /field name: has a control/);
  assert.equal(parseNetConf(hostile, n, "DEL").name, "net\r\n  holder   pod shop/web-0");
});
