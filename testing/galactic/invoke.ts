/**
 * How galactic's masters exec their IPAM delegate: containernetworking/plugins
 * `pkg/ipam` ExecAdd/ExecCheck/ExecDel over libcni's `pkg/invoke` (cni
 * v1.3.0, plugins v1.9.1, as galactic's go.mod pins them), and the strict
 * reading of the delegate's result (`pkg/types/create`, `pkg/types/100`,
 * galactic's internal/cniipam/result.go). Read from those sources; nothing is
 * copied.
 */
import { CniError, GoError, goQuote, type Json, wrap } from "./skel.ts";

/** `invoke.FindInPath`: the first `CNI_PATH` directory holding the plugin as a regular file. */
function findInPath(plugin: string): string {
  const paths = (Deno.env.get("CNI_PATH") ?? "").split(":").filter(Boolean);
  if (!plugin) throw new GoError("no plugin name provided");
  if (plugin.includes("/")) throw new GoError(`invalid plugin name: ${plugin}`);
  if (!paths.length) throw new GoError("no paths provided");
  for (const dir of paths) {
    try {
      if (Deno.statSync(`${dir}/${plugin}`).isFile) return `${dir}/${plugin}`;
    } catch {
      // Not in this directory.
    }
  }
  throw new GoError(`failed to find plugin ${goQuote(plugin)} in path [${paths.join(" ")}]`);
}

/**
 * `RawExec.pluginErr`: a failed delegate's stdout read as a `types.Error`; with
 * no stdout, its stderr is the message (`netplugin failed: "<stderr>"`); with
 * neither, the exit status.
 */
function pluginErr(status: number, stdout: string, stderr: string): CniError {
  if (!stdout) {
    return new CniError(
      0,
      stderr
        ? `netplugin failed: ${goQuote(stderr)}`
        : `netplugin failed with no error message: exit status ${status}`,
    );
  }
  try {
    const j = JSON.parse(stdout);
    const typed = (k: string, t: string) => j?.[k] === undefined || typeof j[k] === t;
    if (
      j === null || typeof j !== "object" || Array.isArray(j) || !typed("msg", "string") ||
      !typed("details", "string") ||
      !(j.code === undefined || (Number.isInteger(j.code) && j.code >= 0))
    ) {
      throw new Error("json: cannot unmarshal into Go value of type types.Error");
    }
    return new CniError(j.code ?? 0, j.msg ?? "", j.details ?? "");
  } catch (err) {
    return new CniError(
      0,
      `netplugin failed but error parsing its diagnostic message ${goQuote(stdout)}: ${
        (err as Error).message
      }`,
    );
  }
}

/**
 * `invoke.DelegateAdd/Check/Del` through `ipam.Exec*(type, stdin)`: execs the plugin with this
 * process's whole environment and CNI_COMMAND set to the verb (`DelegateArgs.AsEnv`), the
 * master's stdin unchanged. On success the delegate's stderr is copied to ours; on failure it
 * is dropped unless stdout was empty. Answers the delegate's stdout.
 */
