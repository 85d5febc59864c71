/**
 * Process tests: the installed plugin is exec'd with CNI env vars and stdin,
 * exactly as a runtime does, against milo-dev answering in Milo's shapes.
 */
import assert from "node:assert/strict";
import { claimName, KEYS } from "../lib/claims.ts";
import { SUPPORTED_VERSIONS } from "../lib/cni.ts";
import { type MiloDev, startMiloDev } from "./support/milo_dev.ts";
import { installPlugin, type RunResult, type TestPlugin } from "./support/plugin.ts";

const TOKEN = "dev-token-a";
const CLASSES = [
  {
    metadata: { name: "vpc-pods-ipv4" },
    spec: { ipFamily: "IPv4", prefixLength: 32, requiredScopeRoles: ["network"] },
  },
  {
    metadata: { name: "vpc-pods-ipv6" },
    spec: { ipFamily: "IPv6", prefixLength: 96, requiredScopeRoles: ["network"] },
  },
  { metadata: { name: "tiny-ipv6" }, spec: { ipFamily: "IPv6", prefixLength: 128 } },
  {
    metadata: { name: "restricted-ipv4" },
    spec: { ipFamily: "IPv4", prefixLength: 32, consumers: ["someone-else"] },
  },
];
const SEED = {
  projects: [
    {
      name: "tenant-a",
      tokens: [TOKEN],
      ipClasses: CLASSES,
      ipPools: [
        {
          metadata: { name: "vpc-7b3e-pods-v4" },
          spec: {
            cidr: "10.40.0.0/24",
            ipFamily: "IPv4",
            classNames: ["vpc-pods-ipv4"],
            reservations: { leading: 1, trailing: 1, unitPrefixLength: 32 },
          },
        },
        {
          metadata: { name: "vpc-7b3e-pods-v6" },
          spec: { cidr: "fd20:0:0:1::/64", ipFamily: "IPv6", classNames: ["vpc-pods-ipv6"] },
        },
        {
          metadata: { name: "tiny-v6" },
          spec: { cidr: "fd30::/127", ipFamily: "IPv6", classNames: ["tiny-ipv6"] },
        },
        {
          metadata: { name: "restricted-v4" },
          spec: { cidr: "10.99.0.0/28", ipFamily: "IPv4", classNames: ["restricted-ipv4"] },
        },
      ],
    },
    { name: "tenant-b", tokens: ["dev-token-b"], ipClasses: [], ipPools: [] },
  ],
};

/** Asserts a well-formed CNI error: one JSON object with code/msg/details, exit non-zero. */
function assertCniError(r: RunResult, code: number, msg?: RegExp): void {
  assert.notEqual(r.code, 0, `expected failure, stdout=${r.stdout}`);
  assert.ok(r.json, `stdout must carry the error JSON, stderr=${r.stderr}`);
  assert.equal(r.stdout.trim().split("\n").length, 1, "exactly one JSON document on stdout");
  assert.equal(r.json.code, code, `code: ${r.stdout}`);
  assert.equal(typeof r.json.msg, "string");
  assert.equal(typeof r.json.details, "string");
  assert.ok(!r.stdout.includes(TOKEN) && !r.stderr.includes(TOKEN), "token must never appear");
  assert.doesNotMatch(r.stdout, /\bat .*\.ts:\d+/, "no stack traces");
  if (msg) assert.match(`${r.json.msg} ${r.json.details}`, msg);
}

function assertOk(r: RunResult): void {
  assert.equal(r.code, 0, `expected success: stdout=${r.stdout} stderr=${r.stderr}`);
}

type Ip = { address: string; gateway?: string; version?: string; interface?: number };

/** The eight groups of an IPv6 address, zero-compression undone. */
function expand6(ip: string): string[] {
  const [head, tail = ""] = ip.split("::");
  const h = head ? head.split(":") : [], t = tail ? tail.split(":") : [];
  const groups = ip.includes("::") ? [...h, ...Array(8 - h.length - t.length).fill("0"), ...t] : h;
  return groups.map((g) => parseInt(g, 16).toString(16));
}

function ipsOf(r: RunResult): Ip[] {
  return (r.json?.ips ?? []) as Ip[];
}

