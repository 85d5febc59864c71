/**
 * Fail closed, through the installed plugin as a process (both with and
 * without the agent): no token in any output, credentials only from the
 * node, no destructive GC on odd input, only sane leases, a half ADD always
 * rolled back, one JSON document and a bounded exit, no proxy and no
 * redirect, names checked before URLs, bounded answers, and installed files
 * that belong to the installer.
 */
import assert from "node:assert/strict";
import { KEYS } from "../lib/claims.ts";
import { hostId } from "../lib/host.ts";
import { keptSize } from "../lib/list_bound.ts";
import { IPClaimSchema, MAX_LIST_BYTES } from "../lib/milo_objects.ts";
import { execCni } from "../scripts/cni_exec.ts";
import { install } from "../scripts/install.ts";
import { boundFor, type FakeMilo, fakeMilo } from "../testing/fake_milo.ts";
import { fixture, reply } from "../testing/milo_fixtures.ts";
import { installPlugin, type TestPlugin } from "../testing/plugin.ts";
import { assertCniError, assertOk, MODES, TOKEN } from "../testing/process.ts";

type Handler = Parameters<typeof fakeMilo>[0];

/** A fake Milo that stores what it creates and answers GET/DELETE/LIST from the store. */
function storeHandler(
  lease: (create: Record<string, unknown>) => Record<string, unknown> | Response,
): { handle: Handler; claims: Map<string, Record<string, unknown>> } {
  const claims = new Map<string, Record<string, unknown>>();
  const handle: Handler = (req, seen) => {
    const name = seen.path.split("/ipclaims/")[1];
    if (req.method === "POST") {
      const create = seen.body as Record<string, unknown>;
      const n = (create.metadata as { name: string }).name;
      if (claims.has(n)) return reply(409, fixture("status-409-already-exists.json"));
      const answer = lease(create);
      if (answer instanceof Response) return answer;
      const claim = boundFor(create, answer);
      claims.set(n, claim);
      return reply(201, claim);
    }
    const notFound = () =>
      reply(404, { ...fixture("status-404-not-found.json"), details: { name, kind: "ipclaims" } });
    if (req.method === "GET" && name) {
      return claims.has(name) ? reply(200, claims.get(name)) : notFound();
    }
    if (req.method === "DELETE" && name) {
      const c = claims.get(name);
      if (!c) return notFound();
      claims.delete(name);
      return reply(200, { ...c, status: { ...(c.status as object), phase: "Releasing" } });
    }
    if (req.method === "GET") {
      return reply(200, { kind: "IPClaimList", items: [...claims.values()] });
    }
    return reply(405, { kind: "Status", code: 405 });
  };
  return { handle, claims };
}

const GOOD = (create: Record<string, unknown>) =>
  (create.spec as { ipFamily: string }).ipFamily === "IPv4"
    ? { allocatedCIDR: "10.40.0.7/32", address: "10.40.0.7" }
    : { allocatedCIDR: "fd20::1:0:3:0:0/96" };

/** One fake Milo and one install per mode; each step sets the fake's handler and starts clean. */
async function failClosedEnv(mode: (typeof MODES)[number]) {
  let current: Handler = () => reply(500, {});
  const fake = await fakeMilo((req, seen) => current(req, seen));
  const plugin = await installPlugin({
    miloUrl: fake.url,
    token: TOKEN,
    agent: mode === "agent",
    // Steps that need fast failures lower their network's timeouts: the node allows it.
    nodeConfig: {
      timeouts: { requestMs: 1000, totalMs: 4000, minRequestMs: 500, minTotalMs: 1000 },
    },
  });
  const token = await Deno.readTextFile(plugin.tokenFile);
  let agentEnv: string | undefined;
  const run = async (
    handle: Handler,
    fn: (fake: FakeMilo, plugin: TestPlugin) => Promise<void>,
    o: { agentEnv?: Record<string, string> } = {},
  ) => {
    current = handle;
    await plugin.setNode({});
    for (const f of [plugin.tokenFile, plugin.logFile, `${plugin.stateDir}/journal`]) {
      await Deno.remove(f, { recursive: true }).catch(() => {});
    }
    await Deno.writeTextFile(plugin.tokenFile, token);
    const want = JSON.stringify(o.agentEnv ?? {});
    if (mode === "agent" && want !== agentEnv) {
      await plugin.stopAgent("SIGKILL");
      await plugin.startAgent(o.agentEnv);
      agentEnv = want;
    }
    fake.seen.length = 0;
    await fn(fake, plugin);
  };
  const close = async () => {
    await plugin.cleanup();
    await fake.close();
  };
  return { run, close };
}

