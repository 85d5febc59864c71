/**
 * The end-to-end world, composed of its rooms: the namespaces
 * ({@link Topology}), milo-dev and its admin client ({@link MiloAdmin}),
 * milo-ipam installed per node ({@link installNode}) with, in agent mode, a
 * `milo-ipam agent` per node ({@link NodeAgent}), the runtime emulator
 * ({@link Runtime}) with its result cache ({@link ResultCache}) and, with
 * `multus`, each node's Multus cache, and the ledger. Always call
 * {@link World.teardown} in a finally block.
 */
import { E2E_SEED } from "../seeds.ts";
import { makeTestCA } from "../testca.ts";
import { ResultCache } from "./cache.ts";
import { computeLedger, type Ledger } from "./ledger.ts";
import { MiloAdmin, TOKEN } from "./milo.ts";
import { NodeAgent } from "./node_agent.ts";
import { installNode, type Mode, type NodeInstall } from "./nodes.ts";
import { Runtime } from "./runtime.ts";
import { MILO_ADDR, NODE_NAMES, type NodeName, Topology } from "./topology.ts";

/** How a world is built beyond its mode. */
export interface WorldOptions {
  /**
   * Give every node a Multus cache dir (`<tmp>/multus/<node>`, its results in
   * `results/`) and a node config naming both result caches in `resultsDirs`
   * (the runtime's and Multus's); without it the node config names `resultsDir`.
   */
  multus?: boolean;
}

/** The whole e2e topology in one mode. */
export class World {
  /** How the plugin runs on the nodes. */
  readonly mode: Mode;
  /** The namespaces. */
  readonly net = new Topology();
  /** The temp dir of the run (kept with E2E_KEEP=1). */
  dir = "";
  tokenFile = "";
  caFile = "";
  /** milo-dev and its admin client. */
  milo!: MiloAdmin;
  /** The nodes' result caches (the runtime's own). */
  cache!: ResultCache;
  /** The nodes' Multus caches (`multus` worlds): where its delegates' results are. */
  multus?: ResultCache;
  /** The runtime emulator. */
  rt!: Runtime;
  /** milo-ipam on each node. */
  readonly installs = {} as Record<NodeName, NodeInstall>;
  /** The agent of each node (agent mode). */
  readonly agents: Partial<Record<NodeName, NodeAgent>> = {};

  readonly #opts: WorldOptions;

  constructor(mode: Mode = "direct", opts: WorldOptions = {}) {
    this.mode = mode;
    this.#opts = opts;
  }

  /** Builds namespaces, certificates, milo-dev, the plugin installs and (agent mode) the agents. */
  async setup(): Promise<void> {
    this.dir = await Deno.makeTempDir({ prefix: `milo-ipam-e2e-${this.mode}-` });
    this.cache = new ResultCache(`${this.dir}/cni-results`);
    await this.cache.setup();
    if (this.#opts.multus) {
      this.multus = new ResultCache(`${this.dir}/multus`, "results");
      await this.multus.setup();
    }
    await Deno.mkdir(`${this.dir}/state`, { recursive: true });
    this.tokenFile = `${this.dir}/token`;
    await Deno.writeTextFile(this.tokenFile, TOKEN + "\n", { mode: 0o600 });
    const seed = `${this.dir}/seed.json`;
    await Deno.writeTextFile(seed, JSON.stringify(E2E_SEED, null, 2));
    const tls = await makeTestCA(`${this.dir}/tls`, [MILO_ADDR]);
    this.caFile = tls.caFile;
    await this.net.setup();
    this.milo = new MiloAdmin(this.net.miloNs, { dir: this.dir, seed, ...tls });
    await this.milo.start();
    for (const node of NODE_NAMES) {
      this.installs[node] = await installNode({
        node,
        mode: this.mode,
        dir: this.dir,
        miloUrl: this.milo.url,
        tokenFile: this.tokenFile,
        caFile: this.caFile,
        resultsDir: this.cache.dir(node),
        resultsDirs: this.multus ? [this.cache.dir(node), this.multus.dir(node)] : undefined,
        stateDir: `${this.dir}/state/${node}`,
      });
    }
    this.rt = new Runtime(this.net, this.cache, this.installs, this.multus);
    if (this.mode === "agent") {
      for (const node of NODE_NAMES) {
        const agent = new NodeAgent(this.installs[node], this.net.nodeNs(node));
        this.agents[node] = agent;
        await agent.start();
      }
    }
  }

  /** The agent of a node (agent mode only). */
  agent(node: NodeName): NodeAgent {
    const a = this.agents[node];
    if (!a) throw new Error(`no agent on ${node} in ${this.mode} mode`);
    return a;
  }

  /**
   * Milo's claims against the live attachments: the three numbers that must be
   * 0. The attachments are where the plugin's results are: the runtime's cache
   * and, for Multus-attached pods, Multus's (the runtime holds only Multus's
   * own entry for them).
   */
  async ledger(): Promise<Ledger> {
    const live = [
      ...await this.cache.liveAttachments(),
      ...(this.multus ? await this.multus.liveAttachments() : []),
    ];
    return computeLedger(await this.milo.claims(), live, await this.milo.retained());
  }

  /** Tears everything down: agents, milo-dev, the relay, every namespace of this run, the temp dir. */
  async teardown(): Promise<void> {
    for (const a of Object.values(this.agents)) await a.kill("SIGKILL").catch(() => {});
    await this.milo?.stop().catch(() => {});
    await this.net.teardown();
    if (this.dir && !Deno.env.get("E2E_KEEP")) {
      await Deno.remove(this.dir, { recursive: true }).catch(() => {});
    }
  }
}
