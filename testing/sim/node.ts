/**
 * One simulated node: its node config and state directory on disk, its
 * result caches, the plugin as a runtime execs it (lib/thin.ts's client of
 * the agent, falling back to doing the call itself under its watchdog,
 * lib/run.ts), and the agent (lib/agent.ts: the calls of one attachment in
 * turn, the undo of an ADD whose caller vanished, the reconcile on a timer).
 * Every call runs the real `invoke` (lib/invoke.ts) and so the real
 * handlers; every reconcile the real `reconcile` (lib/reconcile.ts).
 */
import { clusterUidOf } from "./kube.ts";
import { type NodeConfig, parseNodeConfig } from "../../lib/config.ts";
import { invoke, type InvokeRequest, type Reply } from "../../lib/invoke.ts";
import type { MiloClient } from "../../lib/milo.ts";
import { reconcile, type ReconcileReport } from "../../lib/reconcile.ts";
import { WATCHDOG_GRACE_MS } from "../../lib/timers.ts";
import { canon, MILO_BASE } from "./milo.ts";
import type { Proc, Scheduler } from "./scheduler.ts";
import type { SimPod } from "./kube.ts";

/** A JSON object. */
export type Json = Record<string, unknown>;

/** The grant of the simulated networks' one address space. */
export const SCOPE = {
  network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-sim" },
};

/** Settings every simulated node shares (and the checker's windows follow). */
export const NODE_SETTINGS = {
  requestMs: 2_000,
  totalMs: 10_000,
  reconcileIntervalS: 30,
  graceS: 120,
  verifyIntervalS: 300,
  /** Past the longest the simulated Milo holds a request before it runs (28 s, milo.ts). */
  recheckAfterS: 30,
};

/** One CNI call a runtime makes. */
export interface CniCall {
  verb: "ADD" | "DEL";
  containerId: string;
  ifname: string;
  conf: Json;
  pod: Pick<SimPod, "namespace" | "name" | "uid">;
}

/** What the runtime saw of a call. */
export interface CniOutcome {
  ok: boolean;
  /** The addresses of an ADD's result. */
  ips: string[];
  code?: number;
  msg?: string;
  /** How it was answered: the agent, the plugin itself, or its watchdog. */
  via: "agent" | "plugin" | "watchdog";
}

/** A Milo client asked for: a node's (`node`: it marks its DELETEs, as the real ones do) or the sweep's. */
export interface ClientCall {
  requestMs: number;
  deadline: number;
  signal?: AbortSignal;
  who: string;
  node?: NodeConfig;
}

/** What a node needs of the world. */
export interface NodeWorld {
  sched: Scheduler;
  /** The nodes' `reconcile.recheckAfterS` (lib/late_deletes.ts). */
  recheckAfterS: number;
  /** A Milo client for a call or a run of this node. */
  client(o: ClientCall): MiloClient;
  /** Wraps an invocation (a defect's old behaviour around the real handler). */
  invoke(node: SimNode, req: InvokeRequest, deps: Parameters<typeof invoke>[1]): Promise<Reply>;
  log(line: string): void;
  /** Told of every reconcile report. */
  reconciled?(node: SimNode, r: ReconcileReport): void;
}

type Frame = { kind: "ack"; deadline: number } | { kind: "reply"; reply: Reply };

/** The two ends of one connection to the agent's socket. */
class Conn {
  readonly gone = new AbortController();
  tookOver = false;
  /** Set once the plugin end is closed (it exited, or gave up). */
  closed = false;
  readonly #queue: (Frame | null)[] = [];
  #waiter: ((f: Frame | null | "stuck") => void) | undefined;
  readonly #sched: Scheduler;
  readonly plugin: Proc;
  /** The agent's call serving it, once it runs. */
  agentCall?: Proc;

  constructor(sched: Scheduler, plugin: Proc) {
    this.#sched = sched;
    this.plugin = plugin;
  }

