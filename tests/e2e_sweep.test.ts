/**
 * End to end: `milo-ipam sweep` against the leases the e2e runtime really
 * made (bridge in network namespaces, milo-dev), with a Kubernetes API
 * stand-in fed from the runtime's pods. Needs what tests/e2e_cni.test.ts
 * needs; skips with the reason elsewhere and fails instead when CI is set.
 */
import { e2eMissing, World } from "../testing/e2e/mod.ts";
import { LOADED_TIMEOUTS, type Run, timed } from "../testing/e2e/scenarios/run.ts";
import { clusterSweep } from "../testing/e2e/scenarios/sweep.ts";

const MISSING = e2eMissing();
const IN_CI = Boolean(Deno.env.get("CI"));

Deno.test({
  name: MISSING && !IN_CI
    ? `e2e sweep (skipped: ${MISSING})`
    : "e2e sweep: a dead node and a force-deleted pod come back to the pool, nothing live goes",
  ignore: Boolean(MISSING) && !IN_CI,
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  if (MISSING) throw new Error(`CI is set but the e2e prerequisites are missing: ${MISSING}`);
  const run: Run = { w: new World("direct"), mode: "direct", figures: { mode: "direct" } };
  try {
    await timed(run, "setup", () => run.w.setup());
    run.w.rt.timeouts = LOADED_TIMEOUTS;
    await timed(run, "sweep scenario", () => clusterSweep(run));
  } finally {
    console.log("e2e sweep figures:\n" + JSON.stringify(run.figures, null, 2));
    await run.w.teardown();
  }
});
