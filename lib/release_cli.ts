/**
 * The command line of `milo-ipam release ADDRESS`: its flags, the Milo client
 * from the node config, the Kubernetes client of `--kubeconfig` (or
 * in-cluster), and the report as text or one JSON object. The rules are
 * lib/release.ts's.
 */
import { parseCommandLine, usageError } from "./cli.ts";
import { readNodeConfig, withConfigFlag } from "./config_file.ts";
import { toCniError } from "./errors.ts";
import { redact, redactedJson } from "./redact.ts";
import { KubeClient } from "./kube.ts";
import { inClusterAccess, kubeconfigAccess } from "./kube_access.ts";
import { MiloClient } from "./milo.ts";
import { printableLines } from "./printable.ts";
import { type Proof, RELEASE_EXIT, releaseAddress, type ReleaseReport } from "./release.ts";
import { parseDuration } from "./sweep_cli.ts";
import { NODE_MONITOR_GRACE_MS, TERMINATION_GRACE_MS } from "./sweep_rules.ts";
import { after } from "./timers.ts";
import { RELEASE_USAGE } from "./usage.ts";

const DEFAULTS = {
  intervalMs: 30_000,
  nodeMonitorGraceMs: NODE_MONITOR_GRACE_MS,
  terminationGraceMs: TERMINATION_GRACE_MS,
  quietMs: 3_600_000,
  timeoutMs: 60_000,
};

/** What the command line touches outside itself; tests replace any of it. */
export interface ReleaseIo {
  write: (text: string) => void;
  sleep: (ms: number) => Promise<void>;
  env: (name: string) => string | undefined;
}

const DEFAULT_IO: ReleaseIo = {
  write: (text) => void Deno.stdout.writeSync(new TextEncoder().encode(text)),
  sleep: after,
  env: (n) => Deno.env.get(n),
};

/** CLI entry: answers the exit code (see {@link RELEASE_EXIT}). */
export async function releaseCli(args: string[], io: Partial<ReleaseIo> = {}): Promise<number> {
  const x = { ...DEFAULT_IO, ...io };
  const name = "milo-ipam release";
  const p = parseCommandLine(name, args, {
    usage: RELEASE_USAGE,
    positionals: true,
    options: {
      config: { type: "string" },
      kubeconfig: { type: "string" },
      "in-cluster": { type: "boolean", default: false },
      holder: { type: "string" },
      apply: { type: "boolean", default: false },
      quiet: { type: "string" },
      interval: { type: "string" },
      "node-monitor-grace": { type: "string" },
      "termination-grace": { type: "string" },
      timeout: { type: "string" },
      output: { type: "string", default: "text" },
    },
  });
  if ("exit" in p) return p.exit;
  const v = p.values as Record<string, string | boolean | undefined>;
  const wrong = (why: string) => usageError(name, why, RELEASE_USAGE).exit;
  if (p.positionals.length !== 1) return wrong("name one ADDRESS");
  const ways = [v.kubeconfig !== undefined, !!v["in-cluster"], v.holder !== undefined];
  if (ways.filter(Boolean).length !== 1) {
    return wrong(
      "prove the holder gone one way: --kubeconfig FILE or --in-cluster (the cluster's API), " +
        "or --holder POD_UID (your word, with its node quiet)",
    );
  }
  if (v.output !== "text" && v.output !== "json") {
    return wrong(`--output ${v.output}: text or json`);
  }
  const ms: Record<string, number> = {};
  for (
    const [flag, key] of [
      ["interval", "intervalMs"],
      ["node-monitor-grace", "nodeMonitorGraceMs"],
      ["termination-grace", "terminationGraceMs"],
      ["quiet", "quietMs"],
      ["timeout", "timeoutMs"],
    ] as const
  ) {
    const text = v[flag] as string | undefined;
    const got = text === undefined ? DEFAULTS[key] : parseDuration(text);
    if (got === undefined || (key === "timeoutMs" && got <= 0)) {
      return wrong(`--${flag} ${text}: a duration such as 1h, 10m, 30s or plain seconds`);
    }
    ms[key] = got;
  }
  const address = p.positionals[0];
  let report: ReleaseReport;
  let milo: MiloClient | undefined;
  let kube: KubeClient | undefined;
  try {
    const node = await readNodeConfig(withConfigFlag(v.config as string | undefined, x.env));
    milo = await MiloClient.open(node, node.timeouts.requestMs, Date.now() + ms.timeoutMs);
    let proof: Proof;
    if (v.holder !== undefined) {
      proof = { kind: "holder", podUid: v.holder as string, quietMs: ms.quietMs };
    } else {
      const access = v.kubeconfig
        ? await kubeconfigAccess(v.kubeconfig as string)
        : await inClusterAccess(x.env);
      kube = KubeClient.open(access);
      proof = {
        kind: "kube",
        kube,
        cluster: node.cluster,
        intervalMs: ms.intervalMs,
        nodeMonitorGraceMs: ms.nodeMonitorGraceMs,
        terminationGraceMs: ms.terminationGraceMs,
      };
    }
    report = await releaseAddress({
      address,
      milo,
      proof,
      apply: !!v.apply,
      operationMs: ms.timeoutMs,
      sleep: x.sleep,
    });
  } catch (err) {
    const e = toCniError(err);
    report = {
      kind: "ReleaseReport",
      version: 1,
      address,
      apply: !!v.apply,
      proof: v.holder !== undefined ? "holder" : "kube",
      outcome: "error",
      exitCode: RELEASE_EXIT.error,
      claim: null,
      checks: [],
      message: `error: ${e.message}`,
      requests: { milo: milo?.requests ?? 0, kubernetes: kube?.requests ?? 0 },
      error: { message: e.message, details: e.details },
    };
  } finally {
    milo?.close();
    kube?.close();
  }
  x.write(v.output === "json" ? redactedJson(report, 2) + "\n" : redact(renderText(report)));
  return report.exitCode;
}

/** The report for a human: the claim, each check, the outcome. */
export function renderText(r: ReleaseReport): string {
  const c = r.claim;
  return printableLines([
    `milo-ipam release ${r.address}: ${r.apply ? "apply" : "dry run (nothing is released)"}, ` +
    `holder proven gone by ${r.proof === "kube" ? "the cluster's API" : "--holder"}`,
    ...(c
      ? [
        `claim ${c.name} (uid ${c.uid ?? "?"}): ${c.address ?? "?"}, pod ${c.pod ?? "?"} (uid ${
          c.podUid ?? "?"
        }), cluster ${c.cluster ?? "?"}, node ${c.node ?? "?"}, made ${c.created ?? "?"}`,
      ]
      : []),
    ...r.checks.map((x) => `  checked: ${x}`),
    `${r.message} (exit ${r.exitCode})`,
    ...(r.error?.details ? [`  ${r.error.details}`] : []),
  ]);
}
