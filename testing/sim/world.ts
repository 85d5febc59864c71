/**
 * The simulated world, put together and run: one Milo tenant, two clusters
 * of three nodes each (every runtime of runtime.ts among them), the agents,
 * kubelets, the node reconciles and the cluster sweeps, driven by a script
 * (script.ts) on one simulated clock (scheduler.ts), checked after every
 * event (checker.ts). One call of {@link simulate} is one run of one seed.
 */
import { Holdings } from "../../lib/holdings.ts";
import type { InvokeRequest, Reply } from "../../lib/invoke.ts";
import { invoke } from "../../lib/invoke.ts";
import { Journal } from "../../lib/journal.ts";
import { markingDeletes } from "../../lib/late_deletes.ts";
import { useFlock } from "../../lib/lockfile.ts";
import type { MiloClient } from "../../lib/milo.ts";
import type { ReconcileReport } from "../../lib/reconcile.ts";
import type { Duplicate } from "../../lib/restore.ts";
import { sweep } from "../../lib/sweep.ts";
import type { WireClaim } from "../stub_types.ts";
import {
  Checker,
  claimAddress,
  clock,
  type InPlace,
  type Violation,
  type Windows,
} from "./checker.ts";
import { clientWith, type Defect, invokeWith, sweepWith } from "./defects.ts";
import { type Plant, plant } from "./plant.ts";
import { SimKube, sweepKube } from "./kube.ts";
import { SimLocks } from "./locks.ts";
import { canon, MILO_BASE, SimMilo } from "./milo.ts";
import { type ClientCall, NODE_SETTINGS, SimNode } from "./node.ts";
import { hexId, type Sandbox, SimKubelet } from "./runtime.ts";
import { EPOCH, Scheduler } from "./scheduler.ts";
import {
  type Cluster,
  CLUSTERS,
  describe,
  makeScript,
  type Profile,
  profileOf,
  type Step,
} from "./script.ts";

/** What one run is given. */
export interface SimOptions {
  seed: number;
  /** Steps of the script drawn from the seed (ignored when `script` is given). */
  steps?: number;
  /** How hard the script is on the world: 0 no faults, 1 the default, more is harder. */
  faults?: number;
  /** A script to run instead of the seed's (a shrunk one). */
  script?: Step[];
  /** The seed's profile (script.ts) instead of the one it draws. */
  profile?: Profile;
  /** Puts back one of issue #37's defects (defects.ts). */
  defect?: Defect;
  /**
   * The nodes' `reconcile.recheckAfterS`: 30 s, or 0 with a defect put back
   * (the code before it had no recheck and no refusal: lib/late_deletes.ts came later).
   */
  recheckAfterS?: number;
  /** Plants a wrong ledger the checker must report (its own tests). */
  plant?: Plant;
  /** Hears each trace line as it is made. */
  onLine?: (line: string) => void;
}

/** What one run found. */
export interface SimResult {
  seed: number;
  script: Step[];
  trace: string[];
  violation?: Violation & { at: number; step: number; tick: number };
  /** Events fired, simulated ms, steps run. */
  ticks: number;
  simMs: number;
  stepsRun: number;
}

/** The sweep's settings in the simulated clusters (short, so runs see many). */
export const SWEEP = { graceMs: 60_000, intervalMs: 30_000, operationMs: 30_000 };

/** How long the world runs on after its last step, without faults, for every release to land. */
export const DRAIN_MS = 12 * 60_000;

/** The checker's windows, from the node settings (see checker.ts). */
export const WINDOWS: Windows = {
  release: 2 * NODE_SETTINGS.reconcileIntervalS * 1000 + 2 * NODE_SETTINGS.totalMs + 10_000,
  verify: 2 * NODE_SETTINGS.verifyIntervalS * 1000 + 2 * NODE_SETTINGS.reconcileIntervalS * 1000 +
    2 * NODE_SETTINGS.totalMs + 10_000,
  dead: NODE_SETTINGS.graceS * 1000 + 3 * NODE_SETTINGS.reconcileIntervalS * 1000 +
    2 * NODE_SETTINGS.totalMs + 10_000,
};

const SHM = "/dev/shm";

/** Runs one seed (or one script) of the world; answers its trace and the first violation. */
export async function simulate(o: SimOptions): Promise<SimResult> {
  const root = Deno.makeTempDirSync({
    dir: exists(SHM) ? SHM : undefined,
    prefix: "milo-ipam-sim-",
  });
  try {
    const w = new World(o, root);
    return await w.sched.install(() => w.run());
  } finally {
    useFlock(undefined);
    Deno.removeSync(root, { recursive: true });
  }
}

