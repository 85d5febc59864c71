/**
 * The process concurrency sweep without the agent: N ADDs with at most K in
 * flight (each a plugin process doing the work itself), then the same N DELs,
 * with one cluster and with two sharing the pool.
 */
import type { TestPlugin } from "../../testing/plugin.ts";
import { type ConcurrencyPoint, summarize } from "../model.ts";
import type { Plan } from "../plan.ts";
import { brief, childrenCpuMs, ok, pool, say, serverCpuMs } from "../proc.ts";
import type { World } from "../world.ts";

async function point(
  plugins: TestPlugin[],
  verb: "ADD" | "DEL",
  tag: string,
  n: number,
  level: number,
): Promise<ConcurrencyPoint> {
  const confs = plugins.map((p) => p.netConf());
  const cpu0 = await childrenCpuMs(), srv0 = await serverCpuMs();
  const t0 = performance.now();
  const rs = await pool(n, level, (i) =>
    plugins[i % plugins.length].run({
      command: verb,
      containerId: `${tag}-${i}`,
      stdin: confs[i % confs.length],
    }));
  const wallMs = performance.now() - t0;
  const clientCpuMs = ((await childrenCpuMs()) - cpu0) / n;
  const srvMs = ((await serverCpuMs()) - srv0) / n;
  const good = rs.filter(ok);
  const failures = rs.length - good.length;
  if (failures) say(`  ${tag} ${verb}: ${failures} failed, e.g. ${brief(rs.find((r) => !ok(r))!)}`);
  return {
    clusters: plugins.length,
    inFlight: level,
    verb,
    n,
    failures,
    wallMs,
    perSecond: (good.length / wallMs) * 1000,
    summary: summarize(good.map((r) => r.ms)),
    clientCpuMs,
    serverCpuMs: srvMs,
  };
}

/** Every level for one and two clusters; levels past the run's time budget are skipped. */
export async function concurrencySection(
  w: World,
  plan: Plan,
  levels: number[],
  overBudget: () => boolean,
): Promise<{ points: ConcurrencyPoint[]; skipped: string[] }> {
  const points: ConcurrencyPoint[] = [];
  const skipped: string[] = [];
  for (const plugins of [[w.a], [w.a, w.b]]) {
    for (const level of levels) {
      const what = `${plugins.length} cluster(s) × ${level} in flight`;
      if (overBudget()) {
        say(`  skipping ${what}: past the ${plan.budgetS} s budget`);
        skipped.push(what);
        continue;
      }
      for (const verb of ["ADD", "DEL"] as const) {
        const p = await point(
          plugins,
          verb,
          `cc${plugins.length}-${level}`,
          plan.concurrencyN(level),
          level,
        );
        points.push(p);
        say(`concurrency ${what} ${verb}: ${p.perSecond.toFixed(1)}/s`);
      }
    }
  }
  return { points, skipped };
}
