/**
 * The benchmark chart, as a self-contained SVG: latency percentiles per
 * series (one in flight, with and without the agent) on top, the process
 * concurrency sweep's throughput and p99 below.
 *
 *   deno run --allow-read --allow-write bench/chart.ts RESULTS.json OUT.svg   (re-render)
 */
import { type BenchResults, type ConcurrencyPoint, find, type Series } from "./model.ts";

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

/** The one-in-flight series of both paths, agent first. */
function latencyRows(r: BenchResults): Series[] {
  const agent = r.agent.series.map((s) => ({ ...s, label: `agent: ${s.label}` }));
  return [...agent, ...r.latency.series].filter((s) => s.summary.n > 0);
}

function latencyPanel(r: BenchResults, top: number): { svg: string; height: number } {
  const rows = latencyRows(r);
  const left = 360, right = W - 150, rowH = 24;
  const height = 70 + rows.length * rowH + 40;
  const { max, step } = niceMax(Math.max(10, ...rows.map((s) => s.summary.p99)) * 1.05);
  const x = (v: number) => left + (Math.min(v, max) / max) * (right - left);
  const out: string[] = [];
  out.push(txt(20, top + 22, "Latency per invocation, one in flight (ms, exec → exit)", {
    size: 15,
    weight: "bold",
  }));
  const n = rows[0]?.summary.n ?? 0;
  out.push(txt(
    20,
    top + 40,
    `bar = p50, whisker to p99 with a tick at p90; n = ${n} per ` +
      `series after ${r.warmup} warm-up rounds`,
    { size: 11, fill: "#555" },
  ));
  const y0 = top + 60, y1 = y0 + rows.length * rowH;
  for (let v = 0; v <= max + 1e-9; v += step) {
    out.push(line(x(v), y0 - 4, x(v), y1, GRID));
    out.push(txt(x(v), y1 + 14, fmt(v), { size: 10, anchor: "middle", fill: "#555" }));
  }
  const floor = find(r.agent.series, "floor")?.summary;
  const budgets = floor
    ? [[1.5 * floor.p50, "agent p50 budget", "end"], [
      2 * floor.p99,
      "p99 budget",
      "start",
    ]] as const
    : [];
  for (const [v, label, anchor] of budgets) {
    if (!(v <= max)) continue;
    out.push(
      line(x(v), y0 - 8, x(v), y1, COLORS.budget, "stroke-dasharray='5,4' stroke-width='1.5'"),
    );
    const dx = anchor === "end" ? -3 : 3;
    out.push(txt(x(v) + dx, y0 - 10, label, { size: 10, anchor, fill: COLORS.budget }));
  }
  rows.forEach((s, i) => out.push(bar(s, y0 + i * rowH + rowH / 2, left, right, x)));
  out.push(txt(right + 8, y0 - 10, "p50 / p90 / p99", { size: 10, fill: "#555" }));
  return { svg: out.join("\n"), height };
}

function bar(s: Series, cy: number, left: number, right: number, x: (v: number) => number) {
  const { p50, p90, p99 } = s.summary;
  return [
    txt(left - 8, cy + 4, s.label, { size: 11, anchor: "end" }),
    `<rect x='${left}' y='${(cy - 7).toFixed(1)}' width='${(x(p50) - left).toFixed(1)}' ` +
    `height='14' fill='${COLORS.p50}' opacity='0.85'/>`,
    line(x(p50), cy, x(p99), cy, INK, "stroke-width='1.2'"),
    line(x(p90), cy - 5, x(p90), cy + 5, COLORS.p90, "stroke-width='2.5'"),
    line(x(p99), cy - 7, x(p99), cy + 7, COLORS.p99, "stroke-width='2.5'"),
    txt(right + 8, cy + 4, `${fmt(p50)} / ${fmt(p90)} / ${fmt(p99)}`, { size: 11 }),
  ].join("\n");
}

/** Where a panel's plot sits and how values map onto it. */
interface Frame {
  plotL: number;
  plotR: number;
  plotT: number;
  plotB: number;
  levels: number[];
  x: (level: number) => number;
  y: (v: number) => number;
}

/** A horizontal reference line of a panel. */
interface Ref {
  value: number;
  label: string;
}

interface PanelOptions {
  left: number;
  top: number;
  width: number;
  title: string;
  value: (p: ConcurrencyPoint) => number;
  refs: Ref[];
  unit: string;
  log?: boolean;
}

function frameOf(points: ConcurrencyPoint[], o: PanelOptions): { frame: Frame; ticks: number[] } {
  const plotL = o.left + 55, plotR = o.left + o.width - 15, plotT = o.top + 50;
  const plotB = o.top + 240;
  const levels = [...new Set(points.map((p) => p.inFlight))].sort((a, b) => a - b);
  const vals = [...points.map(o.value), ...o.refs.map((r) => r.value)]
    .filter((v) => Number.isFinite(v) && v > 0);
  const { max, step } = niceMax(Math.max(1, ...vals) * 1.1);
  const lo = 10 ** Math.floor(Math.log10(Math.min(...vals, max)));
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...vals, lo * 10)));
  const y = o.log
    ? (v: number) =>
      plotB - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / Math.log10(hi / lo)) *
        (plotB - plotT)
    : (v: number) => plotB - (Math.min(v, max) / max) * (plotB - plotT);
  const x = (lv: number) =>
    plotL + (levels.indexOf(lv) + 0.5) * ((plotR - plotL) / Math.max(1, levels.length));
  const ticks: number[] = [];
  if (o.log) { for (let v = lo; v <= hi * 1.0001 && ticks.length < 12; v *= 10) ticks.push(v); }
  else for (let v = 0; v <= max + 1e-9 && ticks.length < 12; v += step) ticks.push(v);
  return { frame: { plotL, plotR, plotT, plotB, levels, x, y }, ticks };
}

