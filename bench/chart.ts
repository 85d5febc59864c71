/**
 * The benchmark chart, as a self-contained SVG: latency percentiles per
 * series (one in flight) on top, throughput and p99 against concurrency below.
 *
 *   deno run --allow-read --allow-write bench/chart.ts RESULTS.json OUT.svg   (re-render)
 */
import type { BenchResults, SweepPoint } from "./model.ts";

const W = 960;
const FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'";
const INK = "#222";
const GRID = "#ddd";
const COLORS = { p50: "#3b6fb6", p90: "#e0902f", p99: "#c23b3b", budget: "#6a9a3a" };
const LINE = ["#3b6fb6", "#c23b3b"];

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function txt(
  x: number,
  y: number,
  s: string,
  o: { size?: number; anchor?: string; weight?: string; fill?: string } = {},
): string {
  return `<text x='${x.toFixed(1)}' y='${y.toFixed(1)}' ${FONT} font-size='${o.size ?? 12}' ` +
    `text-anchor='${o.anchor ?? "start"}' font-weight='${o.weight ?? "normal"}' ` +
    `fill='${o.fill ?? INK}'>${esc(s)}</text>`;
}

function line(x1: number, y1: number, x2: number, y2: number, stroke: string, extra = ""): string {
  return `<line x1='${x1.toFixed(1)}' y1='${y1.toFixed(1)}' x2='${x2.toFixed(1)}' ` +
    `y2='${y2.toFixed(1)}' stroke='${stroke}' ${extra}/>`;
}

/** A "nice" axis maximum and tick step covering `v`. */
function niceMax(v: number): { max: number; step: number } {
  const safe = Number.isFinite(v) && v > 0 ? v : 1;
  const mag = 10 ** Math.floor(Math.log10(safe));
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * mag >= safe) {
      const max = m * mag;
      const step = max / 5;
      return { max, step };
    }
  }
  return { max: 10 * mag, step: 2 * mag };
}

function fmt(ms: number): string {
  if (!Number.isFinite(ms)) return "–";
  return ms >= 100 ? ms.toFixed(0) : ms.toFixed(1);
}

function latencyPanel(r: BenchResults, top: number): { svg: string; height: number } {
  const rows = r.latency.filter((s) => s.summary.n > 0);
  const left = 300, right = W - 150, rowH = 26;
  const height = 70 + rows.length * rowH + 40;
  const maxV = Math.max(100, ...rows.map((s) => s.summary.p99));
  const { max, step } = niceMax(maxV * 1.05);
  const x = (v: number) => left + (Math.min(v, max) / max) * (right - left);
  const out: string[] = [];
  out.push(txt(20, top + 22, "Latency per invocation, one in flight (ms, exec → exit)", {
    size: 15,
    weight: "bold",
  }));
  out.push(
    txt(
      20,
      top + 40,
      `bar = p50, whisker to p99 with a tick at p90; n = ${
        rows[0]?.summary.n ?? 0
      } per series after ${r.warmup} warm-up rounds`,
      { size: 11, fill: "#555" },
    ),
  );
  const y0 = top + 60, y1 = y0 + rows.length * rowH;
  for (let v = 0; v <= max + 1e-9; v += step) {
    out.push(line(x(v), y0 - 4, x(v), y1, GRID));
    out.push(txt(x(v), y1 + 14, fmt(v), { size: 10, anchor: "middle", fill: "#555" }));
  }
  const budgets = [[35, "p50 budget 35 ms", "end"], [100, "p99 budget 100 ms", "start"]] as const;
  for (const [v, label, anchor] of budgets) {
    if (v > max) continue;
    out.push(
      line(x(v), y0 - 8, x(v), y1, COLORS.budget, "stroke-dasharray='5,4' stroke-width='1.5'"),
    );
    const dx = anchor === "end" ? -3 : 3;
    out.push(txt(x(v) + dx, y0 - 10, label, { size: 10, anchor, fill: COLORS.budget }));
  }
  rows.forEach((s, i) => {
    const cy = y0 + i * rowH + rowH / 2;
    const { p50, p90, p99 } = s.summary;
    out.push(txt(left - 8, cy + 4, s.label, { size: 12, anchor: "end" }));
    out.push(
      `<rect x='${left}' y='${(cy - 7).toFixed(1)}' width='${(x(p50) - left).toFixed(1)}' ` +
        `height='14' fill='${COLORS.p50}' opacity='0.85'/>`,
    );
    out.push(line(x(p50), cy, x(p99), cy, INK, "stroke-width='1.2'"));
    out.push(line(x(p90), cy - 5, x(p90), cy + 5, COLORS.p90, "stroke-width='2.5'"));
    out.push(line(x(p99), cy - 7, x(p99), cy + 7, COLORS.p99, "stroke-width='2.5'"));
    out.push(txt(right + 8, cy + 4, `${fmt(p50)} / ${fmt(p90)} / ${fmt(p99)}`, { size: 11 }));
  });
  out.push(txt(right + 8, y0 - 10, "p50 / p90 / p99", { size: 10, fill: "#555" }));
  return { svg: out.join("\n"), height };
}

