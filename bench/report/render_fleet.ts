/** The report's fleet section (issue 20), and the report of a `--only fleet` run. */
import {
  type FleetResults,
  type FleetRound,
  type FleetRun,
  load1,
  type Machine,
} from "../model.ts";
import {
  CHURN_PER_POD_HOUR,
  extrapolate,
  FLEET_LIMITS,
  FLEET_SIZES,
  fleetBudgets,
  idealMs,
  MILO_CEILING,
  type PerNode,
  perNode,
  PODS_PER_NODE,
  SWEEP_OBSERVATIONS,
  SWEEP_PERIOD_S,
} from "./fleet.ts";
import { fmtCount, fmtMs, fmtRatio, fmtSeconds, machineRows, table, verdict } from "./format.ts";

/** CPU idle share below which the fleet section counts as started under load (%). */
const QUIET_IDLE_PCT = 80;

/** Whether the fleet's figures were taken under load: a noisy run, or a busy machine at its start. */
export function fleetNoisy(f: FleetResults, m: Machine): boolean {
  return !(load1(m.loadBefore) <= m.nproc) || !(f.idleBeforePct >= QUIET_IDLE_PCT);
}

const outcomes = (codes: Record<string, number>) =>
  Object.entries(codes).map(([c, n]) => `${n}× ${c === "0" ? "ok" : `code ${c}`}`).join(", ");

const methods = (m: Record<string, number>) =>
  Object.entries(m).sort().map(([k, v]) => `${k} ${v}`).join(", ") || "none";

function roundRow(what: string, r: FleetRound): (string | number)[] {
  return [
    what,
    r.calls,
    outcomes(r.codes),
    fmtSeconds(r.wallMs),
    fmtMs(r.summary.p50),
    fmtMs(r.summary.max),
    `${r.requests} (${methods(r.byMethod)})`,
    r.throttled,
    r.allocations,
    `${r.lists} / ${r.rowsScanned}`,
    r.fallbacks,
  ];
}

function perNodeLines(f: FleetResults, p: PerNode): string[] {
  return [
    `- requests per created claim ${fmtRatio(p.requestsPerClaim)} (storm: every request, 429s ` +
    `included; POSTs alone ${fmtRatio(p.postsPerClaim)}; the pace round without a ceiling ` +
    `${fmtRatio(f.pace.requests / f.pace.allocations)}), requests per DEL ${
      fmtRatio(p.requestsPerDel)
    } ` +
    `(drain), ${f.families} claims per ADD;`,
    `- LISTs per created claim ${fmtRatio(p.listsPerClaim)}, per DEL ${
      fmtRatio(p.listsPerDel)
    }; idle: ` +
    `${fmtRatio(p.idleRequestsPerNodeHour)} requests and ${
      fmtRatio(p.idleListsPerNodeHour)
    } LISTs per ` +
    `node-hour;`,
    `- a node's first start (no record): ${
      fmtRatio(p.startListsPerNode)
    } LIST; a restart with its ` +
    `record: ${fmtRatio(p.restartListsPerNode)}.`,
  ];
}

/** Milo's load at 100, 1,000 and 5,000 nodes, and the model beside it. */
function extrapolation(f: FleetResults): string {
  const p = perNode(f);
  const rows = FLEET_SIZES.map((n) => {
    const x = extrapolate(f, n, p);
    return [
      n.toLocaleString("en-US"),
      fmtCount(x.claims),
      `${fmtCount(x.creates)} (${(x.ceilingShare * 100).toFixed(x.ceilingShare < 0.1 ? 1 : 0)}%)`,
      fmtCount(x.requests),
      fmtCount(x.lists),
      fmtCount(x.rows),
      fmtCount(x.sweepLists),
      fmtCount(x.sweepRows),
      fmtCount(x.startRows),
    ];
  });
  return [
    `Milo's load per second at ${PODS_PER_NODE} pods a node, each pod replaced ` +
    `${CHURN_PER_POD_HOUR === 1 ? "once" : `${CHURN_PER_POD_HOUR} times`} an hour (a DEL and a ` +
    `dual-stack ADD), every node in one project, from these per-node figures of this run:`,
    "",
    ...perNodeLines(f, p),
    "",
    table([
      "nodes",
      "claims",
      `creates/s (of ${MILO_CEILING})`,
      "node requests/s",
      "node LISTs/s",
      "node rows scanned/s",
      "sweep LISTs/s",
      "sweep rows scanned/s",
      "rows of one node's first LIST",
    ], rows),
    "",
    "The model (per second; C = nodes × pods × claims per ADD, the tenant's claims, which one",
    "LIST page of Milo's `GetList` reads whatever its selector):",
    "",
    "```",
    "creates  = C × churn / 3600",
    "requests = nodes × (pods × churn × (claims/ADD × requests/claim + requests/DEL)",
    "                    + idle requests/node-hour) / 3600",
    "LISTs    = the same with LISTs per claim, per DEL and per idle node-hour",
    "rows     = LISTs × C",
    `sweep    = ${SWEEP_OBSERVATIONS} LISTs every ${SWEEP_PERIOD_S} s (deploy/base/sweep.yaml), ` +
    "each C rows (Milo answers a LIST whole, whatever its limit)",
    "```",
    "",
    "Requests per claim come from the storm at 2× oversubscription (an upper bound: the churn",
    "above stays under the ceiling). The node terms are what the agents send; the cluster sweep",
    "(one per cluster, here one cluster) is a separate term, not measured by this section: its",
    "figures follow from its schedule. A node without a record (a new node) lists",
    "once at its first start: the last column, once per such node.",
  ].join("\n");
}

