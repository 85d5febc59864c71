/**
 * The end-to-end world: milo-dev in its own network namespace, four node
 * namespaces (cluster A: a1, a2; cluster B: b1, b2) on a bridge in the milo
 * namespace, milo-ipam installed per cluster, pods as namespaces attached by
 * a real CNI master (`bridge`, `ptp`) that delegates to milo-ipam, a libcni-like
 * result cache per node, and the ledger that compares Milo with the live pods.
 */
import { Buffer } from "node:buffer";
import { install } from "../../scripts/install.ts";
import { eachLine } from "../../testing/child.ts";
import { type MiloDev, startMiloDev } from "../../testing/milo_dev.ts";
import { E2E_SEED, E2E_TOKEN as TOKEN } from "../../testing/seeds.ts";
import { makeTestCA } from "../../testing/testca.ts";
import { formatCidr, parseCidr } from "../../lib/ip.ts";
import type { AgentAnswer } from "./e2e_agent.ts";
import {
  addBridge,
  addNetns,
  CNI_BIN,
  delNetns,
  delNetnsByPrefix,
  delStaleNetns,
  type Exec,
  execIn,
  linkVeth,
} from "./netns.ts";

const AGENT = new URL("./e2e_agent.ts", import.meta.url).pathname;

/** Namespace name base; a run uses `mie2e-<pid>-`. */
export const NS_BASE = "mie2e-";
/** Address of milo-dev on the milo namespace's bridge (RFC 2544 benchmark range). */
export const MILO_ADDR = "198.18.0.1";
const MILO_PORT = 8443;
const ADMIN = "127.0.0.1:9000";
export const PROJECT = "tenant-a";

/** The nodes and their clusters. */
export const NODES = {
  a1: { cluster: "cluster-a", addr: "198.18.0.11" },
  a2: { cluster: "cluster-a", addr: "198.18.0.12" },
  b1: { cluster: "cluster-b", addr: "198.18.0.21" },
  b2: { cluster: "cluster-b", addr: "198.18.0.22" },
} as const;
export type NodeName = keyof typeof NODES;
export const NODE_NAMES = Object.keys(NODES) as NodeName[];

/** The shared VPC network (bridge master) and the IPv6 ptp network. */
export const NET_BRIDGE = "vpc-7b3e";
export const NET_PTP6 = "vpc-7b3e-ptp6";

/** Usable IPv4 addresses of the pool: 10.244.0.1 .. 10.244.0.200. */
export const POOL_SIZE = 200;

/** The seed: one tenant, a /32 class whose pool has exactly POOL_SIZE addresses, a /96 class. */
export const SEED = E2E_SEED;

/** Timeouts of the plugin in the e2e configs (the plugin's defaults). */
export const TIMEOUTS = { requestMs: 2000, totalMs: 10_000 };
/** The node configs' timeouts: the limits every network config of the e2e stays within. */
const NODE_TIMEOUT_LIMITS = { requestMs: 10_000, totalMs: 30_000 };

// deno-lint-ignore no-explicit-any
export type Json = any;

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
  result?: Json;
  /** Addresses from the result, CIDR form. */
  addresses?: string[];
}

/** What one CNI invocation did. */
export interface CniCall {
  ok: boolean;
  /** CNI error code (undefined on success; 0 when the plugin printed no error). */
  code?: number;
  msg?: string;
  json?: Json;
  ms: number;
  stdout: string;
  stderr: string;
}

/** The ledger: Milo's claims against the live attachments. */
export interface Ledger {
  claims: number;
  live: number;
  duplicates: number;
  claimsWithoutPod: number;
  podsWithoutClaim: number;
  details: string[];
}

interface Install {
  cluster: string;
  bin: string;
  wrapDir: string;
  nodeConfig: string;
  logFile: string;
}

/** Concurrency-limited map over items (at most `limit` in flight). */
export async function pool<T>(
  items: T[],
  limit: number,
  fn: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) await fn(items[i], i);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** Sleeps `ms`. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The whole e2e topology. Always call {@link World.teardown} in a finally block. */