function sweepPanel(
  points: SweepPoint[],
  o: {
    left: number;
    top: number;
    width: number;
    title: string;
    value: (p: SweepPoint) => number;
    budget: { value: number; label: string; atLevel?: number; above: boolean };
    unit: string;
    log?: boolean;
  },
): string {
  const out: string[] = [];
  const h = 240;
  const plotL = o.left + 55, plotR = o.left + o.width - 15, plotT = o.top + 50, plotB = o.top + h;
  const levels = [...new Set(points.map((p) => p.inFlight))].sort((a, b) => a - b);
  const vals = points.map(o.value).filter((v) => Number.isFinite(v) && v > 0);
  const { max, step } = niceMax(Math.max(o.budget.value, ...vals) * 1.1);
  const x = (lv: number) =>
    plotL + (levels.indexOf(lv) + 0.5) * ((plotR - plotL) / Math.max(1, levels.length));
  const lo = 10 ** Math.floor(Math.log10(Math.min(o.budget.value, ...vals)));
  const hi = 10 ** Math.ceil(Math.log10(Math.max(o.budget.value, ...vals)));
  const y = o.log
    ? (v: number) =>
      plotB - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / Math.log10(hi / lo)) *
        (plotB - plotT)
    : (v: number) => plotB - (Math.min(v, max) / max) * (plotB - plotT);
  out.push(txt(o.left, o.top + 20, o.title, { size: 14, weight: "bold" }));
  const ticks: number[] = [];
  if (o.log) { for (let v = lo; v <= hi * 1.0001 && ticks.length < 12; v *= 10) ticks.push(v); }
  else for (let v = 0; v <= max + 1e-9 && ticks.length < 12; v += step) ticks.push(v);
  for (const v of ticks) {
    out.push(line(plotL, y(v), plotR, y(v), GRID));
    out.push(txt(plotL - 6, y(v) + 4, fmt(v), { size: 10, anchor: "end", fill: "#555" }));
  }
  out.push(line(plotL, plotB, plotR, plotB, INK));
  for (const lv of levels) {
    out.push(txt(x(lv), plotB + 16, String(lv), { size: 11, anchor: "middle" }));
  }
  out.push(txt((plotL + plotR) / 2, plotB + 32, "ADDs in flight", { size: 11, anchor: "middle" }));
  out.push(txt(plotL - 6, plotT - 10, o.unit, { size: 10, anchor: "end", fill: "#555" }));
  const by = o.budget;
  out.push(line(plotL, y(by.value), plotR, y(by.value), COLORS.budget, "stroke-dasharray='5,4'"));
  out.push(txt(plotR, y(by.value) - 5, by.label, { size: 10, anchor: "end", fill: COLORS.budget }));
  if (by.atLevel !== undefined && levels.includes(by.atLevel)) {
    out.push(
      `<rect x='${(x(by.atLevel) - 9).toFixed(1)}' y='${plotT}' width='18' ` +
        `height='${plotB - plotT}' fill='${COLORS.budget}' opacity='0.08'/>`,
    );
  }
  for (const clusters of [1, 2]) {
    const ps = points.filter((p) => p.clusters === clusters).sort((a, b) =>
      a.inFlight - b.inFlight
    );
    if (!ps.length) continue;
    const color = LINE[clusters - 1];
    const d = ps.map((p, i) =>
      `${i ? "L" : "M"}${x(p.inFlight).toFixed(1)},${y(o.value(p)).toFixed(1)}`
    )
      .join(" ");
    out.push(`<path d='${d}' fill='none' stroke='${color}' stroke-width='2'/>`);
    for (const p of ps) {
      out.push(
        `<circle cx='${x(p.inFlight).toFixed(1)}' cy='${y(o.value(p)).toFixed(1)}' r='3.5' ` +
          `fill='${color}'/>`,
      );
      out.push(
        txt(x(p.inFlight) + (clusters === 1 ? -6 : 6), y(o.value(p)) - 7, fmt(o.value(p)), {
          size: 10,
          anchor: clusters === 1 ? "end" : "start",
          fill: color,
        }),
      );
    }
    const ly = o.top + 38;
    const lx = o.left + o.width - 210 + (clusters - 1) * 105;
    out.push(line(lx, ly, lx + 18, ly, color, "stroke-width='2'"));
    out.push(txt(lx + 22, ly + 4, clusters === 1 ? "one cluster" : "two clusters", { size: 11 }));
  }
  return out.join("\n");
}

