/**
 * Re-renders a report and its chart from a results file:
 *
 *   deno run --allow-read --allow-write bench/report.ts bench/results/DATE.json
 */
import { renderChart } from "./chart.ts";
import type { BenchResults } from "./model.ts";
import { renderReport } from "./report/render.ts";

export { renderReport };

/** Writes `BASE.md` and `BASE.svg` beside `BASE.json`. */
export async function writeReport(base: string, r: BenchResults): Promise<void> {
  const svgName = `${base.split("/").pop()}.svg`;
  await Deno.writeTextFile(`${base}.json`, JSON.stringify(r, null, 1) + "\n");
  await Deno.writeTextFile(`${base}.svg`, renderChart(r));
  await Deno.writeTextFile(`${base}.md`, renderReport(r, svgName));
}

if (import.meta.main) {
  const input = Deno.args[0];
  if (!input?.endsWith(".json")) {
    console.error("usage: deno run --allow-read --allow-write bench/report.ts RESULTS.json");
    Deno.exit(2);
  }
  const r: BenchResults = JSON.parse(await Deno.readTextFile(input));
  await writeReport(input.slice(0, -".json".length), r);
}
