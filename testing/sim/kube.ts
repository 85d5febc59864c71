/**
 * One cluster's Kubernetes API in the simulated world: pods with UIDs and a
 * termination grace, nodes whose Ready condition the node controller turns
 * Unknown after its monitor grace without word from the kubelet (k8s.io
 * kubernetes `pkg/controller/nodelifecycle`, 40 s, 50 s since 1.32) and True
 * again when the kubelet is heard (`lastTransitionTime` moving), graceful and
 * forced deletion, a StatefulSet that makes a pod again under the same name
 * once the old object is gone, Deployments that replace and surge. The
 * kubelets (runtime.ts) act on what it holds; the sweep reads it through
 * {@link SweepKube}, as lib/kube.ts's client would answer.
 */
import type { KubeClient, KubeNode, KubePod } from "../../lib/kube.ts";
import type { Scheduler } from "./scheduler.ts";

/** The UID of a simulated cluster's kube-system namespace (what its nodes' installs record). */
export function clusterUidOf(cluster: string): string {
  return `00000000-0000-4000-8000-${cluster.replace(/[^a-z0-9]/g, "").padEnd(12, "0").slice(-12)}`;
}

/** A network a pod is attached to: the network config's name, and its interface. */
export interface PodNet {
  network: string;
  ifname: string;
}

/** A pod as the simulated API keeps it. */
export interface SimPod {
  namespace: string;
  name: string;
  uid: string;
  node?: string;
  graceS: number;
  /** Set once its deletion was asked (graceful: the kubelet ends it, then the object goes). */
  deleting?: number;
  owner: { kind: "StatefulSet" | "Deployment" | "Pod"; name: string };
  nets: PodNet[];
}

/** A node as the simulated API keeps it. */
export interface SimNodeStatus {
  name: string;
  ready: boolean;
  readySince: number;
  /** Cut off from the API server (its kubelet neither hears nor is heard). */
  partitioned: boolean;
}

/** A workload the cluster runs: its pods' names come from it. */
export interface Workload {
  kind: "StatefulSet" | "Deployment";
  name: string;
  replicas: number;
  graceS: number;
  nets: PodNet[];
}

/** What the kubelets of the cluster hear. */
export interface KubeListener {
  /** The pods bound to `node` changed (a pod bound, one marked for deletion or removed). */
  podsChanged(node: string): void;
}

export class SimKube {
  readonly cluster: string;
  readonly pods = new Map<string, SimPod>();
  readonly nodes = new Map<string, SimNodeStatus>();
  readonly workloads = new Map<string, Workload>();
  readonly #sched: Scheduler;
  #uid = 0;
  listener: KubeListener = { podsChanged: () => {} };
  /** Told of every change worth a trace line. */
  log: (line: string) => void = () => {};

  constructor(sched: Scheduler, cluster: string, nodes: string[]) {
    this.#sched = sched;
    this.cluster = cluster;
    for (const name of nodes) {
      this.nodes.set(name, { name, ready: true, readySince: sched.now(), partitioned: false });
    }
  }

  /** Adds a workload and makes its pods. */
  addWorkload(w: Workload): void {
    this.workloads.set(w.name, w);
    this.#reconcileWorkload(w);
  }

  /** The pod named `ns/name`, if any. */
  podByName(name: string, namespace = "shop"): SimPod | undefined {
    for (const p of this.pods.values()) if (p.name === name && p.namespace === namespace) return p;
    return undefined;
  }

  /** The pods of a workload, by name. */
  podsOf(workload: string): SimPod[] {
    return [...this.pods.values()].filter((p) => p.owner.name === workload)
      .sort((a, b) => a.name < b.name ? -1 : 1);
  }

  /** Makes a pod and schedules it onto a Ready node; answers it (none when no node is Ready). */
  createPod(p: Omit<SimPod, "uid" | "node">): SimPod | undefined {
    const ready = [...this.nodes.values()].filter((n) => n.ready).map((n) => n.name).sort();
    if (!ready.length) return undefined;
    const rng = this.#sched.rng(`kube ${this.cluster} schedule ${p.name}`);
    const pod: SimPod = {
      ...p,
      uid: `${this.cluster}-uid-${String(++this.#uid).padStart(5, "0")}`,
      node: rng.pick(ready),
    };
    this.pods.set(pod.uid, pod);
    this.log(`kube ${this.cluster}: pod ${pod.namespace}/${pod.name} ${pod.uid} on ${pod.node}`);
    this.listener.podsChanged(pod.node!);
    return pod;
  }

  /** Asks a pod to end: marked, and its kubelet ends it (the object goes once it confirms). */
  deletePod(uid: string): void {
    const p = this.pods.get(uid);
    if (!p || p.deleting !== undefined) return;
    p.deleting = this.#sched.now();
    this.log(`kube ${this.cluster}: delete ${p.namespace}/${p.name} ${uid}`);
    if (p.owner.kind === "Deployment") this.#reconcileWorkload(this.workloads.get(p.owner.name));
    if (p.node) this.listener.podsChanged(p.node);
  }

  /** Removes a pod's object at once, whatever its kubelet is doing (`--force --grace-period=0`). */
  forceDelete(uid: string): void {
    const p = this.pods.get(uid);
    if (!p) return;
    this.log(`kube ${this.cluster}: force-delete ${p.namespace}/${p.name} ${uid}`);
    this.#remove(p);
  }

  /** A kubelet's word that its pod has ended: the object goes. */
  confirmEnded(uid: string): void {
    const p = this.pods.get(uid);
    if (p && p.deleting !== undefined) this.#remove(p);
  }