class World {
  readonly sched: Scheduler;
  readonly o: SimOptions;
  readonly trace: string[] = [];
  readonly script: Step[];
  readonly locks: SimLocks;
  readonly milo: SimMilo;
  readonly kubes = new Map<Cluster, SimKube>();
  readonly nodes = new Map<string, SimNode>();
  readonly kubelets = new Map<string, SimKubelet>();
  readonly sandboxes = new Map<string, Sandbox>();
  readonly #agentSince = new Map<string, number>();
  readonly #behind = new Map<string, number>();
  /**
   * Addresses whose claim a release path deleted while its holder was live:
   * when, and whether that DELETE's answer reached its sender.
   */
  readonly #inPlace = new Map<string, InPlace>();
  /** The in-place removals whose DELETE's answer is on its way, by sender and claim name. */
  readonly #unheard = new Map<string, InPlace>();
  /** Duplicates reported by a node (a reconcile's verification, a DEL, the sweep): address, last. */
  readonly #reported = new Map<string, number>();
  readonly #sweeping = new Set<Cluster>();
  /** Agent kills waiting for an ADD's create to be in flight, by node. */
  readonly #armed = new Map<string, (why: string) => void>();
  #step = -1;

  constructor(o: SimOptions, root: string) {
    this.o = o;
    this.sched = new Scheduler(o.seed);
    this.script = o.script ??
      makeScript(o.seed, o.steps ?? 80, o.faults ?? 1, o.profile ?? profileOf(o.seed));
    this.locks = new SimLocks(this.sched);
    useFlock(this.locks.flock);
    const rng = this.sched.rng("world");
    this.milo = new SimMilo(this.sched, {
      poolSize: rng.int(40, 80),
      retentionMs: rng.int(60_000, 180_000),
      quota: 400,
      latencyMs: 30,
    }, {
      changed: (line) => this.log(line),
      removed: (c, by, judged) => this.#removed(c, by, judged),
      answered: (by, method, target) => {
        const x = this.#unheard.get(`${by} ${method} ${target}`);
        if (x) x.answered = true;
        this.#unheard.delete(`${by} ${method} ${target}`);
      },
    });
    const world = {
      sched: this.sched,
      recheckAfterS: this.o.recheckAfterS ?? (this.o.defect ? 0 : NODE_SETTINGS.recheckAfterS),
      client: (c: ClientCall) => this.#client(c),
      invoke: (node: SimNode, req: InvokeRequest, deps: Parameters<typeof invoke>[1]) =>
        this.#invoke(node, req, deps),
      log: (line: string) => this.log(line),
      reconciled: (node: SimNode, r: ReconcileReport) => {
        for (const x of r.released) {
          this.log(`${node.name} reconcile released ${x.claim} (${x.via})`);
        }
        for (const x of r.remade) this.log(`${node.name} reconcile made ${x.claim} again`);
        for (const x of r.kept.filter((k) => k.reason.startsWith("journal entry: "))) {
          this.log(`${node.name} reconcile dropped ${x.claim} from the journal: ${x.reason}`);
        }
        this.#report(`${node.name} reconcile`, r.duplicates);
      },
    };
    const kubeletWorld = {
      sched: this.sched,
      log: (line: string) => this.log(line),
      sandboxes: this.sandboxes,
      kernelFailure: 0.05,
    };
    for (const cluster of Object.keys(CLUSTERS) as Cluster[]) {
      const names = CLUSTERS[cluster].map(([n]) => n);
      const kube = new SimKube(this.sched, cluster, names);
      kube.log = (line) => this.log(line);
      this.kubes.set(cluster, kube);
      for (const [name, flavour] of CLUSTERS[cluster]) {
        const node = new SimNode(world, root, cluster, name, hexId(`host ${name}`).slice(0, 32));
        this.nodes.set(name, node);
        this.kubelets.set(name, new SimKubelet(kubeletWorld, node, kube, flavour));
      }
      kube.listener = { podsChanged: (n) => this.kubelets.get(n)?.sync() };
    }
  }

  log(line: string): void {
    const l = `${clock(this.sched.now())} ${line}`;
    this.trace.push(l);
    this.o.onLine?.(l);
  }