const v4 = { classes: { ipv4: "vpc-pods-ipv4" } };
const v6 = { classes: { ipv6: "vpc-pods-ipv6" } };
const deletes = (fake: FakeMilo) => fake.seen.filter((s) => s.method === "DELETE");
/** Requests other than LISTs (the agent's reconcile timer lists claims at its start). */
const calls = (fake: FakeMilo) =>
  fake.seen.filter((s) => !(s.method === "GET" && s.path.endsWith("/ipclaims")));

for (const mode of MODES) {
  Deno.test(`[${mode}] fail closed`, async (t) => {
    const env = await failClosedEnv(mode);
    try {
      await t.step(
        "a token file of two lines is code 7 naming the file; no token anywhere",
        async () => {
          await env.run(storeHandler(GOOD).handle, async (fake, plugin) => {
            await Deno.writeTextFile(plugin.tokenFile, "NEWTOKEN123\nOLDTOKEN456\n");
            for (const command of ["ADD", "DEL"]) {
              const r = await plugin.run({ command, containerId: "rot", stdin: plugin.netConf() });
              assertCniError(r, 7, new RegExp(plugin.tokenFile), "NEWTOKEN123");
              assert.ok(!r.stdout.includes("OLDTOKEN456"));
            }
            const log = await Deno.readTextFile(plugin.logFile);
            assert.ok(!/NEWTOKEN123|OLDTOKEN456/.test(log), "the log never carries the token");
            assert.equal(calls(fake).length, 0, "nothing was sent");
          });
        },
      );

      await t.step("a network config cannot set credentials, endpoints or paths", async () => {
        await env.run(storeHandler(GOOD).handle, async (fake, plugin) => {
          const before = await Deno.readTextFile(plugin.tokenFile);
          for (
            const [ipam, key] of [
              [{ log: { file: plugin.tokenFile } }, "log"],
              [{ milo: { url: "https://evil.example.com", tokenFile: "/etc/shadow" } }, "milo"],
              [{ cluster: "cluster-b" }, "cluster"],
              [{ node: "another-node" }, "node"],
              [{ stateDir: "/tmp" }, "stateDir"],
            ] as const
          ) {
            for (const command of ["ADD", "DEL"]) {
              const r = await plugin.run({
                command,
                containerId: "nad",
                stdin: plugin.netConf(ipam),
              });
              assertCniError(r, 7, new RegExp(`ipam\\.${key}.*node setting`));
            }
          }
          assert.equal(await Deno.readTextFile(plugin.tokenFile), before, "token file untouched");
          assert.equal(calls(fake).length, 0);
          const same = plugin.netConf({ milo: { url: fake.url }, cluster: "cluster-a" });
          assertOk(await plugin.run({ command: "ADD", containerId: "nad", stdin: same }));
        });
      });

      await t.step(
        "GC releases nothing on missing input, nor a claim younger than gc.minAgeS",
        async () => {
          const store = storeHandler(GOOD);
          await env.run(store.handle, async (fake, plugin) => {
            const conf = plugin.netConf(v4);
            for (const id of ["a", "b"]) {
              assertOk(await plugin.run({ command: "ADD", containerId: id, stdin: conf }));
            }
            for (const list of [{}, { "cni.dev/valid-attachments": null }]) {
              const r = await plugin.run({ command: "GC", stdin: { ...conf, ...list } });
              assertCniError(r, 7, /valid-attachments/);
            }
            await plugin.setNode({ gc: { minAgeS: 3600 } });
            assertOk(
              await plugin.run({
                command: "GC",
                stdin: { ...conf, "cni.dev/valid-attachments": [] },
              }),
            );
            assert.equal(deletes(fake).length, 0, "young claims are kept");
            await plugin.setNode({});
            // GC ages claims on Milo's clock, in whole seconds (a Date header may lag one).
            await new Promise((r) => setTimeout(r, 2_100));
            assertOk(
              await plugin.run({ command: "GC", stdin: { ...conf, "cni.dev/attachments": [] } }),
            );
            assert.equal(deletes(fake).length, 2, "the older key name is honoured");
            assert.equal(store.claims.size, 0);
          });
        },
      );

      await t.step(
        "only a sane lease reaches the runtime; an unusable one is released again",
        async (t) => {
          const bad: Record<
            string,
            { conf: Record<string, unknown>; status: Record<string, string>; says: RegExp }
          > = {
            "0.0.0.0/32": {
              conf: v4,
              status: { allocatedCIDR: "0.0.0.0/32" },
              says: /unspecified/,
            },
            "::/0": { conf: v6, status: { allocatedCIDR: "::/0" }, says: /prefix \/0/ },
            "an IPv4 /8": { conf: v4, status: { allocatedCIDR: "10.0.0.0/8" }, says: /prefix \/8/ },
            "multicast": { conf: v4, status: { allocatedCIDR: "224.0.0.5/32" }, says: /multicast/ },
            "loopback": { conf: v4, status: { allocatedCIDR: "127.0.0.1/32" }, says: /loopback/ },
            "link-local": {
              conf: v4,
              status: { allocatedCIDR: "169.254.3.4/32" },
              says: /link-local/,
            },
            "IPv6 link-local": {
              conf: v6,
              status: { allocatedCIDR: "fe80::/96" },
              says: /link-local/,
            },
            "address outside the CIDR": {
              conf: v4,
              status: { allocatedCIDR: "10.40.0.7/32", address: "10.40.0.8" },
              says: /inside 10\.40\.0\.7\/32/,
            },
            "IPv6 /64": {
              conf: v6,
              status: { allocatedCIDR: "fd20:0:0:1::/64" },
              says: /prefix \/64/,
            },
          };
          let current = "";
          const store = storeHandler(() => bad[current].status);
          await env.run(store.handle, async (fake, plugin) => {
            for (const [name, c] of Object.entries(bad)) {
              await t.step(name, async () => {
                current = name;
                const before = deletes(fake).length;
                const r = await plugin.run({
                  command: "ADD",
                  containerId: `bad-${Object.keys(bad).indexOf(name)}`,
                  stdin: plugin.netConf(c.conf),
                });
                assertCniError(r, 105, c.says);
                assert.match(r.json!.details as string, /allocatedCIDR=/, "the error quotes Milo");
                assert.match(r.json!.details as string, /released/);
                assert.equal(deletes(fake).length, before + 1, "the claim just made is deleted");
              });
            }
            assert.equal(store.claims.size, 0);
          });
        },
      );

      await t.step(
        "a half ADD is rolled back within totalMs although the other family hit the deadline",
        async () => {
          const store = storeHandler(GOOD);
          const hung: (() => void)[] = [];
          const handle: Handler = (req, seen) => {
            const family = (seen.body as { spec?: { ipFamily?: string } })?.spec?.ipFamily;
            if (req.method === "POST" && family === "IPv6") {
              return new Promise((resolve) => hung.push(() => resolve(reply(503, {}))));
            }
            return store.handle(req, seen);
          };
          await env.run(handle, async (fake, plugin) => {
            const conf = plugin.netConf({
              classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
              timeouts: { requestMs: 1000, totalMs: 1500 },
            });
            const r = await plugin.run({ command: "ADD", containerId: "half", stdin: conf });
            hung.forEach((f) => f());
            assertCniError(r, 11, /rollback: IPv4 claim pod-[0-9a-f]+-v4 released/);
            assert.equal(deletes(fake).length, 1);
            assert.equal(store.claims.size, 0, "no half lease left");
            assert.ok(r.ms < 1500 + 1000, `ended within totalMs + 1 s (${Math.round(r.ms)} ms)`);
          });
        },
      );

      await t.step(
        "one JSON document and a bounded exit: a FIFO log, a token read that never ends",
        async () => {
          await env.run(storeHandler(GOOD).handle, async (_fake, plugin) => {
            const conf = plugin.netConf({ ...v4, timeouts: { requestMs: 500, totalMs: 1000 } });
            await Deno.remove(plugin.logFile).catch(() => {});
            await new Deno.Command("mkfifo", { args: [plugin.logFile] }).output();
            const ok = await plugin.run({ command: "ADD", containerId: "fifo", stdin: conf });
            assertOk(ok);
            assert.equal(ok.stdout.trim().split("\n").length, 1);
            assert.ok(ok.ms < 2000, `exit within totalMs + 1 s (${Math.round(ok.ms)} ms)`);
            await Deno.remove(plugin.tokenFile);
            await new Deno.Command("mkfifo", { args: [plugin.tokenFile] }).output();
            const stuck = await plugin.run({ command: "ADD", containerId: "stuck", stdin: conf });
            assertCniError(stuck, 11, /totalMs/);
            assert.ok(stuck.ms < 2000, `exit within totalMs + 1 s (${Math.round(stuck.ms)} ms)`);
          });
        },
      );

      await t.step("proxy variables are never followed; a redirect is never followed", async () => {
        const proxy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        let proxied = 0;
        (async () => {
          for await (const c of proxy) {
            proxied++;
            c.close();
          }
        })();
        const proxyUrl = `http://127.0.0.1:${proxy.addr.port}`;
        const proxyEnv = { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, ALL_PROXY: proxyUrl };
        const store = storeHandler(GOOD);
        const handle: Handler = (req, seen) =>
          req.method === "DELETE" && seen.path.endsWith("-v4")
            ? new Response(null, { status: 303, headers: { location: "http://127.0.0.1:1/x" } })
            : store.handle(req, seen);
        try {
          await env.run(handle, async (fake, plugin) => {
            const conf = plugin.netConf(v4);
            const add = await plugin.run({
              command: "ADD",
              containerId: "px",
              stdin: conf,
              env: proxyEnv,
            });
            assertOk(add);
            assert.equal(proxied, 0, "no connection to the proxy");
            const del = await plugin.run({ command: "DEL", containerId: "px", stdin: conf });
            assertCniError(del, 105, /redirect.*127\.0\.0\.1:1\/x/);
            assert.equal(fake.seen.filter((s) => s.path === "/x").length, 0);
            assert.equal(store.claims.size, 1, "nothing released");
          }, { agentEnv: proxyEnv });
        } finally {
          proxy.close();
        }
      });

      await t.step("a claim name from Milo that is not DNS-1123 never reaches a URL", async () => {
        const old = new Date(Date.now() - 3600_000).toISOString();
        const evil = {
          ...fixture("ipclaim-bound-ipv4.json"),
          metadata: {
            name: "..",
            uid: "u",
            creationTimestamp: old,
            annotations: { [KEYS.containerId]: "gone", [KEYS.ifname]: "eth0" },
          },
        };
        const handle: Handler = () => reply(200, { kind: "IPClaimList", items: [evil] });
        await env.run(handle, async (fake, plugin) => {
          // Recorded for this host and network: GC would release it but for its name.
          Object.assign(evil.metadata.annotations, {
            [KEYS.host]: hostId({ hostIdFile: "/etc/machine-id", stateDir: plugin.stateDir }),
            [KEYS.network]: "vpc-7b3e",
          });
          const r = await plugin.run({
            command: "GC",
            stdin: { ...plugin.netConf(v4), "cni.dev/valid-attachments": [] },
          });
          assertCniError(r, 105, /DNS-1123/);
          assert.ok(fake.seen.length > 0);
          assert.deepEqual(calls(fake), [], "only LISTs were sent");
        });
      });

      await t.step("answers and annotations are bounded", async () => {
        const huge = "x".repeat(5 * 1024 * 1024);
        await env.run(
          () => reply(201, { kind: "IPClaim", pad: huge }),
          async (_f, plugin) => {
            const r = await plugin.run({
              command: "ADD",
              containerId: "big",
              stdin: plugin.netConf(v4),
            });
            assertCniError(r, 105, /exceeds/);
            assert.ok(r.stdout.length < 4096, "the error quotes little");
            const vpc = await plugin.run({
              command: "ADD",
              containerId: "big",
              stdin: plugin.netConf(v4, { vpc: "v".repeat(1024 * 1024 - 1024) }),
            });
            assertCniError(vpc, 7, /field vpc/);
          },
        );
      });
    } finally {
      await env.close();
    }
  });
}

