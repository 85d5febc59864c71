/** The agent's counters, served as Prometheus text on `GET /metrics`. */

/** Upper bounds (seconds) of the call latency histogram. */
const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

type Labels = Record<string, string>;

function labelText(l: Labels): string {
  const parts = Object.entries(l).map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, "_")}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
}

class Counter {
  readonly #values = new Map<string, number>();

  /** A counter whose series of `series` exist at 0 from the start (an alert's rate sees the first). */
  constructor(series: Labels[] = []) {
    for (const l of series) this.#values.set(labelText(l), 0);
  }

  add(labels: Labels = {}, n = 1): void {
    const k = labelText(labels);
    this.#values.set(k, (this.#values.get(k) ?? 0) + n);
  }

  lines(name: string): string[] {
    if (!this.#values.size) return [`${name} 0`];
    return [...this.#values].map(([k, v]) => `${name}${k} ${v}`);
  }
}

class Gauge {
  #value = 0;

  set(n: number): void {
    this.#value = n;
  }

  lines(name: string): string[] {
    const v = this.#value === Infinity ? "+Inf" : String(Math.round(this.#value * 1000) / 1000);
    return [`${name} ${v}`];
  }
}

class Histogram {
  readonly #series = new Map<string, { counts: number[]; sum: number; n: number }>();

  observe(labels: Labels, seconds: number): void {
    const k = JSON.stringify(labels);
    const s = this.#series.get(k) ?? { counts: BUCKETS.map(() => 0), sum: 0, n: 0 };
    BUCKETS.forEach((b, i) => {
      if (seconds <= b) s.counts[i]++;
    });
    s.sum += seconds;
    s.n++;
    this.#series.set(k, s);
  }

  lines(name: string): string[] {
    const out: string[] = [];
    for (const [k, s] of this.#series) {
      const l = JSON.parse(k) as Labels;
      BUCKETS.forEach((b, i) =>
        out.push(`${name}_bucket${labelText({ ...l, le: String(b) })} ${s.counts[i]}`)
      );
      out.push(`${name}_bucket${labelText({ ...l, le: "+Inf" })} ${s.n}`);
      out.push(`${name}_sum${labelText(l)} ${s.sum}`, `${name}_count${labelText(l)} ${s.n}`);
    }
    return out;
  }
}

/** Each of `values` as the one label `name`. */
const each = (name: string, values: string[]): Labels[] => values.map((v) => ({ [name]: v }));

/**
 * The series of the calls counter that exist at 0 from the agent's start:
 * those the alert rules read (deploy/monitoring/prometheusrule.yaml: code 11
 * of any verb, 100 of an ADD), so that `increase()` sees the first such call.
 */
const CALL_SERIES: Labels[] = [
  ...["ADD", "DEL", "CHECK"].flatMap((verb) => ["0", "11"].map((code) => ({ verb, code }))),
  { verb: "ADD", code: "100" },
];

/**
 * Everything the agent counts. A labelled counter an alert reads has its
 * series at 0 from the start: Prometheus' `increase()` over a series that
 * appears at its first event sees no increase, so the first brake or pause
 * would raise nothing.
 */
export class Metrics {
  readonly calls = new Counter(CALL_SERIES);
  readonly latency = new Histogram();
  readonly miloRequests = new Counter();
  readonly retries = new Counter();
  readonly reconcileCandidates = new Counter();
  readonly reconcileReleases = new Counter(each("via", ["journal", "orphan", "boot"]));
  readonly reconcileBrakes = new Counter(each("reason", ["empty", "shrunk"]));
  readonly otherHostClaims = new Gauge();
  readonly tokenReloadFailures = new Counter();
  readonly throttled = new Counter(each("event", ["queued", "expired", "paused", "cut"]));
  readonly rateLimit = new Gauge();
  readonly concurrencyLimit = new Gauge();
  /** Releases the node's journal owes now (read at each scrape). */
  readonly journalOwed = new Gauge();
  /** Releases owed at which ADDs are refused. */
  readonly journalMax = new Gauge();
  /** 1 while the readiness probe passes (Milo answered with the node's token), else 0. */
  readonly ready = new Gauge();
  /** Claims of live attachments made again, by outcome, and those that could not be. */
  readonly leaseRepairs = new Counter(each("outcome", ["made", "present", "duplicate", "failed"]));
  /** Addresses found on two sandboxes, by who found them (a call's release, or the reconcile). */
  readonly duplicates = new Counter(each("via", ["release", "reconcile"]));
  /** Addresses two sandboxes use and live attachments without their claim, at the last verification. */
  readonly duplicateAddresses = new Gauge();
  readonly liveWithoutClaim = new Gauge();
  /** The release running (the `release` label of `milo_ipam_build_info`). */
  release = "";

  /** Prometheus text exposition; `fallbacks` is read from the plugin's counter file. */
  render(fallbacks: number): string {
    const family = (name: string, type: string, help: string, lines: string[]) => [
      `# HELP ${name} ${help}`,
      `# TYPE ${name} ${type}`,
      ...lines,
    ];
    return [
      ...family(
        "milo_ipam_calls_total",
        "counter",
        "CNI calls answered by the agent, by verb and CNI result code (0 = success).",
        this.calls.lines("milo_ipam_calls_total"),
      ),
      ...family(
        "milo_ipam_call_duration_seconds",
        "histogram",
        "Time from the plugin process's start to the agent's reply, by verb.",
        this.latency.lines("milo_ipam_call_duration_seconds"),
      ),
      ...family(
        "milo_ipam_milo_requests_total",
        "counter",
        "HTTP requests to Milo, by method and status (error = no answer).",
        this.miloRequests.lines("milo_ipam_milo_requests_total"),
      ),
      ...family(
        "milo_ipam_milo_retries_total",
        "counter",
        "Requests to Milo that were retries of an earlier attempt.",
        this.retries.lines("milo_ipam_milo_retries_total"),
      ),
      ...family(
        "milo_ipam_milo_throttled_total",
        "counter",
        "The node's Milo limiter: requests queued for a slot, failed unsent at their deadline " +
          "(expired), pauses on 429/503 (paused), and cuts of its limits (cut), by event.",
        this.throttled.lines("milo_ipam_milo_throttled_total"),
      ),
      ...family(
        "milo_ipam_milo_rate_limit",
        "gauge",
        "Requests per second the node's Milo limiter allows its most limited flow now (+Inf: none).",
        this.rateLimit.lines("milo_ipam_milo_rate_limit"),
      ),
      ...family(
        "milo_ipam_milo_concurrency_limit",
        "gauge",
        "Milo requests the node's limiter lets its most limited flow have in flight at once now.",
        this.concurrencyLimit.lines("milo_ipam_milo_concurrency_limit"),
      ),
      ...family(
        "milo_ipam_fallbacks_total",
        "counter",
        "Plugin calls that did the work themselves because the agent did not answer.",
        [`milo_ipam_fallbacks_total ${fallbacks}`],
      ),
      ...family(
        "milo_ipam_reconcile_candidates_total",
        "counter",
        "Claims the reconcile timer found without a live attachment.",
        this.reconcileCandidates.lines("milo_ipam_reconcile_candidates_total"),
      ),
      ...family(
        "milo_ipam_reconcile_releases_total",
        "counter",
        "Claims the reconcile timer released, by path (journal, orphan or boot).",
        this.reconcileReleases.lines("milo_ipam_reconcile_releases_total"),
      ),
      ...family(
        "milo_ipam_reconcile_brakes_total",
        "counter",
        "Reconcile runs that released nothing because the live set looked wrong, by reason.",
        this.reconcileBrakes.lines("milo_ipam_reconcile_brakes_total"),
      ),
      ...family(
        "milo_ipam_other_host_claims",
        "gauge",
        "Claims under this node name made by another host, at the last reconcile.",
        this.otherHostClaims.lines("milo_ipam_other_host_claims"),
      ),
      ...family(
        "milo_ipam_release_journal_owed",
        "gauge",
        "Releases the node's journal owes (failed DELs and rollbacks reconcile retries).",
        this.journalOwed.lines("milo_ipam_release_journal_owed"),
      ),
      ...family(
        "milo_ipam_release_journal_max",
        "gauge",
        "Owed releases at which the node refuses the ADDs (code 11) of namespaces owing an even part or more (one namespace's own limit: 512).",
        this.journalMax.lines("milo_ipam_release_journal_max"),
      ),
      ...family(
        "milo_ipam_ready",
        "gauge",
        "1 while Milo answers the node's token (the readiness probe), else 0.",
        this.ready.lines("milo_ipam_ready"),
      ),
      ...family(
        "milo_ipam_lease_repairs_total",
        "counter",
        "Claims of live attachments the reconcile found missing in Milo, by outcome: made " +
          "again (made), there again already (present), taken by another (duplicate), not " +
          "made this run (failed).",
        this.leaseRepairs.lines("milo_ipam_lease_repairs_total"),
      ),
      ...family(
        "milo_ipam_duplicates_total",
        "counter",
        "Addresses found on two sandboxes (a live one without its claim, and Milo's holder), " +
          "by who found them: a call's release, or the reconcile's verification.",
        this.duplicates.lines("milo_ipam_duplicates_total"),
      ),
      ...family(
        "milo_ipam_duplicate_addresses",
        "gauge",
        "Addresses of this node's live attachments that Milo records for another holder, at " +
          "the last verification.",
        this.duplicateAddresses.lines("milo_ipam_duplicate_addresses"),
      ),
      ...family(
        "milo_ipam_live_without_claim",
        "gauge",
        "Live attachments of this node whose claim is missing in Milo and could not be made " +
          "again, at the last verification.",
        this.liveWithoutClaim.lines("milo_ipam_live_without_claim"),
      ),
      ...family(
        "milo_ipam_build_info",
        "gauge",
        "The milo-ipam release the agent runs (always 1).",
        [`milo_ipam_build_info${labelText({ release: this.release })} 1`],
      ),
      ...family(
        "milo_ipam_token_reload_failures_total",
        "counter",
        "Calls whose token file could not be read or was malformed.",
        this.tokenReloadFailures.lines("milo_ipam_token_reload_failures_total"),
      ),
      "",
    ].join("\n");
  }
}
