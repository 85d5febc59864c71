import assert from "node:assert/strict";
import { claimName, KEYS, labelValue, ownership } from "../lib/claims.ts";
import { encodeResult, parseCniArgs, readCniEnv, requireVersion } from "../lib/cni.ts";
import { parseNetConf } from "../lib/config.ts";
import { CniError } from "../lib/errors.ts";
import { parseCidr } from "../lib/ip.ts";
import { permissionFlags } from "../lib/permissions.ts";
import { grantsFor, launcherScript } from "../scripts/install.ts";

const ipam = {
  type: "milo-ipam",
  milo: { url: "https://milo.example.com/base", tokenFile: "/t" },
  cluster: "cluster-a",
  classes: { ipv4: "vpc-pods-ipv4" },
};
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

Deno.test("config: defaults fill in and the ipam block wins over node config", () => {
  const c = parseNetConf(conf({ timeouts: { requestMs: 500 } }), {
    path: "/etc/node.conf",
    values: { milo: { namespace: "tenant-ns", url: "https://other" }, node: "n1" },
  });
  assert.equal(c.ipam.milo.url, "https://milo.example.com/base");
  assert.equal(c.ipam.milo.namespace, "tenant-ns");
  assert.equal(c.ipam.node, "n1");
  assert.deepEqual(c.ipam.timeouts, { requestMs: 500, totalMs: 10_000 });
  assert.equal(c.ipam.log.file, "/var/log/milo-ipam.log");
});

Deno.test("config: errors name the field", () => {
  const none = { values: {} };
  throwsCni(() => parseNetConf(conf({ classes: {} }), none), 7, /ipam\.classes/);
  throwsCni(() => parseNetConf(conf({ cluster: 5 }), none), 7, /ipam\.cluster/);
  throwsCni(
    () => parseNetConf(conf({ milo: { url: "http://milo.example.com", tokenFile: "/t" } }), none),
    7,
    /ipam\.milo\.url/,
  );
  throwsCni(
    () => parseNetConf(conf({ gateways: { ipv4: "fe80::1" } }), none),
    7,
    /ipam\.gateways\.ipv4/,
  );
  throwsCni(
    () => parseNetConf(conf({ timeouts: { requestMs: 9000, totalMs: 1000 } }), none),
    7,
    /requestMs/,
  );
  throwsCni(() => parseNetConf(conf({}, { name: "" }), none), 7, /field name/);
  throwsCni(() => parseNetConf("[1]", none), 6, /JSON object/);
  throwsCni(() => parseNetConf("{", none), 6, /not valid JSON/);
});

Deno.test("config: plain http is accepted for loopback only", () => {
  for (const url of ["http://127.0.0.1:8080", "http://[::1]:80", "http://localhost:1"]) {
    assert.equal(
      parseNetConf(conf({ milo: { url, tokenFile: "/t" } }), { values: {} }).ipam.milo.url,
      url,
    );
  }
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

Deno.test("claim names are deterministic DNS-1123 and differ per family and attachment", async () => {
  const a = { cluster: "c", containerId: "abc", ifname: "eth0" };
  const v4 = await claimName(a, "ipv4");
  assert.equal(v4, await claimName({ ...a }, "ipv4"));
  assert.match(v4, /^pod-[0-9a-f]{20}-v4$/);
  assert.equal(await claimName(a, "ipv6"), v4.replace(/-v4$/, "-v6"));
  assert.notEqual(v4, await claimName({ ...a, cluster: "d" }, "ipv4"));
  assert.notEqual(v4, await claimName({ ...a, ifname: "net1" }, "ipv4"));
});

Deno.test("label values obey the 63-character rule; full values stay in annotations", async () => {
  assert.equal(await labelValue("node-1"), "node-1");
  const id = "9f0c1e6a4b2d48e7a1c3b5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";
  const hashed = await labelValue(id);
  assert.ok(hashed.length <= 63 && hashed !== id);
  assert.match(hashed, /^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/);
  assert.match(await labelValue("-bad-"), /^sha256-/);
  const own = await ownership({
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

Deno.test("install grants come from every milo-ipam block of a conflist, for launcher and binary", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const plugin = (url: string, tokenFile: string) => ({
      type: "bridge",
      ipam: { type: "milo-ipam", milo: { url, tokenFile }, cluster: "c", classes: { ipv4: "x" } },
    });
    await Deno.writeTextFile(
      `${dir}/net.conflist`,
      JSON.stringify({
        cniVersion: "1.0.0",
        name: "n",
        plugins: [
          plugin("https://milo-a.example.com/base", "/run/a-token"),
          plugin("http://127.0.0.1:8080", "/run/b-token"),
          { type: "portmap" },
        ],
      }),
    );
    const g = await grantsFor({
      dir: `${dir}/bin`,
      config: `${dir}/net.conflist`,
      nodeConfig: `${dir}/node.conf`,
    });
    assert.deepEqual(g.net.sort(), ["127.0.0.1:8080", "milo-a.example.com:443"]);
    assert.ok(g.read.includes("/run/a-token") && g.read.includes("/run/b-token"));
    assert.ok(g.read.includes(`${dir}/node.conf`));
    assert.deepEqual([...new Set(g.write)].length, 2, "log file and reconcile state dir");
    const flags = permissionFlags(g);
    const script = launcherScript("/opt/deno", "/opt/milo-ipam.js", flags);
    for (const f of flags) assert.ok(script.includes(`'${f}'`), f);
    assert.match(script, /'run' '--no-config'.*'\/opt\/milo-ipam\.js' "\$@"/);
    await assert.rejects(grantsFor({ dir, config: `${dir}/node.conf` }));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
