/**
 * A stand-in for galactic's master plugins (`datum-cloud/galactic` c4c2d06: galactic-veth,
 * `internal/cni`, and galactic-tap, `internal/cnitap`, sharing `internal/cnimaster`), run as a
 * CNI plugin process, deciding as they do wherever milo-ipam sees the outcome: the chain it
 * reads from the pod's NAD, what it forwards to its IPAM delegate and in which environment,
 * when it calls ADD, CHECK and DEL, how it reads the result, which failures it returns and
 * which it swallows, which masks it reports. Kernel steps (VRF, veth or tap, host-device,
 * netns addresses, host gateway) do nothing here but refuse an interface name the kernel
 * would, and a test knob makes ADD fail where such a step sits.
 *
 * Run it from a wrapper per binary in a temp bin dir (the runtime execs `CNI_PATH/<type>`):
 *   #!/bin/sh
 *   exec <deno> run --allow-all --no-config --no-lock <abs path>/testing/galactic/master.ts \
 *     --flavour galactic-tap
 * `--flavour galactic-tap` behaves as galactic-tap, anything else as galactic-veth.
 *
 * Environment (besides the CNI variables), as internal/config/cni.go resolves it:
 * - `GALACTIC_CNI_NODE_NAME`, else `NODE_NAME`: the node name (without either, code 4; the
 *   static conflist and the API lookup galactic also tries are not modelled).
 * - `GALACTIC_CNI_KUBECONFIG` (else /var/lib/galactic/kubeconfig), `GALACTIC_CNI_LOG_FILE`
 *   (the stand-in writes stderr when unset), `GALACTIC_CNI_LOG_LEVEL` (info).
 * - `GALACTIC_MASTER_TEST_NADS` (TEST KNOB, the stand-in's Kubernetes API): a directory of
 *   NetworkAttachmentDefinitions, `<namespace>/<name>.json` (testing/galactic/chain.ts
 *   writeNad). Unset is a node without a kubeconfig: every ADD fails creating its client.
 * - `GALACTIC_MASTER_TEST_FAIL_AT` (TEST KNOB): make ADD fail at `before-ipam` (after the
 *   tracker, before IPAM ADD, like vrf.Add) or `after-ipam` (after IPAM ADD, like hostgw).
 * - `GALACTIC_MASTER_TEST_APISERVER` (TEST KNOB): the URL STATUS probes (`GET /healthz`); unset
 *   is "not in a cluster", which STATUS passes.
 */

import { interfaceName, MAX_IFNAME } from "./chain.ts";
import {
  annotateNad,
  k8sClient,
  parseConf,
  type PluginConf,
  podNamespace,
  verifyChain,
} from "./conf.ts";
import { exec, execAdd, type IpamResult, prevResult100, toIpamResult } from "./invoke.ts";
import {
  type Args,
  CniError,
  GoError,
  join,
  type Json,
  log,
  pluginMain,
  print,
  setupLogging,
  wrap,
} from "./skel.ts";

const env = (k: string) => Deno.env.get(k) ?? "";
/** Which binary this is (the wrapper's `--flavour`): galactic-tap, else galactic-veth. */
let flavour = "galactic-veth";
const tap = () => flavour === "galactic-tap";

/** A link the kernel creates: a name past IFNAMSIZ is refused (internal/plumbing/intf/intf.go). */
function link(what: string, ...names: string[]): void {
  const long = names.find((n) => n.length > MAX_IFNAME);
  if (long) {
    throw new GoError(
      `${what} ${names.join("/")}: numerical result out of range (${long} is past IFNAMSIZ)`,
    );
  }
}

/** A made-up MAC for the host end (the kernel's, in galactic). */
function macOf(s: string): string {
  let h = 0;
  for (const ch of s) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return ["02", ...[24, 16, 8, 0, 4].map((b) => ((h >>> b) & 0xff).toString(16).padStart(2, "0"))]
    .join(":");
}

/**
 * cnimaster.AppendIPConfigs: IPv6 then IPv4, both on one interface; IPv4 re-masked (/32 veth,
 * internal/cni/result.go; /25 tap, internal/cnitap/result.go, the mask hostgw puts on the
 * tap's gateway address); routes keep only their destination.
 */
function ipConfigs(res: IpamResult | undefined, index: number, v4mask: number) {
  const ips: Json[] = [];
  if (res?.ipv6Subnet) {
    ips.push({
      interface: index,
      address: res.ipv6Subnet,
      ...(res.ipv6Gateway ? { gateway: res.ipv6Gateway } : {}),
    });
  }
  if (res?.ipv4Address) {
    ips.push({
      interface: index,
      address: `${res.ipv4Address}/${v4mask}`,
      ...(res.ipv4Gateway ? { gateway: res.ipv4Gateway } : {}),
    });
  }
  return { ips, ...(res?.routes.length ? { routes: res.routes.map((dst) => ({ dst })) } : {}) };
}