Deno.test("install refuses credentials inside a writable path; its files are its own and replaced atomically", async () => {
  const fake = await fakeMilo(storeHandler(GOOD).handle);
  // The launcher's own copy of Deno exists only in that form: both installs here are launchers,
  // whether or not `deno compile` works on this machine.
  const plugin = await installPlugin({ miloUrl: fake.url, token: TOKEN, mode: "launcher" });
  try {
    assert.equal(plugin.installed.kind, "launcher");
    const bad = `${plugin.dir}/bad-node.json`;
    await Deno.writeTextFile(
      bad,
      JSON.stringify({
        ...plugin.node,
        milo: { url: fake.url, tokenFile: `${plugin.stateDir}/t` },
      }),
    );
    await assert.rejects(
      install({ dir: `${plugin.dir}/bin2`, config: bad, quiet: true }),
      /inside/,
    );
    const deno = `${plugin.dir}/bin/.milo-ipam/deno`;
    const [copy, source] = [await Deno.stat(deno), await Deno.stat(Deno.execPath())];
    assert.notEqual(copy.ino, source.ino, "a copy, not a hard link into the npm cache");
    assert.equal(copy.nlink, 1);
    assert.equal(copy.mode! & 0o777, 0o755);
    if (Deno.uid() === 0) assert.equal(copy.uid, 0);
    const execs = (async () => {
      const codes: number[] = [];
      for (let i = 0; i < 40; i++) {
        const r = await plugin.run({ command: "VERSION", stdin: "{}" });
        codes.push(r.json?.supportedVersions ? r.code : -1);
      }
      return codes;
    })();
    await install({
      dir: `${plugin.dir}/bin`,
      config: plugin.nodeConfig,
      mode: "launcher",
      quiet: true,
    });
    assert.ok((await execs).every((c) => c === 0), "every exec during the reinstall worked");
    const left = [
      ...Deno.readDirSync(`${plugin.dir}/bin`),
      ...Deno.readDirSync(`${plugin.dir}/bin/.milo-ipam`),
    ]
      .filter((e) => /tmp|raw/.test(e.name));
    assert.deepEqual(left, [], "no temporary file left behind");
  } finally {
    await plugin.cleanup();
    await fake.close();
  }
});

