/**
 * What every scenario shares: one mode's run (world and figures), the
 * ledger assertion, timing, and pod teardown.
 */
import assert from "node:assert/strict";
import type { Claim } from "../milo.ts";
import { delNetns } from "../netns.ts";
import { delPod, type Driver } from "../kubelet.ts";
import { type Ledger, ledgerLine } from "../ledger.ts";
import type { Mode } from "../nodes.ts";
import type { Pod } from "../runtime.ts";
import { clusterOf } from "../topology.ts";
import type { World } from "../world.ts";

/** Calls in flight in the big scenarios. */
export const INFLIGHT = 64;

/**
 * Plugin timeouts under load: 64 plugin processes on a 2-core runner get a
 * small share of CPU each, so a request can take seconds on the client side.
 */
export const LOADED_TIMEOUTS = { requestMs: 5_000, totalMs: 20_000 };

/** One mode's run: the world and the figures printed at the end (docs/e2e.md quotes them). */
export interface Run {
  w: World;
  mode: Mode;
  figures: Record<string, unknown>;
}

/** Prints the ledger line (with the mode) and its first details; records the figures. */
export function printLedger(run: Run, scenario: string, l: Ledger): void {
  console.log(ledgerLine(run.mode, scenario, l));
  for (const d of l.details.slice(0, 20)) console.log(`  ${d}`);
  run.figures[`ledger:${scenario}`] = [l.duplicates, l.claimsWithoutPod, l.podsWithoutClaim];
}

/** Prints the ledger and asserts 0 / 0 / 0, one claim per live attachment (and `live` of them). */
export async function assertLedger(run: Run, scenario: string, live?: number): Promise<Ledger> {
  const l = await run.w.ledger();
  printLedger(run, scenario, l);
  assert.equal(l.duplicates, 0, "duplicate addresses");
  assert.equal(l.claimsWithoutPod, 0, "claims without a live pod");
  assert.equal(l.podsWithoutClaim, 0, "live pods without a claim");
  if (live !== undefined) assert.equal(l.live, live, "live attachments");
  assert.equal(l.claims, l.live, "one claim per live attachment");
  return l;
}

/** The claim whose annotations name this pod's cluster and container. */
export function claimOf(claims: Claim[], pod: Pod): Claim | undefined {
  return claims.find((c) =>
    c.metadata.annotations?.["milo-ipam.io/container-id"] === pod.containerId &&
    c.metadata.annotations?.["milo-ipam.io/cluster"] === clusterOf(pod.node)
  );
}

/** Runs `fn`, records and prints how long it took under `name`. */
export async function timed<T>(run: Run, name: string, fn: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  try {
    return await fn();
  } finally {
    const s = Math.round((performance.now() - t0) / 100) / 10;
    run.figures[`duration:${name}`] = `${s} s`;
    console.log(`[${run.mode}] ${name}: ${s} s`);
  }
}

/** Tears a pod down (DEL, bounded retries) and deletes its namespace. */
export async function removePod(run: Run, d: Driver, p: Pod): Promise<void> {
  assert.ok(await delPod(run.w.rt, d, p), `DEL ${p.containerId}`);
  await delNetns(p.netns);
}
