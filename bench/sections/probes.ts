/** One-step probes: single first-time steps of the plugin, each in a fresh `bench/probe.ts`. */
import { join } from "node:path";
import { median, type ProbeRow } from "../model.ts";
import type { Plan } from "../plan.ts";
import { brief, denoEnv, execTimed, say } from "../proc.ts";
import type { World } from "../world.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

const PROBES: [string, string][] = [
  ["stdin-stream", "read stdin through `Deno.stdin.readable`"],
  ["stdin-read", "read stdin with `Deno.stdin.readSync()` into a buffer (what lib/stdin.ts does)"],
  ["fetch-http", "first fetch, two in parallel, plain HTTP"],
  ["fetch-tls-one", "first fetch, one, TLS with caFile client"],
  ["fetch-tls-pair", "first fetch, two in parallel, TLS with caFile client"],
  ["connect-tls", "`Deno.connectTls` + handshake only (no fetch)"],
];

/** Every probe per round, order alternating; the first round is not kept. */
export async function probesSection(w: World, plan: Plan): Promise<ProbeRow[]> {
  say(`probes: ${plan.probeRounds} rounds`);
  const data = new Map<string, { wall: number[]; cpu: number[] }>();
  const stdin = JSON.stringify(w.a.netConf());
  for (let i = 0; i < plan.probeRounds + 1; i++) {
    for (const [mode] of i % 2 ? [...PROBES].reverse() : PROBES) {
      const url = `${mode === "fetch-http" ? w.http.url : w.tls.url}/healthz`;
      const args = ["run", "--no-config", "--allow-all", join(ROOT, "bench/probe.ts"), mode, url];
      const r = await execTimed(Deno.execPath(), [...args, w.tls.caFile ?? ""], denoEnv(), stdin);
      if (r.code !== 0) throw new Error(`probe ${mode}: ${brief(r)}`);
      if (i === 0) continue;
      const v: { wallMs: number; cpuMs: number } = JSON.parse(r.stdout);
      const d = data.get(mode) ?? { wall: [], cpu: [] };
      d.wall.push(v.wallMs);
      d.cpu.push(v.cpuMs);
      data.set(mode, d);
    }
  }
  return PROBES.map(([mode, label]) => ({
    mode,
    label,
    n: data.get(mode)?.wall.length ?? 0,
    wallMs: median(data.get(mode)?.wall ?? []),
    cpuMs: median(data.get(mode)?.cpu ?? []),
  }));
}
