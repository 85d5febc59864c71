/**
 * The simulator's checker (testing/sim/checker.ts) reports a wrong ledger:
 * each plant (testing/sim/world.ts) is one, and the run it is planted in is
 * otherwise clean.
 */
import assert from "node:assert/strict";
import { Checker, type Ledger } from "../testing/sim/checker.ts";
import type { Sandbox } from "../testing/sim/runtime.ts";
import type { Step } from "../testing/sim/script.ts";
import type { WireClaim } from "../testing/stub_types.ts";
import { simulate } from "../testing/sim/world.ts";

/** One pod of a Deployment deleted a minute in: a sandbox that lived and is dead. */
const SCRIPT: Step[] = [{
  at: 61_000,
  do: "delete",
  cluster: "cluster-a",
  workload: "web",
  pick: 0,
}];

Deno.test("sim checker: the run without a plant is clean", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT });
  assert.equal(r.violation, undefined, r.violation?.what);
});

Deno.test("sim checker: a planted duplicate (two live sandboxes on one address) is reported", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT, plant: "duplicate" });
  assert.equal(r.violation?.kind, "duplicate", r.violation?.what);
  assert.match(r.violation!.what, /held by two live sandboxes/);
});

Deno.test("sim checker: a planted forgotten release (a dead sandbox's claim its node does not remember) is reported", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT, plant: "forgotten" });
  assert.equal(r.violation?.kind, "forgotten", r.violation?.what);
  assert.match(r.violation!.what, /neither its node's record nor its journal names it/);
});

Deno.test("sim checker: a planted leak (a dead sandbox's claim remembered, never released) is reported past its bound", async () => {
  const r = await simulate({ seed: 7, script: SCRIPT, plant: "leak" });
  assert.equal(r.violation?.kind, "leaked", r.violation?.what);
  assert.match(r.violation!.what, /still in Milo past/);
});

/**
 * Two sandboxes of one slot on 10.40.0.8 from 6 s: a release's DELETE removed
 * the first one's claim in place at 4 s (`answered`: its sender heard so) and
 * the second made the name again. At 10 s one of them ends (`ends`): the
 * second (the first gets its claim back), or the first (its DEL). The
 * duplicate lasted 4 s. `reportedAt`: when a node reported it, if one did.
 */
function raced(
  o: { answered: boolean; ends: "victim" | "other"; reportedAt?: number },
): { checker: Checker; at(ms: number): void } {
  const ip = "10.40.0.8";
  let now = 0;
  const sandbox = (id: string, since: number): Sandbox => ({
    id,
    node: "a-1",
    cluster: "cluster-a",
    pod: { namespace: "shop", name: `slot-${id}`, uid: `uid-${id}` },
    state: "live",
    since,
    born: since,
    nets: [{ network: "slot", ifname: "eth0", conf: {}, ips: [ip] }],
  });
  const first = sandbox("a".repeat(64), 0);
  const second = sandbox("b".repeat(64), 6_000);
  const claim = (s: Sandbox): WireClaim => ({
    apiVersion: "ipam.miloapis.com/v1alpha1",
    kind: "IPClaim",
    metadata: {
      name: "slot-1-v4",
      namespace: "ns",
      annotations: { "milo-ipam.io/container-id": s.id, "milo-ipam.io/ifname": "eth0" },
    },
    spec: {},
    status: { phase: "Bound", address: ip },
  });
  const ended = () => now >= 10_000;
  const ledger: Ledger = {
    now: () => now,
    sandboxes: new Map([[first.id, first], [second.id, second]]),
    claims: () => [claim(ended() && o.ends === "other" ? first : second)],
    stateDir: () => "/nonexistent",
    quietSince: () => -Infinity,
    deletedBehind: () => undefined,
    removedInPlace: () => ({ at: 4_000, answered: o.answered }),
    reported: () => o.reportedAt !== undefined && o.reportedAt <= now ? o.reportedAt : undefined,
  };
  const checker = new Checker(ledger, { release: 90_000, verify: 690_000, dead: 400_000 });
  return {
    checker,
    at(ms: number) {
      now = ms;
      if (ended()) (o.ends === "other" ? second : first).state = "dead";
    },
  };
}

/** The checker's verdicts at each time of `times` (ms). */
function verdicts(w: ReturnType<typeof raced>, times: number[]) {
  return times.map((t) => {
    w.at(t);
    return w.checker.check();
  });
}

const TIMES = [6_000, 8_000, 10_000, 50_000, 95_000, 97_000, 200_000];

Deno.test("sim checker: a duplicate a DELETE removed in place that ends before its window is still owed its report, where a node knew of it", () => {
  for (
    const o of [{ answered: true, ends: "other" }, { answered: false, ends: "victim" }] as const
  ) {
    const v = verdicts(raced(o), TIMES);
    assert.deepEqual(v.slice(0, 5), Array(5).fill(undefined), JSON.stringify(o));
    assert.equal(v[5]?.kind, "unreported", JSON.stringify(o));
    assert.match(v[5]!.what, /removed in place, and no node reported it within 90 s/);
  }
});

Deno.test("sim checker: a duplicate a DELETE removed in place, reported at once, is not held against the run after it ends", () => {
  const v = verdicts(raced({ answered: true, ends: "victim", reportedAt: 7_000 }), TIMES);
  assert.deepEqual(v, Array(TIMES.length).fill(undefined));
});

Deno.test("sim checker: a duplicate no node could know of (the DELETE's answer lost, the other holder gone first) is not held against the run", () => {
  const v = verdicts(raced({ answered: false, ends: "other" }), TIMES);
  assert.deepEqual(v, Array(TIMES.length).fill(undefined));
});