/**
 * ADD: internal/cni/ops_add.go `cmdAdd` + internal/cni/result.go (galactic-veth);
 * internal/cnitap/ops_add.go `cmdAdd` + internal/cnitap/result.go (galactic-tap).
 */
async function cmdAdd(a: Args): Promise<void> {
  const conf = parseConf(a.stdin);
  const ids = { containerID: a.containerId, vpc: conf.vpc, vpcAttachment: conf.vpcattachment };
  log("INFO", "ADD: starting", { ...ids, netns: a.netns, ifName: a.ifName });
  // Chain completeness (issue #331): before the rollback tracker, so a refusal releases
  // nothing and IPAM is never called.
  const dir = k8sClient();
  const ns = podNamespace(a.args);
  verifyChain(dir, conf.name, ns);
  // The rollback tracker (internal/cni/resource.go, internal/cnitap/resource.go): IPAM
  // delegation is recorded on the ipam block's presence alone, before IPAM ADD is attempted.
  const ipamDelegated = conf.ipamType !== undefined;
  try {
    if (env("GALACTIC_MASTER_TEST_FAIL_AT") === "before-ipam") {
      throw new GoError("add VRF: test knob GALACTIC_MASTER_TEST_FAIL_AT");
    }
    try {
      link("create VRF", interfaceName(conf.vpc, null, "V"));
    } catch (err) {
      throw wrap("add VRF", err);
    }
    const host = interfaceName(conf.vpc, conf.vpcattachment, "H");
    const guest = interfaceName(conf.vpc, conf.vpcattachment, "G");
    try {
      if (tap()) link("create tap", host);
      else link("create veth pair", host, guest);
    } catch (err) {
      throw wrap(tap() ? "add tap" : "add veth", err);
    }
    annotateNad(dir, conf.name, ns, host);
    let res: IpamResult | undefined;
    if (conf.ipamType !== undefined) {
      // veth wraps both steps in "configure IPAM: " (configureIPAM); tap does not.
      const step = (err: unknown) => tap() ? err : wrap("configure IPAM", err);
      let d;
      try {
        d = await execAdd(conf.ipamType, a.stdin, conf.cniVersion || "0.1.0");
      } catch (err) {
        throw step(wrap(`delegate to ${conf.ipamType} ADD`, err));
      }
      try {
        res = toIpamResult(d);
      } catch (err) {
        throw step(wrap("convert IPAM result", err));
      }
      log("DEBUG", "ADD: IPAM allocated", { containerID: a.containerId, ...res });
    }
    // hostgw.ConfigureHostGateway: a family without a gateway is skipped silently.
    if (env("GALACTIC_MASTER_TEST_FAIL_AT") === "after-ipam") {
      // veth wraps hostgw's error (internal/cni/result.go); tap returns it as it is.
      const e = new GoError("add gateway address: test knob GALACTIC_MASTER_TEST_FAIL_AT");
      throw tap() ? e : wrap("configure host gateway", e);
    }
    const mac = macOf(host), mtu = conf.mtu || 1500;
    const interfaces = tap()
      ? [{ name: host, mac, mtu }]
      : [{ name: host, mac, mtu }, { name: a.ifName, mac: macOf(guest), mtu, sandbox: a.netns }];
    print({
      cniVersion: conf.cniVersion,
      interfaces,
      ...ipConfigs(res, tap() ? 0 : 1, tap() ? 25 : 32),
      dns: {},
    });
  } catch (err) {
    // The deferred rollback (`tracker.cleanup`): IPAM DEL with the same stdin first, its
    // failure logged and never returned; then the attachment's own interface.
    log("ERROR", "ADD: failed, rolling back created resources", { err, ...ids });
    if (ipamDelegated) {
      try {
        await exec("DEL", conf.ipamType!, a.stdin);
        log("DEBUG", "Rollback: released IPAM allocation", { ipamType: conf.ipamType });
      } catch (delErr) {
        log("ERROR", "Rollback: failed to release IPAM allocation", {
          err: delErr,
          ipamType: conf.ipamType,
        });
      }
    }
    log("INFO", "Selective rollback: cleaning up resources created during failed ADD", {
      vpc: conf.vpc,
      vpcAttachment: conf.vpcattachment,
    });
    throw err;
  }
}

/**
 * galactic-veth's checkPrevResult (internal/cni/ops_check.go): each IP on a guest (sandboxed)
 * interface must be among that interface's addresses, which it lists for IPv6 only
 * (`validateIPOnInterface`: AddrList FAMILY_V6), so an IPv4 address is never found; IPv6
 * ones, and the kernel's links, MACs and MTUs, are taken as galactic's ADD left them.
 */
function vethPrevResult(prev: Json): void {
  const interfaces = (prev.interfaces ?? []) as Json[];
  for (const ip of (prev.ips ?? []) as Json[]) {
    if (ip.interface === undefined || ip.interface === null) continue;
    const i = ip.interface as number;
    if (i < 0 || i >= interfaces.length) {
      throw new GoError(`ipConfig interface index ${i} out of range [0, ${interfaces.length})`);
    }
    const target = interfaces[i];
    if (!target.sandbox) continue;
    const addr = String(ip.address);
    const bare = addr.split("/")[0];
    if (!addr.includes(":")) {
      throw new GoError(
        `ip ${addr} on "${target.name}" (guest): ip ${bare} not assigned to "${target.name}"`,
      );
    }
  }
}

