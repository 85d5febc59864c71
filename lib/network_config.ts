/**
 * The network config (the master's `ipam` block, a namespace user's) against
 * the node config: node settings refused unless equal to the node's, the
 * node's network defaults merged under it, and the result held to the one
 * schema (lib/config.ts) and the node's timeouts (lib/network_timeouts.ts).
 * The scope and classes an ADD may claim with are the node's grant
 * (lib/scope_grant.ts).
 */
import { isPlainObject } from "./values.ts";
import {
  NETWORK_KEYS,
  type NetworkConfig,
  NetworkConfigSchema,
  NODE_ONLY_KEYS,
  type NodeConfig,
} from "./config.ts";
import { issuesOf, type KeyTree, keyTree, refuseUnknownKeys } from "./config_fields.ts";
import { CniError } from "./errors.ts";
import { networkTimeouts } from "./network_timeouts.ts";

/** The ipam block's keys: the network keys, `type`, and node keys (refused by value). */
const IPAM_KEYS: KeyTree = {
  type: null,
  ...keyTree(NetworkConfigSchema),
  ...Object.fromEntries(NODE_ONLY_KEYS.map((k) => [k, null])),
};

/** The ipam block's keys a network config may set: named when a key is refused. */
const IPAM_LISTED = ["type", ...NETWORK_KEYS];

/** True when every leaf of `given` equals the same leaf of `have`. */
function sameLeaves(given: unknown, have: unknown): boolean {
  if (isPlainObject(given)) {
    return isPlainObject(have) && Object.keys(given).every((k) => sameLeaves(given[k], have[k]));
  }
  return JSON.stringify(given) === JSON.stringify(have);
}

/** Throws code 7 naming the first node-only key of the ipam block that differs from the node's. */
function refuseNodeKeys(ipam: Record<string, unknown>, node: NodeConfig): void {
  for (const key of NODE_ONLY_KEYS) {
    if (ipam[key] === undefined) continue;
    const have = (node as unknown as Record<string, unknown>)[key];
    if (!sameLeaves(ipam[key], have)) {
      throw new CniError(
        "config",
        `field ipam.${key}: a node setting; a network config may not set it`,
        `set ${key} in the node config ${node.path}; a network config may set only ${
          NETWORK_KEYS.join(", ")
        }`,
      );
    }
  }
}

const MERGED = ["classes", "gateways", "prefixLengths"] as const;

/**
 * The network settings: node defaults under the ipam block (key by key in
 * MERGED objects). Timeouts above the node's limits are refused; below its
 * floor, an ADD is refused and any other verb is held to the floor (a
 * release is never refused for an attachment made before the floor was).
 */
export function parseNetwork(
  ipam: Record<string, unknown>,
  node: NodeConfig,
  verb = "ADD",
): NetworkConfig {
  refuseUnknownKeys(ipam, IPAM_KEYS, "ipam.", "", IPAM_LISTED);
  refuseNodeKeys(ipam, node);
  const merged: Record<string, unknown> = { ...node.defaults };
  for (const key of NETWORK_KEYS) {
    if (ipam[key] === undefined) continue;
    const a = merged[key], b = ipam[key];
    merged[key] = (MERGED as readonly string[]).includes(key) && isPlainObject(a) &&
        isPlainObject(b)
      ? { ...a, ...b }
      : b;
  }
  const parsed = NetworkConfigSchema.safeParse(merged);
  if (!parsed.success) {
    const issues = issuesOf(parsed.error, "ipam.");
    throw new CniError("config", issues[0], issues.join("; ") + ` (node config ${node.path})`);
  }
  if (parsed.data.reclaimPolicy === "Retain" && parsed.data.identity === "attachment") {
    const from = ipam.reclaimPolicy === undefined ? `node config ${node.path}` : "network config";
    throw new CniError(
      "config",
      "field ipam.reclaimPolicy: Retain is not allowed for pod leases",
      `set by the ${from}; a claim named after its container is never made again, so Milo ` +
        "would keep every removed pod's address retained until its lease ends; use Delete, or " +
        'identity "pod" or "network" (which retain by a name that is made again)',
    );
  }
  return { ...parsed.data, timeouts: networkTimeouts(parsed.data.timeouts, node, verb) };
}
