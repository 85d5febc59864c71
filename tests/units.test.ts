import assert from "node:assert/strict";
import { claimName, KEYS, labelValue, ownership } from "../lib/claims.ts";
import { encodeResult, parseCniArgs, readCniEnv, requireVersion } from "../lib/cni.ts";
import { parseNodeConfig, validateNodeConfig, withNodeName } from "../lib/config.ts";
import { readNodeConfig } from "../lib/config_file.ts";
import { parseNetConf } from "../lib/netconf.ts";
import { CniError } from "../lib/errors.ts";
import { hostId } from "../lib/host.ts";
import { parseCidr } from "../lib/ip.ts";
import { permissionFlags } from "../lib/permissions.ts";
import { sha256Hex } from "../lib/sha256.ts";
import { compileArgs, launcherScript } from "../scripts/build.ts";
import { grantsFor } from "../scripts/sandbox.ts";

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

Deno.test("host identity: the machine-id, else one made once in the state dir; a malformed one is 7", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const id = (file: string, stateDir = `${dir}/state`) =>
      hostId({ hostIdFile: `${dir}/${file}`, stateDir });
    await Deno.writeTextFile(`${dir}/machine-id`, "3d1219c7c4c5404aaa1f6d2a48adfda4\n");
    assert.equal(id("machine-id"), "3d1219c7c4c5404aaa1f6d2a48adfda4");
    const made = id("absent");
    assert.match(made, /^[0-9a-f]{32}$/);
    assert.equal(await Deno.readTextFile(`${dir}/state/host-id`), made + "\n");
    assert.equal(id("machine-id"), "3d1219c7c4c5404aaa1f6d2a48adfda4");
    assert.equal(id("absent"), made, "made once, read after");
    await Deno.writeTextFile(`${dir}/uninitialized`, "uninitialized\n");
    assert.equal(id("uninitialized"), made, "systemd's first-boot placeholder is no identity");
    await Deno.writeTextFile(`${dir}/bad`, "two words\n");
    throwsCni(() => id("bad"), 7, /not a label value/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
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

Deno.test("config: errors name the field", () => {
  const n = node();
  throwsCni(() => parseNetConf(conf({ classes: {} }), n, "ADD"), 7, /ipam\.classes/);
  throwsCni(
    () => parseNetConf(conf({ gateways: { ipv4: "fe80::1" } }), n, "ADD"),
    7,
    /gateways\.ipv4/,
  );
  throwsCni(() => parseNetConf(conf({}, { name: "" }), n, "ADD"), 7, /field name/);
  throwsCni(() => parseNetConf(conf({}, { vpc: "v".repeat(300) }), n, "ADD"), 7, /field vpc/);
  throwsCni(() => parseNetConf("[1]", n, "ADD"), 6, /JSON object/);
  throwsCni(() => parseNetConf("{", n, "ADD"), 6, /not valid JSON/);
  throwsCni(() => node({ cluster: 5 }), 7, /field cluster/);
  throwsCni(() => node({ milo: { ...NODE.milo, url: "http://milo.example.com" } }), 7, /milo\.url/);
  throwsCni(() => node({ milo: { ...NODE.milo, namespace: "../x" } }), 7, /DNS-1123/);
  throwsCni(() => node({ timeouts: { requestMs: 9000, totalMs: 1000 } }), 7, /requestMs/);
  throwsCni(
    () => node({ allowIdentities: [{}] }),
    7,
    /allowIdentities.*a namespace, a network or an identity/,
  );
  throwsCni(() => node({ allowIdentities: [{ namespace: "A_b" }] }), 7, /DNS-1123/);
  throwsCni(
    () => node({ allowIdentities: [{ namespce: "db", identity: "pod" }] }),
    7,
    /field allowIdentities\.0: unknown key namespce; known keys: namespace, network, identity/,
  );
  throwsCni(() => node({ allowIdentities: [{ network: "n", identity: "x" }] }), 7, /identity/);
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

Deno.test("env: each missing variable is named, code 4", () => {
  const env = (vars: Record<string, string>) => (k: string) => vars[k];
  throwsCni(() => readCniEnv(env({})), 4, /CNI_COMMAND/);
  throwsCni(() => readCniEnv(env({ CNI_COMMAND: "ADD" })), 4, /CNI_CONTAINERID/);
  throwsCni(() => readCniEnv(env({ CNI_COMMAND: "ADD", CNI_CONTAINERID: "c" })), 4, /CNI_IFNAME/);
  throwsCni(
    () => readCniEnv(env({ CNI_COMMAND: "ADD", CNI_CONTAINERID: "c", CNI_IFNAME: "eth0" })),
    4,
    /CNI_NETNS/,
  );
  const del = readCniEnv(env({ CNI_COMMAND: "DEL", CNI_CONTAINERID: "c", CNI_IFNAME: "eth0" }));
  assert.equal(del.netns, "");
  throwsCni(
    () => readCniEnv(env({ CNI_COMMAND: "DEL", CNI_CONTAINERID: "c/..", CNI_IFNAME: "e" })),
    4,
    /CONTAINERID/,
  );
  assert.deepEqual(parseCniArgs("IgnoreUnknown=1;K8S_POD_NAME=web-0"), {
    IgnoreUnknown: "1",
    K8S_POD_NAME: "web-0",
  });
  throwsCni(() => parseCniArgs("novalue"), 4, /CNI_ARGS/);
});

Deno.test("env and config: a control or format character in an interface or network name is refused at ADD, taken by DEL", () => {
  const env = (vars: Record<string, string>) => (k: string) => vars[k];
  const vars = { CNI_CONTAINERID: "c", CNI_IFNAME: "e\x1bth0", CNI_NETNS: "/x" };
  throwsCni(() => readCniEnv(env({ ...vars, CNI_COMMAND: "ADD" })), 4, /CNI_IFNAME.*\\u001b/);
  throwsCni(
    () => readCniEnv(env({ ...vars, CNI_COMMAND: "ADD", CNI_IFNAME: "eth\u202e0" })),
    4,
    /control or format character/,
  );
  for (const verb of ["DEL", "CHECK"]) {
    assert.equal(readCniEnv(env({ ...vars, CNI_COMMAND: verb })).ifname, "e\x1bth0");
  }
  const n = node();
  const hostile = conf({}, { name: "net\r\n  holder   pod shop/web-0" });
  throwsCni(() => parseNetConf(hostile, n, "ADD"), 7, /field name: has a control/);
  assert.equal(parseNetConf(hostile, n, "DEL").name, "net\r\n  holder   pod shop/web-0");
});

Deno.test("versions: verbs newer than the request are refused with code 1", () => {
  requireVersion("0.4.0", "CHECK");
  throwsCni(() => requireVersion("0.3.1", "CHECK"), 1, /CHECK/);
  throwsCni(() => requireVersion("1.0.0", "GC"), 1, /GC/);
  throwsCni(() => requireVersion("0.2.0", "ADD"), 1, /not supported/);
});

Deno.test("result encoding per version: legacy carries ips[].version, none carries interface", () => {
  const leases = [
    { family: "ipv6" as const, cidr: parseCidr("fd20::1:0:3:0:0/96")! },
    { family: "ipv4" as const, cidr: parseCidr("10.40.0.7/32")! },
  ];
  const gw = { ipv4: "169.254.1.1", ipv6: "fe80::1" };
  assert.deepEqual(encodeResult("0.3.1", leases, gw), {
    cniVersion: "0.3.1",
    ips: [
      { version: "4", address: "10.40.0.7/32", gateway: "169.254.1.1" },
      { version: "6", address: "fd20::1:0:3:0:0/96", gateway: "fe80::1" },
    ],
    routes: [{ dst: "0.0.0.0/0" }, { dst: "::/0" }],
    dns: {},
  });
  assert.deepEqual(encodeResult("1.1.0", leases.slice(1), {}), {
    cniVersion: "1.1.0",
    ips: [{ address: "10.40.0.7/32" }],
    routes: [{ dst: "0.0.0.0/0" }],
    dns: {},
  });
});

async function subtleHex(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test("sha256Hex: FIPS 180-4 vectors, and WebCrypto's digest at every length across block edges", async () => {
  assert.equal(
    sha256Hex(""),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
  assert.equal(
    sha256Hex("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.equal(
    sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
  );
  for (let n = 0; n <= 200; n++) {
    const text = Array.from({ length: n }, (_, i) => i % 17 === 5 ? "é" : "abcxyz019-_.\0"[i % 13])
      .join("");
    assert.equal(sha256Hex(text), await subtleHex(text), `length ${n}`);
  }
});

Deno.test("claim names keep the hash existing claims were named by", async () => {
  const a = { cluster: "cluster-a", containerId: "9f0c1e6a4b2d", ifname: "eth0" };
  const digest = await subtleHex(`${a.cluster}\u0000${a.containerId}\u0000${a.ifname}`);
  assert.equal(claimName(a, "ipv4"), `pod-${digest.slice(0, 20)}-v4`);
});

Deno.test("claim names are deterministic DNS-1123 and differ per family and attachment", () => {
  const a = { cluster: "c", containerId: "abc", ifname: "eth0" };
  const v4 = claimName(a, "ipv4");
  assert.equal(v4, claimName({ ...a }, "ipv4"));
  assert.match(v4, /^pod-[0-9a-f]{20}-v4$/);
  assert.equal(claimName(a, "ipv6"), v4.replace(/-v4$/, "-v6"));
  assert.notEqual(v4, claimName({ ...a, cluster: "d" }, "ipv4"));
  assert.notEqual(v4, claimName({ ...a, ifname: "net1" }, "ipv4"));
});

Deno.test("label values obey the 63-character rule; full values stay in annotations", () => {
  assert.equal(labelValue("node-1"), "node-1");
  const id = "9f0c1e6a4b2d48e7a1c3b5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";
  const hashed = labelValue(id);
  assert.ok(hashed.length <= 63 && hashed !== id);
  assert.match(hashed, /^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/);
  assert.match(labelValue("-bad-"), /^sha256-/);
  const own = ownership({
    cluster: "cluster-a",
    node: "n".repeat(80),
    network: "vpc",
    containerId: id,
    ifname: "eth0",
    podNamespace: "shop",
    podName: "web-0",
    podUid: "u-1",
    vpc: "vpc-7b3e",
  }, "ipv4");
  for (const v of Object.values(own.labels)) assert.ok(v.length <= 63, v);
  assert.equal(own.annotations[KEYS.containerId], id);
  assert.equal(own.annotations[KEYS.node], "n".repeat(80));
  assert.equal(own.annotations[KEYS.pod], "shop/web-0");
  assert.equal(own.labels[KEYS.podName], "web-0");
  assert.equal(own.labels[KEYS.vpc], "vpc-7b3e");
  assert.equal(own.labels[KEYS.family], "ipv4");
});

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

Deno.test("repo: no any outside tests/ (deno lint's no-explicit-any is never silenced there)", () => {
  const root = new URL("../", import.meta.url).pathname;
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const e of Deno.readDirSync(root + dir)) {
      const path = `${dir}${e.name}`;
      if (e.isDirectory && !["tests", ".git", ".tmp", "node_modules"].includes(e.name)) {
        walk(`${path}/`);
      } else if (e.isFile && e.name.endsWith(".ts")) {
        const text = Deno.readTextFileSync(root + path);
        // deno lint refuses an explicit any unless its no-explicit-any is ignored at the line.
        if (/deno-lint-ignore[^\n]*no-explicit-any/.test(text)) found.push(path);
      }
    }
  };
  walk("");
  assert.deepEqual(found, []);
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