/** The fleet section: the rounds, the start and idle figures, and the extrapolation. */
export function renderFleet(f: FleetResults, m: Machine): string {
  const noisy = fleetNoisy(f, m)
    ? [
      `> **Noisy**: the section began with the 1-minute load at ${
        f.loadBefore.split(" ")[0]
      } and ` +
      `${f.idleBeforePct.toFixed(0)}% of the CPU idle (${m.nproc} cores); every figure is ` +
      `inflated by other work.`,
      "",
    ]
    : [];
  const s = f.storm, i = f.idle, p = perNode(f);
  const hours = (f.nodes * i.seconds) / 3600;
  return [
    ...noisy,
    `${f.nodes} node agents, each its own install, state, socket and node name in one ` +
    `cluster, against one TLS milo-dev; ${f.podsPerNode} dual-stack pods a node started at ` +
    `once, every call the installed plugin exec'd as a runtime does (production timeouts: ` +
    `${f.timeouts.requestMs} ms per request, ${f.timeouts.totalMs} ms total; an ADD's requests ` +
    `end ${fmtSeconds(f.requestDeadlineMs)} s after its process starts). Reconcile every ` +
    `${f.reconcileIntervalS} s. The pace round runs the ADDs against no ceiling; the storm sets ` +
    `Milo's ceiling to half the claims per second the pace round created (${f.ceiling}/s: 2× ` +
    `oversubscription), restarts the agents first, and starts ${
      f.stormPodsPerNode ?? f.podsPerNode
    } pods a node: as many as end within the request deadline at ${FLEET_LIMITS.lastAddVsIdeal}× ` +
    `the ideal. Milo queues what it cannot serve at once (priority and fairness) and answers ` +
    `429 when its queue overflows. Wall: from the first spawn to the last ` +
    `exit; p50 and max per call (ms); milo-dev's counters over each round.`,
    "",
    table(
      [
        "round",
        "calls",
        "outcomes",
        "wall s",
        "p50",
        "max",
        "requests",
        "429",
        "claims created",
        "LISTs / rows",
        "fallbacks",
      ],
      [
        roundRow("pace: ADD, no ceiling", f.pace),
        roundRow(`storm: ADD, ${f.ceiling} creates/s`, s),
        roundRow("drain: DEL of the storm's pods", f.drain),
      ],
    ),
    "",
    `Storm: ${fmtRatio(p.postsPerClaim)} POSTs per created claim, ${s.throttled} answered 429, ` +
    `${s.codes["11"] ?? 0} code 11; the last ADD ended ${fmtSeconds(s.wallMs)} s after the first ` +
    `started, ${(s.wallMs / idealMs(f)).toFixed(2)}× the ideal of ${fmtSeconds(idealMs(f))} s ` +
    `(${s.calls * f.families} claims ÷ ${f.ceiling}/s).`,
    "",
    `Start (no record): ${f.start.lists} LISTs (${f.start.rowsScanned} rows) and ` +
    `${f.start.requests} requests from ${f.nodes} agents within ${
      fmtSeconds(f.start.waitedMs)
    } s. ` +
    `Restart with a record: ${f.restart.lists} LISTs, ${f.restart.requests} requests.`,
    "",
    `Idle: ${i.seconds} s (${
      fmtCount(hours * 3600)
    } node-seconds, ${i.reconciles} reconciles logged, ` +
    `${i.claims} claims in the tenant): ${i.requests} requests (${methods(i.byMethod)}), ` +
    `${i.lists} LISTs, ${i.rowsScanned} rows scanned; per node-hour ` +
    `${fmtRatio(p.idleListsPerNodeHour)} LISTs and ${fmtRatio(p.idleRowsPerNodeHour)} rows.`,
    "",
    "### Milo's load extrapolated",
    "",
    extrapolation(f),
  ].join("\n");
}

/** The Markdown report of a `deno task bench --only fleet` run. */
export function renderFleetReport(r: FleetRun): string {
  const f = r.fleet, m = r.machine, c = r.contention;
  const budgets = fleetBudgets(f);
  const failed = budgets.filter((b) => b.ok === false).map((b) => b.what);
  return [
    `# milo-ipam fleet benchmark, ${r.date}${
      r.quick ? " (quick smoke run: too few samples to judge)" : ""
    }`,
    "",
    "`deno task bench --only fleet`: the fleet section of `deno task bench` alone.",
    "",
    "## Machine",
    "",
    table(["", ""], [
      ...machineRows(
        m,
        `${c.idleBeforePct.toFixed(0)}% idle at the start; ${c.busyPct.toFixed(0)}% busy during ` +
          `the run, ${c.ownPct.toFixed(0)}% of that the benchmark's own processes`,
      ),
      ["Deno", `${r.deno.version} (V8 ${r.deno.v8}, TypeScript ${r.deno.typescript})`],
      ["run", `${r.durationS.toFixed(0)} s`],
    ]),
    "",
    "## Budgets",
    "",
    "Issues 20 and 29's, judged within this run.",
    "",
    table(
      ["budget", "limit", "this run", "verdict"],
      budgets.map((b) => [b.what, b.limit, b.figure, verdict(b.ok)]),
    ),
    "",
    failed.length ? `Budgets failed: ${failed.join("; ")}.` : "Every judged budget passes.",
    "",
    "## Fleet against one Milo",
    "",
    renderFleet(f, m),
    "",
  ].join("\n");
}
