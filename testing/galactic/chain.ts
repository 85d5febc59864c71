/**
 * The attachment conflist galactic runs: what a NetworkAttachmentDefinition's
 * chain must hold for galactic to attach a pod through it, the host interface
 * name galactic derives from it, how a runtime (libcni) hands each plugin its
 * stanza, and the NADs the master stand-in reads in place of the Kubernetes
 * API. Read from datum-cloud/galactic and containernetworking/cni v1.3.0;
 * nothing is copied.
 */

type Json = Record<string, unknown>;

/** galactic-bgp's type (internal/hostconf/hostconf.go BGPPluginType). */
export const BGP_PLUGIN = "galactic-bgp";
/** The masters (cmd/galactic-veth, cmd/galactic-tap). */
export const MASTERS = ["galactic-veth", "galactic-tap"];
/** The NAD annotation a master writes (internal/nadpatch/nadpatch.go AnnotationHostInterface). */
export const HOST_INTERFACE_ANNOTATION = "k8s.v1.cni.cncf.io/host-interface";

const BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/**
 * internal/cnimaster/config.go `IsValidBase62`: non-empty, `[0-9a-zA-Z]` only.
 */
export function isBase62(s: unknown): s is string {
  return typeof s === "string" && /^[0-9a-zA-Z]+$/.test(s);
}

/** The value a base62 identifier encodes (internal/plumbing/intf/intf.go, kenshaw/baseconv's Digits62). */
export function base62Value(s: string): bigint {
  let v = 0n;
  for (const ch of s) v = v * 62n + BigInt(BASE62.indexOf(ch));
  return v;
}

/**
 * internal/plumbing/intf/intf.go: `G` + vpc left-padded with zeros to 9 + vpcattachment padded
 * to 3 + `H` (host end; `G` the guest end of a veth; the VRF is `G` + vpc + `V`). Padding is
 * a minimum: longer values make longer names.
 */
export function interfaceName(vpc: string, vpcattachment: string | null, end: "H" | "G" | "V") {
  const att = vpcattachment === null ? "" : vpcattachment.padStart(3, "0");
  return `G${vpc.padStart(9, "0")}${att}${end}`;
}

/** Linux IFNAMSIZ is 16: an interface name holds at most 15 bytes. */
export const MAX_IFNAME = 15;

/**
 * What keeps galactic from attaching a pod through `conflist` (a NAD's `spec.config`), or from
 * routing it as the chain means, each naming the rule and galactic's file. Empty when the chain
 * is one galactic runs as meant. `nadName`, when given, must be the conflist's `name`: the
 * master reads its NAD by that name (internal/cni/ops_add.go VerifyChainComplete(pluginConf.Name)).
 */
export function chainProblems(conflist: Json, nadName?: string): string[] {
  const out: string[] = [];
  const plugins = Array.isArray(conflist.plugins) ? conflist.plugins as Json[] : [];
  if (!plugins.length) {
    out.push("no plugins list: galactic needs a conflist (docs/cni/configuration.md)");
  }
  const master = plugins[0];
  if (!master || !MASTERS.includes(String(master.type))) {
    out.push("the first plugin must be galactic-veth or galactic-tap (docs/cni/configuration.md)");
  }
  const version = String(conflist.cniVersion ?? "");
  if (!["1.0.0", "1.1.0"].includes(version)) {
    out.push(
      `cniVersion ${version}: galactic-bgp reads prevResult as a 1.0.0/1.1.0 result ` +
        "(internal/cnibgp/prevresult.go)",
    );
  }
  if (nadName !== undefined && conflist.name !== nadName) {
    out.push(
      `name ${JSON.stringify(conflist.name)} is not the NAD's ${JSON.stringify(nadName)}: the ` +
        "master reads its NAD by the conflist's name (internal/nadpatch/nadpatch.go)",
    );
  }
  const bgp = plugins.filter((p) => p?.type === BGP_PLUGIN);
  if (!bgp.length) {
    out.push(
      "no galactic-bgp in the chain: the master refuses the ADD with code 7 " +
        "(internal/hostconf/hostconf.go VerifyChainIncludes)",
    );
  }
  if (!master) return out;
  const { vpc, vpcattachment } = master;
  if (!isBase62(vpc) || !isBase62(vpcattachment)) {
    out.push("vpc and vpcattachment must be base62 (internal/cnimaster/config.go IsValidBase62)");
    return out;
  }
  if (base62Value(vpc) >= 1n << 48n) {
    out.push(`vpc ${vpc} is past 48 bits (docs/cni/configuration.md)`);
  }
  if (base62Value(vpcattachment) >= 1n << 16n) {
    out.push(`vpcattachment ${vpcattachment} is past 16 bits (docs/cni/configuration.md)`);
  }
  const host = interfaceName(vpc, vpcattachment, "H");
  if (host.length > MAX_IFNAME) {
    out.push(
      `host interface ${host} is longer than ${MAX_IFNAME} bytes (internal/plumbing/intf/intf.go)`,
    );
  }
  for (const p of plugins.slice(1)) {
    if (!String(p?.type ?? "").startsWith("galactic-")) continue;
    if (p.vpc !== vpc || p.vpcattachment !== vpcattachment) {
      out.push(
        `${p.type} names vpc ${p.vpc}/${p.vpcattachment}, the master ${vpc}/${vpcattachment}: ` +
          "each stage reads its own stanza's (docs/cni/configuration.md, internal/cnibgp/config.go)",
      );
    }
  }
  return out;
}

/**
 * libcni `buildOneConfig` (libcni/api.go): the stanza a runtime gives plugin `i` of a
 * conflist, with the conflist's `name` and `cniVersion` (and the previous plugin's result)
 * injected.
 */
export function stanza(conflist: Json, i: number, prevResult?: Json): Json {
  const p = (conflist.plugins as Json[])[i];
  return {
    ...p,
    name: conflist.name,
    cniVersion: conflist.cniVersion,
    ...(prevResult ? { prevResult } : {}),
  };
}

/** The path of NAD `namespace/name` in a NAD directory (the stand-in's API server). */
export function nadPath(dir: string, namespace: string, name: string): string {
  return `${dir}/${namespace}/${name}.json`;
}

/** Writes a NetworkAttachmentDefinition into a NAD directory, as the API would hold it. */
export async function writeNad(dir: string, nad: Json): Promise<void> {
  const meta = nad.metadata as { name: string; namespace: string };
  await Deno.mkdir(`${dir}/${meta.namespace}`, { recursive: true });
  await Deno.writeTextFile(nadPath(dir, meta.namespace, meta.name), JSON.stringify(nad));
}

/** A NetworkAttachmentDefinition holding `conflist` as its `spec.config`. */
export function nadOf(namespace: string, conflist: Json): Json {
  return {
    apiVersion: "k8s.cni.cncf.io/v1",
    kind: "NetworkAttachmentDefinition",
    metadata: { name: conflist.name, namespace },
    spec: { config: JSON.stringify(conflist) },
  };
}