/** Renders the chart for one run's results. */
export function renderChart(r: BenchResults): string {
  const lat = latencyPanel(r, 10);
  const adds = r.sweep.filter((p) => p.verb === "ADD");
  const sweepTop = 10 + lat.height + 10;
  const half = (W - 40) / 2;
  const body = [
    lat.svg,
    sweepPanel(adds, {
      left: 20,
      top: sweepTop,
      width: half - 10,
      title: "ADD throughput vs concurrency",
      value: (p) => p.perSecond,
      budget: { value: 40, label: "budget ≥ 40/s at 32", atLevel: 32, above: true },
      unit: "ADD/s",
    }),
    sweepPanel(adds, {
      left: 20 + half + 10,
      top: sweepTop,
      width: half - 10,
      title: "ADD p99 vs concurrency",
      value: (p) => p.summary.p99,
      budget: { value: 500, label: "budget ≤ 500 ms at 32", atLevel: 32, above: false },
      unit: "ms (log)",
      log: true,
    }),
  ];
  const height = sweepTop + 290;
  const caption = `milo-ipam ${
    r.quick ? "quick " : ""
  }benchmark ${r.date} · ${r.machine.nproc} cores ${r.machine.cpu} · Deno ${r.deno.version} · ${r.install.kind}`;
  return [
    `<svg xmlns='http://www.w3.org/2000/svg' width='${W}' height='${height + 20}' ` +
    `viewBox='0 0 ${W} ${height + 20}'>`,
    `<rect width='100%' height='100%' fill='white'/>`,
    ...body,
    txt(W - 10, height + 12, caption, { size: 10, anchor: "end", fill: "#777" }),
    "</svg>",
    "",
  ].join("\n");
}

if (import.meta.main) {
  const [input, output] = Deno.args;
  if (!input || !output) {
    console.error("usage: deno run --allow-read --allow-write bench/chart.ts RESULTS.json OUT.svg");
    Deno.exit(2);
  }
  await Deno.writeTextFile(output, renderChart(JSON.parse(await Deno.readTextFile(input))));
}
