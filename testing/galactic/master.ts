/**
 * A stand-in for galactic's master plugins (`datum-cloud/galactic`: galactic-veth,
 * `internal/cni`, and galactic-tap, `internal/cnitap`, sharing `internal/cnimaster`), run as a
 * CNI plugin process, that treats its IPAM delegate as they do: what it forwards, when it calls
 * ADD, CHECK and DEL, which failures it returns and which it swallows, which masks it reports.
 * It does no dataplane work: every kernel and Kubernetes step of the real plugins (VRF, veth or
 * tap, host-device move, NAD patch, netns addresses, host gateway) is a no-op here, with a test
 * knob to make it fail at the point that step sits.
 *
 * Read from galactic's sources (newest stored versions); nothing is copied. The flavour is the
 * config's `type`: `galactic-tap` behaves as galactic-tap, anything else as galactic-veth.
 *
 * Run it from a wrapper in a temp bin dir (the runtime execs `CNI_PATH/<type>`):
 *   #!/bin/sh
 *   exec <deno> run --allow-all --no-config --no-lock <abs path>/testing/galactic/master.ts "$@"
 *
 * Environment (besides the CNI variables):
 * - `GALACTIC_CNI_NODE_NAME`: the node name (cnimaster.ParseConf resolves it from this variable
 *   or the node's conflist; without either it is code 4). Exported to the delegate as NODE_NAME.
 * - `GALACTIC_CNI_LOG_FILE`: JSON-lines log (cnimaster.SetupLogging); stderr when unset.
 * - `GALACTIC_MASTER_TEST_FAIL_AT` (TEST KNOB, not galactic's): make ADD fail at one point:
 *   `chain-check` (before the rollback tracker exists, like nadpatch.VerifyChainComplete),
 *   `before-ipam` (after the tracker, before IPAM ADD, like vrf.Add or veth.Add), `after-ipam`
 *   (after IPAM ADD succeeded, like hostgw.ConfigureHostGateway).
 * - `GALACTIC_MASTER_TEST_APISERVER` (TEST KNOB): the URL STATUS probes (`GET /healthz`) in place
 *   of the kubeconfig's API server; unset is "not in a cluster", which STATUS passes.
 */

import {
  type Args,
  CniError,
  delegate,
  DelegateError,
  type Json,
  log,
  logTo,
  pluginMain,
} from "./skel.ts";

/** types100's supported result versions: what `type100.NewResult` parses (anything else fails). */
const RESULT_100_VERSIONS = ["1.0.0", "1.1.0"];
const BASE62 = /^[0-9A-Za-z]+$/;

/** What galactic keeps of an IPAM result (`cniipam.IPAMResult`). */
interface IpamResult {
  ipv4Address?: string;
  ipv4Gateway?: string;
  /** The IPv6 address with the prefix length IPAM gave (a per-endpoint block). */
  ipv6Subnet?: string;
  ipv6Gateway?: string;
  routes: string[];
}

/**
 * internal/cniipam `ResultToIPAMResult`: re-parses the delegate's result as a 1.0.0/1.1.0
 * result (`type100.NewResult`; any other cniVersion is an error, after IPAM ran), keeps the IPv4
 * address without its mask and the IPv6 address with its prefix, each family's gateway (no
 * gateway is not an error here), and the routes' destinations.
 */
