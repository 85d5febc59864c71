/**
 * The runtime's result cache, libcni style: one `cniCacheV1` file per
 * attachment at `<root>/<node>/<network>-<containerID>-<ifname>`, written after
 * a successful ADD, read for CHECK's and DEL's `prevResult`, removed by DEL.
 * `milo-ipam reconcile` and GC's valid attachments read it too. Multus keeps
 * its delegates' results in a cache of the same shape, at
 * `<root>/<node>/results/...` (`<root>/<node>` is the node's Multus `cniDir`).
 */
import { Buffer } from "node:buffer";
import { normCidr } from "./ledger.ts";
import { type CniResult, MULTUS_NETWORK } from "./netconf.ts";
import { clusterOf, NODE_NAMES, type NodeName } from "./topology.ts";

/** What names one attachment in the cache. */
export interface AttachmentRef {
  node: NodeName;
  network: string;
  containerId: string;
  ifname: string;
}

/** A libcni `cniCacheV1` entry. */
export interface CacheEntry {
  kind: "cniCacheV1";
  containerId: string;
  /** The network config, base64. */
  config: string;
  ifName: string;
  networkName: string;
  netns: string;
  cniArgs: string[][];
  result: CniResult;
}

/** An attachment the runtime holds whose pod namespace exists. */
export interface LiveAttachment {
  cluster: string;
  node: NodeName;
  containerId: string;
  ifname: string;
  /** Canonical CIDRs of its result. */
  addresses: string[];
}

/** One valid attachment as a runtime passes it to GC. */
export interface ValidAttachment {
  containerID: string;
  ifname: string;
}

/** The result caches of every node, under one root. */
export class ResultCache {
  readonly root: string;
  /** The results' subdirectory of a node's directory ("" for the runtime's cache). */
  readonly #sub: string;

  /** `sub` "results" gives Multus's layout: `<root>/<node>/results/`. */
  constructor(root: string, sub = "") {
    this.root = root;
    this.#sub = sub;
  }

  /** A node's directory: the runtime's cache, or Multus's `cniDir`. */
  base(node: NodeName): string {
    return `${this.root}/${node}`;
  }

  /** A node's cache directory (an entry of its node config's `resultsDirs`). */
  dir(node: NodeName): string {
    return this.#sub ? `${this.base(node)}/${this.#sub}` : this.base(node);
  }

  /** Creates every node's directory. */
  async setup(): Promise<void> {
    for (const n of NODE_NAMES) await Deno.mkdir(this.dir(n), { recursive: true });
  }

  /** The entry's path. */
  path(a: AttachmentRef): string {
    return `${this.dir(a.node)}/${a.network}-${a.containerId}-${a.ifname}`;
  }

  /** The entry, or undefined when there is none. */
  async read(a: AttachmentRef): Promise<CacheEntry | undefined> {
    try {
      return JSON.parse(await Deno.readTextFile(this.path(a))) as CacheEntry;
    } catch {
      return undefined;
    }
  }

  /** Writes the entry of a successful ADD. */
  async write(
    a: AttachmentRef,
    o: { conf: Record<string, unknown>; netns: string; cniArgs: string; result: CniResult },
  ): Promise<void> {
    const entry: CacheEntry = {
      kind: "cniCacheV1",
      containerId: a.containerId,
      config: Buffer.from(JSON.stringify(o.conf)).toString("base64"),
      ifName: a.ifname,
      networkName: a.network,
      netns: o.netns,
      cniArgs: o.cniArgs.split(";").map((kv) => kv.split("=", 2)),
      result: o.result,
    };
    await Deno.writeTextFile(this.path(a), JSON.stringify(entry));
  }

  /** Removes the entry; a missing one is fine. */
  async remove(a: AttachmentRef): Promise<void> {
    await Deno.remove(this.path(a)).catch(() => {});
  }

  async #entries(node: NodeName): Promise<CacheEntry[]> {
    const out: CacheEntry[] = [];
    for await (const e of Deno.readDir(this.dir(node))) {
      if (!e.isFile) continue;
      out.push(JSON.parse(await Deno.readTextFile(`${this.dir(node)}/${e.name}`)) as CacheEntry);
    }
    return out;
  }

  /** The entries' file names in a node's cache directory, sorted. */
  async files(node: NodeName): Promise<string[]> {
    const out: string[] = [];
    for await (const e of Deno.readDir(this.dir(node))) if (e.isFile) out.push(e.name);
    return out.sort();
  }

  /** Valid attachments of a node on `network` (what a runtime passes to GC). */
  async validAttachments(node: NodeName, network: string): Promise<ValidAttachment[]> {
    return (await this.#entries(node)).filter((d) => d.networkName === network)
      .map((d) => ({ containerID: d.containerId, ifname: d.ifName }));
  }

  /**
   * The live attachments: entries of every node whose pod namespace still
   * exists. Multus's own entries (`multus-cni-network`) are no attachment of
   * milo-ipam: its delegates' results, in the Multus cache, are.
   */
  async liveAttachments(): Promise<LiveAttachment[]> {
    const out: LiveAttachment[] = [];
    for (const node of NODE_NAMES) {
      for (const doc of await this.#entries(node)) {
        if (doc.networkName === MULTUS_NETWORK) continue;
        const exists = await Deno.stat(String(doc.netns ?? "")).then(() => true, () => false);
        if (!exists) continue;
        out.push({
          cluster: clusterOf(node),
          node,
          containerId: doc.containerId,
          ifname: doc.ifName,
          addresses: (doc.result?.ips ?? []).map((i) => normCidr(i.address)),
        });
      }
    }
    return out;
  }
}
