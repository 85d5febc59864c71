/**
 * The alert rules of deploy/monitoring/prometheusrule.yaml under
 * `promtool test rules` (Debian's prometheus package, which .ci/run
 * installs): each alert fires on a series of its own, and a fresh agent with
 * nothing wrong raises none. The agent's series are what lib/metrics.ts
 * exports, scraped once a minute from an agent started at minute 0 and
 * changed as its events change it (a brake, a pause, a pool exhausted), so a
 * labelled counter that appears only at its first event misses its alert here
 * as in Prometheus. `up` and kube-state-metrics' series are written as those
 * exporters write them.
 */
import assert from "node:assert/strict";
import { dump, load } from "js-yaml";
import { Metrics } from "../lib/metrics.ts";

const RULES = new URL("../deploy/monitoring/prometheusrule.yaml", import.meta.url).pathname;
/** The PodMonitor's job name (namespace/name) and one agent's target. */
const JOB = "kube-system/milo-ipam-agent";
const INSTANCE = "10.0.0.17:9464";
const AGENT = { instance: INSTANCE, job: JOB };
/** kube-state-metrics' own target. */
const KSM = { instance: "10.0.3.4:8080", job: "kube-state-metrics" };

const hasPromtool = (() => {
  try {
    return new Deno.Command("promtool", { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
})();

type Labels = Record<string, string>;
/** One input series: its labels (with `__name__`) and one value per minute (undefined: absent). */
type Series = { labels: Labels; values: (number | undefined)[] };

/** Parses Prometheus' text exposition into series (`name{labels}` → value). */
function parseExposition(text: string): Map<string, { labels: Labels; value: number }> {
  const out = new Map<string, { labels: Labels; value: number }>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^(\w+)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `an exposition line: ${line}`);
    const labels: Labels = { __name__: m[1] };
    for (const [, k, v] of (m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)) labels[k] = v;
    out.set(line.slice(0, line.lastIndexOf(" ")), { labels, value: Number(m[3]) });
  }
  return out;
}

/**
 * An agent started at minute 0 and scraped once a minute for `minutes`:
 * `at(minute, metrics)` changes it before that minute's scrape; `fallbacks`
 * is the plugin's counter file at that minute. Answers its series with the
 * scrape's `instance` and `job`, each absent before it first appeared.
 */
function agentSeries(
  minutes: number,
  at: (minute: number, m: Metrics) => void = () => {},
  fallbacks: (minute: number) => number = () => 0,
): Series[] {
  const m = new Metrics();
  m.release = "0.0.0";
  const series = new Map<string, Series>();
  for (let t = 0; t < minutes; t++) {
    at(t, m);
    for (const [key, s] of parseExposition(m.render(fallbacks(t)))) {
      const one = series.get(key) ??
        { labels: { ...s.labels, ...AGENT }, values: new Array(minutes).fill(undefined) };
      one.values[t] = s.value;
      series.set(key, one);
    }
  }
  return [...series.values(), constant({ __name__: "up", ...AGENT }, 1, minutes)];
}

/** A series of one value for `minutes`. */
function constant(labels: Labels, value: number, minutes: number): Series {
  return { labels, values: new Array(minutes).fill(value) };
}

/** promtool's input series: `name{labels}` and the values, `_` where absent. */
function inputSeries(all: Series[]) {
  return all.map(({ labels, values }) => {
    const { __name__, ...rest } = labels;
    const text = Object.entries(rest).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(",");
    return {
      series: `${__name__}{${text}}`,
      values: values.map((v) => v === undefined ? "_" : String(v)).join(" "),
    };
  });
}

/** An alerting rule as the file writes it. */
interface Rule {
  alert: string;
  expr: string;
  labels: Labels;
  annotations?: Labels;
}

/** The rule file's groups, as a plain Prometheus rule file. */
function ruleGroups(): { name: string; rules: Rule[] }[] {
  const doc = load(Deno.readTextFileSync(RULES)) as { spec: { groups: [] } };
  return doc.spec.groups;
}

/** One case: its series, and the alerts that fire at `evalMinute` (with their labels). */
interface Case {
  name: string;
  series: Series[];
  evalMinute: number;
  fires: { alert: string; labels: Labels }[];
}

const ALERTS = ruleGroups().flatMap((g) => g.rules.map((r) => r.alert));
const SEVERITY = Object.fromEntries(
  ruleGroups().flatMap((g) => g.rules.map((r) => [r.alert, r.labels.severity])),
);

/**
 * promtool's test of one case: every alert of the rules at `evalMinute`,
 * those of `fires` with their labels, every other none.
 */
function promtoolTest(c: Case) {
  return {
    interval: "1m",
    name: c.name,
    input_series: inputSeries(c.series),
    alert_rule_test: ALERTS.map((alert) => ({
      eval_time: `${c.evalMinute}m`,
      alertname: alert,
      exp_alerts: c.fires.filter((f) => f.alert === alert).map((f) => ({
        exp_labels: { severity: SEVERITY[alert], ...f.labels },
      })),
    })),
  };
}

/** Runs promtool on the cases; answers its exit code and output. */
function promtool(cases: Case[]): { code: number; out: string } {
  const dir = Deno.makeTempDirSync({ prefix: "milo-ipam-alerts-" });
  try {
    // Annotations are templates promtool would compare rendered: `check rules` checks them.
    const groups = ruleGroups().map((g) => ({
      ...g,
      rules: g.rules.map(({ annotations: _, ...r }) => r),
    }));
    Deno.writeTextFileSync(`${dir}/rules.yaml`, dump({ groups }));
    Deno.writeTextFileSync(
      `${dir}/test.yaml`,
      dump({
        rule_files: ["rules.yaml"],
        evaluation_interval: "1m",
        tests: cases.map(promtoolTest),
      }, { lineWidth: -1 }),
    );
    const out = new Deno.Command("promtool", {
      args: ["test", "rules", `${dir}/test.yaml`],
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    const d = new TextDecoder();
    return { code: out.code, out: d.decode(out.stdout) + d.decode(out.stderr) };
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

/** Sets each gauge of the agent's from minute `from` on. */
const from = (minute: number, change: (m: Metrics) => void) => (t: number, m: Metrics) => {
  if (t === minute) change(m);
};

/** A journal's gauges as the agent sets them at each scrape. */
const journal = (owed: number) => (_t: number, m: Metrics) => {
  m.journalOwed.set(owed);
  m.journalMax.set(4096);
  m.ready.set(1);
};

/** A ready agent (its readiness gauge 1), with `also` changing it too. */
const ready = (also: (t: number, m: Metrics) => void = () => {}) => (t: number, m: Metrics) => {
  m.ready.set(1);
  m.journalMax.set(4096);
  also(t, m);
};

/** An agent scraped for `after` minutes, then not answering its scrape (`up` 0) until `minutes`. */
function stopped(minutes: number, after: number): Series[] {
  const gone = new Array(minutes - after);
  const alive = agentSeries(after, ready()).filter((s) => s.labels.__name__ !== "up");
  return [
    ...alive.map((s) => ({ ...s, values: [...s.values, ...gone] })),
    { labels: { __name__: "up", ...AGENT }, values: [...Array(after).fill(1), ...gone.fill(0)] },
  ];
}

const CASES: Case[] = [
  {
    name: "a fresh agent, nothing wrong",
    series: agentSeries(60, ready()),
    evalMinute: 59,
    fires: [],
  },
  {
    name: "the first reconcile brake",
    series: agentSeries(20, ready(from(10, (m) => m.reconcileBrakes.add({ reason: "empty" })))),
    evalMinute: 12,
    fires: [{ alert: "MiloIpamReconcileBrake", labels: { ...AGENT, reason: "empty" } }],
  },
  {
    name: "the first pause on Milo's 429",
    series: agentSeries(20, ready(from(5, (m) => m.throttled.add({ event: "paused" })))),
    evalMinute: 11,
    fires: [{ alert: "MiloIpamMiloThrottling", labels: { ...AGENT, event: "paused" } }],
  },
  {
    name: "the first ADD refused with 100 (pool or quota)",
    series: agentSeries(20, ready(from(10, (m) => m.calls.add({ verb: "ADD", code: "100" })))),
    evalMinute: 11,
    fires: [{ alert: "MiloIpamPoolExhausted", labels: { ...AGENT, verb: "ADD", code: "100" } }],
  },
  {
    name: "claims of another host under this node's name",
    series: agentSeries(20, ready(from(10, (m) => m.otherHostClaims.set(3)))),
    evalMinute: 11,
    fires: [{ alert: "MiloIpamOtherHostClaims", labels: AGENT }],
  },
  {
    name: "a token that fails to reload",
    series: agentSeries(20, ready(from(10, (m) => m.tokenReloadFailures.add()))),
    evalMinute: 11,
    fires: [{ alert: "MiloIpamTokenReloadFailed", labels: AGENT }],
  },
  {
    name: "a duplicate address found by the reconcile",
    series: agentSeries(20, ready(from(10, (m) => m.duplicates.add({ via: "reconcile" })))),
    evalMinute: 11,
    fires: [{ alert: "MiloIpamDuplicateAddress", labels: { ...AGENT, via: "reconcile" } }],
  },
  {
    name: "live pods without their claim",
    series: agentSeries(30, ready(from(5, (m) => m.liveWithoutClaim.set(2)))),
    evalMinute: 16,
    fires: [{ alert: "MiloIpamLiveWithoutClaim", labels: AGENT }],
  },
  {
    name: "a lost claim made again",
    series: agentSeries(20, ready(from(10, (m) => m.leaseRepairs.add({ outcome: "made" })))),
    evalMinute: 11,
    fires: [{ alert: "MiloIpamLeaseRepaired", labels: { ...AGENT, outcome: "made" } }],
  },
  {
    name: "an agent Milo does not answer",
    series: agentSeries(30, (t, m) => m.ready.set(t < 5 ? 1 : 0)),
    evalMinute: 16,
    fires: [{ alert: "MiloIpamAgentNotReady", labels: AGENT }],
  },
  {
    name: "a release journal backlog",
    series: agentSeries(30, journal(150)),
    evalMinute: 16,
    fires: [{ alert: "MiloIpamReleaseJournalBacklog", labels: AGENT }],
  },
  {
    name: "a release journal nearly full",
    series: agentSeries(30, journal(3500)),
    evalMinute: 16,
    fires: [
      { alert: "MiloIpamReleaseJournalBacklog", labels: AGENT },
      { alert: "MiloIpamReleaseJournalNearlyFull", labels: AGENT },
    ],
  },
  {
    name: "over 5% of calls answered 11",
    series: agentSeries(
      30,
      ready((t, m) => {
        m.calls.add({ verb: "ADD", code: "0" }, 10);
        if (t >= 5) m.calls.add({ verb: "ADD", code: "11" }, 2);
      }),
    ),
    evalMinute: 20,
    fires: [{ alert: "MiloIpamCode11Rate", labels: { instance: INSTANCE } }],
  },
  {
    name: "the plugin working without its agent",
    series: agentSeries(20, ready(), (t) => t < 5 ? 0 : 3 * (t - 5)),
    evalMinute: 12,
    fires: [{ alert: "MiloIpamFallbacks", labels: AGENT }],
  },
  {
    name: "an agent that stopped answering its scrape",
    series: stopped(30, 5),
    evalMinute: 15,
    fires: [{ alert: "MiloIpamAgentDown", labels: AGENT }],
  },
  {
    name: "agent pods the DaemonSet cannot make available (an init container refusing)",
    series: [
      ...agentSeries(30, ready()),
      constant(
        {
          __name__: "kube_daemonset_status_number_unavailable",
          namespace: "kube-system",
          daemonset: "milo-ipam-agent",
          ...KSM,
        },
        1,
        30,
      ),
    ],
    evalMinute: 20,
    fires: [{
      alert: "MiloIpamAgentUnavailable",
      labels: { namespace: "kube-system", daemonset: "milo-ipam-agent", ...KSM },
    }],
  },
  {
    name: "no agent scraped at all",
    series: [constant({ __name__: "up", ...KSM }, 1, 30)],
    evalMinute: 20,
    fires: [{ alert: "MiloIpamAgentAbsent", labels: { job: JOB } }],
  },
  {
    name: "a failed sweep Job",
    series: [
      ...agentSeries(20, ready()),
      constant(
        {
          __name__: "kube_job_status_failed",
          namespace: "kube-system",
          job_name: "milo-ipam-sweep-29000000",
          ...KSM,
        },
        1,
        20,
      ),
      constant(
        {
          __name__: "kube_job_status_start_time",
          namespace: "kube-system",
          job_name: "milo-ipam-sweep-29000000",
          ...KSM,
        },
        5 * 60,
        20,
      ),
    ],
    evalMinute: 10,
    fires: [{ alert: "MiloIpamSweepFailed", labels: {} }],
  },
];

Deno.test({
  name: "alerts: every rule fires on its own series under promtool, and none on a fresh agent",
  ignore: !hasPromtool && !Deno.env.get("CI"),
  fn: () => {
    assert.ok(hasPromtool, "promtool (Debian's prometheus package) is installed by .ci/run");
    const fired = new Set(CASES.flatMap((c) => c.fires.map((f) => f.alert)));
    assert.deepEqual(ALERTS.filter((a) => !fired.has(a)), [], "every alert has a case");
    const check = promtoolCheck();
    assert.equal(check.code, 0, check.out);
    const r = promtool(CASES);
    assert.equal(r.code, 0, r.out);
  },
});

Deno.test("alerts: the labelled counters the rules read exist at 0 from the agent's start", () => {
  const series = parseExposition(new Metrics().render(0));
  const rules = ruleGroups().flatMap((g) => g.rules);
  for (const r of rules) {
    for (const [, name, selector] of r.expr.matchAll(/\b(milo_ipam_\w+_total)(\{[^}]*\})?/g)) {
      const want = [...(selector ?? "").matchAll(/(\w+)="([^"]*)"/g)];
      const present = [...series.values()].some((s) =>
        s.labels.__name__ === name && want.every(([, k, v]) => s.labels[k] === v)
      );
      assert.ok(present, `${r.alert}: ${name}${selector ?? ""} at 0 from the start`);
    }
  }
});

/** `promtool check rules` of the whole rule file, annotations' templates included. */
function promtoolCheck(): { code: number; out: string } {
  const dir = Deno.makeTempDirSync({ prefix: "milo-ipam-alerts-" });
  try {
    Deno.writeTextFileSync(`${dir}/rules.yaml`, dump({ groups: ruleGroups() }));
    const out = new Deno.Command("promtool", {
      args: ["check", "rules", `${dir}/rules.yaml`],
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    const d = new TextDecoder();
    return { code: out.code, out: d.decode(out.stdout) + d.decode(out.stderr) };
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}