async function withEnv(
  fn: (milo: MiloDev, plugin: TestPlugin) => Promise<void>,
  opts: { tls?: boolean } = {},
): Promise<void> {
  const milo = await startMiloDev({ seed: SEED, tls: opts.tls });
  let plugin: TestPlugin | undefined;
  try {
    plugin = await installPlugin({
      miloUrl: milo.url,
      token: TOKEN,
      caFile: (milo as MiloDev & { caFile?: string }).caFile,
    });
    await fn(milo, plugin);
  } finally {
    await plugin?.cleanup();
    await milo.stop();
  }
}

Deno.test("plugin verbs against milo-dev over HTTP", async (t) => {
  await withEnv(async (milo, plugin) => {
    const conf = plugin.netConf();

    await t.step("VERSION lists every supported version", async () => {
      const r = await plugin.run({ command: "VERSION", stdin: { cniVersion: "1.0.0" } });
      assertOk(r);
      assert.deepEqual(r.json, { cniVersion: "1.0.0", supportedVersions: [...SUPPORTED_VERSIONS] });
    });

    await t.step("ADD leases one address per family, encoded in each CNI version", async () => {
      for (const [i, v] of SUPPORTED_VERSIONS.entries()) {
        const r = await plugin.run({
          command: "ADD",
          containerId: `ver-${i}`,
          stdin: { ...conf, cniVersion: v },
        });
        assertOk(r);
        assert.equal(r.json!.cniVersion, v);
        const ips = ipsOf(r);
        assert.equal(ips.length, 2);
        assert.match(ips[0].address, /^10\.40\.0\.\d+\/32$/);
        assert.match(ips[1].address, /\/96$/);
        assert.equal(expand6(ips[1].address.split("/")[0]).slice(0, 4).join(":"), "fd20:0:0:1");
        assert.equal(ips[0].gateway, "169.254.1.1");
        assert.equal(ips[1].gateway, "fe80::1");
        assert.ok(ips.every((ip) => ip.interface === undefined));
        assert.equal(r.json!.interfaces, undefined);
        assert.deepEqual(r.json!.routes, [{ dst: "0.0.0.0/0" }, { dst: "::/0" }]);
        if (v.startsWith("0.")) assert.deepEqual(ips.map((ip) => ip.version), ["4", "6"]);
        else assert.ok(ips.every((ip) => ip.version === undefined));
      }
      const all = await milo.listClaims("tenant-a");
      const addresses = all.map((c) => c.status.allocatedCIDR);
      assert.equal(new Set(addresses).size, addresses.length, "no duplicate address");
    });

    await t.step("claims carry cluster, node, pod, container, interface", async () => {
      const id = "9f0c1e6a4b2d48e7a1c3b5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";
      assertOk(
        await plugin.run({ command: "ADD", containerId: id, stdin: conf, podName: "web-7" }),
      );
      const name = await claimName(
        { cluster: "cluster-a", containerId: id, ifname: "eth0" },
        "ipv4",
      );
      const [claim] = await milo.listClaims(
        "tenant-a",
        `${KEYS.podName}=web-7,${KEYS.family}=ipv4`,
      );
      assert.equal(claim.metadata.name, name);
      const l = claim.metadata.labels, a = claim.metadata.annotations;
      assert.equal(l[KEYS.cluster], "cluster-a");
      assert.equal(l[KEYS.node], "node-a1");
      assert.equal(l[KEYS.podNamespace], "shop");
      assert.equal(l[KEYS.vpc], "vpc-7b3e");
      assert.equal(l[KEYS.vpcattachment], "vpc-7b3e-attach-1");
      assert.ok(l[KEYS.containerId].length <= 63);
      assert.equal(a[KEYS.containerId], id);
      assert.equal(a[KEYS.ifname], "eth0");
      assert.equal(a[KEYS.pod], "shop/web-7");
      assert.equal(a[KEYS.podUid], `uid-${id}`);
      assert.equal(claim.spec.scope.network.name, "vpc-7b3e");
    });

    await t.step("ADD retried for the same attachment returns the same lease", async () => {
      const first = await plugin.run({ command: "ADD", containerId: "idem", stdin: conf });
      const again = await plugin.run({ command: "ADD", containerId: "idem", stdin: conf });
      assertOk(first);
      assertOk(again);
      assert.deepEqual(ipsOf(again), ipsOf(first));
      const mine = await milo.listClaims("tenant-a", `${KEYS.containerId}=idem`);
      assert.equal(mine.length, 2);
    });

    await t.step("ADD never adopts a claim held by someone else", async () => {
      const name = await claimName(
        { cluster: "cluster-a", containerId: "victim", ifname: "eth0" },
        "ipv4",
      );
      const res = await fetch(
        `${milo.url}/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims`,
        {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({
            apiVersion: "ipam.miloapis.com/v1alpha1",
            kind: "IPClaim",
            metadata: {
              name,
              annotations: { [KEYS.cluster]: "cluster-b", [KEYS.containerId]: "other" },
            },
            spec: { className: "vpc-pods-ipv4", scope: (conf.ipam as { scope: unknown }).scope },
          }),
        },
      );
      assert.equal(res.status, 201);
      await res.body?.cancel();
      const r = await plugin.run({ command: "ADD", containerId: "victim", stdin: conf });
      assertCniError(r, 103, /held by another attachment/);
      assert.equal((await milo.listClaims("tenant-a", `${KEYS.containerId}=victim`)).length, 0);
      const still = await milo.listClaims("tenant-a");
      assert.ok(still.some((c) => c.metadata.name === name), "the foreign claim is left alone");
    });

    await t.step("dual-stack: a failing second family rolls back the first", async () => {
      const broken = plugin.netConf({ classes: { ipv4: "vpc-pods-ipv4", ipv6: "no-such-class" } });
      const r = await plugin.run({ command: "ADD", containerId: "half", stdin: broken });
      assertCniError(r, 102, /no-such-class/);
      assert.equal((await milo.listClaims("tenant-a", `${KEYS.containerId}=half`)).length, 0);
    });

    await t.step("exhausted pool: code 100 naming pool and class, no lease kept", async () => {
      const tiny = plugin.netConf({ classes: { ipv4: "vpc-pods-ipv4", ipv6: "tiny-ipv6" } });
      for (const id of ["tiny-1", "tiny-2"]) {
        assertOk(await plugin.run({ command: "ADD", containerId: id, stdin: tiny }));
      }
      const r = await plugin.run({ command: "ADD", containerId: "tiny-3", stdin: tiny });
      assertCniError(r, 100, /tiny-v6.*tiny-ipv6/);
      assert.equal((await milo.listClaims("tenant-a", `${KEYS.containerId}=tiny-3`)).length, 0);
      for (const id of ["tiny-1", "tiny-2"]) {
        assertOk(await plugin.run({ command: "DEL", containerId: id, stdin: tiny }));
      }
    });

    await t.step("CHECK passes for a live lease and reports a changed address", async () => {
      const add = await plugin.run({ command: "ADD", containerId: "chk", stdin: conf });
      assertOk(add);
      const prevResult = add.json;
      assertOk(
        await plugin.run({ command: "CHECK", containerId: "chk", stdin: { ...conf, prevResult } }),
      );
      const wrong = { ...prevResult, ips: [{ address: "10.40.0.250/32" }, ipsOf(add)[1]] };
      const r = await plugin.run({
        command: "CHECK",
        containerId: "chk",
        stdin: { ...conf, prevResult: wrong },
      });
      assertCniError(
        r,
        104,
        new RegExp(`10\\.40\\.0\\.250/32.*${ipsOf(add)[0].address.replace(/\./g, "\\.")}`),
      );
    });

    await t.step("CHECK catches a claim deleted behind the plugin's back", async () => {
      const add = await plugin.run({ command: "ADD", containerId: "gone", stdin: conf });
      assertOk(add);
      const name = await claimName(
        { cluster: "cluster-a", containerId: "gone", ifname: "eth0" },
        "ipv4",
      );
      const res = await fetch(
        `${milo.url}/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims/${name}`,
        { method: "DELETE", headers: { authorization: `Bearer ${TOKEN}` } },
      );
      assert.equal(res.status, 200);
      await res.body?.cancel();
      const r = await plugin.run({
        command: "CHECK",
        containerId: "gone",
        stdin: { ...conf, prevResult: add.json },
      });
      assertCniError(r, 104, new RegExp(`${name} is missing`));
    });

    await t.step(
      "DEL releases both claims, twice is fine, without netns or prevResult",
      async () => {
        const add = await plugin.run({ command: "ADD", containerId: "del-me", stdin: conf });
        assertOk(add);
        for (let i = 0; i < 2; i++) {
          const r = await plugin.run({
            command: "DEL",
            containerId: "del-me",
            stdin: conf,
            env: { CNI_NETNS: undefined },
          });
          assertOk(r);
          assert.equal(r.stdout, "");
        }
        assert.equal((await milo.listClaims("tenant-a", `${KEYS.containerId}=del-me`)).length, 0);
      },
    );

    await t.step("STATUS succeeds silently; a missing class is code 50", async () => {
      const r = await plugin.run({ command: "STATUS", stdin: conf });
      assertOk(r);
      assert.equal(r.stdout, "");
      const missing = plugin.netConf({ classes: { ipv4: "vpc-pods-ipv4", ipv6: "nope-v6" } });
      assertCniError(await plugin.run({ command: "STATUS", stdin: missing }), 50, /nope-v6/);
    });

    await t.step("GC releases exactly the claims missing from valid-attachments", async () => {
      const gcConf = plugin.netConf({}, { name: "gc-net" });
      for (const id of ["gc-keep", "gc-drop-1", "gc-drop-2"]) {
        assertOk(await plugin.run({ command: "ADD", containerId: id, stdin: gcConf }));
      }
      const before = await milo.listClaims("tenant-a");
      const r = await plugin.run({
        command: "GC",
        stdin: {
          ...gcConf,
          "cni.dev/valid-attachments": [{ containerID: "gc-keep", ifname: "eth0" }],
        },
      });
      assertOk(r);
      assert.equal(r.stdout, "");
      const after = await milo.listClaims("tenant-a");
      const ids = (cs: typeof after) => cs.map((c) => c.metadata.annotations?.[KEYS.containerId]);
      assert.equal(ids(after).filter((i) => i === "gc-keep").length, 2);
      assert.ok(!ids(after).some((i) => i?.startsWith("gc-drop")));
      assert.equal(before.length - after.length, 4, "only the other network's orphans went");
      const empty = await plugin.run({
        command: "GC",
        stdin: { ...gcConf, "cni.dev/valid-attachments": [] },
      });
      assertOk(empty);
      assert.equal((await milo.listClaims("tenant-a", `${KEYS.network}=gc-net`)).length, 0);
    });

    await t.step("a class the project may not use is code 101 (403)", async () => {
      const r = await plugin.run({
        command: "ADD",
        containerId: "forbidden",
        stdin: plugin.netConf({ classes: { ipv4: "restricted-ipv4" } }),
      });
      assertCniError(r, 101, /403/);
    });

    await t.step("token is re-read every call: rotation takes effect", async () => {
      await Deno.writeTextFile(plugin.tokenFile, "revoked-token\n");
      assertCniError(
        await plugin.run({ command: "ADD", containerId: "rot", stdin: conf }),
        101,
        /401/,
      );
      assertCniError(await plugin.run({ command: "STATUS", stdin: conf }), 50, /401/);
      await Deno.writeTextFile(plugin.tokenFile, TOKEN);
      assertOk(await plugin.run({ command: "ADD", containerId: "rot", stdin: conf }));
    });

    await t.step("a token of another project is refused on the project path", async () => {
      const base =
        `${milo.url}/apis/resourcemanager.miloapis.com/v1alpha1/projects/tenant-b/control-plane`;
      await plugin.setNode({ milo: { url: base, tokenFile: plugin.tokenFile } });
      try {
        const r = await plugin.run({ command: "ADD", containerId: "proj", stdin: conf });
        assertCniError(r, 101, /403/);
      } finally {
        await plugin.setNode({});
      }
    });

    await t.step("transient 503s beyond the deadline end in code 11, in time", async () => {
      await milo.setFaults({ errorRate: 1, errorStatuses: [503], retryAfterSeconds: 0 });
      try {
        const fast = plugin.netConf({ timeouts: { requestMs: 300, totalMs: 1500 } });
        const r = await plugin.run({ command: "ADD", containerId: "busy", stdin: fast });
        assertCniError(r, 11, /503/);
        const d = await plugin.run({ command: "DEL", containerId: "busy", stdin: fast });
        assertCniError(d, 11, /503/);
      } finally {
        await milo.clearFaults();
      }
      assert.equal((await milo.listClaims("tenant-a", `${KEYS.containerId}=busy`)).length, 0);
    });

    await t.step("a fetch to any host but the installed Milo is refused (code 106)", async () => {
      const other = new URL(milo.adminUrl);
      await plugin.setNode({ milo: { url: other.origin, tokenFile: plugin.tokenFile } });
      try {
        const r = await plugin.run({ command: "ADD", containerId: "sbx", stdin: conf });
        assertCniError(r, 106, new RegExp(other.host.replace(/\./g, "\\.")));
      } finally {
        await plugin.setNode({});
      }
    });

    await t.step("every invocation logs one JSON line, never the token", async () => {
      const text = await Deno.readTextFile(plugin.logFile);
      assert.ok(!text.includes(TOKEN));
      const lines = await plugin.logLines();
      const del = lines.find((l) => l.verb === "DEL" && l.containerId === "del-me");
      assert.ok(del);
      assert.equal(del.outcome, "ok");
      assert.equal(typeof del.durationMs, "number");
      assert.equal((del.claims as string[]).length, 2);
      assert.ok(lines.some((l) => l.outcome === "error" && l.code === 11));
    });
  });
});

