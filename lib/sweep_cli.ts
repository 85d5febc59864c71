/**
 * The command line of `milo-ipam sweep`: arguments and durations, opening the
 * Milo and Kubernetes clients, and the report as text or one JSON object
 * (also for failures).
 */
import type { NodeConfig } from "./config.ts";
import { parseFlags } from "./cli.ts";
import { readNodeConfig, withConfigFlag } from "./config_file.ts";
import { toCniError, UsageError } from "./errors.ts";
import { redact, redactedJson } from "./redact.ts";
import { KubeClient } from "./kube.ts";
import { inClusterAccess, kubeconfigAccess } from "./kube_access.ts";
import { MiloClient } from "./milo.ts";
import { sweep } from "./sweep.ts";
import {
  emptyReport,
  EXIT,
  formatDuration,
  type MaxRelease,
  renderText,
  type SweepReport,
} from "./sweep_report.ts";
import { NODE_MONITOR_GRACE_MS, TERMINATION_GRACE_MS } from "./sweep_rules.ts";
import { after } from "./timers.ts";

/** The command line. */
export const USAGE = "usage: milo-ipam sweep [--config FILE] [--kubeconfig FILE] [--apply] " +
  "[--grace DURATION] [--interval DURATION] [--termination-grace DURATION] " +
  "[--node-monitor-grace DURATION] [--max-release N|P%] [--timeout DURATION] " +
  "[--request-timeout DURATION] [--output text|json]";

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** Parses `10m`, `30s`, `1h`, `500ms`, `1h30m` or plain seconds (`45`, `2.5`) into ms. */
export function parseDuration(text: string): number | undefined {
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1_000);
  if (!/^(\d+(\.\d+)?(ms|s|m|h))+$/.test(text)) return undefined;
  let ms = 0;
  for (const [, n, , unit] of text.matchAll(/(\d+(\.\d+)?)(ms|s|m|h)/g)) {
    ms += Number(n) * UNITS[unit];
  }
  return Math.round(ms);
}

/** Parses `--max-release`: `N` pods, or `P%` of the pods with claims (0-100; lib/sweep.ts). */
export function parseMaxRelease(text: string): MaxRelease | undefined {
  if (/^\d+$/.test(text)) return { count: Number(text) };
  const m = /^(\d+(\.\d+)?)%$/.exec(text);
  return m && Number(m[1]) <= 100 ? { percent: Number(m[1]) } : undefined;
}

/** The parsed command line. */
export interface SweepArgs {
  config?: string;
  kubeconfig?: string;
  apply: boolean;
  graceMs: number;
  intervalMs: number;
  terminationGraceMs: number;
  nodeMonitorGraceMs: number;
  maxRelease: MaxRelease;
  /**
   * The sweep's own budget of one operation (a LIST, Milo's or the API's,
   * across its pages; one claim's re-check and release), and of one request
   * (a LIST's answer may pause no longer): default the node config's
   * `timeouts.totalMs` and `requestMs` for Milo, 120 s and 10 s for the API.
   * The nodes' ADD deadline is the node config's, whatever these are.
   */
  timeoutMs?: number;
  requestTimeoutMs?: number;
  output: "text" | "json";
}

const DEFAULTS = {
  graceMs: 600_000,
  intervalMs: 30_000,
  terminationGraceMs: TERMINATION_GRACE_MS,
  nodeMonitorGraceMs: NODE_MONITOR_GRACE_MS,
  maxRelease: { percent: 25 },
};
const MAX_GRACE_MS = 30 * 86_400_000;
const MAX_INTERVAL_MS = 3_600_000;
const MAX_TIMEOUT_MS = 3_600_000;
const MAX_REQUEST_TIMEOUT_MS = 600_000;

/** Parses the arguments; a bad one throws the usage (exit 1). */
export function parseSweepArgs(args: string[]): SweepArgs {
  const values = parseFlags(args, USAGE, {
    config: { type: "string" },
    kubeconfig: { type: "string" },
    apply: { type: "boolean", default: false },
    grace: { type: "string" },
    interval: { type: "string" },
    "termination-grace": { type: "string" },
    "node-monitor-grace": { type: "string" },
    "max-release": { type: "string" },
    timeout: { type: "string" },
    "request-timeout": { type: "string" },
    output: { type: "string", default: "text" },
  });
  const duration = (flag: string, text: string | undefined, fallback: number, max: number) => {
    if (text === undefined) return fallback;
    const ms = parseDuration(text);
    if (ms === undefined || ms > max) {
      throw new UsageError(
        USAGE,
        `--${flag} ${text}: a duration up to ${
          formatDuration(max)
        } such as 10m, 30s, 1h, 500ms or plain seconds`,
      );
    }
    return ms;
  };
  const max = values["max-release"];
  const maxRelease = max === undefined ? DEFAULTS.maxRelease : parseMaxRelease(max);
  if (!maxRelease) throw new UsageError(USAGE, `--max-release ${max}: N or P% (0-100)`);
  if (values.output !== "text" && values.output !== "json") {
    throw new UsageError(USAGE, `--output ${values.output}: text or json`);
  }
  const optional = (flag: string, text: string | undefined, max: number) => {
    if (text === undefined) return undefined;
    const ms = duration(flag, text, 0, max);
    if (!ms) throw new UsageError(USAGE, `--${flag} ${text}: more than 0`);
    return ms;
  };
  const timeoutMs = optional("timeout", values.timeout, MAX_TIMEOUT_MS);
  const requestTimeoutMs = optional(
    "request-timeout",
    values["request-timeout"],
    MAX_REQUEST_TIMEOUT_MS,
  );
  if (timeoutMs !== undefined && requestTimeoutMs !== undefined && requestTimeoutMs > timeoutMs) {
    throw new UsageError(USAGE, "--request-timeout must not exceed --timeout");
  }
  return {
    config: values.config,
    kubeconfig: values.kubeconfig,
    apply: values.apply,
    graceMs: duration("grace", values.grace, DEFAULTS.graceMs, MAX_GRACE_MS),
    intervalMs: duration("interval", values.interval, DEFAULTS.intervalMs, MAX_INTERVAL_MS),
    terminationGraceMs: duration(
      "termination-grace",
      values["termination-grace"],
      DEFAULTS.terminationGraceMs,
      MAX_INTERVAL_MS,
    ),
    nodeMonitorGraceMs: duration(
      "node-monitor-grace",
      values["node-monitor-grace"],
      DEFAULTS.nodeMonitorGraceMs,
      MAX_INTERVAL_MS,
    ),
    maxRelease,
    ...(timeoutMs ? { timeoutMs } : {}),
    ...(requestTimeoutMs ? { requestTimeoutMs } : {}),
    output: values.output,
  };
}

