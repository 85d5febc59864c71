/**
 * A stand-in for galactic-bgp (`datum-cloud/galactic` c4c2d06, `internal/cnibgp`), the plugin a
 * galactic chain runs after its master, and for galactic-router's GC of what it publishes
 * (`internal/gc/gc.go`): which prefixes galactic announces for which attachment, and for how
 * long after the pod that had them is gone. That is where milo-ipam's hold matters: an address
 * Milo gives another attachment while it is still announced here sends that VPC's traffic for it
 * to the wrong pod. SRv6, eBPF, BGPVRFInstances and EndpointSlices are not modelled (milo-ipam sees
 * nothing of them).
 *
 * Run it as a CNI plugin from a wrapper in the runtime's CNI_PATH (as testing/galactic/master.ts):
 *   exec <deno> run --allow-all --no-config --no-lock <abs path>/testing/galactic/bgp.ts
 *
 * Environment (besides the CNI variables):
 * - `GALACTIC_CNI_NODE_NAME`, else `NODE_NAME`: the node (the BGPRouter it announces through).
 * - `GALACTIC_MASTER_TEST_NADS` (TEST KNOB, the stand-in's Kubernetes API, as the master's): the
 *   BGPAdvertisements are kept under `<dir>/.bgp/` ({@link advertisements}).
 * - `GALACTIC_MASTER_TEST_NETNS` (TEST KNOB): the directory standing for `/var/run/netns`, where
 *   galactic looks a recorded network namespace up by its base name (`internal/gc/netns.go`
 *   NetNSExists); the test's runtime makes a file per live sandbox.
 */

import { base62Value, isBase62 } from "./chain.ts";
import { k8sClient } from "./conf.ts";
import { parseCidr, prevResult100 } from "./invoke.ts";
import {
  type Args,
  CniError,
  GoError,
  goQuote,
  type Json,
  log,
  pluginMain,
  print,
  setupLogging,
} from "./skel.ts";

const env = (k: string) => Deno.env.get(k) ?? "";

/** crdnames' annotation keys: per container ID, cut to 41 characters (`containerIDLen`). */
const NETNS = "galactic.datum.net/netns";
const SUBNET_V6 = "galactic.datum.net/allocated-subnet-ipv6";
const SUBNET_V4 = "galactic.datum.net/allocated-subnet-ipv4";
const NO_ADDRESSING = "galactic.datum.net/no-addressing";
const keyOf = (prefix: string, containerId: string) => `${prefix}.${containerId.slice(0, 41)}`;

/** A BGPAdvertisement as the stand-in keeps it: its annotations and announced prefixes. */
export interface Advertisement {
  name: string;
  annotations: Record<string, string>;
  prefixes: string[];
  /** The node whose router announces it (`spec.routerRef`: the last ADD's node). */
  node: string;
}

/**
 * crdnames.BGPAdvertisementName: one per attachment, named by the hex of the values `vpc` and
 * `vpcattachment` encode (`nameSegment` through intf.Base62ToHex, which drops leading zeros).
 */
export function advertisementName(vpc: string, vpcattachment: string): string {
  return `${base62Value(vpc).toString(16)}-${base62Value(vpcattachment).toString(16)}`;
}

/** gc.NetNSExists: the recorded path's base name under the netns directory. */
function netnsExists(netnsDir: string, path: string): boolean {
  if (!path) return false;
  try {
    Deno.statSync(`${netnsDir}/${path.split("/").pop()}`);
    return true;
  } catch {
    return false;
  }
}

const store = (dir: string) => `${dir}/.bgp`;

/** Every BGPAdvertisement the stand-in's API holds. */
export function advertisements(dir: string): Advertisement[] {
  let names: string[];
  try {
    names = [...Deno.readDirSync(store(dir))].map((e) => e.name).filter((n) => n.endsWith(".json"));
  } catch {
    return [];
  }
  return names.sort().map((n) => JSON.parse(Deno.readTextFileSync(`${store(dir)}/${n}`)));
}

