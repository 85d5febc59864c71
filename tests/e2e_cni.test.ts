/**
 * End to end: milo-ipam under a real CNI master (Debian's bridge and ptp) in
 * real network namespaces, two clusters sharing one tenant pool in milo-dev,
 * with faults; once with the plugin working alone and once with a
 * `milo-ipam agent` per node; pods attached through Multus too (scenario 7).
 * Needs root, iproute2 and
 * containernetworking-plugins; skips with the reason elsewhere, and fails
 * instead of skipping when CI is set. See docs/e2e.md.
 */
import { e2eMissing, HAVE_PING, type Mode, MODES, World } from "../testing/e2e/mod.ts";
import { agentRestart } from "../testing/e2e/scenarios/agent_restart.ts";
import { boundedFailure } from "../testing/e2e/scenarios/bounded.ts";
import { churnWithFaults } from "../testing/e2e/scenarios/churn.ts";
import { lostClaims } from "../testing/e2e/scenarios/lost.ts";
import { multusAttachments } from "../testing/e2e/scenarios/multus.ts";
import { twoClustersOnePool } from "../testing/e2e/scenarios/one_pool.ts";
import { delNeverCame } from "../testing/e2e/scenarios/orphans.ts";
import { ptpIpv6 } from "../testing/e2e/scenarios/ptp.ts";
import { stableAddresses } from "../testing/e2e/scenarios/stable.ts";
import { INFLIGHT, LOADED_TIMEOUTS, type Run, timed } from "../testing/e2e/scenarios/run.ts";

const MISSING = e2eMissing();
const IN_CI = Boolean(Deno.env.get("CI"));
/**
 * Lifecycles of scenario 2 per mode (E2E_CHURN sets both, E2E_CHURN_AGENT the agent's); the
 * full-size soak (`deno task soak`) runs 1,000 of each scenario's.
 */
const CHURN: Record<Mode, number> = {
  direct: Number(Deno.env.get("E2E_CHURN") ?? 128),
  agent: Number(Deno.env.get("E2E_CHURN_AGENT") ?? Deno.env.get("E2E_CHURN") ?? 128),
};
/** Multus lifecycles of scenario 7 per mode (E2E_MULTUS_CHURN; else 64, at most the mode's churn). */
const MULTUS_CHURN: Record<Mode, number> = {
  direct: Number(Deno.env.get("E2E_MULTUS_CHURN") ?? Math.min(64, CHURN.direct)),
  agent: Number(Deno.env.get("E2E_MULTUS_CHURN") ?? Math.min(64, CHURN.agent)),
};
/** E2E_SCENARIOS=2,7 runs only those scenarios (1, 1b, 2, 3, 5, 6, 7, 8, 9); all by default. Not in CI. */
const ONLY = Deno.env.get("E2E_SCENARIOS")?.split(",").map((s) => s.trim()).filter(Boolean);
if (ONLY && IN_CI) throw new Error("E2E_SCENARIOS is for local runs: CI runs every scenario");
const wanted = (n: string) => !ONLY || ONLY.includes(n);
/** E2E_MODE=direct or agent runs one mode; both by default. */
const RUN_MODES: readonly Mode[] = (() => {
  const m = Deno.env.get("E2E_MODE");
  if (!m) return MODES;
  if (m !== "direct" && m !== "agent") throw new Error(`E2E_MODE=${m}: direct or agent`);
  return [m];
})();

if (MISSING && !IN_CI) console.warn(`e2e skipped: ${MISSING} (run as root; see docs/e2e.md)`);

for (const mode of RUN_MODES) {
  Deno.test({
    name: MISSING && !IN_CI
      ? `e2e [${mode}] under a real CNI master (skipped: ${MISSING})`
      : `e2e [${mode}]: milo-ipam under bridge/ptp in network namespaces, two clusters, one pool`,
    ignore: Boolean(MISSING) && !IN_CI,
    sanitizeOps: false,
    sanitizeResources: false,
  }, async (t) => {
    if (MISSING) throw new Error(`CI is set but the e2e prerequisites are missing: ${MISSING}`);
    const run: Run = { w: new World(mode, { multus: true }), mode, figures: { mode } };
    const started = performance.now();
    try {
      await timed(run, "setup", () => run.w.setup());
      run.w.rt.timeouts = LOADED_TIMEOUTS;
      run.figures.reachability = HAVE_PING ? "ping" : "tcp probe (no ping installed)";
      if (wanted("1")) {
        await t.step(
          "1. two clusters, one pool: 200 pods, 64 in flight, then exhaustion",
          () => twoClustersOnePool(run),
        );
      }
      if (wanted("1b")) {
        await t.step(
          "1b. ptp master: IPv6 /96 blocks with a link-local gateway",
          () => ptpIpv6(run),
        );
      }
      if (wanted("2")) {
        await t.step(
          `2. churn with faults: ${CHURN[mode]} lifecycles, ${INFLIGHT} in flight`,
          () => churnWithFaults(run, CHURN[mode]),
        );
      }
      if (wanted("3")) {
        await t.step(
          "3. DEL never came: GC and node reconcile release exactly the orphans",
          () => delNeverCame(run),
        );
      }
      if (wanted("5")) {
        await t.step("5. bounded failure: milo-dev down or hanging", () => boundedFailure(run));
      }
      if (mode === "agent" && wanted("6")) {
        await t.step(
          "6. agent SIGKILLed and restarted with 32 ADDs in flight",
          () => timed(run, "scenario 6", () => agentRestart(run)),
        );
      }
      if (wanted("7")) {
        await t.step(
          `7. Multus: 16 pods live through reconcile, ${MULTUS_CHURN[mode]} lifecycles with ` +
            `faults${mode === "agent" ? " and an agent restart" : ""}, a DEL that never came`,
          () => timed(run, "scenario 7", () => multusAttachments(run, MULTUS_CHURN[mode])),
        );
      }
      if (wanted("8")) {
        await t.step(
          "8. stable addresses: db-0 re-created on its node and another gets its address back; " +
            "a second sandbox gets none; a late DEL releases nothing; a force-deleted holder " +
            "is released by its node's reconcile",
          () => timed(run, "scenario 8", () => stableAddresses(run)),
        );
      }
      if (wanted("9")) {
        await t.step(
          "9. Milo loses a namespace's claims while their pods run: each node's reconcile makes " +
            "them again on the pods' addresses",
          () => timed(run, "scenario 9", () => lostClaims(run)),
        );
      }
    } finally {
      run.figures["duration:total"] = `${Math.round((performance.now() - started) / 1000)} s`;
      console.log(`e2e figures [${mode}]:\n` + JSON.stringify(run.figures, null, 2));
      await run.w.teardown();
    }
  });
}
