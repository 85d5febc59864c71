import assert from "node:assert/strict";
import { claimName, KEYS, labelValue, ownership } from "../lib/claims.ts";
import { webSha256Hex } from "../testing/web_digest.ts";

Deno.test("claim names keep the hash existing claims were named by", async () => {
  const a = { cluster: "cluster-a", containerId: "9f0c1e6a4b2d", ifname: "eth0" };
  const digest = await webSha256Hex(`${a.cluster}\u0000${a.containerId}\u0000${a.ifname}`);
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