export class World {
  readonly prefix = `${NS_BASE}${Deno.pid}-`;
  readonly miloNs = `${this.prefix}milo`;
  readonly miloUrl = `https://${MILO_ADDR}:${MILO_PORT}`;
  dir = "";
  tokenFile = "";
  caFile = "";
  cacheRoot = "";
  stateDir = "";
  installs: Record<string, Install> = {};
  /** The plugin's timeouts in the configs piped from now on. */
  timeouts: { requestMs: number; totalMs: number } = { ...TIMEOUTS };
  /** Pods with a successful ADD and no successful DEL yet. */
  live = new Map<string, Pod>();
  #certFile = "";
  #keyFile = "";
  #milo?: MiloDev;
  #agent?: Deno.ChildProcess;
  #agentWriter?: WritableStreamDefaultWriter<Uint8Array>;
  #agentPending = new Map<number, (a: AgentAnswer) => void>();
  #agentId = 0;
  #podSeq = 0;
  log: (line: string) => void = (l) => console.log(l);

  nodeNs(node: NodeName): string {
    return `${this.prefix}${node}`;
  }

  cacheDir(node: NodeName): string {
    return `${this.cacheRoot}/${node}`;
  }

  /** Builds namespaces, certificates, milo-dev and the plugin installs. */
  async setup(): Promise<void> {
    await delStaleNetns(NS_BASE);
    this.dir = await Deno.makeTempDir({ prefix: "milo-ipam-e2e-" });
    this.cacheRoot = `${this.dir}/cni-results`;
    this.stateDir = `${this.dir}/state`;
    await Deno.mkdir(this.stateDir, { recursive: true });
    for (const n of NODE_NAMES) await Deno.mkdir(this.cacheDir(n), { recursive: true });
    this.tokenFile = `${this.dir}/token`;
    await Deno.writeTextFile(this.tokenFile, TOKEN + "\n");
    await Deno.writeTextFile(`${this.dir}/seed.json`, JSON.stringify(SEED, null, 2));
    const tls = await makeTestCA(`${this.dir}/tls`, [MILO_ADDR]);
    this.caFile = tls.caFile;
    this.#certFile = tls.certFile;
    this.#keyFile = tls.keyFile;

    await addNetns(this.miloNs);
    await addBridge(this.miloNs, "mbr0", `${MILO_ADDR}/24`);
    for (const [i, n] of NODE_NAMES.entries()) {
      const ns = this.nodeNs(n);
      await addNetns(ns);
      await linkVeth({
        hub: this.miloNs,
        hubIf: `to-${n}`,
        hubBridge: "mbr0",
        leaf: ns,
        leafIf: `up${i}`,
        leafCidr: `${NODES[n].addr}/24`,
      });
    }
    await this.startMilo();
    this.#startAgent();
    for (const node of NODE_NAMES) await this.#install(node);
  }

