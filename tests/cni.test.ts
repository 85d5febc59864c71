import assert from "node:assert/strict";
import { encodeResult, parseCniArgs, readCniEnv, requireVersion } from "../lib/cni.ts";
import { CniError } from "../lib/errors.ts";
import { parseCidr } from "../lib/ip.ts";

function throwsCni(fn: () => unknown, code: number, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof CniError);
    assert.equal(e.code, code);
    assert.match(`${e.message} ${e.details}`, pattern);
    return true;
  });
}

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

Deno.test("env: a control or format character in an interface name is refused at ADD, taken by DEL and CHECK", () => {
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
});
