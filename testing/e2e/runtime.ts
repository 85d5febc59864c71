/**
 * The runtime emulator: what kubelet and containerd do for milo-ipam. It
 * creates pod namespaces and execs the master plugin (`bridge`, `ptp`) inside
 * the node's namespace with the CNI environment and the network config on
 * stdin, keeps the libcni-like result cache, and execs the installed
 * milo-ipam the way a master delegates to it (CHECK, GC) and the node runs it
 * (`reconcile`).
 */
import type { ReconcileReport } from "../../lib/reconcile.ts";
import type { ResultCache, ValidAttachment } from "./cache.ts";
import {
  bridgeConf,
  type CniResult,
  NET_BRIDGE,
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
  readonly #installs: Record<NodeName, NodeInstall>;
  #podSeq = 0;

  constructor(topo: Topology, cache: ResultCache, installs: Record<NodeName, NodeInstall>) {
    this.#topo = topo;
    this.#cache = cache;
    this.#installs = installs;
  }

  /** A new pod (namespace created) on `node`. */
  async newPod(node: NodeName, o: { network?: string; name?: string } = {}): Promise<Pod> {
    const seq = ++this.#podSeq;
    const pod: Pod = {
      name: o.name ?? `web-${seq}`,
      namespace: clusterOf(node) === "cluster-a" ? "shop" : "billing",
      uid: crypto.randomUUID(),
      node,
      netns: this.#topo.podNs(seq),
      containerId: `ctr${seq}x${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`,
      network: o.network ?? NET_BRIDGE,
      ifname: "eth0",
    };
    await addNetns(pod.netns);
    return pod;
  }

  /** The bridge network config of a cluster with the current timeouts. */
  bridgeConf(cluster: string, ipamExtra: Record<string, unknown> = {}): NetConf {
    return bridgeConf(cluster, this.timeouts, ipamExtra);
  }

  /** The network config a runtime would pipe for this pod. */
  confOf(pod: Pod): NetConf {
    return pod.network === NET_PTP6
      ? ptp6Conf(this.timeouts)
      : this.bridgeConf(clusterOf(pod.node));
  }

  /** The config with `prevResult` from the result cache, as libcni injects it. */
  async #withPrev(pod: Pod, conf: NetConf): Promise<NetConf> {
    const out = { ...conf };
    const cached = await this.#cache.read(pod);
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
      await this.#cache.write(pod, { conf, netns: env.CNI_NETNS, cniArgs: env.CNI_ARGS, result });
      this.live.set(this.#key(pod), pod);
    }
    if (verb === "DEL" && call.ok) {
      await this.#cache.remove(pod);
      this.live.delete(this.#key(pod));
    }
    return call;
  }

  #key(pod: Pod): string {
    return `${clusterOf(pod.node)}\u0000${pod.containerId}\u0000${pod.ifname}`;
  }

  /**
   * The runtime forgets a pod without any DEL: its namespace vanishes and its
   * result cache entry is gone (a "DEL that never came").
   */
  async forgetPod(pod: Pod): Promise<void> {
    await this.#cache.remove(pod);
    this.live.delete(this.#key(pod));
    await delNetns(pod.netns);
  }

  /**
   * The IPAM delegate's CHECK exactly as the master execs it: milo-ipam from
   * CNI_PATH with the master's env and stdin (network config plus prevResult).
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
