/**
 * The fleet's budgets (issue 20) and the model that extrapolates Milo's load
 * to large fleets from the per-node figures one run measured.
 */
import { DEFAULT_ALLOCATIONS_PER_SECOND } from "../../milo-dev/limits.ts";
import type { FleetResults, FleetRound } from "../model.ts";
import type { Finding } from "./findings.ts";
import { fmtRatio, fmtSeconds } from "./format.ts";

/** Fleet sizes of the extrapolation. */
export const FLEET_SIZES = [100, 1_000, 5_000];
/** Pods a node runs in the extrapolation. */
export const PODS_PER_NODE = 30;
/** Churn of the extrapolation: each pod replaced (one DEL, one ADD) this often an hour. */
export const CHURN_PER_POD_HOUR = 1;
/** The cluster sweep's schedule (deploy/base/sweep.yaml: every 5 minutes) and its two observations. */
export const SWEEP_PERIOD_S = 300;
/** Paginated LISTs of the cluster's claims per sweep run (lib/sweep.ts observes twice). */
export const SWEEP_OBSERVATIONS = 2;
/** Milo's allocation ceiling per API server. */
export const MILO_CEILING = DEFAULT_ALLOCATIONS_PER_SECOND;

/**
 * The storm's limits against Milo's priority and fairness (milo-dev's default:
 * creates queue, an overflow answers 429): every request the storm sends
 * (POSTs, 429s, reads) per claim created, and the last ADD against the ideal.
 */
export const FLEET_LIMITS = { requestsPerClaim: 1.3, lastAddVsIdeal: 2.5 };

/** The storm's ideal: the claims it asks for, created at the ceiling without a gap (ms). */
export function idealMs(f: FleetResults): number {
  return (f.storm.calls * f.families / f.ceiling) * 1000;
}

/** Node-hours a stretch of `seconds` on every node covers. */
function nodeHours(f: FleetResults, seconds: number): number {
  return (f.nodes * seconds) / 3600;
}

const per = (x: number, y: number) => (y > 0 ? x / y : NaN);
const posts = (r: FleetRound) => r.byMethod.POST ?? 0;

/** The per-node figures of one run the extrapolation starts from. */
export interface PerNode {
  /** Storm: POSTs, and every request (429s and reads included), per claim created. */
  postsPerClaim: number;
  requestsPerClaim: number;
  /** Drain: requests per DEL call. */
  requestsPerDel: number;
  /** LISTs per claim created (storm) and per DEL (drain). */
  listsPerClaim: number;
  listsPerDel: number;
  /** Idle stretch: requests and LISTs per node-hour. */
  idleRequestsPerNodeHour: number;
  idleListsPerNodeHour: number;
  idleRowsPerNodeHour: number;
  /** LISTs one agent sent at its first start (no record) and at a restart (with one). */
  startListsPerNode: number;
  restartListsPerNode: number;
}

/** The per-node figures of a run. */
export function perNode(f: FleetResults): PerNode {
  const hours = nodeHours(f, f.idle.seconds);
  return {
    postsPerClaim: per(posts(f.storm), f.storm.allocations),
    requestsPerClaim: per(f.storm.requests, f.storm.allocations),
    requestsPerDel: per(f.drain.requests, f.drain.calls),
    listsPerClaim: per(f.storm.lists, f.storm.allocations),
    listsPerDel: per(f.drain.lists, f.drain.calls),
    idleRequestsPerNodeHour: per(f.idle.requests, hours),
    idleListsPerNodeHour: per(f.idle.lists, hours),
    idleRowsPerNodeHour: per(f.idle.rowsScanned, hours),
    startListsPerNode: per(f.start.lists, f.nodes),
    restartListsPerNode: per(f.restart.lists, f.nodes),
  };
}

/** Milo's load from a fleet of `nodes`, by the model of {@link extrapolate}. */
export interface Projection {
  nodes: number;
  /** Claims in the tenant: what one LIST page of Milo's `GetList` reads. */
  claims: number;
  creates: number;
  /** Share of {@link MILO_CEILING} the churn's creates take. */
  ceilingShare: number;
  requests: number;
  lists: number;
  rows: number;
  sweepLists: number;
  sweepRows: number;
  /** Rows one LIST of a node without a record scans at its first start. */
  startRows: number;
}