/**
 * CHECK: internal/cni/ops_check.go and internal/cnitap/ops_check.go `cmdCheck`. Errors are
 * collected: the node-level and interface checks, the prevResult against the kernel (strict
 * 1.0.0/1.1.0 parse; veth: IPv6 addresses only), then IPAM CHECK with the stdin unchanged
 * (called even when an earlier check failed); joined and wrapped "CHECK failed: %w", so skel
 * prints the delegate's error when IPAM CHECK failed, else code 999.
 */
async function cmdCheck(a: Args): Promise<void> {
  const conf = parseConf(a.stdin);
  const ids = { containerID: a.containerId, vpc: conf.vpc, vpcAttachment: conf.vpcattachment };
  log("INFO", "CHECK: starting", ids);
  const errs: Error[] = [];
  const prev = conf.raw.prevResult;
  if (prev !== undefined && prev !== null) {
    try {
      const parsed = prevResult100(prev as Json);
      if (!tap()) vethPrevResult(parsed);
    } catch (err) {
      errs.push(wrap("prevResult validation", err));
    }
  }
  if (conf.ipamType !== undefined) {
    try {
      await exec("CHECK", conf.ipamType, a.stdin);
    } catch (err) {
      errs.push(wrap("IPAM CHECK", err));
    }
  }
  if (errs.length) {
    const err = wrap("CHECK failed", join(errs));
    log("ERROR", "CHECK: failed", { err, ...ids });
    throw err;
  }
  log("INFO", "CHECK: passed", ids);
}

/**
 * DEL: internal/cni/ops_del.go and internal/cnitap/ops_del.go `cmdDel`: always succeeds. A config
 * that does not parse prints an empty 1.0.0 result and skips all cleanup, IPAM DEL included;
 * otherwise IPAM DEL runs first and its failure is logged (WARN) and swallowed; then the
 * interface cleanup (nothing here); then an empty result in the config's version. An empty
 * type100 result prints `dns: {}` (a struct field: omitempty keeps it).
 */
async function cmdDel(a: Args): Promise<void> {
  log("INFO", "DEL: starting", { containerID: a.containerId, netns: a.netns });
  let conf: PluginConf;
  try {
    conf = parseConf(a.stdin);
  } catch (err) {
    log("ERROR", "DEL: failed to parse CNI config, skipping cleanup", {
      err,
      containerID: a.containerId,
    });
    print({ cniVersion: "1.0.0", dns: {} });
    return;
  }
  if (conf.ipamType !== undefined) {
    try {
      await exec("DEL", conf.ipamType, a.stdin);
    } catch (err) {
      log("WARN", "DEL: IPAM delegation failed, allocation may not have been released", {
        err,
        containerID: a.containerId,
      });
    }
  }
  log("INFO", "DEL: skipping shared resource cleanup (handled by GC)", {
    containerID: a.containerId,
    vpc: conf.vpc,
    vpcAttachment: conf.vpcattachment,
  });
  // types.PrintResult converts to the config's version; an empty one fails and prints nothing.
  if (conf.cniVersion) print({ cniVersion: conf.cniVersion, dns: {} });
}

/**
 * STATUS: internal/cnimaster/check.go `RunStatus`: the config must parse with cniVersion and
 * type (`ParseStatusConf`, code 7), then the API server must answer (`ProbeAPIServer`: any HTTP
 * status; code 50 otherwise). The IPAM delegate is never asked.
 */
async function cmdStatus(a: Args): Promise<void> {
  let sc: Json;
  try {
    sc = JSON.parse(new TextDecoder().decode(a.stdin));
  } catch (err) {
    throw new CniError(7, "invalid CNI config", String(err));
  }
  if (!sc.cniVersion) throw new CniError(7, "cniVersion is required");
  if (!sc.type) throw new CniError(7, "type is required");
  setupLogging(env("GALACTIC_CNI_LOG_FILE") || undefined, env("GALACTIC_CNI_LOG_LEVEL"));
  const api = env("GALACTIC_MASTER_TEST_APISERVER");
  log("INFO", "STATUS: probing API server reachability");
  if (!api) return log("INFO", "STATUS: ready"); // rest.ErrNotInCluster: the probe is skipped
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
  // cmd/galactic-tap/main.go sets CNI_NETNS_OVERRIDE=true for every call (tap never enters a
  // netns), so skel skips its netns check and every delegate inherits it.
  if (Deno.args[0] === "--flavour") flavour = Deno.args[1];
  if (tap()) Deno.env.set("CNI_NETNS_OVERRIDE", "true");
  await pluginMain(
    { add: cmdAdd, check: cmdCheck, del: cmdDel, status: cmdStatus },
    "CNI galactic plugin (milo-ipam test stand-in)",
  );
}
