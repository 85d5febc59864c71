/**
 * The objects the Kubernetes API stand-in (testing/kube_dev.ts) serves: pods
 * and nodes cut from the shared fixtures (`tests/fixtures/kube/`, real `v1`
 * objects), filled in from what a test says about them, with the
 * resourceVersion every change bumps.
 */

const FIXTURES = new URL("../tests/fixtures/kube/", import.meta.url);

/** A Kubernetes fixture body (a fresh copy): real `v1` objects as an API server answers them. */
export function kubeFixture(name: string): KubeObject {
  return JSON.parse(Deno.readTextFileSync(new URL(name, FIXTURES)));
}

/** The pod and node every stored object is cut from (list items: no kind, no apiVersion). */
const TEMPLATES = (() => {
  const { kind: _k, apiVersion: _a, ...pod } = kubeFixture("pod.json");
  const node = (kubeFixture("nodelist.json").items as KubeObject[])[0];
  return JSON.stringify({ pod, node });
})();

/** What a test says about a pod; the rest is filled in. */
export interface PodInput {
  namespace: string;
  name: string;
  /** Default: a fresh random UID. */
  uid?: string;
  nodeName?: string;
  /** Default `Running`. */
  phase?: string;
  annotations?: Record<string, string>;
  /** `spec.terminationGracePeriodSeconds`; default the fixture's (Kubernetes' default, 30). */
  graceS?: number;
  /**
   * A mirror pod as its node's kubelet makes it for the static pod of this
   * UID: the `kubernetes.io/config.mirror` annotation and an owner reference
   * to the node (`pkg/kubelet/pod/mirror_client.go`). An annotation a test
   * writes itself is only that: any user may write it on a pod of theirs.
   */
  staticUid?: string;
}

/**
 * Most bytes of a pod's annotations, keys and values together, as the API
 * server validates them (`TotalAnnotationSizeLimitB`, k8s.io/apimachinery
 * `pkg/api/validation/objectmeta.go`): a larger set is refused.
 */
export const MAX_ANNOTATION_BYTES = 256 * 1024;

/** A stored object, in the API's JSON shape. */
export type KubeObject = { metadata: Record<string, unknown> } & Record<string, unknown>;

/** The pods and nodes the stand-in serves; every change bumps the resourceVersion. */
export class KubeStore {
  /** The UID of the cluster's `kube-system` namespace: the cluster's identity. */
  clusterUid: string = crypto.randomUUID();
  readonly #pods = new Map<string, KubeObject>();
  readonly #nodes = new Map<string, KubeObject>();
  #rv = 1000;
  /** The list order of each kind, until a pod or node is added or removed. */
  #sorted: { pods?: KubeObject[]; nodes?: KubeObject[] } = {};

  /** The current resourceVersion. */
  get resourceVersion(): string {
    return String(this.#rv);
  }

  #meta(extra: Record<string, unknown>): Record<string, unknown> {
    return {
      uid: crypto.randomUUID(),
      resourceVersion: String(++this.#rv),
      creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
      ...extra,
    };
  }

  /** Adds (or replaces, by namespace/name) a pod; answers the stored object. */
  addPod(p: PodInput): KubeObject {
    const size = Object.entries(p.annotations ?? {}).reduce(
      (n, [k, v]) => n + new TextEncoder().encode(k + v).length,
      0,
    );
    if (size > MAX_ANNOTATION_BYTES) {
      throw new Error(`annotations size ${size} is larger than limit ${MAX_ANNOTATION_BYTES}`);
    }
    const { pod } = JSON.parse(TEMPLATES) as { pod: KubeObject };
    const node = p.nodeName ? this.#nodes.get(p.nodeName) : undefined;
    const mirror = p.staticUid && p.nodeName
      ? {
        annotations: { ...p.annotations, "kubernetes.io/config.mirror": p.staticUid },
        ownerReferences: [{
          apiVersion: "v1",
          kind: "Node",
          name: p.nodeName,
          uid: node?.metadata.uid ?? crypto.randomUUID(),
          controller: true,
        }],
      }
      : {};
    pod.metadata = this.#meta({
      name: p.name,
      namespace: p.namespace,
      ...(p.uid ? { uid: p.uid } : {}),
      ...(p.annotations ? { annotations: { ...p.annotations } } : {}),
      ...mirror,
    });
    const spec = pod.spec as Record<string, unknown>;
    if (p.nodeName) spec.nodeName = p.nodeName;
    else delete spec.nodeName;
    if (p.graceS !== undefined) spec.terminationGracePeriodSeconds = p.graceS;
    const { podIP: _p, podIPs: _ps, hostIP: _h, hostIPs: _hs, ...status } = pod.status as Record<
      string,
      unknown
    >;
    pod.status = { ...status, phase: p.phase ?? "Running" };
    this.#pods.set(`${p.namespace}/${p.name}`, pod);
    this.#sorted.pods = undefined;
    return pod;
  }

  /** Removes a pod; true when it existed. */
  removePod(namespace: string, name: string): boolean {
    this.#rv++;
    this.#sorted.pods = undefined;
    return this.#pods.delete(`${namespace}/${name}`);
  }

  /** The pod `namespace/name`, if stored. */
  pod(namespace: string, name: string): KubeObject | undefined {
    return this.#pods.get(`${namespace}/${name}`);
  }

  /** Adds a node (a Ready one). */
  addNode(name: string): KubeObject {
    const { node } = JSON.parse(TEMPLATES) as { node: KubeObject };
    const labels = node.metadata.labels as Record<string, string>;
    node.metadata = this.#meta({
      name,
      labels: { ...labels, "kubernetes.io/hostname": name },
      annotations: node.metadata.annotations,
    });
    const status = node.status as { addresses: { type: string; address: string }[] };
    status.addresses = status.addresses.filter((a) => a.type !== "Hostname");
    status.addresses.push({ type: "Hostname", address: name });
    this.#nodes.set(name, node);
    this.#sorted.nodes = undefined;
    return node;
  }

  /**
   * Sets a node's `Ready` condition: `Unknown` as the node controller marks a
   * node it lost contact with, `False` for a failing kubelet. A change of
   * status moves its `lastTransitionTime` to `at` (default now), as the
   * kubelet and the node controller write it (k8s.io/kubernetes
   * `pkg/kubelet/nodestatus/setters.go` `ReadyCondition`).
   */
  setNodeReady(name: string, status: "True" | "False" | "Unknown", at = new Date()): void {
    const st = this.#nodes.get(name)?.status as {
      conditions: { type: string; status: string; lastTransitionTime?: string }[];
    };
    for (const c of st.conditions) {
      if (c.type !== "Ready" || c.status === status) continue;
      c.status = status;
      c.lastTransitionTime = at.toISOString().replace(/\.\d+Z$/, "Z");
    }
    this.#rv++;
  }

  /** Removes a node; true when it existed. */
  removeNode(name: string): boolean {
    this.#rv++;
    this.#sorted.nodes = undefined;
    return this.#nodes.delete(name);
  }

  /** Removes every pod and node. */
  clear(): void {
    this.#rv++;
    this.#pods.clear();
    this.#nodes.clear();
    this.#sorted = {};
  }

  /** Every pod, sorted by namespace/name (the list order); not to be changed. */
  pods(): readonly KubeObject[] {
    return this.#sorted.pods ??= [...this.#pods.keys()].sort().map((k) => this.#pods.get(k)!);
  }

  /** Every node, sorted by name; not to be changed. */
  nodes(): readonly KubeObject[] {
    return this.#sorted.nodes ??= [...this.#nodes.keys()].sort().map((k) => this.#nodes.get(k)!);
  }
}
