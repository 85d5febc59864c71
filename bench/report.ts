/**
 * Re-renders a report and its chart from a results file (a `--only fleet`
 * run's has no chart):
 *
 *   deno run --allow-read --allow-write bench/report.ts bench/results/DATE.json
 */
import { renderChart } from "./chart.ts";
import type { BenchResults, FleetRun } from "./model.ts";
import { renderReport } from "./report/render.ts";
import { renderFleetReport } from "./report/render_fleet.ts";

/** Writes `BASE.md` and `BASE.svg` beside `BASE.json`. */
export async function writeReport(base: string, r: BenchResults): Promise<void> {
  const svgName = `${base.split("/").pop()}.svg`;
  await Deno.writeTextFile(`${base}.json`, JSON.stringify(r, null, 1) + "\n");
  await Deno.writeTextFile(`${base}.svg`, renderChart(r));
  await Deno.writeTextFile(`${base}.md`, renderReport(r, svgName));
}

/** Writes `BASE.md` beside `BASE.json` for a `--only fleet` run. */
export async function writeFleetReport(base: string, r: FleetRun): Promise<void> {
  await Deno.writeTextFile(`${base}.json`, JSON.stringify(r, null, 1) + "\n");
  await Deno.writeTextFile(`${base}.md`, renderFleetReport(r));
}

if (import.meta.main) {
  const input = Deno.args[0];
  if (!input?.endsWith(".json")) {
    console.error("usage: deno run --allow-read --allow-write bench/report.ts RESULTS.json");
    Deno.exit(2);
  }
  const r: BenchResults | FleetRun = JSON.parse(await Deno.readTextFile(input));
  const base = input.slice(0, -".json".length);
  if ("only" in r) await writeFleetReport(base, r);
  else await writeReport(base, r);
}
