/**
 * The command line of `milo-ipam decommission`: its flags, the Milo client
 * from the node config (any node config that reaches the cluster's Milo
 * project: the cluster itself is gone), and the report as text or one JSON
 * object (also for failures). The rules are lib/decommission.ts's.
 */
import { parseCommandLine, usageError } from "./cli.ts";
import { readNodeConfig, withConfigFlag } from "./config_file.ts";
import { DNS1123_SUBDOMAIN } from "./config.ts";
import {
  decommission,
  DECOMMISSION_EXIT,
  type DecommissionOptions,
  type DecommissionReport,
} from "./decommission.ts";
import { toCniError } from "./errors.ts";
import { redact, redactedJson } from "./redact.ts";
import { MiloClient } from "./milo.ts";
import { printableLines } from "./printable.ts";
import { parseDuration } from "./sweep_cli.ts";
import { formatDuration } from "./sweep_report.ts";
import { after } from "./timers.ts";
import { DECOMMISSION_USAGE } from "./usage.ts";

const DEFAULTS = { quietMs: 3_600_000, intervalMs: 60_000, timeoutMs: 300_000, requestMs: 30_000 };

/** What the command line touches outside itself; tests replace any of it. */
export interface DecommissionIo {
  write: (text: string) => void;
  sleep: (ms: number) => Promise<void>;
  env: (name: string) => string | undefined;
}

const DEFAULT_IO: DecommissionIo = {
  write: (text) => void Deno.stdout.writeSync(new TextEncoder().encode(text)),
  sleep: after,
  env: (n) => Deno.env.get(n),
};

/** CLI entry: answers the exit code (see {@link DECOMMISSION_EXIT}). */
export async function decommissionCli(
  args: string[],
  io: Partial<DecommissionIo> = {},
): Promise<number> {
  const x = { ...DEFAULT_IO, ...io };
  const name = "milo-ipam decommission";
  const p = parseCommandLine(name, args, {
    usage: DECOMMISSION_USAGE,
    options: {
      cluster: { type: "string" },
      config: { type: "string" },
      apply: { type: "boolean", default: false },
      expect: { type: "string" },
      quiet: { type: "string" },
      interval: { type: "string" },
      timeout: { type: "string" },
      "request-timeout": { type: "string" },
      output: { type: "string", default: "text" },
    },
  });
  if ("exit" in p) return p.exit;
  const v = p.values as Record<string, string | boolean | undefined>;
  const wrong = (why: string) => usageError(name, why, DECOMMISSION_USAGE).exit;
  const cluster = v.cluster as string | undefined;
  if (!cluster || !DNS1123_SUBDOMAIN.test(cluster)) {
    return wrong("--cluster NAME: the cluster whose leases go (its claims' milo-ipam.io/cluster)");
  }
  if (v.output !== "text" && v.output !== "json") {
    return wrong(`--output ${v.output}: text or json`);
  }
  const ms: Record<string, number> = {};
  for (
    const [flag, key] of [
      ["quiet", "quietMs"],
      ["interval", "intervalMs"],
      ["timeout", "timeoutMs"],
      ["request-timeout", "requestMs"],
    ] as const
  ) {
    const text = v[flag] as string | undefined;
    const got = text === undefined ? DEFAULTS[key] : parseDuration(text);
    if (got === undefined || (key !== "intervalMs" && got <= 0)) {
      return wrong(`--${flag} ${text}: a duration such as 1h, 10m, 30s or plain seconds`);
    }
    ms[key] = got;
  }
  const expect = v.expect === undefined ? undefined : Number(v.expect);
  if (v.apply && (expect === undefined || !Number.isInteger(expect) || expect < 0)) {
    return wrong("--apply needs --expect N: the number of claims the dry run listed");
  }
  if (!v.apply && expect !== undefined) return wrong("--expect goes with --apply");
  let report: DecommissionReport;
  let milo: MiloClient | undefined;
  try {
    const node = await readNodeConfig(withConfigFlag(v.config as string | undefined, x.env));
    milo = await MiloClient.open(node, ms.requestMs, Date.now() + ms.timeoutMs);
    const o: DecommissionOptions = {
      cluster,
      milo,
      apply: !!v.apply,
      expect,
      quietMs: ms.quietMs,
      intervalMs: ms.intervalMs,
      operationMs: ms.timeoutMs,
      sleep: x.sleep,
    };
    report = await decommission(o);
  } catch (err) {
    const e = toCniError(err);
    report = {
      kind: "DecommissionReport",
      version: 1,
      cluster,
      apply: !!v.apply,
      outcome: "error",
      exitCode: DECOMMISSION_EXIT.error,
      message: `error: ${e.message}`,
      observations: [],
      nodes: {},
      newest: null,
      retained: 0,
      totals: { claims: 0, released: 0, wouldRelease: 0, gone: 0, failed: 0 },
      claims: [],
      requests: milo?.requests ?? 0,
      error: { message: e.message, details: e.details },
    };
  } finally {
    milo?.close();
  }
  x.write(v.output === "json" ? redactedJson(report, 2) + "\n" : redact(renderText(report, ms)));
  return report.exitCode;
}

/** The report for a human: the cluster, what was seen, per node, the outcome. */
export function renderText(r: DecommissionReport, ms: Record<string, number>): string {
  const lines = [
    `milo-ipam decommission: cluster ${r.cluster}, ${
      r.apply ? "apply" : "dry run (nothing is released; then --apply --expect N)"
    }; --quiet ${formatDuration(ms.quietMs)}, --interval ${formatDuration(ms.intervalMs)}`,
    ...r.observations.map((o, i) => `LIST ${i + 1} at ${o.at} (Milo's clock): ${o.claims} claims`),
  ];
  if (r.newest) {
    lines.push(
      `newest claim ${r.newest.claim}: node ${r.newest.node ?? "?"}, pod ${
        r.newest.pod ?? "?"
      }, made ${r.newest.created} (${formatDuration(Math.max(0, r.newest.ageS) * 1000)} ago)`,
    );
  }
  const nodes = Object.entries(r.nodes).sort(([a], [b]) => a < b ? -1 : 1);
  if (nodes.length) {
    lines.push(`claims by node (${nodes.length}):`);
    for (const [n, count] of nodes.slice(0, 50)) lines.push(`  ${n}  ${count}`);
    if (nodes.length > 50) lines.push(`  ... and ${nodes.length - 50} more nodes (--output json)`);
  }
  if (r.retained) {
    lines.push(
      `${r.retained} claim(s) are Retain (identity pod or network, galactic): Milo keeps their ` +
        "addresses retained until their class's retentionLease ends (milo-ipam show --retained)",
    );
  }
  for (const c of r.claims.filter((c) => c.action === "failed" || c.action === "changed")) {
    lines.push(`  ${c.action} ${c.claim} ${c.address ?? ""}: ${c.why ?? ""}`);
  }
  const t = r.totals;
  lines.push(
    `totals: ${t.claims} claims; ${t.released} released, ${t.wouldRelease} would be released, ` +
      `${t.gone} gone already, ${t.failed} failed or changed; ${r.requests} Milo request(s)`,
    `${r.message} (exit ${r.exitCode})`,
  );
  if (r.error?.details) lines.push(`  ${r.error.details}`);
  return printableLines(lines);
}