Deno.test("the node config lives outside the runtimes' network directory: an install naming none reads the legacy file with one warning per call; one naming it warns", async () => {
  const store = storeHandler(GOOD);
  const fake = await fakeMilo(store.handle);
  const unnamed = await installPlugin({
    miloUrl: fake.url,
    token: TOKEN,
    nodeConfigAt: "legacy",
    chooseConfig: false,
  });
  const named = await installPlugin({ miloUrl: fake.url, token: TOKEN, nodeConfigAt: "legacy" });
  const warnings = async (p: TestPlugin) =>
    (await p.logLines()).filter((l) => l.level === "warn").map((l) => String(l.msg));
  const readGrant = (p: TestPlugin) =>
    p.installed.flags.find((f) => f.startsWith("--allow-read="))!.slice(13).split(",");
  try {
    const { default: def, legacy } = unnamed.nodeConfigPaths!;
    const netDir = legacy.slice(0, legacy.lastIndexOf("/"));
    assert.equal(unnamed.nodeConfig, legacy);
    assert.equal(unnamed.installed.warnings.length, 1, "the install warned about the legacy file");
    assert.ok(unnamed.installed.warnings[0].includes(legacy));
    assert.ok(readGrant(unnamed).includes(def) && readGrant(unnamed).includes(legacy));
    const conf = unnamed.netConf(v4);
    for (const [command, n] of [["ADD", 1], ["DEL", 2]] as const) {
      const r = await unnamed.run({ command, containerId: "old", stdin: conf });
      assertOk(r);
      assert.ok(!r.stdout.includes(netDir), "the warning never goes to stdout");
      const w = await warnings(unnamed);
      assert.equal(w.length, n, `one warning per invocation: ${JSON.stringify(w)}`);
      assert.ok(w.every((m) => m.includes(legacy) && m.includes(def)), w.join("\n"));
    }
    assert.equal(store.claims.size, 0);
    // The new file present: it is the one read (the legacy file no longer even parses), silently.
    await Deno.writeTextFile(def, JSON.stringify(unnamed.node));
    await Deno.writeTextFile(legacy, "{");
    await Deno.remove(unnamed.logFile);
    const now = await unnamed.run({ command: "ADD", containerId: "new", stdin: conf });
    assertOk(now);
    assert.deepEqual(await warnings(unnamed), [], "no warning with the new file present");
    assert.ok((await unnamed.logLines()).length > 0, "the call was logged");

    // Named at install although it lies in the network directory: warned at install and per call.
    const at = named.nodeConfigPaths!;
    assert.equal(named.nodeConfig, at.legacy);
    assert.equal(named.installed.warnings.length, 1);
    assert.ok(named.installed.warnings[0].includes(at.legacy));
    assert.ok(!readGrant(named).includes(at.default), "no grant on a path it never reads");
    const r = await named.run({ command: "ADD", containerId: "named", stdin: named.netConf(v4) });
    assertOk(r);
    const w = await warnings(named);
    assert.equal(w.length, 1, JSON.stringify(w));
    assert.match(w[0], /runtimes scan/);
    assert.ok(w[0].includes(at.legacy));
  } finally {
    await unnamed.cleanup();
    await named.cleanup();
    await fake.close();
  }
});

