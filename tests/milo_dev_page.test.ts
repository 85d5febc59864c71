/** The utilization page, rendered by headless Chromium. */

import assert from "node:assert/strict";
import type { IPPoolObject } from "../milo-dev/objects.ts";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";

const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = new URL("../.tmp/artifacts/", import.meta.url).pathname;
const NS = "/namespaces/default";

function haveChromium(): boolean {
  try {
    return Deno.statSync(CHROMIUM).isFile;
  } catch {
    return false;
  }
}

const present = haveChromium();
if (!present && !Deno.env.get("CI")) {
  console.error(`milo_dev_page: ${CHROMIUM} is missing; skipping (apt-get install -y chromium)`);
}

async function chromium(args: string[], ms = 60_000): Promise<string> {
  const profile = await Deno.makeTempDir({ prefix: "milo-dev-chromium-" });
  const child = new Deno.Command(CHROMIUM, {
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-quic",
      "--no-first-run",
      `--user-data-dir=${profile}`,
      ...args,
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  try {
    const out = await child.output();
    const stdout = new TextDecoder().decode(out.stdout);
    if (!out.success) {
      throw new Error(
        `chromium failed (${out.code}): ${new TextDecoder().decode(out.stderr).slice(-2000)}`,
      );
    }
    return stdout;
  } finally {
    clearTimeout(timer);
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await Deno.remove(profile, { recursive: true }).catch(() => {});
  }
}

async function lease(
  dev: Awaited<ReturnType<typeof startMiloDev>>,
  cluster: string,
  node: string,
  pod: string,
  cid: string,
) {
  const nodeLabel = node.length > 63 ? `h-${node.length}-${node.slice(0, 20)}` : node;
  for (const [fam, cls] of [["v4", "vpc-pods-ipv4"], ["v6", "vpc-pods-ipv6"]]) {
    const r = await miloApi(dev, "POST", `${NS}/ipclaims`, {
      body: claimBody(`${cluster}-${pod.replace("/", "-")}-${fam}`, {
        className: cls,
        labels: { "milo-ipam.io/cluster": cluster, "milo-ipam.io/node": nodeLabel },
        annotations: {
          "milo-ipam.io/cluster": cluster,
          "milo-ipam.io/node": node,
          "milo-ipam.io/pod": pod,
          "milo-ipam.io/container-id": cid,
          "milo-ipam.io/ifname": "eth0",
        },
      }),
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
}

Deno.test({
  name: "milo-dev page: pools, bars and leases by cluster/node in Chromium; screenshot",
  ignore: !present && !Deno.env.get("CI"),
  async fn() {
    if (!present) throw new Error(`${CHROMIUM} is missing: install the Debian package "chromium"`);
    const dev = await startMiloDev();
    try {
      const longNode = "ip-10-0-12-34.eu-central-1.compute.internal-with-a-very-long-suffix-x";
      await lease(dev, "cluster-a", "node-1", "shop/web-0", "9f0c1e6a4b2d48e7a1c3");
      await lease(dev, "cluster-a", "node-1", "shop/web-1", "1a2b3c4d5e6f70819203");
      await lease(dev, "cluster-a", "node-2", "shop/cart-0", "aa00bb11cc22dd33ee44");
      await lease(dev, "cluster-b", longNode, "kube-system/coredns-7d9f", "0123456789abcdef0123");
      await miloApi(dev, "POST", `${NS}/ipclaims`, { body: claimBody("manual-claim") });
      await dev.resetStats();

      const dom = await chromium(["--dump-dom", "--virtual-time-budget=5000", `${dev.url}/`]);
      for (const pool of ["vpc-7b3e-pods-v4", "vpc-7b3e-pods-v6", "vpc-9c1d-pods-v4"]) {
        assert.ok(dom.includes(`data-pool="${pool}"`), `pool ${pool} shown`);
      }
      const v4 = (await miloApi<IPPoolObject>(dev, "GET", "/ippools/vpc-7b3e-pods-v4")).body.status;
      assert.deepEqual([v4.capacity.allocated, v4.capacity.total, v4.utilizationPercent], [
        "7",
        "256",
        2.7344,
      ]);
      assert.match(dom, /class="fill[^"]*" style="width: ?2\.7344%;?"/, "v4 bar at 7/256");
      assert.ok(dom.includes(">2.73%<"), "v4 percentage shown");
      assert.ok(dom.includes("&lt;0.01%"), "tiny v6 utilization shown as <0.01%");
      assert.ok(dom.includes('>7</b> / <span class="total">256</span>'), "allocated / total shown");
      const section = (name: string) => {
        const i = dom.indexOf(`data-cluster="${name}"`);
        assert.ok(i >= 0, `cluster ${name} shown`);
        const j = dom.indexOf("data-cluster=", i + 10);
        return dom.slice(i, j < 0 ? undefined : j);
      };
      const a = section("cluster-a");
      assert.ok(a.includes('data-node="node-1"') && a.includes('data-node="node-2"'));
      const node1 = a.slice(a.indexOf('data-node="node-1"'), a.indexOf('data-node="node-2"'));
      assert.ok(
        node1.includes("shop/web-0") && node1.includes("shop/web-1") &&
          !node1.includes("shop/cart-0"),
      );
      assert.ok(node1.includes("10.40.0.1") && node1.includes("10.40.0.2"));
      assert.ok(a.slice(a.indexOf('data-node="node-2"')).includes("shop/cart-0"));
      const b = section("cluster-b");
      assert.ok(b.includes(`data-node="${longNode}"`), "full node name from the annotation");
      assert.ok(b.includes("kube-system/coredns-7d9f"));
      assert.ok(section("(unlabelled)").includes("default/manual-claim"));
      assert.ok(dom.includes("live"), "live indicator");
      const stats = await dev.stats();
      // deno-lint-ignore no-explicit-any
      assert.ok((stats.page as any).feed >= 1, "the page polls /-/utilization");

      const filtered = await chromium([
        "--dump-dom",
        "--virtual-time-budget=3000",
        `${dev.url}/?project=tenant-b`,
      ]);
      assert.ok(filtered.includes('data-pool="vpc-9c1d-pods-v4"'));
      assert.ok(!filtered.includes('data-pool="vpc-7b3e-pods-v4"'));

      await Deno.mkdir(ARTIFACTS, { recursive: true });
      const png = `${ARTIFACTS}milo-dev-page.png`;
      await chromium([
        `--screenshot=${png}`,
        "--window-size=1280,900",
        "--hide-scrollbars",
        "--virtual-time-budget=5000",
        `${dev.url}/?project=tenant-a`,
      ]);
      const head = (await Deno.readFile(png)).slice(0, 8);
      assert.deepEqual([...head], [137, 80, 78, 71, 13, 10, 26, 10], "a PNG was written");
    } finally {
      await dev.stop();
    }
  },
});
