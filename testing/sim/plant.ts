/**
 * What the checker's own tests plant in a run (tests/sim_checker.test.ts):
 * a wrong ledger of each kind the checker must report, once the world has
 * what it needs (two live sandboxes, a dead one).
 */
import { claimAddress } from "./checker.ts";
import type { SimMilo } from "./milo.ts";
import type { SimNode } from "./node.ts";
import type { Sandbox } from "./runtime.ts";
import type { Scheduler } from "./scheduler.ts";

/**
 * `duplicate`: a live sandbox's address given to another live one too;
 * `forgotten`: a dead sandbox's claim kept in Milo, its node remembering
 * nothing; `leak`: the same, its node remembering it under a journal entry
 * of another node name (kept, never judged, so never released).
 */
export type Plant = "duplicate" | "leak" | "forgotten";

/** What planting needs of the world. */
export interface Planted {
  sched: Scheduler;
  sandboxes: Map<string, Sandbox>;
  milo: SimMilo;
  nodes: Map<string, SimNode>;
  log(line: string): void;
}

/** Plants `what` as soon as the world allows it (polled every simulated second). */
export function plant(what: Plant, w: Planted): void {
  const poll = () =>
    w.sched.after(1_000, "plant", () => {
      if (!once(what, w)) poll();
    }, null);
  poll();
}

function once(what: Plant, w: Planted): boolean {
  const live = [...w.sandboxes.values()].filter((s) => s.state === "live");
  if (what === "duplicate") {
    if (live.length < 2) return false;
    const [a, b] = live;
    b.nets[0].ips = [...b.nets[0].ips, a.nets[0].ips[0]];
    w.log(`PLANT: ${a.nets[0].ips[0]} given to ${b.pod.name} too`);
    return true;
  }
  const dead = [...w.sandboxes.values()].find((s) => s.state === "dead" && s.nets[0].ips.length);
  if (!dead) return false;
  const ip = dead.nets[0].ips[0];
  const name = `pod-planted${dead.id.slice(0, 8)}-v4`;
  const now = w.sched.now();
  w.milo.claims.set(name, {
    apiVersion: "ipam.miloapis.com/v1alpha1",
    kind: "IPClaim",
    metadata: {
      name,
      namespace: "default",
      uid: `planted-${dead.id.slice(0, 8)}`,
      creationTimestamp: new Date(now).toISOString(),
      labels: { "milo-ipam.io/cluster": dead.cluster, "milo-ipam.io/node": dead.node },
      annotations: {
        "milo-ipam.io/container-id": dead.id,
        "milo-ipam.io/ifname": dead.nets[0].ifname,
        "milo-ipam.io/node": dead.node,
      },
    },
    spec: { className: "vpc-pods-ipv4", ipFamily: "IPv4", reclaimPolicy: "Delete" },
    status: { phase: "Bound", allocatedCIDR: `${ip}/32`, address: ip },
  });
  if (what === "leak") {
    const dir = `${w.nodes.get(dead.node)!.config.stateDir}/journal`;
    Deno.mkdirSync(dir, { recursive: true });
    Deno.writeTextFileSync(
      `${dir}/pod-planted.json`,
      JSON.stringify({
        cluster: dead.cluster,
        node: `${dead.node}-elsewhere`,
        network: dead.nets[0].network,
        containerId: dead.id,
        ifname: dead.nets[0].ifname,
        created: now,
        claims: [{ name }],
        attempts: 0,
        lastError: "planted",
      }),
    );
  }
  const address = claimAddress(w.milo.claims.get(name)!);
  w.log(
    `PLANT: claim ${name} ${address} of dead ${dead.pod.name} kept in Milo` +
      (what === "leak" ? ", journaled under another node" : ""),
  );
  return true;
}