  /** The agent sends a frame (null: the connection closed under it). */
  send(f: Frame | null): void {
    if (this.closed) return;
    this.#sched.after(0, `${this.plugin.name} frame`, () => {
      if (this.#waiter) {
        const w = this.#waiter;
        this.#waiter = undefined;
        w(f);
      } else this.#queue.push(f);
    }, this.plugin);
  }

  /** The plugin reads the next frame, or "stuck" at `until`. */
  next(until: number): Promise<Frame | null | "stuck"> {
    if (this.#queue.length) return Promise.resolve(this.#queue.shift()!);
    return new Promise((resolve) => {
      const t = this.#sched.after(until - this.#sched.now(), `${this.plugin.name} wait`, () => {
        this.#waiter = undefined;
        resolve("stuck");
      });
      this.#waiter = (f) => {
        t.cancel();
        resolve(f);
      };
    });
  }

  /** The plugin's end closes; `fallback`: it said it does the call itself. */
  close(fallback = false): void {
    if (this.closed) return;
    this.closed = true;
    const owner = this.agentCall ?? null;
    this.#sched.after(0, `${this.plugin.name} hangs up`, () => {
      if (fallback) this.tookOver = true;
      this.gone.abort();
    }, owner);
  }
}

/** The node agent: a process whose calls and reconcile runs die with it. */
class SimAgent {
  readonly proc: Proc;
  readonly procs = new Set<Proc>();
  readonly conns = new Set<Conn>();
  readonly #lanes = new Map<string, Promise<void>>();
  readonly #node: SimNode;
  #reconciling = false;
  #calls = 0;

  constructor(node: SimNode, firstReconcileMs: number) {
    this.#node = node;
    const sched = node.world.sched;
    this.proc = sched.spawn(`${node.name} agent`, async () => {
      await sched.sleep(firstReconcileMs, "first reconcile");
      while (true) {
        this.reconcileNow();
        await sched.sleep(NODE_SETTINGS.reconcileIntervalS * 1000, "reconcile timer");
      }
    });
  }

  kill(): void {
    const sched = this.#node.world.sched;
    sched.kill(this.proc);
    for (const p of this.procs) sched.kill(p);
    for (const c of this.conns) c.send(null);
  }

  /** One node reconcile, unless one is running (lib/agent.ts `reconcileNow`). */
  reconcileNow(): void {
    if (this.#reconciling) return;
    this.#reconciling = true;
    const node = this.#node;
    const sched = node.world.sched;
    const p = sched.spawn(`${node.name} reconcile`, async () => {
      try {
        const milo = node.world.client({
          requestMs: NODE_SETTINGS.requestMs,
          deadline: sched.now() + NODE_SETTINGS.totalMs,
          who: `${node.name} reconcile`,
          node: node.config,
        });
        const r = await reconcile({
          node: node.config,
          milo,
          graceMs: NODE_SETTINGS.graceS * 1000,
          dryRun: false,
          now: sched.now,
        });
        node.world.reconciled?.(node, r);
      } catch (err) {
        node.world.log(
          `${node.name} reconcile failed: ${err instanceof Error ? err.message : err}`,
        );
      } finally {
        this.#reconciling = false;
        this.procs.delete(p);
      }
    });
    this.procs.add(p);
  }

  /** Takes a connection: its call runs after every earlier call of the attachment. */
  accept(conn: Conn, req: InvokeRequest & { call: CniCall }): void {
    const node = this.#node;
    const sched = node.world.sched;
    this.conns.add(conn);
    const lane = `${req.call.containerId}/${req.call.ifname}`;
    const before = this.#lanes.get(lane) ?? Promise.resolve();
    let done = () => {};
    const mine = new Promise<void>((r) => done = r);
    this.#lanes.set(lane, mine);
    const n = ++this.#calls;
    const c = req.call;
    const name = `${node.name} agent ${c.pod.name}/${c.ifname} ${
      c.containerId.slice(0, 8)
    } ${c.verb}#${n}`;
    const p = sched.spawn(name, async (self) => {
      conn.agentCall = self;
      try {
        await before;
        // Its turn comes as an event (the earlier call's end), never in that call's step.
        await sched.sleep(0, "turn");
        if (conn.gone.signal.aborted) return;
        const reply = await this.#invoke(req, conn);
        const add = req.call.verb === "ADD";
        if (conn.gone.signal.aborted && !conn.tookOver && add && reply.node) {
          const del = (k: string) => k === "CNI_COMMAND" ? "DEL" : req.env(k);
          const undo = await node.world.invoke(node, {
            env: del,
            stdin: req.stdin,
            started: sched.now(),
            callId: `${req.callId}-undo`,
            undoOf: req.callId,
          }, node.deps(undefined));
          node.world.log(
            `${node.name} agent undo of ${req.call.pod.name}/${req.call.ifname} ADD: ${
              summary(undo)
            }`,
          );
        }
        conn.send({ kind: "reply", reply });
      } finally {
        this.conns.delete(conn);
        this.procs.delete(self);
        // The next call of the attachment runs once this one ended, from an event of its own.
        sched.after(0, `${node.name} lane ${lane}`, done, null);
        if (this.#lanes.get(lane) === mine) this.#lanes.delete(lane);
      }
    });
    this.procs.add(p);
  }

  #invoke(req: InvokeRequest, conn: Conn): Promise<Reply> {
    const node = this.#node;
    return node.world.invoke(node, req, {
      ...node.deps(conn.gone.signal),
      onDeadline: (deadline) => conn.send({ kind: "ack", deadline }),
    });
  }
}

/** A simulated node of a cluster. */
export class SimNode {
  readonly name: string;
  readonly cluster: string;
  readonly dir: string;
  readonly config: NodeConfig;
  readonly world: NodeWorld;
  /** The runtime's result cache, and Multus's. */
  readonly resultsDir: string;
  readonly multusDir: string;
  agent: SimAgent | undefined;
  #calls = 0;