function resultToIpamResult(stdout: string): IpamResult {
  let r: Json;
  try {
    r = JSON.parse(stdout);
  } catch (err) {
    throw new Error(`convert IPAM result: parse IPAM result: ${err}`);
  }
  if (!RESULT_100_VERSIONS.includes(String(r.cniVersion))) {
    throw new Error(
      `convert IPAM result: parse IPAM result: result type supports [1.0.0 1.1.0] but ` +
        `unmarshalled CNIVersion is "${r.cniVersion}"`,
    );
  }
  const out: IpamResult = { routes: [] };
  for (const ip of (r.ips ?? []) as Json[]) {
    const address = String(ip.address);
    const gateway = typeof ip.gateway === "string" ? ip.gateway : undefined;
    if (!address.includes(":")) {
      out.ipv4Address = address.split("/")[0];
      out.ipv4Gateway = gateway;
    } else {
      out.ipv6Subnet = address;
      out.ipv6Gateway = gateway;
    }
  }
  for (const rt of (r.routes ?? []) as Json[]) out.routes.push(String(rt.dst));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Config: internal/cnimaster/config.go `ParseConf` (both flavours' parseConf wrap it).

interface PluginConf {
  raw: Json;
  cniVersion: string;
  type: string;
  vpc: string;
  vpcattachment: string;
  mtu: number;
  /** Whether to delegate at all: decided by the `ipam` block's presence alone. */
  ipamType?: string;
}

function parseConf(stdin: Uint8Array): PluginConf {
  let raw: Json;
  try {
    raw = JSON.parse(new TextDecoder().decode(stdin));
  } catch (err) {
    throw new CniError(7, "invalid CNI config", String(err));
  }
  // cnimaster.ParseConf: vpc and vpcattachment must be non-empty base62 (code 7), checked first,
  // before any state exists (`IsValidBase62`).
  for (const field of ["vpc", "vpcattachment"] as const) {
    const v = typeof raw[field] === "string" ? raw[field] as string : "";
    if (!v) throw new CniError(7, `${field} is required and must be a non-empty base62 string`);
    if (!BASE62.test(v)) {
      throw new CniError(7, `invalid base62 value for field '${field}': ${JSON.stringify(v)}`);
    }
  }
  // cnimaster.ParseConf: the node name (env > conflist > API auto-detection; code 4 without),
  // then exported for the rest of the call (os.Setenv NODE_NAME and KUBECONFIG), so the IPAM
  // delegate inherits both.
  const nodeName = Deno.env.get("GALACTIC_CNI_NODE_NAME") ?? "";
  if (!nodeName) {
    throw new CniError(4, "node name is required (or set GALACTIC_CNI_NODE_NAME)");
  }
  Deno.env.set("NODE_NAME", nodeName);
  Deno.env.set("KUBECONFIG", Deno.env.get("GALACTIC_CNI_KUBECONFIG") ?? "");
  logTo(Deno.env.get("GALACTIC_CNI_LOG_FILE") || undefined); // cnimaster.SetupLogging
  // (ParseConf's prevResult validation reads `PluginConf.PrevResult`, which JSON decoding never
  // fills (`prevResult` lands in RawPrevResult), so it checks nothing; ADD's
  // ValidatePrevResultAdd likewise. Nothing to mirror.)
  const ipam = raw.ipam;
  return {
    raw,
    cniVersion: String(raw.cniVersion ?? ""),
    type: String(raw.type ?? ""),
    vpc: raw.vpc as string,
    vpcattachment: raw.vpcattachment as string,
    mtu: typeof raw.mtu === "number" ? raw.mtu : 1500,
    ipamType: ipam && typeof ipam === "object" ? String((ipam as Json).type ?? "") : undefined,
  };
}

// ---------------------------------------------------------------------------------------------
// Verbs.

const failAt = () => Deno.env.get("GALACTIC_MASTER_TEST_FAIL_AT") ?? "";

/** A made-up host interface name and MAC (intf.GenerateInterfaceNameHost is not mirrored). */
function hostInterface(conf: PluginConf) {
  const name = `g${conf.vpc}${conf.vpcattachment}`.slice(0, 14) + "H";
  let h = 0;
  for (const ch of `${conf.vpc}/${conf.vpcattachment}`) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  const mac = [
    "02",
    ...[24, 16, 8, 0, 4].map((s) => ((h >>> s) & 0xff).toString(16).padStart(2, "0")),
  ]
    .join(":");
  return { name, mac, mtu: conf.mtu };
}

/**
 * ADD: internal/cni/ops_add.go `cmdAdd` + internal/cni/result.go `buildVethResult` and
 * `configureIPAM` (galactic-veth); internal/cnitap/ops_add.go `cmdAdd` (galactic-tap).
 */
async function cmdAdd(args: Args): Promise<Json> {
  const conf = parseConf(args.stdin);
  const tap = conf.type === "galactic-tap";
  log("INFO", "ADD: starting", {
    containerID: args.containerId,
    vpc: conf.vpc,
    vpcAttachment: conf.vpcattachment,
  });
  // Chain-completeness check (nadpatch.VerifyChainComplete, code 7): before the tracker, so a
  // failure here rolls nothing back and IPAM is never called.
  if (failAt() === "chain-check") {
    throw new CniError(7, "chain completeness check: test knob GALACTIC_MASTER_TEST_FAIL_AT");
  }
  // The rollback tracker (internal/cni/resource.go and internal/cnitap/resource.go
  // `resourceTracker`): IPAM delegation is recorded on the ipam block's presence alone, BEFORE
  // IPAM ADD is attempted, so every failure from here on calls IPAM DEL, whether or not IPAM
  // ADD ran or succeeded (the delegated DEL is idempotent).
  const tracker = { ipamDelegated: conf.ipamType !== undefined };
  try {
    // vrf.Add, veth.Add / tap.Add, the host link lookup, nadpatch.AnnotateNAD: no-ops here.
    if (failAt() === "before-ipam") {
      throw new Error("add VRF: test knob GALACTIC_MASTER_TEST_FAIL_AT");
    }
    const host = hostInterface(conf);
    let res: IpamResult | undefined;
    if (conf.ipamType !== undefined) {
      let stdout: string;
      try {
        stdout = await delegate("ADD", conf.ipamType, args.stdin);
      } catch (err) {
        if (err instanceof DelegateError) throw err; // wrapped with %w: printed as the delegate's
        throw new Error(`delegate to ${conf.ipamType} ADD: ${(err as Error).message}`);
      }
      res = resultToIpamResult(stdout);
      log("DEBUG", "ADD: IPAM allocated", { containerID: args.containerId, ...res });
    }
    // veth: configureInterfaceInNetns, readGuestInterface (kernel: no-ops here); then both
    // flavours: internal/hostgw `ConfigureHostGateway`, which configures each family that has
    // a gateway and silently skips a family without one (no error).
    for (const [fam, gw] of [["IPv6", res?.ipv6Gateway], ["IPv4", res?.ipv4Gateway]] as const) {
      const has = fam === "IPv6" ? res?.ipv6Subnet : res?.ipv4Address;
      if (has && !gw) {
        log(
          "WARN",
          `hostgw: no ${fam} gateway in the IPAM result: no gateway address or ` +
            `pod-subnet route configured for ${fam}`,
          { containerID: args.containerId },
        );
      }
    }
    if (failAt() === "after-ipam") {
      throw new Error("configure host gateway: test knob GALACTIC_MASTER_TEST_FAIL_AT");
    }
    // The printed result (cnimaster `AppendIPConfigs`): IPv6 then IPv4, both pointing at one
    // interface; IPv4 re-masked, /32 for veth (internal/cni/result.go `buildResult`), /25 for
    // tap (internal/cnitap/result.go `buildTapResult`: the mask hostgw puts on the tap's gateway);
    // IPv6 as IPAM gave it; routes keep only their destination.
    const interfaces = tap
      ? [{ name: args.ifName, mac: host.mac, mtu: host.mtu }, host]
      : [host, { name: args.ifName, mac: "02:00:00:00:00:01", mtu: host.mtu, sandbox: args.netns }];
    const index = tap ? 0 : 1;
    const ips: Json[] = [];
    if (res?.ipv6Subnet) {
      ips.push({ interface: index, address: res.ipv6Subnet, gateway: res.ipv6Gateway });
    }
    if (res?.ipv4Address) {
      const address = `${res.ipv4Address}/${tap ? 25 : 32}`;
      ips.push({ interface: index, address, gateway: res.ipv4Gateway });
    }
    const result: Json = { cniVersion: conf.cniVersion, interfaces, ips };
    if (res?.routes.length) result.routes = res.routes.map((dst) => ({ dst }));
    return result;
  } catch (err) {
    // The deferred rollback (`tracker.cleanup`): IPAM DEL with the same stdin first, its failure
    // logged and never returned; then the attachment's interface (a no-op here).
    log("ERROR", "ADD: failed, rolling back created resources", {
      err: String((err as Error).message),
      containerID: args.containerId,
    });
    if (tracker.ipamDelegated) {
      try {
        await delegate("DEL", conf.ipamType!, args.stdin);
        log("DEBUG", "Rollback: released IPAM allocation", { ipamType: conf.ipamType });
      } catch (delErr) {
        log("ERROR", "Rollback: failed to release IPAM allocation", {
          err: delErr instanceof DelegateError ? delErr.error : String(delErr),
          ipamType: conf.ipamType,
        });
      }
    }
    throw err;
  }
}

/**
 * CHECK: internal/cni/ops_check.go and internal/cnitap/ops_check.go `cmdCheck`. Errors are
 * collected: the node-level and interface checks (kernel: no-ops here), `checkPrevResult` (which
 * parses prevResult as a 1.0.0/1.1.0 result), then IPAM CHECK with the stdin unchanged (so the
 * delegate sees the prevResult the runtime cached: the master's own result, IPv4 /25 for tap),
 * called even when an earlier check failed.
 */
async function cmdCheck(args: Args): Promise<void> {
  const conf = parseConf(args.stdin);
  const errs: Error[] = [];
  const prev = conf.raw.prevResult as Json | undefined;
  if (prev !== undefined && prev !== null) {
    if (!RESULT_100_VERSIONS.includes(String(prev.cniVersion))) {
      errs.push(
        new Error(
          `prevResult validation: parse prevResult: result type supports [1.0.0 1.1.0] but ` +
            `unmarshalled CNIVersion is "${prev.cniVersion}"`,
        ),
      );
    } else if (conf.type !== "galactic-tap") {
      // galactic-veth's checkPrevResult: each IP's interface index must be in range.
      const n = ((prev.interfaces ?? []) as unknown[]).length;
      for (const ip of (prev.ips ?? []) as Json[]) {
        const i = ip.interface;
        if (typeof i === "number" && (i < 0 || i >= n)) {
          errs.push(new Error(`prevResult validation: ipConfig interface index ${i} out of range`));
        }
      }
    }
  }
  if (conf.ipamType !== undefined) {
    try {
      await delegate("CHECK", conf.ipamType, args.stdin);
    } catch (err) {
      errs.push(err as Error);
    }
  }
  if (errs.length) {
    log("ERROR", "CHECK: failed", { containerID: args.containerId, err: errs.map(String) });
    // errors.Join wrapped with %w: skel's errors.As finds the delegate's types.Error if any.
    const fromDelegate = errs.find((e) => e instanceof DelegateError);
    if (fromDelegate) throw fromDelegate;
    throw new Error(`CHECK failed: ${errs.map((e) => e.message).join("\n")}`);
  }
  log("INFO", "CHECK: passed", { containerID: args.containerId });
}

/**
 * DEL: internal/cni/ops_del.go and internal/cnitap/ops_del.go `cmdDel`: always succeeds. A config
 * that does not parse (a vpc that is not base62) prints an empty 1.0.0 result and skips all
 * cleanup, IPAM DEL included; otherwise IPAM DEL runs first, and its failure is logged (WARN) and
 * swallowed; then the interface cleanup (no-ops here); then an empty result in the config's version.
 */
async function cmdDel(args: Args): Promise<Json> {
  log("INFO", "DEL: starting", { containerID: args.containerId, netns: args.netns });
  let conf: PluginConf;
  try {
    conf = parseConf(args.stdin);
  } catch (err) {
    log("ERROR", "DEL: failed to parse CNI config, skipping cleanup", {
      err: (err as Error).message,
      containerID: args.containerId,
    });
    return { cniVersion: "1.0.0" };
  }
  if (conf.ipamType !== undefined) {
    try {
      await delegate("DEL", conf.ipamType, args.stdin);
    } catch (err) {
      log("WARN", "DEL: IPAM delegation failed, allocation may not have been released", {
        err: err instanceof DelegateError ? err.error : String(err),
        containerID: args.containerId,
      });
    }
  }
  return { cniVersion: conf.cniVersion };
}

/**
 * STATUS: internal/cnimaster/check.go `RunStatus` (both flavours' cmdStatus): the config must
 * parse with cniVersion and type (`ParseStatusConf`, code 7), then the API server must answer
 * (`ProbeAPIServer`: any HTTP status; code 50 otherwise; no kubeconfig and not in a cluster
 * passes). The IPAM delegate is never asked.
 */
async function cmdStatus(args: Args): Promise<void> {
  let sc: Json;
  try {
    sc = JSON.parse(new TextDecoder().decode(args.stdin));
  } catch (err) {
    throw new CniError(7, "invalid CNI config", String(err));
  }
  if (!sc.cniVersion) throw new CniError(7, "cniVersion is required");
  if (!sc.type) throw new CniError(7, "type is required");
  logTo(Deno.env.get("GALACTIC_CNI_LOG_FILE") || undefined);
  const api = Deno.env.get("GALACTIC_MASTER_TEST_APISERVER");
  if (!api) return; // rest.ErrNotInCluster: the probe is skipped
  log("INFO", "STATUS: probing API server reachability");
  try {
    const res = await fetch(`${api.replace(/\/$/, "")}/healthz`, {
      signal: AbortSignal.timeout(2_000),
    });
    await res.body?.cancel();
  } catch (err) {
    log("ERROR", "STATUS: API server probe failed", { err: String(err) });
    throw new CniError(50, `API server health check failed: healthz request failed: ${err}`);
  }
  log("INFO", "STATUS: ready");
}

if (import.meta.main) {
  await pluginMain({ add: cmdAdd, check: cmdCheck, del: cmdDel, status: cmdStatus });
}
