/**
 * A node's kubelet and its runtime in the simulated world: a pod worker per
 * pod bound to the node (sandbox up, sandbox down when the API says the pod
 * ends or is gone, or its sandbox dies), and the runtime that makes the CNI
 * calls in one of four ways:
 *
 * - `containerd`: a failed ADD is torn down with DEL, and the kubelet tries
 *   a new sandbox; a failed DEL is retried until it succeeds (the kubelet's
 *   StopPodSandbox, then its garbage collection).
 * - `oneshot`: a runtime that never retries a DEL (a podman-like one); a
 *   failed ADD is torn down once and the same container started again.
 * - `galactic`: galactic's masters (datum-cloud/galactic `internal/cni`):
 *   IPAM ADD, then kernel steps that may fail, after which the master calls
 *   IPAM DEL itself; its DEL calls IPAM DEL and swallows its failure
 *   (`ops_del.go`), so the runtime never retries, and libcni drops its cache.
 * - `multus`: Multus (k8snetworkplumbingwg/multus-cni) calls each network's
 *   delegate in turn; a delegate that fails makes it DEL the ones before it;
 *   its DEL calls every delegate and fails when one did.
 *
 * libcni's result cache (lib/liveness.ts reads it) gets an entry per
 * successful ADD (the runtime's; Multus's per delegate), removed after a
 * successful DEL (`libcni/api.go`: kept when the DEL failed).
 */
import { sha256Hex } from "../../lib/sha256.ts";
import type { SimKube, SimPod } from "./kube.ts";
import type { CniCall, CniOutcome, Json, SimNode } from "./node.ts";
import { SCOPE } from "./node.ts";
import type { Proc, Scheduler } from "./scheduler.ts";

/** How a node's runtime calls CNI. */
export type Flavour = "containerd" | "oneshot" | "galactic" | "multus";

/** One attachment of a sandbox. */
export interface Attached {
  network: string;
  ifname: string;
  conf: Json;
  /** The addresses its ADD returned (once it succeeded). */
  ips: string[];
}

/** A pod sandbox, as the world knows it (the checker's truth). */
export interface Sandbox {
  id: string;
  node: string;
  cluster: string;
  pod: { namespace: string; name: string; uid: string };
  /** creating: its ADD runs; live: told its addresses; deleting: its DEL began; dead: done. */
  state: "creating" | "live" | "deleting" | "dead";
  since: number;
  /** When it began (its first ADD): a claim made for it from then on is its own. */
  born: number;
  nets: Attached[];
}

/** The network configs (stdin) of the simulated networks, per flavour. */
export function netConf(network: string, flavour: Flavour): Json {
  const identity = network === "db" ? "pod" : network === "slot" ? "network" : "attachment";
  const galactic = flavour === "galactic";
  return {
    cniVersion: "1.1.0",
    name: network,
    type: galactic ? "galactic-veth" : "ptp",
    ...(galactic ? { vpc: "7b3e", vpcattachment: network === "slot" ? "slot1" : "attach1" } : {}),
    ipam: {
      type: "milo-ipam",
      classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
      scope: SCOPE,
      gateways: { ipv4: "169.254.1.1", ipv6: "fe80::1" },
      ...(identity === "attachment" ? {} : { identity }),
    },
  };
}

/** What the kubelets tell the world. */
export interface KubeletWorld {
  sched: Scheduler;
  log(line: string): void;
  /** Every sandbox ever made, by id. */
  sandboxes: Map<string, Sandbox>;
  /** How often a galactic master's kernel step fails after IPAM ADD. */
  kernelFailure: number;
}

/** A condition a pod worker waits on: notified from an event, never in the notifier's step. */
class Wake {
  #waiters: (() => void)[] = [];
  constructor(readonly sched: Scheduler, readonly name: string) {}
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = this.sched.after(ms, `${this.name} tick`, () => done());
      const done = () => {
        t.cancel();
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve();
      };
      this.#waiters.push(done);
    });
  }
  notify(): void {
    for (const w of this.#waiters.splice(0)) this.sched.after(0, `${this.name} wake`, w);
  }
}

/** The kubelet and runtime of one node. */
export class SimKubelet {
  readonly node: SimNode;
  readonly kube: SimKube;
  readonly flavour: Flavour;
  readonly world: KubeletWorld;
  /** The pod workers, by pod uid. */
  readonly #workers = new Map<string, { proc: Proc; wake: Wake; restart: boolean }>();
  #sandboxes = 0;

  constructor(world: KubeletWorld, node: SimNode, kube: SimKube, flavour: Flavour) {
    this.world = world;
    this.node = node;
    this.kube = kube;
    this.flavour = flavour;
  }