  constructor(world: NodeWorld, root: string, cluster: string, name: string, hostId: string) {
    this.world = world;
    this.name = name;
    this.cluster = cluster;
    this.dir = `${root}/${name}`;
    this.resultsDir = `${this.dir}/results`;
    this.multusDir = `${this.dir}/multus`;
    Deno.mkdirSync(this.dir, { recursive: true });
    Deno.mkdirSync(this.resultsDir, { recursive: true });
    Deno.mkdirSync(this.multusDir, { recursive: true });
    Deno.writeTextFileSync(`${this.dir}/machine-id`, `${hostId}\n`);
    Deno.writeTextFileSync(`${this.dir}/boot_id`, `${bootUuid(hostId, 1)}\n`);
    this.config = parseNodeConfig({
      milo: { url: MILO_BASE, tokenFile: `${this.dir}/token` },
      cluster,
      clusterUid: clusterUidOf(cluster),
      node: name,
      log: { level: "off" },
      stateDir: `${this.dir}/state`,
      resultsDirs: [this.resultsDir, this.multusDir],
      hostIdFile: `${this.dir}/machine-id`,
      bootIdFile: `${this.dir}/boot_id`,
      agent: {
        socket: `${this.dir}/agent.sock`,
        reconcileIntervalS: NODE_SETTINGS.reconcileIntervalS,
      },
      reconcile: {
        graceS: NODE_SETTINGS.graceS,
        verifyIntervalS: NODE_SETTINGS.verifyIntervalS,
        recheckAfterS: world.recheckAfterS,
      },
      timeouts: { requestMs: NODE_SETTINGS.requestMs, totalMs: NODE_SETTINGS.totalMs },
      allowIdentities: [{ namespace: "shop" }],
      allowScopes: [{ scope: SCOPE }],
    }, `${this.dir}/node.json`);
  }

  /** Starts (or restarts) the agent; its first reconcile within one interval. */
  startAgent(): void {
    if (this.agent) return;
    const rng = this.world.sched.rng(`${this.name} agent start ${this.world.sched.now()}`);
    this.agent = new SimAgent(this, rng.int(0, NODE_SETTINGS.reconcileIntervalS * 1000));
  }

  /** Kills the agent (its calls in flight die where they wait, their connections close). */
  killAgent(): void {
    this.agent?.kill();
    this.agent = undefined;
  }

  /** What an invocation of this node is given (a client per call, over the simulated Milo). */
  deps(signal: AbortSignal | undefined) {
    const sched = this.world.sched;
    return {
      nodeConfig: () => Promise.resolve(this.config),
      openMilo: (node: NodeConfig, requestMs: number, deadline: number) =>
        Promise.resolve(
          this.world.client({ requestMs, deadline, signal, who: sched.current().name, node }),
        ),
      now: sched.now,
    };
  }