/** The largest resident set a process reached, in MB, from GNU time's `-v` report. */
function maxRssMb(timeReport: string): number | undefined {
  const kb = /Maximum resident set size \(kbytes\): (\d+)/.exec(timeReport)?.[1];
  return kb === undefined ? undefined : Number(kb) / 1024;
}

/** What an exec'd GC may reach: a Deno process and a few MiB of kept claims, far below 480 MB. */
const GC_RSS_LIMIT_MB = 200;

for (const mode of MODES) {
  Deno.test(`[${mode}] GC against a Milo answering endless ~1 MB pages: 105 naming the bound, quickly, in bounded memory`, async () => {
    // Claims of this node as milo-ipam writes them (every label and annotation, a 64-hex
    // container ID) with Milo's managedFields: ~1 MB a page, every page with a continue token.
    const claim = (i: number) => {
      const ann = {
        [KEYS.cluster]: "cluster-a",
        [KEYS.node]: "node-a1",
        [KEYS.network]: "vpc-7b3e",
        [KEYS.podUid]: crypto.randomUUID(),
        [KEYS.pod]: `shop/web-${i}`,
        [KEYS.containerId]: crypto.randomUUID().replaceAll("-", "").repeat(2),
        [KEYS.ifname]: "eth0",
      };
      const base = boundFor(
        { metadata: { name: `pod-${i}-v4`, labels: ann, annotations: ann }, spec: {} },
        { allocatedCIDR: "10.40.0.7/32" },
      );
      const meta = base.metadata as Record<string, unknown>;
      return { ...base, metadata: { ...meta, managedFields: [{ f: "m".repeat(400) }] } };
    };
    const items = Array.from({ length: 550 }, (_, i) => claim(i));
    const page = JSON.stringify({ kind: "IPClaimList", metadata: { continue: "more" }, items });
    assert.ok(page.length > 800_000 && page.length < 1024 * 1024, `page of ${page.length} bytes`);
    let lists = 0;
    const fake = await fakeMilo((req) => {
      if (req.method !== "GET" || !new URL(req.url).searchParams.has("labelSelector")) {
        return reply(405, { kind: "Status", code: 405 });
      }
      lists++;
      return new Response(page, { headers: { "content-type": "application/json" } });
    });
    const plugin = await installPlugin({
      miloUrl: fake.url,
      token: TOKEN,
      agent: mode === "agent",
    });
    try {
      // A budget an unbounded list would spend on its 1,000 pages; the bound ends it first.
      await plugin.setNode({ timeouts: { requestMs: 5_000, totalMs: 60_000 } });
      if (mode === "agent") await plugin.startAgent();
      lists = 0;
      const stdin = { ...plugin.netConf(v4), "cni.dev/valid-attachments": [] };
      const time = "/usr/bin/time";
      const timed = mode === "direct" && await Deno.stat(time).then(() => true, () => false);
      const r = timed
        ? await execCni(time, {
          env: {
            PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
            CNI_COMMAND: "GC",
            CNI_IFNAME: "eth0",
            CNI_NETNS: "/var/run/netns/test",
            CNI_PATH: `${plugin.dir}/bin`,
            CNI_ARGS: "IgnoreUnknown=1",
          },
          args: ["-v", plugin.installed.path],
          stdin,
          timeoutMs: 60_000,
        })
        : await plugin.run({ command: "GC", stdin, timeoutMs: 60_000 });
      assertCniError(
        r,
        105,
        /IPClaimList exceeds what this process holds of a list: more than 64 MiB kept \(MAX_LIST_BYTES\)/,
      );
      const kept = items.reduce((n, c) => n + keptSize(IPClaimSchema.parse(c)), 0);
      const bound = Math.floor(MAX_LIST_BYTES / kept) + 1;
      // (With the agent, its own reconcile lists too, and is cut the same way.)
      if (mode === "direct") assert.equal(lists, bound, `cut at the bound: ${lists} pages`);
      assert.ok(r.ms < 30_000, `quickly: ${Math.round(r.ms)} ms`);
      if (timed) {
        const rss = maxRssMb(r.stderr);
        assert.ok(
          rss !== undefined,
          `no maximum RSS in GNU time's report: ${r.stderr.slice(-500)}`,
        );
        console.log(`GC max RSS ${rss.toFixed(1)} MB, ${lists} pages, ${Math.round(r.ms)} ms`);
        assert.ok(rss < GC_RSS_LIMIT_MB, `max RSS ${rss.toFixed(1)} MB`);
      }
      assert.deepEqual(fake.seen.filter((s) => s.method !== "GET"), [], "nothing released");
    } finally {
      await plugin.cleanup();
      await fake.close();
    }
  });
}
