/** Unit tests of milo-dev's address arithmetic and selectors. */

import assert from "node:assert/strict";
import { formatCIDR, formatIP, parseCIDR, parseIP, percent4 } from "../milo-dev/ipmath.ts";
import { matchLabels, parseFieldSelector, parseLabelSelector } from "../milo-dev/selectors.ts";

Deno.test("ipmath: parse/format round trips, RFC 5952, 128-bit exact", () => {
  for (
    const [inp, out] of [
      ["10.40.0.7", "10.40.0.7"],
      ["fd20:0:0:1:0:3:0:0", "fd20::1:0:3:0:0"],
      ["FD20:0000::0001", "fd20::1"],
      ["::", "::"],
      ["::1", "::1"],
      ["1:0:0:2:0:0:0:3", "1:0:0:2::3"],
      ["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"],
      ["::ffff:10.0.0.1", "::ffff:a00:1"],
    ]
  ) {
    const ip = parseIP(inp)!;
    assert.ok(ip, inp);
    assert.equal(formatIP(ip.family, ip.value), out);
  }
  for (
    const bad of ["10.0.0.256", "1.2.3", "1::2::3", "12345::", "01.2.3.4", "1:2:3:4:5:6:7:8:9"]
  ) {
    assert.equal(parseIP(bad), undefined, bad);
  }
  const c = parseCIDR("fd20:0:0:1::/64")!;
  assert.equal(c.prefix, 64);
  assert.equal(formatCIDR("IPv6", c.base + (3n << 32n), 96), "fd20::1:0:3:0:0/96");
  assert.equal(parseCIDR("10.40.0.1/24"), undefined, "host bits set");
  const top = parseIP("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")!;
  assert.equal(top.value, (1n << 128n) - 1n);
  assert.equal(percent4(9n, 256n), 3.5156);
  assert.equal(percent4(1n, 3n), 33.3333);
  assert.equal(percent4(2n, 3n), 66.6667);
  assert.equal(percent4(5n, 1n << 32n), 0);
});

Deno.test("selectors: label and field syntax", () => {
  const labels = { app: "web", tier: "front", "milo-ipam.io/node": "node-1" };
  const m = (s: string) => matchLabels(parseLabelSelector(s), labels);
  assert.ok(m("app=web"));
  assert.ok(m("app==web"));
  assert.ok(!m("app!=web"));
  assert.ok(m("app"));
  assert.ok(!m("!app"));
  assert.ok(m("!missing"));
  assert.ok(m("tier in (back, front)"));
  assert.ok(!m("tier notin (back,front)"));
  assert.ok(m("missing notin (x)"));
  assert.ok(m("app=web,milo-ipam.io/node in (node-1),missing!=x"));
  assert.ok(m(""));
  assert.throws(() => parseLabelSelector("app=(x"));
  assert.throws(() => parseLabelSelector("bad key=x"));
  const f = parseFieldSelector("metadata.name=a,spec.className!=b", [
    "metadata.name",
    "spec.className",
  ]);
  assert.deepEqual(f.map((x) => x.op), ["=", "!="]);
  assert.throws(
    () => parseFieldSelector("spec.address=x", ["metadata.name"]),
    /field label not supported/,
  );
});
