/**
 * The world's script: what happens to it, step by step, drawn from the seed
 * once before the run (the run's own chance is drawn as it goes, from
 * streams named after what draws: prng.ts). A step names what it acts on by
 * role (a workload's `pick`-th pod, a node), so a script with steps dropped
 * (shrink.ts) still means something: a step whose target is gone does
 * nothing.
 */
import type { Episode } from "./milo.ts";
import { Prng } from "./prng.ts";

/** The clusters, their nodes, and how each node's runtime calls CNI (runtime.ts). */
export const CLUSTERS = {
  "cluster-a": [["a-1", "containerd"], ["a-2", "galactic"], ["a-3", "multus"]],
  "cluster-b": [["b-1", "oneshot"], ["b-2", "containerd"], ["b-3", "galactic"]],
} as const;

export type Cluster = keyof typeof CLUSTERS;
export const WORKLOADS = ["web", "db", "slot"] as const;
export type WorkloadName = typeof WORKLOADS[number];

/** One thing that happens to the world. */
export type Step =
  & { at: number }
  & (
    | { do: "scale"; cluster: Cluster; workload: WorkloadName; by: number }
    | { do: "delete"; cluster: Cluster; workload: WorkloadName; pick: number; live?: boolean }
    | { do: "force-delete"; cluster: Cluster; workload: WorkloadName; pick: number }
    | { do: "rollout"; cluster: Cluster; workload: WorkloadName }
    | { do: "restart"; cluster: Cluster; workload: WorkloadName; pick: number }
    | { do: "partition"; node: string; ms: number; forceMs?: number; sweepMs?: number }
    | { do: "kill-agent"; node: string; downMs: number; midAdd: boolean }
    | { do: "milo"; episode: Episode; ms: number }
    | { do: "delete-claim"; pick: number }
    | { do: "delete-namespace"; ms: number }
    | { do: "sweep"; cluster: Cluster }
  );

/**
 * What a seed's world goes through: its step kinds and how often each comes
 * (per 100), and its kinds of trouble at Milo. Each seed draws one, so a set
 * of seeds covers stable names changing hands, Milo losing and holding
 * answers, agents killed mid-ADD, and tools deleting claims behind the nodes.
 */
export const PROFILES = {
  /** A bit of everything. */
  mixed: {
    steps: {
      scale: 10,
      delete: 12,
      "force-delete": 8,
      rollout: 8,
      restart: 6,
      sweep: 14,
      partition: 6,
      "kill-agent": 8,
      milo: 14,
      "delete-claim": 2,
      "delete-namespace": 0.5,
    },
    episodes: { overload: 4, slow: 4, stalled: 1, flaky: 3, down: 1, quota: 2, "release-fail": 2 },
    scaled: ["web", "slot"],
    bursts: {},
  },
  /** Stable names changing hands: StatefulSet pods forced off partitioned nodes, sweeps. */
  handover: {
    steps: {
      "force-delete": 14,
      restart: 10,
      partition: 16,
      sweep: 12,
      milo: 14,
      delete: 4,
      rollout: 4,
    },
    episodes: { slow: 6, overload: 3, flaky: 2, stalled: 1 },
    scaled: ["web", "slot"],
    bursts: { "force-delete": [["slow", 0.5, 5_000, 30_000]] },
  },
  /** Agents killed while an ADD's create is in flight, as Milo holds requests and refuses creates. */
  agent: {
    steps: {
      "kill-agent": 18,
      milo: 12,
      "force-delete": 10,
      restart: 10,
      scale: 8,
      rollout: 6,
      delete: 6,
      sweep: 4,
    },
    episodes: { stalled: 5, quota: 4, overload: 3, slow: 2 },
    scaled: ["web"],
    // Milo holds the killed agent's create a while, then refuses the plugin's own at once.
    bursts: {
      "kill-agent": [["stalled", 0.6, 2_000, 8_000], ["quota", 0.5, 10_000, 30_000], [
        "overload",
        0.2,
        5_000,
        20_000,
      ]],
    },
  },
  /** Tools deleting claims of stable names right after a release read them; slots contended. */
  racer: {
    steps: {
      milo: 16,
      rollout: 12,
      scale: 10,
      "force-delete": 10,
      restart: 10,
      delete: 6,
      sweep: 4,
    },
    episodes: { racer: 6, stalled: 2, slow: 2 },
    scaled: ["slot", "slot", "web"],
    bursts: { milo: [["stalled", 0.4, 5_000, 30_000], ["racer", 0.3, 5_000, 30_000]] },
  },
  /** A slot's pods queued for its one name while a tool deletes its claims under releases. */
  takeover: {
    steps: { milo: 14, delete: 14, scale: 12, restart: 10, rollout: 8, sweep: 2 },
    episodes: { racer: 8, slow: 1 },
    scaled: ["slot"],
    bursts: { delete: [["racer", 0.6, 20_000, 90_000]] },
  },
} as const satisfies Record<string, {
  steps: Partial<Record<Step["do"], number>>;
  episodes: Partial<Record<Episode, number>>;
  scaled: readonly WorkloadName[];
  /** Trouble that comes with a step: the episode, its chance, and how long it lasts (ms). */
  bursts: Partial<Record<Step["do"], readonly Burst[]>>;
}>;