  /** A Deployment's rolling update: a surge pod first, then one old pod asked to end. */
  rollout(workload: string): void {
    const w = this.workloads.get(workload);
    if (!w || w.kind !== "Deployment") return;
    const old = this.podsOf(workload).filter((p) => p.deleting === undefined);
    this.#make(w);
    const rng = this.#sched.rng(`kube ${this.cluster} rollout ${workload}`);
    const victim = old.length ? rng.pick(old) : undefined;
    // The old pod goes once the surge pod has had time to start (maxSurge 1, maxUnavailable 0).
    if (victim) {
      this.#sched.after(
        rng.int(2_000, 15_000),
        `kube ${this.cluster} rollout`,
        () => this.deletePod(victim.uid),
        null,
      );
    }
  }

  /** Scales a Deployment by `delta` (down: the newest pods are asked to end). */
  scale(workload: string, delta: number): void {
    const w = this.workloads.get(workload);
    if (!w) return;
    w.replicas = Math.max(0, Math.min(w.replicas + delta, 8));
    this.#reconcileWorkload(w);
  }

  /** Cuts `node` off from the API server for `ms`. */
  partition(node: string, ms: number): void {
    const n = this.nodes.get(node);
    if (!n || n.partitioned) return;
    n.partitioned = true;
    const rng = this.#sched.rng(`kube ${node} partition ${this.#sched.now()}`);
    this.log(`kube ${this.cluster}: ${node} partitioned for ${Math.round(ms / 1000)} s`);
    // The node controller hears nothing and marks it Unknown after its monitor grace.
    this.#sched.after(rng.int(40_000, 50_000), `kube ${node} monitor`, () => {
      if (!n.partitioned || !n.ready) return;
      n.ready = false;
      n.readySince = this.#sched.now();
      this.log(`kube ${this.cluster}: ${node} NotReady`);
    }, null);
    this.#sched.after(ms, `kube ${node} heal`, () => {
      n.partitioned = false;
      this.log(`kube ${this.cluster}: ${node} reachable again`);
      this.listener.podsChanged(node);
      // The kubelet's next status update (every 10 s) makes it Ready again.
      this.#sched.after(rng.int(500, 10_000), `kube ${node} ready`, () => {
        if (n.partitioned || n.ready) return;
        n.ready = true;
        n.readySince = this.#sched.now();
        this.log(`kube ${this.cluster}: ${node} Ready`);
      }, null);
    }, null);
  }

  #remove(p: SimPod): void {
    this.pods.delete(p.uid);
    if (p.node) this.listener.podsChanged(p.node);
    const w = this.workloads.get(p.owner.name);
    if (!w) return;
    // The controller notices within a moment and makes what is missing.
    const rng = this.#sched.rng(`kube ${this.cluster} controller ${p.name}`);
    this.#sched.after(
      rng.int(200, 3_000),
      `kube ${this.cluster} controller ${w.name}`,
      () => this.#reconcileWorkload(w),
      null,
    );
  }

  #reconcileWorkload(w: Workload | undefined): void {
    if (!w) return;
    const pods = this.podsOf(w.name);
    if (w.kind === "StatefulSet") {
      for (let i = 0; i < w.replicas; i++) {
        const name = `${w.name}-${i}`;
        if (!pods.some((p) => p.name === name)) this.#make(w, name);
      }
      return;
    }
    const active = pods.filter((p) => p.deleting === undefined);
    for (let i = active.length; i < w.replicas; i++) this.#make(w);
    const extra = active.slice(w.replicas);
    for (const p of extra.reverse()) this.deletePod(p.uid);
  }

  #make(w: Workload, name?: string): void {
    const rng = this.#sched.rng(`kube ${this.cluster} names ${w.name}`);
    const suffix = () =>
      Array.from({ length: 5 }, () => rng.pick([..."bcdfghjklmnpqrstvwxz2456789"])).join("");
    this.createPod({
      namespace: "shop",
      name: name ?? `${w.name}-${suffix()}`,
      graceS: w.graceS,
      owner: { kind: w.kind, name: w.name },
      nets: w.nets,
    });
  }
}

/**
 * The sweep's view of a cluster's API (the calls lib/sweep.ts makes of
 * lib/kube.ts's client), each answered after a simulated round trip. `blind`:
 * nodes without their Ready condition's lastTransitionTime (an old API view).
 */
export function sweepKube(
  sched: Scheduler,
  kube: SimKube,
  o: { blind?: boolean } = {},
): KubeClient {
  let requests = 0;
  const trip = async () => {
    requests++;
    await sched.sleep(
      sched.rng(`kube ${kube.cluster} api ${sched.current().name}`).skewed(1, 200),
      "kube api",
    );
  };
  const view = (p: SimPod): KubePod => ({
    namespace: p.namespace,
    name: p.name,
    uid: p.uid,
    nodeName: p.node,
    phase: "Running",
    graceS: o.blind ? undefined : p.graceS,
  });
  const client = {
    get requests() {
      return requests;
    },
    listPods: async (): Promise<KubePod[]> => {
      await trip();
      return [...kube.pods.values()].map(view);
    },
    listNodes: async (): Promise<KubeNode[]> => {
      await trip();
      return [...kube.nodes.values()].map((n) => ({
        name: n.name,
        ready: n.ready,
        ...(o.blind ? {} : { readySince: new Date(n.readySince).toISOString() }),
      }));
    },
    clusterUid: async (): Promise<string> => {
      await trip();
      return clusterUidOf(kube.cluster);
    },
    getPod: async (namespace: string, name: string): Promise<KubePod | null> => {
      await trip();
      const p = kube.podByName(name, namespace);
      return p ? view(p) : null;
    },
  };
  return client as unknown as KubeClient;
}
