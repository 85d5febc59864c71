/** Where one ADD spends its time: `bench/phases.ts` in fresh processes, over TLS and HTTP. */
import { join } from "node:path";
import type { TestPlugin } from "../../testing/plugin.ts";
import type { BenchResults } from "../model.ts";
import type { PhaseSample } from "../phases.ts";
import type { Plan } from "../plan.ts";
import { brief, cniEnv, denoEnv, execTimed, say } from "../proc.ts";
import type { World } from "../world.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

async function sample(w: World, p: TestPlugin, id: string): Promise<PhaseSample> {
  const r = await execTimed(
    Deno.execPath(),
    [
      "run",
      "--allow-all",
      "--config",
      join(ROOT, "deno.json"),
      join(ROOT, "bench/phases.ts"),
      w.bundleDir,
    ],
    { ...cniEnv(p, "ADD", id), ...denoEnv() },
    JSON.stringify(p.netConf()),
  );
  if (r.code !== 0) throw new Error(`phases.ts failed: ${brief(r)}`);
  return JSON.parse(r.stdout);
}

/** One unmeasured pair (fills the module cache), then the TLS/HTTP pairs. */
export async function anatomySection(w: World, plan: Plan): Promise<BenchResults["phases"]> {
  say(`ADD anatomy: ${plan.phaseSamples} fresh processes per transport`);
  const out: BenchResults["phases"] = { tls: [], http: [] };
  for (let i = 0; i <= plan.phaseSamples; i++) {
    const t = await sample(w, w.a, `ph-tls-${i}`);
    const u = await sample(w, w.h, `ph-http-${i}`);
    if (i === 0) continue;
    out.tls.push(t);
    out.http.push(u);
  }
  return out;
}