  /** The pods the API binds to this node, as the kubelet hears them (not while partitioned). */
  sync(): void {
    const status = this.kube.nodes.get(this.node.name)!;
    if (status.partitioned) return;
    for (const p of this.kube.pods.values()) {
      if (p.node === this.node.name && !this.#workers.has(p.uid) && p.deleting === undefined) {
        this.#start(p);
      }
    }
    for (const w of this.#workers.values()) w.wake.notify();
  }

  /** Kills the live sandbox of pod `uid` (a crash): the worker tears it down and makes another. */
  restartSandbox(uid: string): boolean {
    const w = this.#workers.get(uid);
    if (!w) return false;
    w.restart = true;
    w.wake.notify();
    return true;
  }

  /** The pods this kubelet runs a worker for. */
  get running(): string[] {
    return [...this.#workers.keys()];
  }

  /** Whether the API (as last heard) wants the pod ended. */
  #ending(p: SimPod): boolean {
    const status = this.kube.nodes.get(this.node.name)!;
    if (status.partitioned) return false;
    const now = this.kube.pods.get(p.uid);
    return !now || now.deleting !== undefined;
  }

  #start(p: SimPod): void {
    const sched = this.world.sched;
    const wake = new Wake(sched, `${this.node.name} kubelet ${p.name}`);
    const entry = { proc: undefined as unknown as Proc, wake, restart: false };
    entry.proc = sched.spawn(`${this.node.name} kubelet ${p.name}`, async () => {
      const rng = sched.rng(`${this.node.name} kubelet ${p.uid}`);
      let attempt = 0;
      let sandbox: Sandbox | undefined;
      while (!this.#ending(p)) {
        if (!sandbox || this.flavour !== "oneshot") sandbox = this.#sandbox(p);
        else this.#set(sandbox, "creating");
        const ok = await this.#add(sandbox);
        if (!ok) {
          // A new sandbox next time, but for a runtime that starts the same container again.
          if (this.flavour !== "oneshot") sandbox = undefined;
          attempt++;
          await wake.wait(Math.min(10_000, 1_000 * 2 ** Math.min(attempt, 4)) + rng.int(0, 2_000));
          continue;
        }
        attempt = 0;
        this.#set(sandbox, "live");
        entry.restart = false;
        while (!this.#ending(p) && !entry.restart) await wake.wait(60_000);
        // The containers get their termination grace (a crash gets none), then the sandbox goes.
        if (!entry.restart) await sched.sleep(rng.int(0, p.graceS * 1000), "grace");
        await this.#del(sandbox);
        sandbox = undefined;
      }
      if (sandbox && sandbox.state !== "dead") await this.#del(sandbox);
      this.#workers.delete(p.uid);
      if (!this.kube.nodes.get(this.node.name)!.partitioned) this.kube.confirmEnded(p.uid);
    });
    this.#workers.set(p.uid, entry);
  }

  #sandbox(p: SimPod): Sandbox {
    const n = ++this.#sandboxes;
    const id = hexId(`${this.node.name}/${p.uid}/${n}`);
    const nets = (this.flavour === "multus" ? p.nets : p.nets.slice(0, 1)).map((x) => ({
      network: x.network,
      ifname: x.ifname,
      conf: netConf(x.network, this.flavour),
      ips: [],
    }));
    const sb: Sandbox = {
      id,
      node: this.node.name,
      cluster: this.node.cluster,
      pod: { namespace: p.namespace, name: p.name, uid: p.uid },
      state: "creating",
      since: this.world.sched.now(),
      born: this.world.sched.now(),
      nets,
    };
    this.world.sandboxes.set(id, sb);
    return sb;
  }