Deno.test("bad input gets a clear CNI error and leases nothing", async (t) => {
  await withEnv(async (milo, plugin) => {
    const conf = plugin.netConf();
    const cases: [string, Parameters<TestPlugin["run"]>[0], number, RegExp][] = [
      ["stdin not JSON", { command: "ADD", containerId: "b1", stdin: "{not json" }, 6, /JSON/],
      ["stdin empty", { command: "ADD", containerId: "b1", stdin: "" }, 6, /JSON/],
      [
        "stdin of 10 MiB",
        { command: "ADD", containerId: "b1", stdin: "x".repeat(10 * 1024 * 1024) },
        6,
        /exceeds/,
      ],
      [
        "wrong types",
        {
          command: "ADD",
          containerId: "b1",
          stdin: { ...conf, ipam: { ...conf.ipam as object, classes: "v4" } },
        },
        7,
        /ipam\.classes/,
      ],
      [
        "no ipam block",
        { command: "ADD", containerId: "b1", stdin: { cniVersion: "1.0.0", name: "x" } },
        7,
        /ipam/,
      ],
      [
        "timeouts out of range",
        {
          command: "ADD",
          containerId: "b1",
          stdin: plugin.netConf({ timeouts: { requestMs: -1, totalMs: 1000 } }),
        },
        7,
        /requestMs/,
      ],
      ["missing CNI_COMMAND", { command: "", stdin: conf }, 4, /CNI_COMMAND/],
      ["unknown CNI_COMMAND", { command: "FROB", stdin: conf }, 4, /FROB/],
      ["missing CNI_CONTAINERID", { command: "ADD", stdin: conf }, 4, /CNI_CONTAINERID/],
      [
        "missing CNI_IFNAME",
        { command: "ADD", containerId: "b1", stdin: conf, env: { CNI_IFNAME: undefined } },
        4,
        /CNI_IFNAME/,
      ],
      [
        "missing CNI_NETNS on ADD",
        { command: "ADD", containerId: "b1", stdin: conf, env: { CNI_NETNS: undefined } },
        4,
        /CNI_NETNS/,
      ],
      [
        "unsupported cniVersion",
        { command: "ADD", containerId: "b1", stdin: { ...conf, cniVersion: "0.2.0" } },
        1,
        /0\.2\.0/,
      ],
      [
        "GC on a 1.0.0 config",
        { command: "GC", stdin: { ...conf, cniVersion: "1.0.0" } },
        1,
        /GC/,
      ],
      [
        "MILO_IPAM_CONFIG names a missing file",
        {
          command: "ADD",
          containerId: "b1",
          stdin: conf,
          env: { MILO_IPAM_CONFIG: "/nonexistent/x" },
        },
        4,
        /nonexistent/,
      ],
    ];
    for (const [name, run, code, pattern] of cases) {
      await t.step(name, async () => assertCniError(await plugin.run(run), code, pattern));
    }
    assert.equal((await milo.listClaims("tenant-a")).length, 0, "nothing leased");
  });
});