export async function exec(verb: "ADD" | "CHECK" | "DEL", type: string, stdin: Uint8Array) {
  const path = findInPath(type);
  const child = new Deno.Command(path, {
    env: { ...Deno.env.toObject(), CNI_COMMAND: verb },
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(stdin).catch(() => {});
  await writer.close().catch(() => {});
  const out = await child.output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  if (out.code !== 0) throw pluginErr(out.code, stdout, stderr);
  if (out.stderr.length) Deno.stderr.writeSync(out.stderr);
  return stdout;
}

/** What galactic keeps of an IPAM result (`cniipam.IPAMResult`). */
export interface IpamResult {
  ipv4Address?: string;
  ipv4Gateway?: string;
  /** The IPv6 address with the prefix length IPAM gave (a per-endpoint block). */
  ipv6Subnet?: string;
  ipv6Gateway?: string;
  routes: string[];
}

const RESULT_100 = ["1.0.0", "1.1.0"];
const RESULT_OLDER = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0"];

/** Go's net.ParseIP: dotted IPv4 (no leading zeros) or IPv6 text; undefined when invalid. */
export function parseIp(s: string): { v4: boolean; text: string } | undefined {
  if (/^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/.test(s)) {
    return { v4: true, text: s };
  }
  if (!s.includes(":") || /[^0-9A-Fa-f:.]/.test(s)) return undefined;
  try {
    const host = new URL(`http://[${s}]/`).hostname.slice(1, -1);
    const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
    if (mapped) {
      const n = (parseInt(mapped[1], 16) << 16 | parseInt(mapped[2], 16)) >>> 0;
      return { v4: true, text: [24, 16, 8, 0].map((b) => (n >>> b) & 255).join(".") };
    }
    return { v4: false, text: host };
  } catch {
    return undefined;
  }
}

/** `types.ParseCIDR` (net.ParseCIDR keeping the address): undefined when invalid. */
export function parseCidr(s: string): { v4: boolean; ip: string; prefix: number } | undefined {
  const m = /^([^/]+)\/(\d{1,3})$/.exec(s);
  const ip = m ? parseIp(m[1]) : undefined;
  if (!m || !ip || (m[2].length > 1 && m[2].startsWith("0"))) return undefined;
  const prefix = Number(m[2]);
  const max = ip.v4 && !m[1].includes(":") ? 32 : 128;
  if (prefix > max) return undefined;
  return { v4: ip.v4, ip: ip.text, prefix: ip.v4 && max === 128 ? prefix - 96 : prefix };
}

/**
 * Decodes a result as Go's json decodes it into `types100.Result` (or its 0.x forms): wrong
 * field types, an address that is not a CIDR, a gateway that is not an IP are errors.
 */
function decodeResult(r: Json): void {
  const fail = (what: string) => {
    throw new GoError(`json: cannot unmarshal ${what}`);
  };
  const str = (v: unknown, what: string) =>
    v === undefined || v === null || typeof v === "string" || fail(what);
  const int = (v: unknown, what: string) =>
    v === undefined || v === null || Number.isInteger(v) || fail(what);
  const list = (v: unknown, what: string) => {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) fail(what);
    return (v as unknown[]).map((x) => {
      if (x !== null && (typeof x !== "object" || Array.isArray(x))) fail(what);
      return (x ?? {}) as Json;
    });
  };
  const cidr = (v: unknown) => {
    if (typeof v !== "string") fail("address: not a string");
    if (!parseCidr(v as string)) throw new GoError(`invalid CIDR address: ${v}`);
  };
  const ip = (v: unknown) => {
    if (v === undefined || v === null) return;
    if (typeof v !== "string") fail("gateway: not a string");
    if (v !== "" && !parseIp(v as string)) {
      throw new GoError(`invalid IP address: ${v}`);
    }
  };
  str(r.cniVersion, "cniVersion into string");
  for (const i of list(r.interfaces, "interfaces")) {
    for (const k of ["name", "mac", "sandbox", "socketPath", "pciID"]) str(i[k], `interfaces.${k}`);
    int(i.mtu, "interfaces.mtu");
  }
  for (const c of list(r.ips, "ips")) {
    int(c.interface, "ips.interface");
    cidr(c.address);
    ip(c.gateway);
  }
  for (const rt of list(r.routes, "routes")) {
    cidr(rt.dst);
    ip(rt.gw);
    for (const k of ["mtu", "advmss", "priority", "table", "scope"]) int(rt[k], `routes.${k}`);
  }
  if (
    r.dns !== undefined && r.dns !== null && (typeof r.dns !== "object" || Array.isArray(r.dns))
  ) {
    fail("dns");
  }
}

/** A delegate's result as `create.Create` decoded it, with the version it was read as. */
export interface DelegateResult {
  version: string;
  result: Json;
}

/**
 * `ipam.ExecAdd` (`invoke.ExecPluginWithResult`): execs the delegate, then reads its result in
 * its own cniVersion, else the config's (`fixupResultVersion`), decoding it strictly as
 * `create.Create` does (an unknown version is an error).
 */
export async function execAdd(
  type: string,
  stdin: Uint8Array,
  confVersion: string,
): Promise<DelegateResult> {
  const stdout = await exec("ADD", type, stdin);
  let r: Json;
  try {
    r = JSON.parse(stdout) ?? {};
    if (typeof r !== "object" || Array.isArray(r)) throw new Error("json: cannot unmarshal");
  } catch (err) {
    throw new GoError(`failed to unmarshal raw result: ${(err as Error).message}`);
  }
  const version = typeof r.cniVersion === "string" && r.cniVersion ? r.cniVersion : confVersion;
  r = { ...r, cniVersion: version };
  if (![...RESULT_100, ...RESULT_OLDER].includes(version)) {
    throw new GoError(`unsupported CNI result version ${goQuote(version)}`);
  }
  decodeResult(r);
  return { version, result: r };
}

/**
 * galactic's `cniipam.ResultToIPAMResult` (internal/cniipam/result.go): re-parses the result
 * as a 1.0.0/1.1.0 result (`type100.NewResult`), so a result of any other version fails here,
 * after IPAM ran ("parse IPAM result: ..."). Keeps the IPv4 address without its mask, the IPv6
 * address with its prefix, each family's gateway (none is not an error here), and the routes'
 * destinations.
 */
export function toIpamResult(d: DelegateResult): IpamResult {
  if (!RESULT_100.includes(d.version)) {
    throw wrap(
      "parse IPAM result",
      new GoError(
        `result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is ${goQuote(d.version)}`,
      ),
    );
  }
  const out: IpamResult = { routes: [] };
  for (const c of (d.result.ips ?? []) as Json[]) {
    const a = parseCidr(String(c.address))!;
    const gw = typeof c.gateway === "string" && c.gateway ? parseIp(c.gateway)?.text : undefined;
    if (a.v4) {
      out.ipv4Address = a.ip;
      out.ipv4Gateway = gw;
    } else {
      out.ipv6Subnet = `${a.ip}/${a.prefix}`;
      out.ipv6Gateway = gw;
    }
  }
  for (const rt of (d.result.routes ?? []) as Json[]) {
    const dst = parseCidr(String(rt.dst))!;
    out.routes.push(`${dst.ip}/${dst.prefix}`);
  }
  return out;
}

/**
 * `type100.NewResult` of a prevResult (CHECK): its version must be 1.0.0 or 1.1.0 and its
 * fields decode strictly; answers it.
 */
export function prevResult100(prev: Json): Json {
  decodeResult(prev);
  if (!RESULT_100.includes(String(prev.cniVersion ?? ""))) {
    throw wrap(
      "parse prevResult",
      new GoError(
        `result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is ${
          goQuote(String(prev.cniVersion ?? ""))
        }`,
      ),
    );
  }
  return prev;
}