  async run(): Promise<SimResult> {
    const sched = this.sched;
    for (const [name, node] of this.nodes) {
      node.startAgent();
      this.#agentSince.set(name, sched.now());
    }
    for (const kube of this.kubes.values()) {
      kube.addWorkload({
        kind: "StatefulSet",
        name: "db",
        replicas: 3,
        graceS: 20,
        nets: [{ network: "db", ifname: "eth0" }, { network: "pods", ifname: "net1" }],
      });
      kube.addWorkload({
        kind: "Deployment",
        name: "web",
        replicas: 3,
        graceS: 10,
        nets: [{ network: "pods", ifname: "eth0" }],
      });
      kube.addWorkload({
        kind: "Deployment",
        name: "slot",
        replicas: 1,
        graceS: 5,
        nets: [{ network: "slot", ifname: "eth0" }],
      });
    }
    this.script.forEach((s, i) => {
      sched.after(s.at - 0, `step ${String(i).padStart(4, "0")}`, () => {
        this.#step = i;
        this.log(`step ${i}: ${describe(s)}`);
        this.#do(s);
      }, null);
    });
    if (this.o.plant) plant(this.o.plant, this);
    const last = this.script.length ? this.script[this.script.length - 1].at : 0;
    const end = sched.now() + last + DRAIN_MS;
    const checker = new Checker({
      now: sched.now,
      sandboxes: this.sandboxes,
      claims: () => this.milo.claims.values(),
      stateDir: (n) => this.nodes.get(n)!.config.stateDir,
      quietSince: (n) => this.#quietSince(n),
      deletedBehind: (a) => this.#behind.get(a),
      removedInPlace: (ip) => this.#inPlace.get(ip),
      reported: (ip) => this.#reported.get(ip),
    }, WINDOWS);
    let violation: SimResult["violation"];
    await sched.runUntil(end, () => {
      const v = checker.check();
      if (!v) return false;
      violation = { ...v, at: sched.now(), step: this.#step, tick: sched.ticks };
      this.log(`VIOLATION ${v.kind}: ${v.what}`);
      if (v.kind === "forgotten" || v.kind === "leaked") this.#dumpState(v.about[2]);
      return true;
    });
    this.locks.closeAll();
    return {
      seed: this.o.seed,
      script: this.script,
      trace: this.trace,
      violation,
      ticks: sched.ticks,
      simMs: sched.now() - EPOCH,
      stepsRun: this.#step + 1,
    };
  }

  /** Since when `node`'s release paths could act: Milo without trouble, its agent up. */
  #quietSince(node: string): number {
    const now = this.sched.now();
    const agent = this.#agentSince.get(node);
    if (agent === undefined || this.milo.troubles().size) return now;
    const troubled = this.milo.troubledUntil;
    return Math.max(agent, troubled === -Infinity ? -Infinity : troubled);
  }

