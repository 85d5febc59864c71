/**
 * The end-to-end world, composed of its rooms: the namespaces
 * ({@link Topology}), milo-dev and its admin client ({@link MiloAdmin}),
 * milo-ipam installed per node ({@link installNode}) with, in agent mode, a
 * `milo-ipam agent` per node ({@link NodeAgent}), the runtime emulator
 * ({@link Runtime}) with its result cache ({@link ResultCache}), and the
 * ledger. Always call {@link World.teardown} in a finally block.
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
  /** The nodes' result caches. */
  cache!: ResultCache;
  /** The runtime emulator. */
  rt!: Runtime;
  /** milo-ipam on each node. */
  readonly installs = {} as Record<NodeName, NodeInstall>;
  /** The agent of each node (agent mode). */
  readonly agents: Partial<Record<NodeName, NodeAgent>> = {};

  constructor(mode: Mode = "direct") {
    this.mode = mode;
  }

  /** Builds namespaces, certificates, milo-dev, the plugin installs and (agent mode) the agents. */
  async setup(): Promise<void> {
    this.dir = await Deno.makeTempDir({ prefix: `milo-ipam-e2e-${this.mode}-` });
    this.cache = new ResultCache(`${this.dir}/cni-results`);
    await this.cache.setup();
    await Deno.mkdir(`${this.dir}/state`, { recursive: true });
    this.tokenFile = `${this.dir}/token`;
    await Deno.writeTextFile(this.tokenFile, TOKEN + "\n");
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
        stateDir: `${this.dir}/state/${node}`,
      });
    }
    this.rt = new Runtime(this.net, this.cache, this.installs);
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

  /** Milo's claims against the live attachments: the three numbers that must be 0. */
  async ledger(): Promise<Ledger> {
    return computeLedger(await this.milo.claims(), await this.cache.liveAttachments());
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
