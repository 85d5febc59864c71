/**
 * The runtime emulator: what kubelet and containerd do for milo-ipam. It
 * creates pod namespaces and execs the master plugin (`bridge`, `ptp`) inside
 * the node's namespace with the CNI environment and the network config on
 * stdin, keeps the libcni-like result cache, and execs the installed
 * milo-ipam the way a master delegates to it (CHECK, GC) and the node runs it
 * (`reconcile`). A Multus-attached pod is attached the way Multus runs a
 * NetworkAttachmentDefinition's delegate: bridge + milo-ipam on `net1`, its
 * result cached in the node's Multus cache, while the runtime's own cache
 * holds only Multus's entry (`multus-cni-network-<containerID>-eth0`).
 */
import type { ReconcileReport } from "../../lib/reconcile.ts";
import type { AttachmentRef, ResultCache, ValidAttachment } from "./cache.ts";
import {
  bridgeConf,
  type CniResult,
  MULTUS_IFNAME,
  MULTUS_NETWORK,
  multusConf,
  multusDelegateConf,
  NET_BRIDGE,
  NET_MULTUS,
  NET_PTP6,
  type NetConf,
  ptp6Conf,
  TIMEOUTS,
  type Timeouts,
} from "./netconf.ts";
import { addNetns, CNI_BIN, delNetns, type Exec, execIn } from "./netns.ts";
import type { NodeInstall } from "./nodes.ts";
import { clusterOf, type NodeName, type Topology } from "./topology.ts";

/** One pod: its namespace, identity and (once ADDed) its lease. */
export interface Pod {
  name: string;
  namespace: string;
  uid: string;
  node: NodeName;
  /** Network namespace name (under /var/run/netns). */
  netns: string;
  containerId: string;
  network: string;
  ifname: string;
  /** Attached through Multus (a NetworkAttachmentDefinition's delegate on `net1`). */
  multus?: boolean;
  /** The result of the successful ADD (as cached). */
  result?: CniResult;
  /** Addresses from the result, CIDR form. */
  addresses?: string[];
}

/** What one CNI invocation did. */
export interface CniCall {
  ok: boolean;
  /** CNI error code (undefined on success; 0 when the plugin printed no error). */
  code?: number;
  msg?: string;
  /** stdout decoded as JSON, when it is. */
  json?: unknown;
  ms: number;
  stdout: string;
  stderr: string;
}

/** What `milo-ipam reconcile` did. */
export interface ReconcileRun {
  code: number;
  /** The JSON report on stdout (undefined when stdout is not one). */
  report?: ReconcileReport;
  stdout: string;
  stderr: string;
}

