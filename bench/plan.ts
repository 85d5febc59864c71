/** How many samples each section takes: the full run, and the CI smoke run (`--quick`). */

/** Sample counts and sizes of one run. */
export interface Plan {
  quick: boolean;
  /** Warm-up rounds dropped from every interleaved loop. */
  warmup: number;
  /** Measured rounds of the one-in-flight latency loops (fallback and agent). */
  samples: number;
  startupSamples: number;
  /** Fresh `bench/phases.ts` processes per transport. */
  phaseSamples: number;
  probeRounds: number;
  rssSamples: number;
  /** Process concurrency sweep: calls per point at `level` in flight. */
  concurrencyN: (level: number) => number;
  /** Agent: calls of the throughput run at {@link throughputInFlight} in flight. */
  throughputN: number;
  throughputInFlight: number;
  /** Agent: ADDs started at once. */
  burst: number;
  /** ADDs in flight across an agent restart. */
  restartN: number;
  /** Agent: in-process ADD/DEL pairs over the socket, and the pair after which RSS is the base. */
  soakPairs: number;
  soakCheckpoint: number;
  /** Sweep: claims (one per pod), pods removed before the run, nodes. */
  sweepClaims: number;
  sweepOrphans: number;
  sweepNodes: number;
  /** Sweep at a real cluster's size: dual-stack pods (two claims each) in one Milo answer, nodes. */
  sweepScalePods: number;
  sweepScaleNodes: number;
  /** Fleet: node agents (each its own install), pods each node starts at once, idle intervals. */
  fleetNodes: number;
  fleetPods: number;
  fleetIdleIntervals: number;
  /** Longest wait for an idle machine before measuring (s). */
  quietWaitS: number;
  /** Whole-run time budget (s): the process concurrency sweep is cut short past it. */
  budgetS: number;
}

/** `deno task bench`. */
export const FULL: Plan = {
  quick: false,
  warmup: 10,
  samples: 200,
  startupSamples: 60,
  phaseSamples: 30,
  probeRounds: 15,
  rssSamples: 20,
  concurrencyN: (level) => (level === 1 ? 100 : 200),
  throughputN: 320,
  throughputInFlight: 32,
  burst: 64,
  restartN: 256,
  soakPairs: 10_000,
  soakCheckpoint: 1_000,
  sweepClaims: 10_000,
  sweepOrphans: 300,
  sweepNodes: 20,
  sweepScalePods: 150_000,
  sweepScaleNodes: 5_000,
  fleetNodes: 8,
  fleetPods: 8,
  fleetIdleIntervals: 4,
  quietWaitS: 300,
  budgetS: 3_600,
};

/** `deno task bench --quick`: every section at a tiny size; figures mean nothing. */
export const QUICK: Plan = {
  quick: true,
  warmup: 1,
  samples: 4,
  startupSamples: 2,
  phaseSamples: 1,
  probeRounds: 1,
  rssSamples: 1,
  concurrencyN: (level) => (level === 1 ? 2 : level),
  throughputN: 16,
  throughputInFlight: 8,
  burst: 16,
  restartN: 32,
  soakPairs: 200,
  soakCheckpoint: 20,
  sweepClaims: 300,
  sweepOrphans: 20,
  sweepNodes: 3,
  sweepScalePods: 500,
  sweepScaleNodes: 5,
  fleetNodes: 2,
  fleetPods: 4,
  fleetIdleIntervals: 1,
  quietWaitS: 0,
  budgetS: 60,
};

/** In-flight levels of the process concurrency sweep. */
export const LEVELS = [1, 8, 32, 64];
