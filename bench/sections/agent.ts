/**
 * The node agent: the installed plugin as a thin client of `milo-ipam agent`.
 * One call in flight, interleaved with the bare floor of the same install's
 * flags: wall time, the client's CPU plus the agent's share (read from
 * /proc/PID/stat around each call), requests, and connections and TLS
 * handshakes at milo-dev after a warm-up. Then load, burst and memory
 * (agent_load.ts), and last the agent's restart under load (the fallback
 * counter is read before it).
 */
import { FALLBACK_COUNTER } from "../../lib/run.ts";
import type { RunResult } from "../../testing/plugin.ts";
import type { AgentResults } from "../model.ts";
import type { Plan } from "../plan.ts";
import {
  alternate,
  childPids,
  cniEnv,
  execTimed,
  ok,
  processCpuMs,
  type Ran,
  Recorder,
  say,
} from "../proc.ts";
import { RequestCounter } from "../requests.ts";
import type { World } from "../world.ts";
import { burstRun, pairs, restartRun, soakRun, throughputRun } from "./agent_load.ts";

/** Series keys of this section. */
export const AGENT = { floor: "floor", add: "add", check: "check", del: "del" } as const;

/** In-process ADD/DEL pairs before measuring: Deno's fetch opens a second connection early on. */
const WARMUP_PAIRS = 15;

/** The pid of the agent process started from `w.g`'s install. */
async function agentPid(w: World): Promise<number> {
  const pids = await childPids((argv) =>
    argv.at(-1) === "agent" && argv.some((a) => a.startsWith(w.g.dir))
  );
  if (pids.length !== 1) throw new Error(`expected one agent process, found ${pids.length}`);
  return pids[0];
}

/** Agent CPU time per call, by series key, over the measured calls. */
class AgentCpu {
  readonly #sum = new Map<string, { ms: number; n: number }>();
  constructor(readonly pid: number) {}

  async around<R extends Ran>(key: string, measured: boolean, fn: () => Promise<R>): Promise<R> {
    const c0 = await processCpuMs(this.pid);
    const r = await fn();
    const ms = (await processCpuMs(this.pid)) - c0;
    if (measured && ok(r)) {
      const s = this.#sum.get(key) ?? { ms: 0, n: 0 };
      this.#sum.set(key, { ms: s.ms + ms, n: s.n + 1 });
    }
    return r;
  }

  means(): Record<string, number> {
    return Object.fromEntries([...this.#sum].map(([k, s]) => [k, s.ms / (s.n || 1)]));
  }
}

async function latency(w: World, plan: Plan, cpu: AgentCpu) {
  const rec = new Recorder(plan.warmup);
  const req = new RequestCounter(w.tls);
  const conf = w.g.netConf();
  for (let i = 0; i < plan.warmup + plan.samples; i++) {
    const id = `ag-${i}`;
    const measured = i >= plan.warmup;
    const call = (verb: string, key: string, stdin: unknown) =>
      req.count(
        verb,
        measured,
        () =>
          rec.run(key, `milo-ipam ${verb} via the agent`, i, () =>
            cpu.around(key, measured, () =>
              w.g.run({ command: verb, containerId: id, stdin }))),
      );
    let added: RunResult | undefined;
    await alternate(
      i,
      () =>
        rec.run(
          AGENT.floor,
          "bare `deno run` (empty script, the agent install's flags)",
          i,
          () => execTimed(w.agentFloor, [], cniEnv(w.g, "VERSION", ""), "{}"),
        ),
      async () => added = await call("ADD", AGENT.add, conf),
    );
    await call("CHECK", AGENT.check, { ...conf, prevResult: added?.json });
    await call("DEL", AGENT.del, conf);
    if ((i + 1) % 50 === 0) say(`  agent round ${i + 1}/${plan.warmup + plan.samples}`);
  }
  return { series: rec.series(), requests: req.rows(), steady: req.steady };
}

/** Starts the agent, measures everything, stops it. */
export async function agentSection(w: World, plan: Plan): Promise<AgentResults> {
  // The timed reconcile would add requests to a counted call; the one at start is over by then.
  const agent = { ...(w.g.node.agent as Record<string, unknown>), reconcileIntervalS: 86_400 };
  await w.g.setNode({ agent });
  await w.g.startAgent();
  try {
    const pid = await agentPid(w);
    say(`agent pid ${pid}: ${WARMUP_PAIRS} warm-up pairs, then ${plan.samples} rounds`);
    const warm = await pairs(w, "warm", WARMUP_PAIRS, 1);
    if (warm.failures) throw new Error(`${warm.failures} warm-up calls to the agent failed`);
    const cpu = new AgentCpu(pid);
    const lat = await latency(w, plan, cpu);
    const throughput = await throughputRun(w, plan);
    const burst = await burstRun(w, plan);
    const soak = await soakRun(w, plan, pid);
    const fallbacks = (await Deno.stat(`${w.g.stateDir}/${FALLBACK_COUNTER}`)
      .catch(() => ({ size: 0 }))).size;
    const restart = await restartRun(w, plan);
    return { ...lat, agentCpuMs: cpu.means(), throughput, burst, soak, fallbacks, restart };
  } finally {
    await w.g.stopAgent();
  }
}