Deno.test("plugin over HTTPS: caFile adds trust, and without it TLS is verified", async (t) => {
  await withEnv(async (milo, plugin) => {
    await t.step("ADD then DEL over TLS", async () => {
      const add = await plugin.run({
        command: "ADD",
        containerId: "tls-1",
        stdin: plugin.netConf(),
      });
      assertOk(add);
      assert.equal(ipsOf(add).length, 2);
      assertOk(await plugin.run({ command: "DEL", containerId: "tls-1", stdin: plugin.netConf() }));
    });
    await t.step("without caFile the server's certificate is rejected", async () => {
      await plugin.setNode({ milo: { url: milo.url, tokenFile: plugin.tokenFile } });
      try {
        const r = await plugin.run({
          command: "ADD",
          containerId: "tls-2",
          stdin: plugin.netConf(),
        });
        assertCniError(r, 7, /TLS/);
      } finally {
        await plugin.setNode({});
      }
    });
  }, { tls: true });
});

Deno.test("Milo down: ADD and DEL fail with code 11, STATUS with 50", async () => {
  await withEnv(async (milo, plugin) => {
    const fast = plugin.netConf({ timeouts: { requestMs: 300, totalMs: 1200 } });
    await milo.setFaults({ down: true });
    try {
      for (const command of ["ADD", "DEL"]) {
        const r = await plugin.run({ command, containerId: "down", stdin: fast });
        assertCniError(r, 11, /Connection refused|connect/i);
      }
      assertCniError(await plugin.run({ command: "STATUS", stdin: fast }), 50);
    } finally {
      await milo.clearFaults();
    }
  });
});