  /**
   * Execs the plugin for `call` from the calling (runtime) process, as
   * lib/thin.ts and lib/run.ts do: through the agent when it takes the call
   * within requestMs, else itself, under its watchdog. Answers when the
   * plugin process has exited.
   */
  exec(call: CniCall): Promise<CniOutcome> {
    const sched = this.world.sched;
    const runtime = sched.current();
    const n = ++this.#calls;
    const callId = `${this.name}-${n}`;
    const label =
      `${this.name} plugin ${call.pod.name}/${call.ifname} ${call.containerId.slice(0, 8)} ` +
      `${call.verb}#${n}`;
    const vars: Record<string, string> = {
      CNI_COMMAND: call.verb,
      CNI_CONTAINERID: call.containerId,
      CNI_IFNAME: call.ifname,
      CNI_NETNS: `/var/run/netns/${call.containerId}`,
      CNI_PATH: "/opt/cni/bin",
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${call.pod.namespace};` +
        `K8S_POD_NAME=${call.pod.name};K8S_POD_UID=${call.pod.uid}`,
    };
    const stdin = new TextEncoder().encode(JSON.stringify(call.conf));
    return new Promise<CniOutcome>((resolve) => {
      let exited = false;
      const exit = (o: CniOutcome) => {
        if (exited) return;
        exited = true;
        sched.after(0, `${label} exit`, () => resolve(o), runtime);
      };
      const plugin = sched.spawn(label, async () => {
        const started = sched.now();
        const req = { env: (k: string) => vars[k], stdin, started, callId, call };
        // The watchdog ends the process at the deadline (lib/run.ts), whatever it is doing.
        const watchdog = sched.after(
          NODE_SETTINGS.totalMs + WATCHDOG_GRACE_MS,
          `${label} watchdog`,
          () => {
            sched.kill(plugin);
            exit({
              ok: false,
              ips: [],
              code: 11,
              msg: "invocation exceeded timeouts.totalMs",
              via: "watchdog",
            });
          },
          null,
        );
        plugin.onKill.push(() => watchdog.cancel());
        const o = await this.#viaAgent(plugin, req) ?? await this.#itself(req);
        watchdog.cancel();
        exit(o);
      });
    });
  }

  /** The thin client: the agent's answer, or undefined when the plugin must do the call itself. */
  async #viaAgent(
    plugin: Proc,
    req: InvokeRequest & { call: CniCall },
  ): Promise<CniOutcome | undefined> {
    const agent = this.agent;
    if (!agent) return undefined;
    const sched = this.world.sched;
    const conn = new Conn(sched, plugin);
    plugin.onKill.push(() => conn.close());
    agent.accept(conn, req);
    const giveUpAt = sched.now() + NODE_SETTINGS.requestMs;
    const first = await conn.next(giveUpAt);
    if (first === "stuck" || (first?.kind === "ack" && sched.now() >= giveUpAt)) {
      conn.close(true);
      return undefined;
    }
    if (first === null) return undefined;
    if (first.kind === "reply") {
      conn.close();
      return outcome(first.reply, "agent");
    }
    const final = await conn.next(first.deadline + WATCHDOG_GRACE_MS);
    if (final === "stuck" || (final === null && sched.now() >= first.deadline)) {
      conn.close();
      return {
        ok: false,
        ips: [],
        code: 11,
        msg: "the agent did not answer by the deadline",
        via: "agent",
      };
    }
    if (final === null || final.kind !== "reply") return undefined;
    conn.close();
    return outcome(final.reply, "agent");
  }

  /** The plugin doing the call itself (lib/run.ts). */
  async #itself(req: InvokeRequest): Promise<CniOutcome> {
    return outcome(await this.world.invoke(this, req, this.deps(undefined)), "plugin");
  }
}

function outcome(r: Reply, via: CniOutcome["via"]): CniOutcome {
  const out = r.stdout ?? {};
  if (r.exitCode === 0) {
    const ips = ((out.ips ?? []) as { address: string }[]).map((x) =>
      canon(x.address.split("/")[0])
    );
    return { ok: true, ips, via };
  }
  return { ok: false, ips: [], code: Number(out.code ?? 999), msg: String(out.msg ?? ""), via };
}

/** One line of what a reply said. */
export function summary(r: Reply): string {
  if (r.exitCode === 0) return "ok";
  const out = r.stdout ?? {};
  return `error ${out.code} ${out.msg}`;
}

/** A boot id (a UUID) of a host's `n`-th boot. */
export function bootUuid(hostId: string, n: number): string {
  const h = (hostId + n.toString(16).padStart(8, "0")).padEnd(32, "0").slice(-32);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${
    h.slice(20, 32)
  }`;
}