/**
 * Per second, for `nodes` nodes of {@link PODS_PER_NODE} pods, each replaced
 * {@link CHURN_PER_POD_HOUR} times an hour, in one project:
 *
 *   claims  C = nodes × pods × families
 *   creates   = C × churn / 3600
 *   requests  = nodes × (pods × churn × (families × req/claim + req/DEL) + idle req/node-h) / 3600
 *   LISTs     = nodes × (pods × churn × (families × LIST/claim + LIST/DEL) + idle LIST/node-h) / 3600
 *   rows      = LISTs × C (every LIST page reads the tenant's claims)
 *   sweep     = observations LISTs every sweep period, each C rows (Milo answers a LIST whole)
 */
export function extrapolate(f: FleetResults, nodes: number, p = perNode(f)): Projection {
  const claims = nodes * PODS_PER_NODE * f.families;
  const changes = nodes * PODS_PER_NODE * CHURN_PER_POD_HOUR;
  const creates = (claims * CHURN_PER_POD_HOUR) / 3600;
  const requests = (changes * (f.families * p.requestsPerClaim + p.requestsPerDel) +
    nodes * p.idleRequestsPerNodeHour) / 3600;
  const lists = (changes * (f.families * p.listsPerClaim + p.listsPerDel) +
    nodes * p.idleListsPerNodeHour) / 3600;
  const sweepLists = SWEEP_OBSERVATIONS / SWEEP_PERIOD_S;
  return {
    nodes,
    claims,
    creates,
    ceilingShare: creates / MILO_CEILING,
    requests,
    lists,
    rows: lists * claims,
    sweepLists,
    sweepRows: sweepLists * claims,
    startRows: p.startListsPerNode * claims,
  };
}

/** The fleet's budgets (issues 20 and 29), judged against one fleet run. */
export function fleetBudgets(f: FleetResults): Finding[] {
  const p = perNode(f), s = f.storm;
  const ideal = idealMs(f), code11 = s.codes["11"] ?? 0;
  const lastVsIdeal = s.wallMs / ideal;
  const fits = ideal <= f.requestDeadlineMs;
  const claims = s.calls * f.families;
  return [{
    group: "fleet",
    what: `idle: LISTs per node-hour after start (${f.nodes} agents, ` +
      `${f.idle.seconds} s, ${f.idle.reconciles} reconciles)`,
    limit: "= 0",
    figure: `${
      fmtRatio(p.idleListsPerNodeHour)
    } (${f.idle.lists} LISTs, ${f.idle.requests} requests)`,
    ok: f.idle.reconciles > 0 ? f.idle.lists === 0 : undefined,
  }, {
    group: "fleet",
    what: `storm at 2× oversubscription (${s.calls} ADDs, ${claims} claims against ` +
      `${f.ceiling} creates/s): requests per created claim (requests ÷ claims)`,
    limit: `≤ ${FLEET_LIMITS.requestsPerClaim}`,
    figure: `${fmtRatio(p.requestsPerClaim)} (${s.requests} requests, ${posts(s)} POSTs, ` +
      `for ${s.allocations} claims; ${s.throttled} answered 429)`,
    ok: s.allocations ? p.requestsPerClaim <= FLEET_LIMITS.requestsPerClaim : undefined,
  }, {
    group: "fleet",
    what: "storm: last ADD vs the ideal (claims ÷ ceiling)",
    limit: `≤ ${FLEET_LIMITS.lastAddVsIdeal}×`,
    figure: `${lastVsIdeal.toFixed(2)}× (${fmtSeconds(s.wallMs)} / ${fmtSeconds(ideal)} s)`,
    ok: Number.isFinite(lastVsIdeal) ? lastVsIdeal <= FLEET_LIMITS.lastAddVsIdeal : undefined,
  }, {
    group: "fleet",
    what: "storm: no code 11 when it fits the deadline at the ceiling " +
      `(ideal ${fmtSeconds(ideal)} s vs the ${fmtSeconds(f.requestDeadlineMs)} s request deadline)`,
    limit: "0",
    figure: `${code11} code 11, ${s.failures} failed` + (fits ? "" : " (does not fit: not judged)"),
    ok: fits ? code11 === 0 : undefined,
  }];
}