Deno.test("reconcile releases only claims absent from the result cache twice, grace apart", async () => {
  await withEnv(async (milo, plugin) => {
    const conf = plugin.netConf();
    for (const id of ["live-1", "orphan-1"]) {
      assertOk(await plugin.run({ command: "ADD", containerId: id, stdin: conf }));
    }
    await Deno.writeTextFile(
      `${plugin.resultsDir}/vpc-7b3e-live-1-eth0`,
      JSON.stringify({
        kind: "cniCacheV1",
        containerId: "live-1",
        ifName: "eth0",
        networkName: "vpc-7b3e",
        result: {},
      }),
    );
    const reconcile = async (...extra: string[]) => {
      const r = await plugin.run({
        command: "",
        args: ["reconcile", "--grace", "1", ...extra],
      });
      assertOk(r);
      return r.json as {
        released: { containerId: string }[];
        kept: { claim: string; reason: string }[];
      };
    };
    const owners = async () =>
      (await milo.listClaims("tenant-a")).map((c) => c.metadata.annotations[KEYS.containerId])
        .sort();

    const first = await reconcile();
    assert.deepEqual(first.released, [], "one observation never releases");
    assert.equal(first.kept.length, 4);
    await new Promise((r) => setTimeout(r, 1200));
    const dry = await reconcile("--dry-run");
    assert.deepEqual(dry.released.map((x) => x.containerId), ["orphan-1", "orphan-1"]);
    assert.deepEqual(
      await owners(),
      ["live-1", "live-1", "orphan-1", "orphan-1"],
      "dry run releases nothing",
    );
    const second = await reconcile();
    assert.deepEqual(second.released.map((x) => x.containerId), ["orphan-1", "orphan-1"]);
    assert.deepEqual(await owners(), ["live-1", "live-1"]);
    const third = await reconcile();
    assert.deepEqual(third.released, []);
  });
});