/** What the command line touches outside itself; tests replace any of it. */
export interface SweepIo {
  env: (name: string) => string | undefined;
  write: (text: string) => void;
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  /**
   * Opens both clients from the node config and `--kubeconfig` (else
   * in-cluster), with the sweep's own timeouts when given.
   */
  open: (
    node: NodeConfig,
    kubeconfig?: string,
    timeouts?: Timeouts,
  ) => Promise<{ milo: MiloClient; kube: KubeClient }>;
}

/** The sweep's `--timeout` and `--request-timeout`, when given. */
type Timeouts = Pick<SweepArgs, "timeoutMs" | "requestTimeoutMs">;

/** The budget of one Milo operation and of one request: the sweep's own, else the node's. */
export function miloTimeouts(node: NodeConfig, t: Timeouts = {}) {
  return {
    requestMs: t.requestTimeoutMs ?? node.timeouts.requestMs,
    operationMs: t.timeoutMs ?? node.timeouts.totalMs,
  };
}

async function openClients(node: NodeConfig, kubeconfig?: string, t: Timeouts = {}) {
  const access = kubeconfig
    ? await kubeconfigAccess(kubeconfig)
    : await inClusterAccess((n) => Deno.env.get(n));
  const m = miloTimeouts(node, t);
  const milo = await MiloClient.open(node, m.requestMs, Date.now() + m.operationMs);
  const kube = KubeClient.open(access, {
    ...(t.requestTimeoutMs ? { requestMs: t.requestTimeoutMs } : {}),
    ...(t.timeoutMs ? { operationMs: t.timeoutMs } : {}),
  });
  return { milo, kube };
}

const DEFAULT_IO: SweepIo = {
  env: (n) => Deno.env.get(n),
  write: (text) => void Deno.stdout.writeSync(new TextEncoder().encode(text)),
  now: Date.now,
  sleep: after,
  open: openClients,
};

/** CLI entry: runs one sweep, prints the report, answers the exit code (see {@link EXIT}). */
export async function sweepCli(args: string[], io: Partial<SweepIo> = {}): Promise<number> {
  const x: SweepIo = { ...DEFAULT_IO, ...io };
  const started = x.now();
  let json = args.includes("--output=json") || args.join(" ").includes("--output json");
  let settings: Omit<SweepArgs, "output"> = { apply: false, ...DEFAULTS };
  let cluster = "";
  let report: SweepReport;
  let clients: { milo: MiloClient; kube: KubeClient } | undefined;
  try {
    const a = parseSweepArgs(args);
    settings = a;
    json = a.output === "json";
    const node = await readNodeConfig(withConfigFlag(a.config, x.env));
    cluster = node.cluster;
    clients = await x.open(node, a.kubeconfig, a);
    report = await sweep({
      ...a,
      cluster,
      ...(node.clusterUid ? { clusterUid: node.clusterUid } : {}),
      ...clients,
      operationMs: miloTimeouts(node, a).operationMs,
      now: x.now,
      sleep: x.sleep,
    });
  } catch (err) {
    report = errorReport(err, { ...settings, cluster }, started, x.now());
    if (clients) {
      report.requests = { milo: clients.milo.requests, kubernetes: clients.kube.requests };
    }
  } finally {
    clients?.milo.close();
    clients?.kube.close();
  }
  x.write(json ? redactedJson(report, 2) + "\n" : redact(renderText(report)));
  return report.exitCode;
}

function errorReport(
  err: unknown,
  o: Parameters<typeof emptyReport>[0],
  started: number,
  now: number,
): SweepReport {
  const e = toCniError(err);
  return {
    ...emptyReport(o, started),
    outcome: "error",
    exitCode: EXIT.error,
    message: `error: ${e.message}`,
    durationMs: now - started,
    error: { message: e.message, details: e.details },
  };
}
