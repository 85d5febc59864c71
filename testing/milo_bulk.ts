/**
 * A tenant of hundreds of thousands of claims for milo-dev, made in seconds:
 * the claims go into milo-dev's database through milo-dev's own create path
 * (its `Ipam.createClaim`, one transaction each, the allocator and all)
 * before the server starts, instead of one fsync'd POST each over the API
 * (some 400 a second on a loaded 2-core machine). The database lives on
 * tmpfs (`/dev/shm`) where there is one, so a commit costs no disk flush.
 * Start milo-dev on the result with `startMiloDev({ seed, dir, dbPath })`:
 * it applies the seed again and keeps the claims.
 */
import { type Attachment, claimBody } from "../lib/claims.ts";
import type { Family } from "../lib/ip.ts";
import type { NetworkConfig } from "../lib/config.ts";
import { Ipam } from "../milo-dev/ipam.ts";
import { validateSeed } from "../milo-dev/seed.ts";
import { Store } from "../milo-dev/store.ts";

/** A scratch directory on tmpfs when the machine has one, else in the temp dir. */
export async function scratchDir(prefix: string): Promise<string> {
  try {
    return await Deno.makeTempDir({ dir: "/dev/shm", prefix });
  } catch {
    return await Deno.makeTempDir({ prefix });
  }
}

/**
 * Creates `count` claims in project `project` of the database at `dbPath`
 * (made when missing) from `seed`: `body(i)` is the i-th create body.
 */
export function seedClaims(
  dbPath: string,
  seed: object,
  project: string,
  count: number,
  body: (i: number) => Record<string, unknown>,
): void {
  const store = new Store(dbPath);
  try {
    const ipam = new Ipam(store, validateSeed(seed));
    for (let i = 0; i < count; i++) ipam.createClaim(project, "default", body(i));
  } finally {
    store.close();
  }
}

/** The classes of {@link bulkSeed}. */
export const BULK_CLASSES = { ipv4: "bulk-pods-ipv4", ipv6: "bulk-pods-ipv6" };

/**
 * A seed of one project with room for 500,000 dual-stack pods: an IPv4 /13
 * of /32s and an IPv6 /64 of /96 blocks ({@link BULK_CLASSES}), and a quota
 * of a million claims.
 */
export function bulkSeed(project: string, token: string): object {
  const cls = (name: string, ipFamily: string, prefixLength: number) => ({
    metadata: { name },
    spec: {
      ipFamily,
      visibility: "consumer",
      consumers: [project],
      prefixLength,
      requiredScopeRoles: ["network"],
      allocationStrategy: "FirstFit",
    },
  });
  const pool = (name: string, cidr: string, ipFamily: string, className: string) => ({
    metadata: { name },
    spec: { cidr, ipFamily, classNames: [className] },
  });
  return {
    projects: [{
      name: project,
      tokens: [token],
      // Past Milo's `maxLimit` of 10,000 (`serviceconfiguration.yaml`): a tenant this size needs
      // Milo's catalogue raised first.
      quota: 1_000_000,
      ipClasses: [cls(BULK_CLASSES.ipv4, "IPv4", 32), cls(BULK_CLASSES.ipv6, "IPv6", 96)],
      ipPools: [
        pool("bulk-v4", "10.64.0.0/13", "IPv4", BULK_CLASSES.ipv4),
        pool("bulk-v6", "fd64:0:0:1::/64", "IPv6", BULK_CLASSES.ipv6),
      ],
    }],
  };
}

/** A dual-stack pod as the plugin records it: pod `i` of `nodes` nodes. */
export interface BulkPod {
  namespace: string;
  name: string;
  uid: string;
  node: string;
}

/** Pod `i`: `shop/web-<i>` on `node-<i % nodes>` with a UID derived from `i`. */
export function bulkPod(i: number, nodes: number): BulkPod {
  const hex = i.toString(16).padStart(12, "0");
  return {
    namespace: "shop",
    name: `web-${i}`,
    uid: `7d3f0c2a-5b1e-4c8d-9a6f-${hex}`,
    node: `node-${i % nodes}`,
  };
}

/**
 * The create body the plugin posts for one family of `pod`'s `eth0` (a
 * 64-hex container ID and a machine-id as the host, as a runtime gives
 * them): the labels and annotations every claim of a real cluster carries,
 * some 1.5 KB in a LIST answer.
 */
export function bulkClaimBody(
  cluster: string,
  pod: BulkPod,
  family: Family,
): Record<string, unknown> {
  const net: NetworkConfig = {
    classes: BULK_CLASSES,
    scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc7b3e" } },
    gateways: {},
    prefixLengths: {},
    reclaimPolicy: "Delete",
    identity: "attachment",
    timeouts: { requestMs: 2_000, totalMs: 10_000 },
  };
  const id = pod.uid.replaceAll("-", "");
  const a: Attachment = {
    cluster,
    node: pod.node,
    network: "vpc7b3e",
    containerId: `${id}${id}`.slice(0, 64),
    ifname: "eth0",
    podNamespace: pod.namespace,
    podName: pod.name,
    podUid: pod.uid,
    host: id.slice(0, 32),
  };
  return claimBody("default", net, a, family, undefined, crypto.randomUUID());
}

/**
 * Seeds `pods` dual-stack pods of `cluster` ({@link bulkPod} on `nodes`
 * nodes, an IPv4 and an IPv6 claim each) into project `project` of
 * {@link bulkSeed} at `dbPath`.
 */
export function seedPods(
  dbPath: string,
  project: string,
  token: string,
  cluster: string,
  pods: number,
  nodes: number,
): void {
  seedClaims(
    dbPath,
    bulkSeed(project, token),
    project,
    2 * pods,
    (i) => bulkClaimBody(cluster, bulkPod(i >> 1, nodes), i & 1 ? "ipv6" : "ipv4"),
  );
}