function axes(f: Frame, ticks: number[], o: PanelOptions): string[] {
  const out = [txt(o.left, o.top + 20, o.title, { size: 14, weight: "bold" })];
  for (const v of ticks) {
    out.push(line(f.plotL, f.y(v), f.plotR, f.y(v), GRID));
    out.push(txt(f.plotL - 6, f.y(v) + 4, fmt(v), { size: 10, anchor: "end", fill: "#555" }));
  }
  out.push(line(f.plotL, f.plotB, f.plotR, f.plotB, INK));
  for (const lv of f.levels) {
    out.push(txt(f.x(lv), f.plotB + 16, String(lv), { size: 11, anchor: "middle" }));
  }
  const mid = (f.plotL + f.plotR) / 2;
  out.push(txt(mid, f.plotB + 32, "ADDs in flight (no agent)", { size: 11, anchor: "middle" }));
  out.push(txt(f.plotL - 6, f.plotT - 10, o.unit, { size: 10, anchor: "end", fill: "#555" }));
  for (const r of o.refs) {
    out.push(
      line(f.plotL, f.y(r.value), f.plotR, f.y(r.value), COLORS.budget, "stroke-dasharray='5,4'"),
    );
    out.push(
      txt(f.plotR, f.y(r.value) - 5, r.label, { size: 10, anchor: "end", fill: COLORS.budget }),
    );
  }
  return out;
}

function clusterLine(ps: ConcurrencyPoint[], clusters: number, f: Frame, o: PanelOptions) {
  const color = LINE[clusters - 1];
  const at = (p: ConcurrencyPoint) => `${f.x(p.inFlight).toFixed(1)},${f.y(o.value(p)).toFixed(1)}`;
  const out = [
    `<path d='${ps.map((p, i) => `${i ? "L" : "M"}${at(p)}`).join(" ")}' fill='none' ` +
    `stroke='${color}' stroke-width='2'/>`,
  ];
  for (const p of ps) {
    const cx = f.x(p.inFlight), cy = f.y(o.value(p));
    out.push(`<circle cx='${cx.toFixed(1)}' cy='${cy.toFixed(1)}' r='3.5' fill='${color}'/>`);
    out.push(txt(cx + (clusters === 1 ? -6 : 6), cy - 7, fmt(o.value(p)), {
      size: 10,
      anchor: clusters === 1 ? "end" : "start",
      fill: color,
    }));
  }
  const ly = o.top + 38, lx = o.left + o.width - 210 + (clusters - 1) * 105;
  out.push(line(lx, ly, lx + 18, ly, color, "stroke-width='2'"));
  out.push(txt(lx + 22, ly + 4, clusters === 1 ? "one cluster" : "two clusters", { size: 11 }));
  return out.join("\n");
}

function concurrencyPanel(points: ConcurrencyPoint[], o: PanelOptions): string {
  if (!points.length) return "";
  const { frame, ticks } = frameOf(points, o);
  const out = axes(frame, ticks, o);
  for (const clusters of [1, 2]) {
    const ps = points.filter((p) => p.clusters === clusters).sort((a, b) =>
      a.inFlight - b.inFlight
    );
    if (ps.length) out.push(clusterLine(ps, clusters, frame, o));
  }
  return out.join("\n");
}

/** Renders the chart for one run's results. */
export function renderChart(r: BenchResults): string {
  const lat = latencyPanel(r, 10);
  const adds = r.concurrency.filter((p) => p.verb === "ADD");
  const top = 10 + lat.height + 10;
  const half = (W - 40) / 2;
  const t = r.agent.throughput;
  const body = [
    lat.svg,
    concurrencyPanel(adds, {
      left: 20,
      top,
      width: half - 10,
      title: "ADD throughput vs concurrency",
      value: (p) => p.perSecond,
      refs: [{
        value: t.add.perSecond,
        label: `agent ADD at ${t.add.inFlight}: ${fmt(t.add.perSecond)}/s`,
      }],
      unit: "ADD/s",
    }),
    concurrencyPanel(adds, {
      left: 20 + half + 10,
      top,
      width: half - 10,
      title: "ADD p99 vs concurrency",
      value: (p) => p.summary.p99,
      refs: [{ value: t.add.summary.p99, label: `agent ADD p99 at ${t.add.inFlight}` }],
      unit: "ms (log)",
      log: true,
    }),
  ];
  const height = top + 290;
  const caption = `milo-ipam ${r.quick ? "quick " : ""}benchmark ${r.date} · ${r.machine.nproc} ` +
    `cores ${r.machine.cpu} · Deno ${r.deno.version} · ${r.install.kind}`;
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