export type Profile = keyof typeof PROFILES;
type Burst = readonly [Episode, number, number, number];
type Episodes = Partial<Record<Episode, number>>;

function weighted<T>(rng: Prng, table: [T, number][]): T {
  const total = table.reduce((n, [, w]) => n + w, 0);
  let x = rng.next() * total;
  for (const [v, w] of table) {
    x -= w;
    if (x < 0) return v;
  }
  return table[table.length - 1][0];
}

/** The profile of `seed`. */
export function profileOf(seed: number): Profile {
  const names = Object.keys(PROFILES) as Profile[];
  return names[new Prng(seed ^ 0x5bd1e995).int(0, names.length - 1)];
}

/** The script of `seed`: `steps` steps from the world's first minute on, `faults` as hard. */
export function makeScript(
  seed: number,
  steps: number,
  faults: number,
  profile = profileOf(seed),
): Step[] {
  const rng = new Prng(seed);
  const p = PROFILES[profile];
  const f = Math.max(0, faults);
  const faulty = new Set(["partition", "kill-agent", "milo", "delete-claim", "delete-namespace"]);
  const table = (Object.entries(p.steps) as [Step["do"], number][])
    .map(([k, w]): [Step["do"], number] => [k, faulty.has(k) ? w * f : w]).filter(([, w]) => w > 0);
  const episodes = Object.entries(p.episodes as Episodes) as [Episode, number][];
  const clusters = Object.keys(CLUSTERS) as Cluster[];
  const nodes = clusters.flatMap((c) => CLUSTERS[c].map(([n]) => n));
  const out: Step[] = [];
  let at = 60_000;
  for (let i = 0; i < steps && table.length; i++) {
    at += rng.skewed(500, 40_000);
    const kind = weighted(rng, table);
    // Some steps come with trouble at Milo, at the same moment (each its own step).
    const bursts = (p.bursts as Partial<Record<Step["do"], readonly Burst[]>>)[kind];
    for (const [episode, chance, min, max] of f > 0 ? bursts ?? [] : []) {
      if (rng.chance(chance) && i < steps - 1) {
        out.push({ at, do: "milo", episode, ms: rng.int(min, max) });
        i++;
      }
    }
    const cluster = rng.pick(clusters);
    const workload = rng.pick(WORKLOADS);
    const pick = rng.int(0, 7);
    switch (kind) {
      case "scale":
        out.push({
          at,
          do: kind,
          cluster,
          workload: rng.pick(p.scaled),
          by: rng.pick([-1, 1, 1, 2]),
        });
        break;
      case "delete":
      case "restart":
        out.push({
          at,
          do: kind,
          cluster,
          workload: rng.chance(0.5) ? rng.pick(p.scaled) : workload,
          pick,
          // In a takeover, the pod that holds the slot is the one deleted.
          ...(kind === "delete" && profile === "takeover" ? { live: true } : {}),
        });
        break;
      case "force-delete":
        out.push({ at, do: kind, cluster, workload: rng.chance(0.5) ? "db" : workload, pick });
        break;
      case "rollout":
        out.push({ at, do: kind, cluster, workload: rng.pick(p.scaled) });
        break;
      case "sweep":
        out.push({ at, do: kind, cluster });
        break;
      case "partition": {
        // Often someone force-deletes a pod of the unreachable node (as runbooks say), and a
        // sweep runs while it is unreachable: in its first seconds it still looks Ready.
        const forceMs = rng.chance(0.6) ? rng.int(1_000, 8_000) : undefined;
        out.push({
          at,
          do: kind,
          node: rng.pick(nodes),
          ms: forceMs === undefined ? rng.skewed(10_000, 240_000) : rng.int(60_000, 240_000),
          ...(forceMs === undefined ? {} : { forceMs }),
          ...(rng.chance(0.5) ? { sweepMs: (forceMs ?? 0) + rng.int(500, 10_000) } : {}),
        });
        break;
      }
      case "kill-agent":
        out.push({
          at,
          do: kind,
          node: rng.pick(nodes),
          downMs: rng.int(1_000, 30_000),
          midAdd: rng.chance(0.7),
        });
        break;
      case "milo":
        out.push({ at, do: kind, episode: weighted(rng, episodes), ms: rng.skewed(2_000, 90_000) });
        break;
      case "delete-claim":
        out.push({ at, do: kind, pick: rng.int(0, 1_000) });
        break;
      case "delete-namespace":
        out.push({ at, do: kind, ms: rng.int(1_000, 20_000) });
        break;
    }
  }
  return out;
}

/** One line of a step, for the trace. */
export function describe(s: Step): string {
  const { at: _at, do: what, ...rest } = s;
  return `${what} ${Object.entries(rest).map(([k, v]) => `${k}=${v}`).join(" ")}`;
}