/** A CNI verb the runtime sends through the master. */
export type Verb = "ADD" | "CHECK" | "DEL";

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function parseJson(text: string): unknown {
  try {
    return text.trim() ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** A CniCall from a finished process: CNI error code and message parsed from stdout. */
function toCall(r: Exec): CniCall {
  const json = parseJson(r.stdout);
  const call: CniCall = { ok: r.code === 0, ms: r.ms, stdout: r.stdout, stderr: r.stderr, json };
  if (!call.ok) {
    const err = isRecord(json) ? json : {};
    call.code = typeof err.code === "number" ? err.code : 0;
    call.msg = typeof err.msg === "string" ? err.msg : r.stderr.trim() || r.stdout.trim();
    if (r.timedOut) call.msg = `timed out after ${Math.round(r.ms)} ms; ${call.msg}`;
  }
  return call;
}

/** The kubelet/containerd side of the e2e. */
export class Runtime {
  /** The plugin's timeouts in the configs piped from now on. */
  timeouts: Timeouts = { ...TIMEOUTS };
  /** Pods with a successful ADD and no successful DEL yet. */
  readonly live = new Map<string, Pod>();
  readonly #topo: Topology;
  readonly #cache: ResultCache;
  /** Multus's caches (its `cniDir` per node; the delegates' results under `results/`). */
  readonly #multus?: ResultCache;
  readonly #installs: Record<NodeName, NodeInstall>;
  #podSeq = 0;

  constructor(
    topo: Topology,
    cache: ResultCache,
    installs: Record<NodeName, NodeInstall>,
    multus?: ResultCache,
  ) {
    this.#topo = topo;
    this.#cache = cache;
    this.#installs = installs;
    this.#multus = multus;
  }

  /**
   * A new pod (namespace created) on `node`; `multus`: attached through Multus
   * on `net1` (network {@link NET_MULTUS}).
   */
  async newPod(
    node: NodeName,
    o: { network?: string; name?: string; multus?: boolean } = {},
  ): Promise<Pod> {
    if (o.multus && !this.#multus) throw new Error("this world has no Multus layout");
    const seq = ++this.#podSeq;
    const pod: Pod = {
      name: o.name ?? `web-${seq}`,
      namespace: clusterOf(node) === "cluster-a" ? "shop" : "billing",
      uid: crypto.randomUUID(),
      node,
      netns: this.#topo.podNs(seq),
      containerId: `ctr${seq}x${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`,
      network: o.network ?? (o.multus ? NET_MULTUS : NET_BRIDGE),
      ifname: o.multus ? MULTUS_IFNAME : "eth0",
      ...(o.multus ? { multus: true } : {}),
    };
    await addNetns(pod.netns);
    return pod;
  }

  /** The bridge network config of a cluster with the current timeouts. */
  bridgeConf(cluster: string, ipamExtra: Record<string, unknown> = {}): NetConf {
    return bridgeConf(cluster, this.timeouts, ipamExtra);
  }

  /** The network config a runtime (or, for a Multus pod, Multus) would pipe for this pod. */
  confOf(pod: Pod): NetConf {
    if (pod.multus) return multusDelegateConf(clusterOf(pod.node), this.timeouts);
    return pod.network === NET_PTP6
      ? ptp6Conf(this.timeouts)
      : this.bridgeConf(clusterOf(pod.node));
  }

  /** The cache that holds the pod's milo-ipam attachment: the runtime's, or Multus's. */
  cacheOf(pod: Pod): ResultCache {
    return pod.multus ? this.#multus! : this.#cache;
  }

  /** Multus's entry of a Multus pod in the runtime's cache: Multus is attached on eth0. */
  multusRef(pod: Pod): AttachmentRef {
    return {
      node: pod.node,
      network: MULTUS_NETWORK,
      containerId: pod.containerId,
      ifname: "eth0",
    };
  }

  /**
   * The config with `prevResult` from the cache of the plugin's result, as
   * libcni injects it (for a Multus pod: Multus's libcni, from its cache).
   */
  async #withPrev(pod: Pod, conf: NetConf): Promise<NetConf> {
    const out = { ...conf };
    const cached = await this.cacheOf(pod).read(pod);
    if (cached?.result) out.prevResult = cached.result;
    return out;
  }

  /**
   * One CNI invocation, runtime style: exec the master plugin inside the node
   * namespace with CNI_* env and the network config on stdin; CHECK and DEL
   * get `prevResult` from the result cache.
   */
  async cni(
    verb: Verb,
    pod: Pod,
    o: { killAfterMs?: number; timeoutMs?: number; conf?: NetConf } = {},
  ): Promise<CniCall> {
    const base = o.conf ?? this.confOf(pod);
    const conf = verb === "ADD" ? { ...base } : await this.#withPrev(pod, base);
    const env = this.#env(verb, pod);
    if (o.killAfterMs !== undefined) env.E2E_KILL_AFTER = (o.killAfterMs / 1000).toFixed(3);
    const r = await execIn(this.#topo.nodeNs(pod.node), `${CNI_BIN}/${conf.type}`, [], {
      env,
      stdin: JSON.stringify(conf),
      timeoutMs: o.timeoutMs ?? this.timeouts.totalMs + 30_000,
    });
    const call = toCall(r);
    if (verb === "ADD" && call.ok) {
      const result = (isRecord(call.json) ? call.json : {}) as CniResult;
      pod.result = result;
      pod.addresses = (result.ips ?? []).map((i) => i.address);
      const cached = { conf, netns: env.CNI_NETNS, cniArgs: env.CNI_ARGS, result };
      await this.cacheOf(pod).write(pod, cached);
      if (pod.multus) await this.#multusAdded(pod, cached);
      this.live.set(this.#key(pod), pod);
    }
    if (verb === "DEL" && call.ok) {
      await this.cacheOf(pod).remove(pod);
      if (pod.multus) await this.#multusDeleted(pod);
      this.live.delete(this.#key(pod));
    }
    return call;
  }

  /**
   * Multus's side of a successful ADD, after its libcni cached the delegate's
   * result in `<cniDir>/results/`: its scratch file of the delegates
   * (`<cniDir>/<containerID>`), then the runtime caches what Multus returned
   * (the default network's result) as `multus-cni-network-<containerID>-eth0`.
   */
  async #multusAdded(
    pod: Pod,
    o: { conf: NetConf; netns: string; cniArgs: string },
  ): Promise<void> {
    const multus = this.#multus!;
    const cniDir = multus.base(pod.node);
    await Deno.writeTextFile(`${cniDir}/${pod.containerId}`, JSON.stringify([o.conf]));
    await this.#cache.write(this.multusRef(pod), {
      conf: multusConf(cniDir),
      netns: o.netns,
      cniArgs: o.cniArgs,
      result: multusResult(o.netns, this.#podSeqOf(pod)),
    });
  }

  /** Multus's side of a successful DEL: libcni dropped the delegate's entry; Multus's goes too. */
  async #multusDeleted(pod: Pod): Promise<void> {
    await Deno.remove(`${this.#multus!.base(pod.node)}/${pod.containerId}`).catch(() => {});
    await this.#cache.remove(this.multusRef(pod));
  }

  #podSeqOf(pod: Pod): number {
    return Number(/p(\d+)$/.exec(pod.netns)?.[1] ?? 0);
  }

  #key(pod: Pod): string {
    return `${clusterOf(pod.node)}\u0000${pod.containerId}\u0000${pod.ifname}`;
  }

  /**
   * The runtime forgets a pod without any DEL: its namespace vanishes and its
   * result cache entry is gone (a "DEL that never came").
   */
  async forgetPod(pod: Pod): Promise<void> {
    await this.cacheOf(pod).remove(pod);
    if (pod.multus) await this.#multusDeleted(pod);
    this.live.delete(this.#key(pod));
    await delNetns(pod.netns);
  }

  /**
   * The IPAM delegate's CHECK exactly as the master execs it: milo-ipam from
   * CNI_PATH with the master's env and stdin (network config plus prevResult;
   * a Multus pod's from Multus's cache, its ifname `net1`).
   */
  async ipamCheck(pod: Pod): Promise<CniCall> {
    const conf = await this.#withPrev(pod, this.confOf(pod));
    const inst = this.#installs[pod.node];
    const r = await execIn(this.#topo.nodeNs(pod.node), `${inst.wrapDir}/milo-ipam`, [], {
      env: this.#env("CHECK", pod),
      stdin: JSON.stringify(conf),
      timeoutMs: this.timeouts.totalMs + 30_000,
    });
    return toCall(r);
  }

  #env(verb: string, pod: Pod): Record<string, string> {
    const inst = this.#installs[pod.node];
    return {
      CNI_COMMAND: verb,
      CNI_CONTAINERID: pod.containerId,
      CNI_NETNS: `/var/run/netns/${pod.netns}`,
      CNI_IFNAME: pod.ifname,
      CNI_PATH: `${inst.wrapDir}:${CNI_BIN}`,
      CNI_ARGS:
        `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name};K8S_POD_UID=${pod.uid}`,
    };
  }

  /** Valid attachments of a node on `network`, from its result cache. */
  validAttachments(node: NodeName, network = NET_BRIDGE): Promise<ValidAttachment[]> {
    return this.#cache.validAttachments(node, network);
  }

  /** Calls milo-ipam's GC directly (cniVersion 1.1.0), as a runtime's GC reaches the IPAM plugin. */
  async gc(node: NodeName, valid: ValidAttachment[]): Promise<CniCall> {
    const conf = {
      ...this.bridgeConf(clusterOf(node)),
      cniVersion: "1.1.0",
      "cni.dev/valid-attachments": valid,
    };
    const inst = this.#installs[node];
    const r = await execIn(this.#topo.nodeNs(node), inst.bin, [], {
      env: { CNI_COMMAND: "GC", CNI_PATH: `${inst.wrapDir}:${CNI_BIN}` },
      stdin: JSON.stringify(conf),
      timeoutMs: 60_000,
    });
    return toCall(r);
  }

  /** Runs `milo-ipam reconcile` for a node inside its namespace. */
  async reconcile(node: NodeName, o: { graceS: number; dryRun?: boolean }): Promise<ReconcileRun> {
    const inst = this.#installs[node];
    const args = ["reconcile", "--grace", String(o.graceS), ...(o.dryRun ? ["--dry-run"] : [])];
    const r = await execIn(this.#topo.nodeNs(node), inst.bin, args, {
      env: {},
      timeoutMs: 120_000,
    });
    const json = parseJson(r.stdout);
    const report = isRecord(json) && Array.isArray(json.released)
      ? json as unknown as ReconcileReport
      : undefined;
    return { code: r.code, report, stdout: r.stdout, stderr: r.stderr };
  }
}

/**
 * What Multus returns to the runtime for a pod: the cluster default network's
 * result on eth0 (that network's delegate is not run here, so its address,
 * from 10.88.0.0/16, exists in no namespace; milo-ipam never sees it).
 */
function multusResult(netns: string, seq: number): CniResult {
  return {
    cniVersion: "1.0.0",
    interfaces: [{ name: "eth0", sandbox: netns }],
    ips: [{
      address: `10.88.${Math.floor(seq / 250) % 250}.${(seq % 250) + 2}/16`,
      gateway: "10.88.0.1",
      interface: 0,
    }],
    dns: {},
  };
}