  /** The milo-ipam `ipam` block of a network (the same on every cluster: per-network keys only). */
  ipam(_cluster: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      type: "milo-ipam",
      classes: { ipv4: "vpc-pods-ipv4" },
      scope: {
        network: { apiGroup: "networking.datumapis.com", kind: "Network", name: NET_BRIDGE },
      },
      timeouts: this.timeouts,
      ...extra,
    };
  }

  /** The bridge network config of a cluster (the conflist entry a runtime pipes to bridge). */
  bridgeConf(cluster: string, ipamExtra: Record<string, unknown> = {}): Json {
    return {
      cniVersion: "1.0.0",
      name: NET_BRIDGE,
      type: "bridge",
      bridge: "cni0",
      isGateway: false,
      ipMasq: false,
      vpc: NET_BRIDGE,
      vpcattachment: `${NET_BRIDGE}-${cluster}`,
      ipam: this.ipam(cluster, ipamExtra),
    };
  }

  /** The IPv6-only ptp network: /96 blocks, link-local gateway fe80::1 on the host veths. */
  ptp6Conf(cluster: string): Json {
    return {
      cniVersion: "1.0.0",
      name: NET_PTP6,
      type: "ptp",
      ipMasq: false,
      ipam: this.ipam(cluster, {
        classes: { ipv6: "vpc-pods-ipv6" },
        gateways: { ipv6: "fe80::1" },
      }),
    };
  }

  /** Installs milo-ipam on one node, as a node's own /opt/cni/bin with its node config. */
  async #install(node: NodeName): Promise<void> {
    const cluster = NODES[node].cluster;
    const base = `${this.dir}/${node}`;
    const nodeConfig = `${base}/node.json`;
    const logFile = `${this.dir}/milo-ipam-${cluster}.log`;
    await Deno.mkdir(base, { recursive: true });
    await Deno.writeTextFile(
      nodeConfig,
      JSON.stringify(
        {
          milo: { url: this.miloUrl, tokenFile: this.tokenFile, caFile: this.caFile },
          cluster,
          node,
          log: { file: logFile, level: "info" },
          resultsDir: this.cacheDir(node),
          stateDir: `${this.stateDir}/${node}`,
          timeouts: NODE_TIMEOUT_LIMITS,
          gc: { minAgeS: 0 },
        },
        null,
        2,
      ),
    );
    const installed = await install({ dir: `${base}/bin`, config: nodeConfig, quiet: true });
    // CNI_PATH's first directory holds a wrapper that can SIGKILL the real plugin
    // after E2E_KILL_AFTER seconds (a plugin process killed mid-ADD).
    const wrapDir = `${base}/wrap`;
    await Deno.mkdir(wrapDir, { recursive: true });
    await Deno.writeTextFile(
      `${wrapDir}/milo-ipam`,
      [
        "#!/bin/sh",
        `real='${installed.path}'`,
        'if [ -n "$E2E_KILL_AFTER" ]; then exec timeout -s KILL "$E2E_KILL_AFTER" "$real" "$@"; fi',
        'exec "$real" "$@"',
        "",
      ].join("\n"),
      { mode: 0o755 },
    );
    await Deno.chmod(`${wrapDir}/milo-ipam`, 0o755);
    this.installs[node] = { cluster, bin: installed.path, wrapDir, nodeConfig, logFile };
  }

  // ---------------------------------------------------------------- milo-dev

  /** Starts milo-dev inside the milo namespace (HTTPS on MILO_ADDR, admin on its loopback). */
  async startMilo(): Promise<void> {
    if (this.#milo) return await this.#milo.restart();
    this.#milo = await startMiloDev({
      prefix: ["ip", "netns", "exec", this.miloNs],
      dir: this.dir,
      seed: `${this.dir}/seed.json`,
      listen: `${MILO_ADDR}:${MILO_PORT}`,
      admin: ADMIN,
      tls: { certFile: this.#certFile, keyFile: this.#keyFile, caFile: this.caFile },
    });
  }

  /** SIGKILLs milo-dev (the process itself: `ip netns exec` execs it); startMilo() restarts it. */
  async killMilo(): Promise<void> {
    await this.#milo?.kill("SIGKILL");
  }

  async #stopMilo(): Promise<void> {
    const milo = this.#milo;
    this.#milo = undefined;
    await milo?.stop();
  }

  #startAgent(): void {
    const child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        this.miloNs,
        Deno.execPath(),
        "run",
        "--no-config",
        "--no-lock",
        "--allow-net",
        `--allow-read=${this.caFile}`,
        AGENT,
        this.caFile,
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
      env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
    }).spawn();
    this.#agent = child;
    this.#agentWriter = child.stdin.getWriter();
    eachLine(child.stdout, (l) => {
      const a = JSON.parse(l) as AgentAnswer;
      this.#agentPending.get(a.id)?.(a);
      this.#agentPending.delete(a.id);
    });
  }

  /** An HTTP request made from inside the milo namespace. */
  async agentFetch(
    method: string,
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: Json }> {
    const id = ++this.#agentId;
    const { promise, resolve } = Promise.withResolvers<AgentAnswer>();
    this.#agentPending.set(id, resolve);
    const req = {
      id,
      method,
      url,
      headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      timeoutMs: 15_000,
    };
    await this.#agentWriter!.write(new TextEncoder().encode(JSON.stringify(req) + "\n"));
    const t = setTimeout(() => resolve({ id, error: "agent gave no answer in 20 s" }), 20_000);
    const a = await promise;
    clearTimeout(t);
    if (a.error) throw new Error(`${method} ${url}: ${a.error}`);
    const text = a.body ?? "";
    let parsed: Json = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch { /* not JSON */ }
    return { status: a.status!, body: parsed };
  }

  async #admin(method: string, path: string, body?: unknown): Promise<Json> {
    const r = await this.agentFetch(method, `http://${ADMIN}${path}`, body);
    if (r.status >= 300) throw new Error(`admin ${method} ${path}: ${r.status} ${r.body}`);
    return r.body;
  }

  /** Replaces milo-dev's faults (admin PUT /faults). */
  setFaults(f: Record<string, unknown>): Promise<Json> {
    return this.#admin("PUT", "/faults", f);
  }

  /** Clears every fault. */
  clearFaults(): Promise<Json> {
    return this.#admin("DELETE", "/faults");
  }

  /** milo-dev's request counters. */
  stats(): Promise<Json> {
    return this.#admin("GET", "/stats");
  }

  /** Every IPClaim of the tenant, read through the API (faults must be off). */
  async claims(labelSelector?: string): Promise<Json[]> {
    const q = labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : "";
    const url = `${this.miloUrl}/apis/resourcemanager.miloapis.com/v1alpha1/projects/${PROJECT}` +
      `/control-plane/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims${q}`;
    const r = await this.agentFetch("GET", url, undefined, { authorization: `Bearer ${TOKEN}` });
    if (r.status !== 200) throw new Error(`list claims: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.items;
  }

  /** The pool's status (capacity) as Milo reports it. */
  async poolStatus(name = "vpc-7b3e-pods-v4"): Promise<Json> {
    const url = `${this.miloUrl}/apis/ipam.miloapis.com/v1alpha1/ippools/${name}`;
    const r = await this.agentFetch("GET", url, undefined, { authorization: `Bearer ${TOKEN}` });
    return r.body?.status;
  }

  // ------------------------------------------------------------------- pods

  /** A new pod (namespace created) on `node`. */
  async newPod(node: NodeName, o: { network?: string; name?: string } = {}): Promise<Pod> {
    const seq = ++this.#podSeq;
    const pod: Pod = {
      name: o.name ?? `web-${seq}`,
      namespace: NODES[node].cluster === "cluster-a" ? "shop" : "billing",
      uid: crypto.randomUUID(),
      node,
      netns: `${this.prefix}p${seq}`,
      containerId: `ctr${seq}x${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`,
      network: o.network ?? NET_BRIDGE,
      ifname: "eth0",
    };
    await addNetns(pod.netns);
    return pod;
  }

  /** The network config a runtime would pipe for this pod. */
  confOf(pod: Pod): Json {
    const cluster = NODES[pod.node].cluster;
    return pod.network === NET_PTP6 ? this.ptp6Conf(cluster) : this.bridgeConf(cluster);
  }

  #cachePath(pod: Pod): string {
    return `${this.cacheDir(pod.node)}/${pod.network}-${pod.containerId}-${pod.ifname}`;
  }

  async #readCache(pod: Pod): Promise<Json | undefined> {
    try {
      return JSON.parse(await Deno.readTextFile(this.#cachePath(pod)));
    } catch {
      return undefined;
    }
  }

  /**
   * One CNI invocation, runtime style: exec the master plugin inside the node
   * namespace with CNI_* env and the network config on stdin; CHECK and DEL
   * get `prevResult` from the result cache as libcni injects it.
   */
  async cni(
    verb: "ADD" | "CHECK" | "DEL",
    pod: Pod,
    o: { killAfterMs?: number; timeoutMs?: number; conf?: Json } = {},
  ): Promise<CniCall> {
    const conf = { ...(o.conf ?? this.confOf(pod)) };
    if (verb !== "ADD") {
      const cached = await this.#readCache(pod);
      if (cached?.result) conf.prevResult = cached.result;
    }
    const env = this.#env(verb, pod);
    if (o.killAfterMs !== undefined) env.E2E_KILL_AFTER = (o.killAfterMs / 1000).toFixed(3);
    const r = await execIn(this.nodeNs(pod.node), `${CNI_BIN}/${conf.type}`, [], {
      env,
      stdin: JSON.stringify(conf),
      timeoutMs: o.timeoutMs ?? this.timeouts.totalMs + 30_000,
    });
    const call = toCall(r);
    const json = call.json;
    if (verb === "ADD" && call.ok) {
      pod.result = json;
      pod.addresses = (json.ips ?? []).map((i: Json) => i.address as string);
      const entry = {
        kind: "cniCacheV1",
        containerId: pod.containerId,
        config: Buffer.from(JSON.stringify(conf)).toString("base64"),
        ifName: pod.ifname,
        networkName: pod.network,
        netns: env.CNI_NETNS,
        cniArgs: env.CNI_ARGS.split(";").map((kv) => kv.split("=", 2)),
        result: json,
      };
      await Deno.writeTextFile(this.#cachePath(pod), JSON.stringify(entry));
      this.live.set(this.#key(pod), pod);
    }
    if (verb === "DEL" && call.ok) {
      await Deno.remove(this.#cachePath(pod)).catch(() => {});
      this.live.delete(this.#key(pod));
    }
    return call;
  }

  #key(pod: Pod): string {
    return `${NODES[pod.node].cluster}\u0000${pod.containerId}\u0000${pod.ifname}`;
  }

  /**
   * The runtime forgets a pod without any DEL: its namespace vanishes and its
   * result cache entry is gone (a "DEL that never came").
   */
  async forgetPod(pod: Pod): Promise<void> {
    await Deno.remove(this.#cachePath(pod)).catch(() => {});
    this.live.delete(this.#key(pod));
    await delNetns(pod.netns);
  }

  /** Valid attachments of a node, from its result cache (what a runtime passes to GC). */
  async validAttachments(node: NodeName, network = NET_BRIDGE): Promise<Json[]> {
    const out: Json[] = [];
    for await (const e of Deno.readDir(this.cacheDir(node))) {
      const doc = JSON.parse(await Deno.readTextFile(`${this.cacheDir(node)}/${e.name}`));
      if (doc.networkName === network) {
        out.push({ containerID: doc.containerId, ifname: doc.ifName });
      }
    }
    return out;
  }

  /**
   * The IPAM delegate's CHECK exactly as the master execs it: milo-ipam from
   * CNI_PATH with the master's env and stdin (network config plus prevResult).
   */
  async ipamCheck(pod: Pod): Promise<CniCall> {
    const conf = { ...this.confOf(pod) };
    const cached = await this.#readCache(pod);
    if (cached?.result) conf.prevResult = cached.result;
    const inst = this.installs[pod.node];
    const r = await execIn(this.nodeNs(pod.node), `${inst.wrapDir}/milo-ipam`, [], {
      env: this.#env("CHECK", pod),
      stdin: JSON.stringify(conf),
      timeoutMs: this.timeouts.totalMs + 30_000,
    });
    return toCall(r);
  }

  #env(verb: string, pod: Pod): Record<string, string> {
    const inst = this.installs[pod.node];
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

  /** Deletes a claim behind the plugin's back (an operator, through the API). */
  async deleteClaim(name: string): Promise<number> {
    const url = `${this.miloUrl}/apis/resourcemanager.miloapis.com/v1alpha1/projects/${PROJECT}` +
      `/control-plane/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims/${name}`;
    const r = await this.agentFetch("DELETE", url, undefined, { authorization: `Bearer ${TOKEN}` });
    return r.status;
  }

  /** Calls milo-ipam's GC directly (cniVersion 1.1.0), as a runtime's GC reaches the IPAM plugin. */
  async gc(node: NodeName, valid: Json[]): Promise<CniCall> {
    const cluster = NODES[node].cluster;
    const conf = {
      ...this.bridgeConf(cluster),
      cniVersion: "1.1.0",
      "cni.dev/valid-attachments": valid,
    };
    const r = await execIn(this.nodeNs(node), this.installs[node].bin, [], {
      env: { CNI_COMMAND: "GC", CNI_PATH: `${this.installs[node].wrapDir}:${CNI_BIN}` },
      stdin: JSON.stringify(conf),
      timeoutMs: 60_000,
    });
    return toCall(r);
  }

  /** Runs `milo-ipam reconcile` for a node inside its namespace; returns the JSON report. */
  async reconcile(
    node: NodeName,
    o: { graceS: number; dryRun?: boolean },
  ): Promise<{ code: number; report: Json; stdout: string; stderr: string }> {
    const inst = this.installs[node];
    const args = ["reconcile", "--grace", String(o.graceS), ...(o.dryRun ? ["--dry-run"] : [])];
    const r = await execIn(this.nodeNs(node), inst.bin, args, { env: {}, timeoutMs: 120_000 });
    let report: Json;
    try {
      report = JSON.parse(r.stdout);
    } catch { /* not JSON */ }
    return { code: r.code, report, stdout: r.stdout, stderr: r.stderr };
  }

  // ----------------------------------------------------------------- ledger

  /** The live attachments: result cache entries whose pod namespace still exists. */
  async liveAttachments(): Promise<
    { cluster: string; node: NodeName; containerId: string; ifname: string; addresses: string[] }[]
  > {
    const out = [];
    for (const node of NODE_NAMES) {
      for await (const e of Deno.readDir(this.cacheDir(node))) {
        const doc = JSON.parse(await Deno.readTextFile(`${this.cacheDir(node)}/${e.name}`));
        const netns = String(doc.netns ?? "");
        try {
          await Deno.stat(netns);
        } catch {
          continue;
        }
        out.push({
          cluster: NODES[node].cluster,
          node,
          containerId: doc.containerId,
          ifname: doc.ifName,
          addresses: (doc.result?.ips ?? []).map((i: Json) => normCidr(i.address)),
        });
      }
    }
    return out;
  }

  /** Milo's claims against the live attachments: the three numbers that must be 0. */
  async ledger(): Promise<Ledger> {
    const claims = await this.claims();
    const live = await this.liveAttachments();
    const details: string[] = [];
    const byAddr = new Map<string, number>();
    for (const c of claims) {
      const a = normCidr(c.status?.allocatedCIDR ?? "");
      byAddr.set(a, (byAddr.get(a) ?? 0) + 1);
    }
    let duplicates = 0;
    for (const [a, n] of byAddr) {
      if (n > 1) {
        duplicates += n - 1;
        details.push(`address ${a} held by ${n} claims`);
      }
    }
    const key = (cluster?: string, cid?: string, ifn?: string) => `${cluster}|${cid}|${ifn}`;
    const liveKeys = new Map(live.map((l) => [key(l.cluster, l.containerId, l.ifname), l]));
    const claimByKey = new Map<string, Json[]>();
    let claimsWithoutPod = 0;
    for (const c of claims) {
      const ann = c.metadata.annotations ?? {};
      const k = key(
        ann["milo-ipam.io/cluster"],
        ann["milo-ipam.io/container-id"],
        ann["milo-ipam.io/ifname"],
      );
      claimByKey.set(k, [...(claimByKey.get(k) ?? []), c]);
      if (!liveKeys.has(k)) {
        claimsWithoutPod++;
        details.push(`claim ${c.metadata.name} (${k}, ${c.status?.allocatedCIDR}) has no live pod`);
      }
    }
    let podsWithoutClaim = 0;
    for (const [k, l] of liveKeys) {
      const held = (claimByKey.get(k) ?? []).map((c) => normCidr(c.status?.allocatedCIDR ?? ""));
      const missing = l.addresses.filter((a) => !held.includes(a));
      if (!held.length || missing.length) {
        podsWithoutClaim++;
        details.push(`live pod ${k} on ${l.node} (${l.addresses}) has no claim for ${missing}`);
      }
    }
    return {
      claims: claims.length,
      live: live.length,
      duplicates,
      claimsWithoutPod,
      podsWithoutClaim,
      details,
    };
  }

  /** Reads the plugin log lines of a cluster. */
  async pluginLog(cluster: string): Promise<Json[]> {
    const text = await Deno.readTextFile(`${this.dir}/milo-ipam-${cluster}.log`).catch(() => "");
    return text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
  }

  /** Tears everything down: milo-dev, the agent, every namespace of this run, the temp dir. */
  async teardown(): Promise<void> {
    await this.#stopMilo().catch(() => {});
    if (this.#agent) {
      await this.#agentWriter?.close().catch(() => {});
      try {
        this.#agent.kill("SIGKILL");
      } catch { /* gone */ }
      await this.#agent.status;
      this.#agent = undefined;
    }
    await delNetnsByPrefix(this.prefix);
    if (this.dir && !Deno.env.get("E2E_KEEP")) {
      await Deno.remove(this.dir, { recursive: true }).catch(() => {});
    }
  }
}

/** A CniCall from a finished process: CNI error code and message parsed from stdout. */
function toCall(r: Exec): CniCall {
  let json: Json;
  try {
    json = r.stdout.trim() ? JSON.parse(r.stdout) : undefined;
  } catch { /* not JSON */ }
  const call: CniCall = { ok: r.code === 0, ms: r.ms, stdout: r.stdout, stderr: r.stderr, json };
  if (!call.ok) {
    call.code = typeof json?.code === "number" ? json.code : 0;
    call.msg = typeof json?.msg === "string" ? json.msg : r.stderr.trim() || r.stdout.trim();
    if (r.timedOut) call.msg = `timed out after ${Math.round(r.ms)} ms; ${call.msg}`;
  }
  return call;
}

/** Canonical CIDR text (so IPv6 spellings compare equal). */
export function normCidr(text: string): string {
  const c = parseCidr(text);
  return c ? formatCidr(c) : text;
}