function save(dir: string, adv: Advertisement): void {
  Deno.mkdirSync(store(dir), { recursive: true });
  const path = `${store(dir)}/${adv.name}.json`;
  Deno.writeTextFileSync(`${path}.tmp`, JSON.stringify(adv));
  Deno.renameSync(`${path}.tmp`, path);
}

/**
 * galactic-router's GC pass (gc.CollectOrphanedCRDs + RemoveOrphanedCRDs): deletes each
 * BGPAdvertisement that records at least one network namespace and none of whose recorded
 * namespaces exists; one recording none is left (its liveness cannot be judged). Answers the
 * names deleted. galactic runs it every 5 minutes (`internal/config/router.go`).
 */
export function routerGc(dir: string, netnsDir: string): string[] {
  const removed: string[] = [];
  for (const adv of advertisements(dir)) {
    const paths = Object.entries(adv.annotations).filter(([k]) => k.startsWith(`${NETNS}.`))
      .map(([, v]) => v);
    if (!paths.length || paths.some((p) => netnsExists(netnsDir, p))) continue;
    Deno.removeSync(`${store(dir)}/${adv.name}.json`);
    removed.push(adv.name);
  }
  return removed;
}

/** cnibgp parseConf (internal/cnibgp/config.go): vpc and vpcattachment base62, a node name. */
function parseConf(stdin: Uint8Array): Json {
  let raw: Json;
  try {
    raw = JSON.parse(new TextDecoder().decode(stdin)) ?? {};
  } catch (err) {
    throw new CniError(7, "invalid CNI config", (err as Error).message);
  }
  for (const field of ["vpc", "vpcattachment"]) {
    const v = raw[field];
    if (v === undefined || v === null || v === "") {
      throw new CniError(7, `${field} is required and must be a non-empty base62 string`);
    }
    if (!isBase62(v)) {
      throw new CniError(7, `invalid base62 value for field '${field}': ${goQuote(String(v))}`);
    }
  }
  if (!env("GALACTIC_CNI_NODE_NAME") && !env("NODE_NAME")) {
    throw new CniError(4, "node name is required (or set GALACTIC_CNI_NODE_NAME)");
  }
  setupLogging(env("GALACTIC_CNI_LOG_FILE") || undefined, env("GALACTIC_CNI_LOG_LEVEL"));
  return raw;
}

/**
 * inferFromPrevResult (internal/cnibgp/prevresult.go) with cniipam.ResultToIPAMResult: the
 * prevResult as a 1.0.0/1.1.0 result with interfaces, and the addresses galactic announces (the
 * IPv6 block as given, the IPv4 address as a /32); none when it has no addresses.
 */
function addressesOf(prev: unknown): { v6?: string; v4?: string } | undefined {
  const fail = (e: Error) => new CniError(6, `infer from prevResult: ${e.message}`);
  if (prev === undefined || prev === null) {
    throw fail(new GoError("no prevResult: galactic-bgp must be chained after a master plugin"));
  }
  let parsed: Json;
  try {
    parsed = prevResult100(prev as Json);
  } catch (err) {
    throw fail(err as Error);
  }
  const interfaces = (parsed.interfaces ?? []) as Json[];
  if (!interfaces.length) throw fail(new GoError("prevResult declares no interfaces"));
  const sandboxed = interfaces.filter((i) => i.sandbox).length;
  if (sandboxed > 1) {
    throw fail(
      new GoError(
        `prevResult declares ${sandboxed} interfaces with a non-empty Sandbox, want 0 (tap ` +
          "master) or 1 (veth master)",
      ),
    );
  }
  const out: { v6?: string; v4?: string } = {};
  for (const ip of (parsed.ips ?? []) as Json[]) {
    const c = parseCidr(String(ip.address))!;
    if (c.v4) out.v4 = c.ip;
    else out.v6 = `${c.ip}/${c.prefix}`;
  }
  return out.v6 || out.v4 ? out : undefined;
}

