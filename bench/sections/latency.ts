/**
 * Per-verb latency of the plugin without the agent (every call does the work
 * itself), one call in flight, interleaved with the bare floor, the minimal
 * TLS client and Debian's host-local so that machine noise hits them alike.
 */
import type { RunResult } from "../../testing/plugin.ts";
import type { LatencyResults } from "../model.ts";
import type { Plan } from "../plan.ts";
import { alternate, brief, cniEnv, execTimed, ok, Recorder, say } from "../proc.ts";
import { RequestCounter } from "../requests.ts";
import type { World } from "../world.ts";

/** Series keys of this section. */
export const LATENCY = {
  floor: "floor",
  version: "version",
  add: "add",
  tlsClient: "tls-client",
  hlAdd: "hl-add",
  check: "check",
  status: "status",
  addHttp: "add-http",
  del: "del",
  hlDel: "hl-del",
} as const;

/** One round: floor/VERSION, ADD/TLS client, host-local, CHECK, STATUS, HTTP ADD, DEL/host-local. */
async function round(w: World, rec: Recorder, req: RequestCounter, i: number, measured: boolean) {
  const id = `lat-${i}`;
  const confA = w.a.netConf(), confH = w.h.netConf();
  const counted = (verb: string, key: string, label: string, stdin: unknown) =>
    req.count(
      verb,
      measured,
      () => rec.run(key, label, i, () => w.a.run({ command: verb, containerId: id, stdin })),
    );
  await alternate(
    i,
    () =>
      rec.run(
        LATENCY.floor,
        "bare `deno run` (empty script, same flags)",
        i,
        () => execTimed(w.floor, [], cniEnv(w.a, "VERSION", ""), "{}"),
      ),
    () =>
      rec.run(
        LATENCY.version,
        "milo-ipam VERSION (start-up)",
        i,
        () => w.a.run({ command: "VERSION", stdin: { cniVersion: "1.1.0" } }),
      ),
  );
  let added: RunResult | undefined;
  await alternate(
    i,
    async () => added = await counted("ADD", LATENCY.add, "milo-ipam ADD, no agent", confA),
    () =>
      rec.run(
        LATENCY.tlsClient,
        "minimal TLS client (read CA, two POSTs)",
        i,
        () => w.tlsClient(id),
      ),
  );
  if (w.hostLocal) {
    await rec.run(LATENCY.hlAdd, "host-local ADD", i, () => w.hostLocalRun("ADD", id));
  }
  await counted("CHECK", LATENCY.check, "milo-ipam CHECK, no agent", {
    ...confA,
    prevResult: added?.json,
  });
  await counted("STATUS", LATENCY.status, "milo-ipam STATUS, no agent", confA);
  await rec.run(
    LATENCY.addHttp,
    "milo-ipam ADD over plain HTTP, no agent",
    i,
    () => w.h.run({ command: "ADD", containerId: id, stdin: confH }),
  );
  await alternate(
    i,
    () => counted("DEL", LATENCY.del, "milo-ipam DEL, no agent", confA),
    () =>
      w.hostLocal
        ? rec.run(LATENCY.hlDel, "host-local DEL", i, () => w.hostLocalRun("DEL", id))
        : Promise.resolve(),
  );
  const rd = await w.h.run({ command: "DEL", containerId: id, stdin: confH });
  if (!ok(rd)) throw new Error(`HTTP DEL failed: ${brief(rd)}`);
}

/** Runs the warm-up and measured rounds. */
export async function latencySection(w: World, plan: Plan): Promise<LatencyResults> {
  const rounds = plan.warmup + plan.samples;
  say(`latency without the agent: ${plan.warmup} warm-up + ${plan.samples} rounds`);
  const rec = new Recorder(plan.warmup);
  const req = new RequestCounter(w.tls);
  for (let i = 0; i < rounds; i++) {
    await round(w, rec, req, i, i >= plan.warmup);
    if ((i + 1) % 50 === 0) say(`  round ${i + 1}/${rounds}`);
  }
  return { series: rec.series(), requests: req.rows() };
}
