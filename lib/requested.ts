/**
 * Requested addresses, by the CNI conventions: `runtimeConfig.ips` (Multus's
 * `ips` capability) and `CNI_ARGS` `IP=` (comma-separated, as the static IPAM
 * plugin reads it). Each pins its family's claim (`spec.address`); the mask
 * given is ignored (the result carries the class's prefix length). Milo calls
 * pinning "a separate and more privileged operation": it is the node's to
 * grant (`allowRequestedAddresses`: `true` for every namespace, or per
 * namespace and network as identities are, lib/identity_grant.ts), refused
 * otherwise (7, naming the key and the grant root would add). Milo binds the
 * block a requested address lies in (`parseRequestedBlock`,
 * `internal/allocator/prefix.go`, masks it to the class's prefix length):
 * where the network says its IPv6 class hands out blocks
 * (`prefixLengths.ipv6` below 128), an address that is not its block's first
 * is refused before anything is asked, naming the address to request.
 */
import type { NodeConfig } from "./config.ts";
import type { NetConf } from "./netconf.ts";
import { clip, CniError } from "./errors.ts";
import { blockStart, type Family, miloFamily, parseCidr } from "./ip.ts";

/** The address requested for each family (canonical, no mask); empty when none is. */
export function requestedAddresses(
  conf: Pick<NetConf, "runtimeIps" | "network">,
  args: Record<string, string>,
  node: Pick<NodeConfig, "allowRequestedAddresses" | "path">,
  a: { podNamespace?: string; network: string },
): Partial<Record<Family, string>> {
  const fromArgs = args.IP ? args.IP.split(",").map((s) => s.trim()).filter(Boolean) : [];
  const sources: [string, string[]][] = [
    ["runtimeConfig.ips", conf.runtimeIps ?? []],
    ["CNI_ARGS IP", fromArgs],
  ];
  const given = sources.filter(([, list]) => list.length);
  if (!given.length) return {};
  if (!granted(node.allowRequestedAddresses, a)) {
    const where =
      `${a.podNamespace ? `namespace ${a.podNamespace}` : "a pod without a namespace"}` +
      ` on network ${JSON.stringify(clip(a.network, 80))}`;
    const example = JSON.stringify({
      ...(a.podNamespace ? { namespace: a.podNamespace } : {}),
      network: clip(a.network, 80),
    });
    throw new CniError(
      "config",
      `${given[0][0]}: requested addresses are the node's to grant, and node config ${node.path} ` +
        `does not grant them to ${where}`,
      "pinning an address is a node privilege (Milo's \"separate and more privileged " +
        `operation"): root adds ${example} to allowRequestedAddresses (true grants every namespace)`,
    );
  }
  const parsed = given.map(([key, list]) => [key, byFamily(key, list, conf.network)]);
  const [[key, first], second] = parsed as [string, Partial<Record<Family, string>>][];
  if (second && (second[1].ipv4 !== first.ipv4 || second[1].ipv6 !== first.ipv6)) {
    throw new CniError(
      "config",
      `${key} and ${second[0]} request different addresses`,
      `${key}: ${Object.values(first).join(", ")}; ${second[0]}: ${
        Object.values(second[1]).join(", ")
      }`,
    );
  }
  return first;
}

function byFamily(
  key: string,
  list: string[],
  network: Pick<NetConf["network"], "classes" | "prefixLengths">,
): Partial<Record<Family, string>> {
  const classes = network.classes;
  const out: Partial<Record<Family, string>> = {};
  for (const text of list) {
    const c = parseCidr(text);
    if (!c) {
      throw new CniError(
        "config",
        `${key}: ${JSON.stringify(clip(text, 80))} is not an IP address`,
      );
    }
    if (!classes[c.family]) {
      throw new CniError(
        "config",
        `${key}: ${c.ip} is ${miloFamily(c.family)}, and the network has no ${c.family} class`,
      );
    }
    if (out[c.family]) {
      throw new CniError("config", `${key}: two ${miloFamily(c.family)} addresses requested`);
    }
    const block = network.prefixLengths?.[c.family];
    const first = block === undefined ? c.ip : blockStart(c, block);
    if (first !== c.ip) {
      throw new CniError(
        "config",
        `${key}: ${c.ip} lies inside the /${block} block ${first}/${block}, which Milo binds ` +
          `whole (the pod's address is its first): request ${first}`,
      );
    }
    out[c.family] = c.ip;
  }
  return out;
}

/** True when `allow` (the node's `allowRequestedAddresses`) grants the pod's namespace on the network. */
function granted(
  allow: NodeConfig["allowRequestedAddresses"],
  a: { podNamespace?: string; network: string },
): boolean {
  if (typeof allow === "boolean") return allow;
  return allow.some((g) =>
    (g.namespace === undefined || g.namespace === a.podNamespace) &&
    (g.network === undefined || g.network === a.network)
  );
}