/**
 * ADD: internal/cnibgp/ops_add.go `cmdAdd` and bgp.go `publishBGPState`: the attachment's
 * BGPAdvertisement records this container's network namespace and addresses; the annotations of
 * containers whose namespace is gone from this node are pruned first
 * (`pruneDeadContainerAnnotations`), and the announced prefixes are every address still recorded,
 * deduplicated and sorted (`allAdvertisedPrefixes`). The prevResult is printed unchanged.
 */
function cmdAdd(a: Args): Promise<void> {
  const conf = parseConf(a.stdin);
  const addresses = addressesOf(conf.prevResult);
  const dir = k8sClient();
  const netnsDir = env("GALACTIC_MASTER_TEST_NETNS") || "/var/run/netns";
  const name = advertisementName(String(conf.vpc), String(conf.vpcattachment));
  const adv = advertisements(dir).find((x) => x.name === name) ??
    { name, annotations: {}, prefixes: [], node: "" };
  const ann = adv.annotations;
  ann[keyOf(NETNS, a.containerId)] = a.netns;
  if (addresses?.v6) ann[keyOf(SUBNET_V6, a.containerId)] = addresses.v6;
  if (addresses?.v4) ann[keyOf(SUBNET_V4, a.containerId)] = addresses.v4;
  if (addresses) delete ann[NO_ADDRESSING];
  else ann[NO_ADDRESSING] = "true";
  for (const [key, path] of Object.entries(ann)) {
    if (!key.startsWith(`${NETNS}.`) || netnsExists(netnsDir, path)) continue;
    const id = key.slice(NETNS.length + 1);
    for (const k of [key, `${SUBNET_V6}.${id}`, `${SUBNET_V4}.${id}`]) delete ann[k];
  }
  const prefixes = new Set<string>();
  for (const [key, value] of Object.entries(ann)) {
    if (key.startsWith(`${SUBNET_V6}.`)) prefixes.add(value);
    if (key.startsWith(`${SUBNET_V4}.`)) prefixes.add(`${value}/32`);
  }
  adv.prefixes = [...prefixes].sort();
  adv.node = env("GALACTIC_CNI_NODE_NAME") || env("NODE_NAME");
  save(dir, adv);
  log("INFO", "ADD: BGP state published", {
    containerID: a.containerId,
    vpc: conf.vpc,
    vpcAttachment: conf.vpcattachment,
  });
  print({ ...(conf.prevResult as Json), cniVersion: conf.cniVersion });
  return Promise.resolve();
}

/**
 * DEL: internal/cnibgp/ops_del.go `cmdDel`: always succeeds; deletes the pod's EndpointSlice
 * (not modelled) and leaves the BGPAdvertisement to galactic-router's GC ({@link routerGc}): the
 * removed pod's prefix stays announced until then or the attachment's next ADD.
 */
function cmdDel(a: Args): Promise<void> {
  let conf: Json;
  try {
    conf = parseConf(a.stdin);
  } catch (err) {
    log("ERROR", "DEL: failed to parse CNI config, skipping cleanup", {
      err,
      containerID: a.containerId,
    });
    print({ cniVersion: "1.0.0", dns: {} });
    return Promise.resolve();
  }
  log("INFO", "DEL: skipping shared resource cleanup (handled by GC)", {
    containerID: a.containerId,
    vpc: conf.vpc,
    vpcAttachment: conf.vpcattachment,
  });
  print({ cniVersion: conf.cniVersion, dns: {} });
  return Promise.resolve();
}

if (import.meta.main) {
  await pluginMain(
    {
      add: cmdAdd,
      del: cmdDel,
      check: () =>
        Promise.reject(new GoError("galactic-bgp CHECK is not modelled by the stand-in")),
      status: () => Promise.resolve(),
    },
    "CNI galactic-bgp plugin (milo-ipam test stand-in)",
  );
}
