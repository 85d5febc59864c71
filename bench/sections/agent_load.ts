/**
 * The agent under load: throughput at K in flight beside the floor run the
 * same way, a burst of ADDs started at once (a node booting), and ADD/DEL
 * pairs sent in-process over the socket while the agent's RSS is sampled, and
 * ADDs in flight across an agent SIGKILL and restart.
 */
import { KEYS } from "../../lib/claims.ts";
import { holderOf } from "../../lib/holder.ts";
import { formatCidr, parseCidr } from "../../lib/ip.ts";
import { callSocket } from "../agent_socket.ts";
import { type AgentResults, type Burst, type LoadPoint, summarize } from "../model.ts";
import type { Plan } from "../plan.ts";
import { brief, cniCode, cniEnv, execTimed, ok, pool, type Ran, rssKiB, say } from "../proc.ts";
import type { TestPlugin } from "../../testing/plugin.ts";
import type { World } from "../world.ts";

/** N calls of `fn` with at most `inFlight` at once. */
async function load(
  n: number,
  inFlight: number,
  fn: (i: number) => Promise<Ran>,
): Promise<{ point: LoadPoint; results: Ran[] }> {
  const t0 = performance.now();
  const results = await pool(n, inFlight, fn);
  const wallMs = performance.now() - t0;
  const good = results.filter(ok);
  const point = {
    n,
    inFlight,
    failures: n - good.length,
    wallMs,
    perSecond: (good.length / wallMs) * 1000,
    summary: summarize(good.map((r) => r.ms)),
  };
  return { point, results };
}

/** The floor, then ADD and DEL through the agent, each N at K in flight. */
export async function throughputRun(w: World, plan: Plan): Promise<AgentResults["throughput"]> {
  const n = plan.throughputN, k = plan.throughputInFlight;
  say(`agent throughput: ${n} calls at ${k} in flight (floor, ADD, DEL)`);
  const conf = w.g.netConf();
  const env = cniEnv(w.g, "VERSION", "");
  const floor = await load(n, k, () => execTimed(w.agentFloor, [], env, "{}"));
  const run = (command: string) =>
    load(n, k, (i) => w.g.run({ command, containerId: `tp-${i}`, stdin: conf }));
  const add = await run("ADD");
  const del = await run("DEL");
  for (const [what, r] of [["ADD", add], ["DEL", del]] as const) {
    const bad = r.results.find((x) => !ok(x));
    if (bad) say(`  ${what}: ${r.point.failures} failed, e.g. ${brief(bad)}`);
  }
  return { floor: floor.point, add: add.point, del: del.point };
}

/** B ADDs started at once by `p`'s installed plugin; then their DELs, untimed. */
async function burstOf(p: TestPlugin, n: number, tag: string): Promise<Burst> {
  const conf = p.netConf();
  const { point, results } = await load(
    n,
    n,
    (i) => p.run({ command: "ADD", containerId: `${tag}-${i}`, stdin: conf }),
  );
  const codes: Record<string, number> = {};
  for (const r of results) {
    const code = cniCode(r);
    codes[code] = (codes[code] ?? 0) + 1;
  }
  const dels = await pool(
    n,
    8,
    (i) => p.run({ command: "DEL", containerId: `${tag}-${i}`, stdin: conf }),
  );
  const stuck = dels.filter((r) => !ok(r)).length;
  if (stuck) say(`  ${stuck} DELs after the burst failed`);
  const slowestMs = Math.max(...results.map((r) => r.ms));
  return { ...point, code11: codes["11"] ?? 0, codes, slowestMs };
}

/**
 * The burst without the agent first (install `a`: each call does the work
 * itself, as before the agent), then the same burst through the agent.
 */
export async function burstRun(w: World, plan: Plan): Promise<AgentResults["burst"]> {
  say(`burst without the agent: ${plan.burst} ADDs at once`);
  const reference = await burstOf(w.a, plan.burst, "burst-alone");
  say(`agent burst: ${plan.burst} ADDs at once`);
  return { ...await burstOf(w.g, plan.burst, "burst"), reference };
}

/** N in-process ADD/DEL pairs over the socket, `inFlight` at once; answers failed calls. */
export async function pairs(
  w: World,
  tag: string,
  n: number,
  inFlight: number,
  from = 0,
): Promise<{ failures: number }> {
  const conf = JSON.stringify(w.g.netConf());
  let failures = 0;
  await pool(n, inFlight, async (i) => {
    const id = `${tag}-${from + i}`;
    for (const verb of ["ADD", "DEL"]) {
      const r = await callSocket(w.g.socket!, cniEnv(w.g, verb, id), conf).catch(() => null);
      if (!r || r.exitCode !== 0) failures++;
    }
  });
  return { failures };
}

