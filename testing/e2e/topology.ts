/**
 * The e2e's network topology: milo-dev's namespace with a bridge, four node
 * namespaces (cluster A: a1, a2; cluster B: b1, b2) linked to it by veths,
 * and one namespace per pod. No traffic leaves these namespaces.
 */
import { addBridge, addNetns, delNetnsByPrefix, delStaleNetns, linkVeth } from "./netns.ts";

/** Namespace name base; a run uses `mie2e-<pid>-`. */
export const NS_BASE = "mie2e-";
/** Address of milo-dev on the milo namespace's bridge (RFC 2544 benchmark range). */
export const MILO_ADDR = "198.18.0.1";
/** milo-dev's HTTPS port on {@link MILO_ADDR}. */
export const MILO_PORT = 8443;
/** milo-dev's admin address, on the milo namespace's loopback. */
export const ADMIN_ADDR = "127.0.0.1:9000";

/** The nodes and their clusters. */
export const NODES = {
  a1: { cluster: "cluster-a", addr: "198.18.0.11" },
  a2: { cluster: "cluster-a", addr: "198.18.0.12" },
  b1: { cluster: "cluster-b", addr: "198.18.0.21" },
  b2: { cluster: "cluster-b", addr: "198.18.0.22" },
} as const;
/** A node of {@link NODES}. */
export type NodeName = keyof typeof NODES;
/** Every node, in order. */
export const NODE_NAMES = Object.keys(NODES) as NodeName[];

/** The cluster a node belongs to. */
export function clusterOf(node: NodeName): string {
  return NODES[node].cluster;
}

/** The namespaces of one run, named `mie2e-<pid>-*`. */
export class Topology {
  /** Prefix of every namespace of this run. */
  readonly prefix = `${NS_BASE}${Deno.pid}-`;
  /** milo-dev's namespace. */
  readonly miloNs = `${this.prefix}milo`;

  /** The namespace of a node. */
  nodeNs(node: NodeName): string {
    return `${this.prefix}${node}`;
  }

  /** The namespace name of the pod with sequence number `seq`. */
  podNs(seq: number): string {
    return `${this.prefix}p${seq}`;
  }

  /** Removes namespaces of interrupted runs, then builds the milo bridge and the nodes. */
  async setup(): Promise<void> {
    await delStaleNetns(NS_BASE);
    await addNetns(this.miloNs);
    await addBridge(this.miloNs, "mbr0", `${MILO_ADDR}/24`);
    for (const [i, n] of NODE_NAMES.entries()) {
      const ns = this.nodeNs(n);
      await addNetns(ns);
      await linkVeth({
        hub: this.miloNs,
        hubIf: `to-${n}`,
        hubBridge: "mbr0",
        leaf: ns,
        leafIf: `up${i}`,
        leafCidr: `${NODES[n].addr}/24`,
      });
    }
  }

  /** Deletes every namespace of this run (pods included). */
  async teardown(): Promise<void> {
    await delNetnsByPrefix(this.prefix);
  }
}