  #client(c: ClientCall): MiloClient {
    const sched = this.sched;
    const rng = sched.rng(`${c.who} jitter`);
    const milo = this.milo;
    const send = ((input: RequestInfo | URL, init?: RequestInit) => {
      const who = sched.current().name;
      if (init?.method === "POST") this.#sending(who);
      this.#racing(who, init?.method ?? "GET");
      return milo.fetch(input, init);
    }) as typeof fetch;
    return clientWith(this.o.defect, {
      baseUrl: MILO_BASE,
      namespace: "default",
      token: "sim-token",
      requestMs: c.requestMs,
      deadline: c.deadline,
      fetch: send,
      sleep: (ms) => sched.sleep(ms, "backoff"),
      random: () => rng.next(),
      now: sched.now,
      signal: c.signal,
      ...(c.node ? { deletes: markingDeletes(c.node) } : {}),
    });
  }

  async #invoke(
    node: SimNode,
    req: InvokeRequest,
    deps: Parameters<typeof invoke>[1],
  ): Promise<Reply> {
    const key = {
      cluster: node.cluster,
      containerId: req.env("CNI_CONTAINERID") ?? "",
      ifname: req.env("CNI_IFNAME") ?? "",
    };
    const stateDir = node.config.stateDir;
    let opened: MiloClient | undefined;
    const wrapped = {
      ...deps,
      openMilo: async (...args: Parameters<typeof deps.openMilo>) => {
        const c = await deps.openMilo(...args);
        opened ??= c;
        return c;
      },
    };
    const reply = await invokeWith(
      this.o.defect,
      req.env("CNI_COMMAND") ?? "",
      req.undoOf !== undefined,
      { record: new Holdings(stateDir).pathOf(key), entry: new Journal(stateDir).pathOf(key) },
      () => opened,
      () => invoke(req, wrapped),
    );
    this.#report(
      `${node.name} ${req.env("CNI_COMMAND")}`,
      reply.record.duplicates as Duplicate[] | undefined,
    );
    const skipped = String(reply.record.skipped ?? "");
    if (/newer claim/.test(skipped)) this.log(`${node.name} ${req.env("CNI_COMMAND")}: ${skipped}`);
    return reply;
  }

  #do(s: Step): void {
    const sched = this.sched;
    switch (s.do) {
      case "scale":
        return this.kubes.get(s.cluster)!.scale(s.workload, s.by);
      case "rollout":
        return this.kubes.get(s.cluster)!.rollout(s.workload);
      case "delete":
      case "force-delete":
      case "restart": {
        const kube = this.kubes.get(s.cluster)!;
        const all = kube.podsOf(s.workload);
        const live = all.filter((p) =>
          [...this.sandboxes.values()].some((x) => x.pod.uid === p.uid && x.state === "live")
        );
        const pods = s.do === "delete" && s.live && live.length ? live : all;
        if (!pods.length) return;
        const p = pods[s.pick % pods.length];
        if (s.do === "delete") kube.deletePod(p.uid);
        else if (s.do === "force-delete") kube.forceDelete(p.uid);
        else this.kubelets.get(p.node ?? "")?.restartSandbox(p.uid);
        return;
      }
      case "partition": {
        const cluster = this.nodes.get(s.node)!.cluster as Cluster;
        const kube = this.kubes.get(cluster)!;
        kube.partition(s.node, s.ms);
        if (s.sweepMs !== undefined) {
          sched.after(s.sweepMs, `step ${this.#step} sweep`, () => this.#sweep(cluster), null);
        }
        if (s.forceMs === undefined) return;
        // Someone force-deletes a pod of the unreachable node (a StatefulSet's, when it runs one).
        const rng = sched.rng(`step ${this.#step} force`);
        sched.after(s.forceMs, `step ${this.#step} force-delete`, () => {
          const pods = [...kube.pods.values()].filter((p) => p.node === s.node)
            .sort((a, b) => a.name < b.name ? -1 : 1);
          const db = pods.filter((p) => p.owner.name === "db");
          const p = db.length ? rng.pick(db) : pods.length ? rng.pick(pods) : undefined;
          if (p) kube.forceDelete(p.uid);
        }, null);
        return;
      }
      case "kill-agent":
        return this.#killAgent(s.node, s.downMs, s.midAdd);
      case "milo":
        this.milo.episode(s.episode, s.ms);
        return;
      case "delete-claim": {
        const names = [...this.milo.claims.keys()].sort();
        if (!names.length) return;
        this.milo.deleteByHand(names[s.pick % names.length]);
        return;
      }
      case "delete-namespace":
        this.milo.deleteNamespace(s.ms);
        return;
      case "sweep":
        return this.#sweep(s.cluster);
    }
  }

  /** Logs what the node of sandbox `id` remembers of it (its record and journal files). */
  #dumpState(id: string): void {
    const s = this.sandboxes.get(id);
    if (!s) return;
    const dir = this.nodes.get(s.node)!.config.stateDir;
    for (const sub of ["holdings", "journal"]) {
      let names: string[] = [];
      try {
        names = [...Deno.readDirSync(`${dir}/${sub}`)].map((e) => e.name).filter((n) =>
          n.endsWith(".json")
        );
      } catch {
        // None.
      }
      for (const n of names) {
        const text = Deno.readTextFileSync(`${dir}/${sub}/${n}`);
        if (text.includes(id) || sub === "journal") {
          this.log(`  ${s.node} ${sub}/${n}: ${text.slice(0, 400)}`);
        }
      }
    }
  }

  /** Notes the duplicates a node reported (an address two sandboxes use). */
  #report(who: string, duplicates: Duplicate[] | undefined): void {
    for (const d of duplicates ?? []) {
      const ip = canon(d.address.split("/")[0]);
      this.log(`${who} reports a duplicate: ${ip} (${d.now})`);
      this.#reported.set(ip, this.sched.now());
    }
  }

  /**
   * A claim Milo deleted: by hand (behind its node's back), or by a release
   * path (noted when its holder was live: removed in place of another).
   */
  #removed(c: WireClaim, by: string | undefined, judged: string | undefined): void {
    const a = c.metadata.annotations ?? {};
    const now = this.sched.now();
    if (by === undefined) {
      this.#behind.set(`${a["milo-ipam.io/container-id"]}/${a["milo-ipam.io/ifname"]}`, now);
      return;
    }
    const holder = this.sandboxes.get(a["milo-ipam.io/container-id"] ?? "");
    if (holder && (holder.state === "live" || holder.state === "creating")) {
      // In place of the object judged (Milo deletes by name): a race nothing on a node can stop.
      // The very object judged, of a live holder: the release judged wrong, which no report
      // excuses.
      if (judged !== c.metadata.uid) {
        const x = { at: now, answered: false };
        this.#inPlace.set(claimAddress(c), x);
        this.#unheard.set(`${by} DELETE ${c.metadata.name}`, x);
      }
      this.log(
        `milo: ${by} deleted ${c.metadata.name} of a ${holder.state} sandbox (${holder.pod.name} ${
          holder.id.slice(0, 8)
        })`,
      );
    }
  }

  /**
   * Kills `node`'s agent, then restarts it after `downMs`; when `midAdd`, at
   * the moment one of its ADDs has sent a create (within a minute, else then).
   */
  #killAgent(name: string, downMs: number, midAdd: boolean): void {
    const sched = this.sched;
    const node = this.nodes.get(name)!;
    const step = this.#step;
    let done = false;
    const kill = (why: string) => {
      if (done) return;
      done = true;
      this.#armed.delete(name);
      if (!node.agent) return;
      this.log(`${name} agent killed${why}`);
      node.killAgent();
      this.#agentSince.delete(name);
      sched.after(downMs, `step ${step} agent restart`, () => {
        this.log(`${name} agent started`);
        node.startAgent();
        this.#agentSince.set(name, sched.now());
      }, null);
    };
    this.#armed.set(name, kill);
    if (!midAdd) return kill("");
    sched.after(60_000, `step ${step} kill anyway`, () => kill(""), null);
  }

  /**
   * A create about to be sent by `who`: an armed kill of its node's agent
   * strikes while it is in flight (at once, or seconds later as the ADD waits
   * for Milo), and Milo holds that create a while before it runs (a queue),
   * so it may land after the plugin's own call and the DEL that follows it.
   */
  #sending(who: string): void {
    const m = /^(\S+) agent \S+ \S+ ADD#/.exec(who);
    const kill = m && this.#armed.get(m[1]);
    if (!kill) return;
    this.#armed.delete(m[1]);
    const rng = this.sched.rng(`kill ${m[1]} ${this.sched.now()}`);
    this.milo.holdNext(rng.int(2_000, 25_000));
    this.sched.after(rng.int(0, 8_000), `kill ${m[1]} agent`, () => kill(" mid-ADD"), null);
  }

  /**
   * While a tool races the release paths (Milo's `racer` episode), Milo holds
   * a release's DELETE for most of its sender's timeout before it runs (the
   * window in which the tool deletes a stable name's claim and its next
   * holder makes it again), and a create a release sends after it (the claim
   * made again) for seconds.
   */
  #racing(who: string, method: string): void {
    if (!this.milo.troubles().has("racer")) return;
    const release = / (DEL|ADD)#\d+$/.test(who)
      ? / DEL#/.test(who)
      : / (reconcile|sweep)$/.test(who);
    if (!release || (method !== "DELETE" && method !== "POST")) return;
    // The DELETE runs within its sender's timeout (its answer read); the claim it makes again
    // after it, seconds later (the next holder in the queue may make the name first).
    const rng = this.sched.rng(`racing ${who}`);
    this.milo.holdNext(method === "DELETE" ? rng.int(800, 1_900) : rng.int(1_200, 1_900));
  }

  #sweep(cluster: Cluster): void {
    if (this.#sweeping.has(cluster)) return;
    this.#sweeping.add(cluster);
    const sched = this.sched;
    const kube = this.kubes.get(cluster)!;
    const d = sweepWith(this.o.defect);
    sched.spawn(`${cluster} sweep`, async () => {
      try {
        const r = await sweep({
          cluster,
          milo: this.#client({
            requestMs: NODE_SETTINGS.requestMs,
            deadline: sched.now() + SWEEP.operationMs,
            who: `${cluster} sweep`,
          }),
          kube: sweepKube(sched, kube, { blind: d.blind }),
          apply: true,
          graceMs: SWEEP.graceMs,
          intervalMs: SWEEP.intervalMs,
          maxRelease: { percent: 50 },
          operationMs: SWEEP.operationMs,
          now: sched.now,
          sleep: (ms) => sched.sleep(ms, "sweep wait"),
          ...d.options,
        });
        for (const x of r.rows.filter((x) => x.why.startsWith("DUPLICATE"))) {
          this.#report(`${cluster} sweep`, [{
            claim: x.claim,
            address: x.address ?? "",
            holder: "",
            now: x.why,
          }]);
        }
        this.log(
          `${cluster} sweep ${r.outcome}: ${r.message}${
            r.rows.map((x) => `; ${x.action} ${x.claim} ${x.address} (${x.pod} ${x.why})`).join("")
          }`,
        );
      } catch (err) {
        this.log(`${cluster} sweep failed: ${err instanceof Error ? err.message : err}`);
      } finally {
        this.#sweeping.delete(cluster);
      }
    });
  }
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}