/** The agent's RSS after the first `soakCheckpoint` pairs and after all `soakPairs`. */
export async function soakRun(w: World, plan: Plan, pid: number): Promise<AgentResults["soak"]> {
  const inFlight = 8;
  say(`agent soak: ${plan.soakPairs} in-process ADD/DEL pairs, ${inFlight} in flight`);
  const rssStartKiB = await rssKiB(pid);
  const t0 = performance.now();
  const first = await pairs(w, "soak", plan.soakCheckpoint, inFlight);
  const rssCheckpointKiB = await rssKiB(pid);
  const rest = plan.soakPairs - plan.soakCheckpoint;
  const step = Math.max(1, Math.ceil(rest / 10));
  let failures = first.failures;
  const rssTraceKiB: number[] = [];
  for (let done = 0; done < rest; done += step) {
    const n = Math.min(step, rest - done);
    failures += (await pairs(w, "soak", n, inFlight, plan.soakCheckpoint + done)).failures;
    rssTraceKiB.push(await rssKiB(pid));
    say(`  ${plan.soakCheckpoint + done + n} pairs, agent RSS ${rssTraceKiB.at(-1)! >> 10} MiB`);
  }
  return {
    pairs: plan.soakPairs,
    checkpoint: plan.soakCheckpoint,
    inFlight,
    failures,
    wallMs: performance.now() - t0,
    rssStartKiB,
    rssCheckpointKiB,
    rssEndKiB: await rssKiB(pid),
    rssTraceKiB,
  };
}

/**
 * N ADDs at K in flight through the installed plugin while the agent is
 * SIGKILLed (after a quarter of them) and restarted; the failed ones are DELed
 * as a runtime would. Then Milo's claims of these attachments against the
 * results: every address a result holds has exactly one claim, no claim is
 * left without a result, no address is leased twice. Then all are DELed.
 */
export async function restartRun(
  w: World,
  plan: Plan,
): Promise<NonNullable<AgentResults["restart"]>> {
  const n = plan.restartN, k = plan.throughputInFlight, at = Math.floor(plan.restartN / 4);
  say(`agent restart: ${n} ADDs at ${k} in flight, the agent SIGKILLed after ${at}, restarted`);
  const conf = w.g.netConf();
  const id = (i: number) => `restart-${i}`;
  let done = 0;
  let restarting: Promise<number> | undefined;
  const restart = async () => {
    const t0 = performance.now();
    await w.g.stopAgent("SIGKILL");
    await new Promise((r) => setTimeout(r, 200));
    await w.g.startAgent();
    return performance.now() - t0;
  };
  const results = await pool(n, k, async (i) => {
    const r = await w.g.run({ command: "ADD", containerId: id(i), stdin: conf });
    if (++done === at) restarting = restart();
    return r;
  });
  const downMs = await restarting;
  const failed = results.flatMap((r, i) => ok(r) ? [] : [i]);
  for (const i of failed) await w.g.run({ command: "DEL", containerId: id(i), stdin: conf });
  const leased = new Map<string, string>();
  results.forEach((r, i) => {
    if (!ok(r)) return;
    for (const ip of (JSON.parse(r.stdout).ips ?? []) as { address: string }[]) {
      leased.set(canonical(ip.address), id(i));
    }
  });
  const claims = (await w.tls.listClaims(undefined, `${KEYS.cluster}=${w.g.node.cluster}`))
    .filter((c) => holderOf(c).containerId?.startsWith("restart-"));
  const holders = new Map<string, string[]>();
  for (const c of claims) {
    const a = canonical(c.status.allocatedCIDR ?? "");
    holders.set(a, [...holders.get(a) ?? [], holderOf(c).containerId ?? "?"]);
  }
  const ledger = {
    duplicates: [...holders.values()].filter((h) => h.length > 1).length,
    leaked: [...holders.entries()].filter(([a, h]) => leased.get(a) !== h[0]).length,
    missing: [...leased.keys()].filter((a) => !holders.has(a)).length,
  };
  await pool(n, 8, (i) => w.g.run({ command: "DEL", containerId: id(i), stdin: conf }));
  return { n, inFlight: k, killedAfter: at, downMs: downMs ?? NaN, failed: failed.length, ledger };
}

/** An address/prefix in its one canonical spelling (lib/ip.ts). */
function canonical(cidr: string): string {
  const c = parseCidr(cidr);
  return c ? formatCidr(c) : cidr;
}
