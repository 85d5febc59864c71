/**
 * cluster-a's Kubernetes API for the sweep scenario: testing/kube_dev.ts run
 * as a program in milo-dev's namespace (https://198.18.0.1:6443, a CA of its
 * own), serving a state file the test writes from the pods its runtime really
 * created; and `milo-ipam sweep` installed as deploy/base/sweep.yaml's init
 * container installs it (`--kube`, here with a kubeconfig naming this API), run on node a1.
 */
import { install } from "../../scripts/install.ts";
import type { KubeDevFaults, KubeDevState } from "../kube_dev.ts";
import type { PodInput } from "../kube_store.ts";
import { writeState } from "../kube_dev.ts";
import { waitForText } from "../child.ts";
import { makeTestCA } from "../testca.ts";
import { execIn } from "./netns.ts";
import type { Pod } from "./runtime.ts";
import { MILO_ADDR, type NodeName } from "./topology.ts";
import type { World } from "./world.ts";

const KUBE_DEV = new URL("../kube_dev.ts", import.meta.url).pathname;
const KUBE_PORT = 6443;
const KUBE_TOKEN = "e2e-sweep-token";
const READY_MS = 30_000;

/** What one `milo-ipam sweep` run printed and returned. */
export interface SweepRun {
  code: number;
  /** The JSON report (`--output json`). */
  report: {
    outcome: string;
    message: string;
    totals: Record<string, number>;
    rows: { claim: string; pod: string | null; action: string; why: string; reason: string }[];
    requests: { milo: number; kubernetes: number };
  };
  ms: number;
  stderr: string;
}

/** The API stand-in and the sweep's install. */
export class ClusterApi {
  readonly #w: World;
  readonly #dir: string;
  #child?: Deno.ChildProcess;
  #bin = "";
  #kubeconfig = "";

  constructor(w: World) {
    this.#w = w;
    this.#dir = `${w.dir}/sweep`;
  }

  get #statePath(): string {
    return `${this.#dir}/kube-state.json`;
  }

  /** Starts the API with `state` and installs the sweep for cluster-a. */
  async start(state: KubeDevState): Promise<void> {
    await Deno.mkdir(`${this.#dir}/state`, { recursive: true });
    await this.set(state);
    const tls = await makeTestCA(`${this.#dir}/tls`, [MILO_ADDR]);
    this.#child = new Deno.Command("ip", {
      args: [
        ...["netns", "exec", this.#w.net.miloNs, Deno.execPath(), "run", "-A", KUBE_DEV],
        ...["--listen", `${MILO_ADDR}:${KUBE_PORT}`, "--state", this.#statePath],
        ...["--cert", tls.certFile, "--key", tls.keyFile, "--token", KUBE_TOKEN],
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    await ready(this.#child);
    this.#kubeconfig = `${this.#dir}/kubeconfig`;
    await Deno.writeTextFile(
      this.#kubeconfig,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        "current-context": "cluster-a",
        clusters: [{
          name: "cluster-a",
          cluster: {
            server: `https://${MILO_ADDR}:${KUBE_PORT}`,
            "certificate-authority": tls.caFile,
          },
        }],
        users: [{ name: "sweep", user: { token: KUBE_TOKEN } }],
        contexts: [{ name: "cluster-a", context: { cluster: "cluster-a", user: "sweep" } }],
      }),
      { mode: 0o600 },
    );
    const nodeConfig = `${this.#dir}/node.json`;
    await Deno.writeTextFile(
      nodeConfig,
      JSON.stringify({
        milo: { url: this.#w.milo.url, tokenFile: this.#w.tokenFile, caFile: this.#w.caFile },
        cluster: "cluster-a",
        node: "sweep",
        log: { file: `${this.#dir}/sweep.log` },
        resultsDir: `${this.#dir}/results`,
        stateDir: `${this.#dir}/state`,
        agent: { socket: `${this.#dir}/run/agent.sock` },
        timeouts: { requestMs: 2_000, totalMs: 10_000 },
      }),
    );
    const installed = await install({
      dir: `${this.#dir}/bin`,
      config: nodeConfig,
      kube: this.#kubeconfig,
      quiet: true,
    });
    this.#bin = installed.path;
  }

  /** Replaces what the API serves. */
  set(state: KubeDevState): Promise<void> {
    return writeState(this.#statePath, state);
  }

  /** Runs `milo-ipam sweep --output json` on `node` with `args`. */
  async sweep(node: NodeName, args: string[]): Promise<SweepRun> {
    const r = await execIn(
      this.#w.net.nodeNs(node),
      this.#bin,
      ["sweep", "--kubeconfig", this.#kubeconfig, "--output", "json", ...args],
      { env: {}, timeoutMs: 120_000 },
    );
    let report: SweepRun["report"];
    try {
      report = JSON.parse(r.stdout);
    } catch {
      throw new Error(`sweep printed no JSON report (exit ${r.code}): ${r.stdout} ${r.stderr}`);
    }
    return { code: r.code, report, ms: r.ms, stderr: r.stderr };
  }

  /** Stops the API. */
  async stop(): Promise<void> {
    const c = this.#child;
    this.#child = undefined;
    if (!c) return;
    try {
      c.kill("SIGKILL");
    } catch { /* gone */ }
    await c.status;
  }
}

/** Waits for the stand-in's "listening on" line (bounded). */
async function ready(child: Deno.ChildProcess): Promise<void> {
  const { found, said } = await waitForText(child.stdout, "listening on", READY_MS);
  if (!found) throw new Error(`kube-dev did not start within ${READY_MS} ms: ${said}`);
}

/** The API's view of a pod the runtime created. */
export function podInput(p: Pod, o: Partial<PodInput> = {}): PodInput {
  return { namespace: p.namespace, name: p.name, uid: p.uid, nodeName: p.node, ...o };
}

/** A state: these pods and nodes, and faults. */
export function stateOf(
  pods: PodInput[],
  nodes: string[],
  faults: Partial<KubeDevFaults> = {},
): KubeDevState {
  return { pods, nodes, faults };
}