  #set(sb: Sandbox, state: Sandbox["state"]): void {
    sb.state = state;
    sb.since = this.world.sched.now();
    const ips = sb.nets.flatMap((n) => n.ips).join(" ");
    this.world.log(
      `${this.node.name} sandbox ${sb.pod.name} ${sb.id.slice(0, 8)} ${state}${
        state === "live" ? ` ${ips}` : ""
      }`,
    );
  }

  #call(sb: Sandbox, verb: "ADD" | "DEL", n: Attached): Promise<CniOutcome> {
    const call: CniCall = {
      verb,
      containerId: sb.id,
      ifname: n.ifname,
      conf: n.conf,
      pod: sb.pod,
    };
    return this.node.exec(call).then((o) => {
      this.world.log(
        `${this.node.name} ${verb} ${sb.pod.name}/${n.ifname} ${sb.id.slice(0, 8)}: ${
          o.ok ? `ok ${o.ips.join(" ")}` : `error ${o.code} ${o.msg}`
        } (${o.via})`,
      );
      return o;
    });
  }

  /** The sandbox's ADD as this runtime makes it; answers whether it is up. */
  async #add(sb: Sandbox): Promise<boolean> {
    const sched = this.world.sched;
    if (this.flavour === "multus") {
      const done: Attached[] = [];
      for (const n of sb.nets) {
        const o = await this.#call(sb, "ADD", n);
        if (!o.ok) {
          // Multus deletes the delegates it added, the failed one too, and fails the ADD.
          for (const d of [...done, n].reverse()) await this.#delegateDel(sb, d);
          await this.#teardown(sb);
          return false;
        }
        n.ips = o.ips;
        done.push(n);
        this.#cache(this.node.multusDir, sb, n, true);
      }
      this.#cache(this.node.resultsDir, sb, { ...sb.nets[0], network: "multus-cni-network" }, true);
      return true;
    }
    const n = sb.nets[0];
    const o = await this.#call(sb, "ADD", n);
    if (
      o.ok && this.flavour === "galactic" &&
      sched.rng(`${sb.id} kernel`).chance(this.world.kernelFailure)
    ) {
      // A kernel step after IPAM failed: the master releases what IPAM gave, swallowing failure.
      this.world.log(
        `${this.node.name} galactic ${sb.pod.name}: kernel step failed after IPAM ADD`,
      );
      await this.#call(sb, "DEL", n);
      await this.#teardown(sb);
      return false;
    }
    if (!o.ok) {
      await this.#teardown(sb);
      return false;
    }
    n.ips = o.ips;
    this.#cache(this.node.resultsDir, sb, n, true);
    return true;
  }

  /** The runtime's DEL of a sandbox whose ADD failed. */
  async #teardown(sb: Sandbox): Promise<void> {
    this.#set(sb, "deleting");
    if (this.flavour === "oneshot") await this.#delOnce(sb);
    else await this.#delRetried(sb);
    this.#set(sb, "dead");
  }

  /** The sandbox's DEL, as this runtime makes it. */
  async #del(sb: Sandbox): Promise<void> {
    this.#set(sb, "deleting");
    if (this.flavour === "oneshot") await this.#delOnce(sb);
    else await this.#delRetried(sb);
    this.#set(sb, "dead");
  }

  async #delOnce(sb: Sandbox): Promise<boolean> {
    const n = sb.nets[0];
    const o = await this.#call(sb, "DEL", n);
    if (o.ok) this.#cache(this.node.resultsDir, sb, n, false);
    return o.ok;
  }

  /** One DEL of the whole sandbox; answers whether it succeeded. */
  async #delAll(sb: Sandbox): Promise<boolean> {
    if (this.flavour === "multus") {
      let ok = true;
      for (const n of [...sb.nets].reverse()) ok = await this.#delegateDel(sb, n) && ok;
      if (ok) {
        this.#cache(
          this.node.resultsDir,
          sb,
          { ...sb.nets[0], network: "multus-cni-network" },
          false,
        );
      }
      return ok;
    }
    const n = sb.nets[0];
    const o = await this.#call(sb, "DEL", n);
    // galactic's master DEL always succeeds: it swallowed IPAM's failure.
    const ok = o.ok || this.flavour === "galactic";
    if (ok) this.#cache(this.node.resultsDir, sb, n, false);
    return ok;
  }

  async #delegateDel(sb: Sandbox, n: Attached): Promise<boolean> {
    const o = await this.#call(sb, "DEL", n);
    if (o.ok) this.#cache(this.node.multusDir, sb, n, false);
    return o.ok;
  }

  /** DEL until it succeeds (the kubelet's StopPodSandbox, then its garbage collection). */
  async #delRetried(sb: Sandbox): Promise<void> {
    const sched = this.world.sched;
    const rng = sched.rng(`${sb.id} del`);
    for (let attempt = 0; !await this.#delAll(sb); attempt++) {
      await sched.sleep(
        Math.min(60_000, 1_000 * 2 ** Math.min(attempt, 6)) + rng.int(0, 1_000),
        "del backoff",
      );
    }
  }

  /** libcni's result cache entry of one attachment: written after its ADD, removed after its DEL. */
  #cache(dir: string, sb: Sandbox, n: Pick<Attached, "network" | "ifname">, write: boolean): void {
    const path = `${dir}/${n.network}-${sb.id}-${n.ifname}`;
    if (write) {
      Deno.writeTextFileSync(
        path,
        JSON.stringify({
          kind: "cniCacheV1",
          containerId: sb.id,
          ifName: n.ifname,
          networkName: n.network,
        }),
      );
    } else {
      try {
        Deno.removeSync(path);
      } catch {
        // Never written (its ADD failed before).
      }
    }
  }
}

/** A container ID: 64 hex digits, made from a stable name. */
export function hexId(seed: string): string {
  return sha256Hex(`${seed}\u0000a`);
}
