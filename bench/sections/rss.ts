/** Peak RSS of single processes under GNU time: the plugin (no agent), the floor, host-local. */
import { join } from "node:path";
import { HOST_LOCAL } from "../machine.ts";
import { median, type RssRow } from "../model.ts";
import type { Plan } from "../plan.ts";
import { brief, cniEnv, execTimed, say } from "../proc.ts";
import type { World } from "../world.ts";

const GNU_TIME = "/usr/bin/time";

/** Samples of ADD, DEL, the floor and host-local; empty without Debian's `time`. */
export async function rssSection(w: World, plan: Plan): Promise<RssRow[]> {
  try {
    await Deno.stat(GNU_TIME);
  } catch {
    say(`peak RSS skipped: ${GNU_TIME} missing (apt-get install -y time)`);
    return [];
  }
  say(`peak RSS: ${plan.rssSamples} samples`);
  const peak = async (path: string, env: Record<string, string>, stdin: string) => {
    const f = join(w.tmp, "rss.txt");
    const r = await execTimed(GNU_TIME, ["-f", "%M", "-o", f, path], env, stdin);
    if (r.code !== 0) throw new Error(`${path} under ${GNU_TIME}: ${brief(r)}`);
    return Number((await Deno.readTextFile(f)).trim().split("\n").pop());
  };
  const kib = {
    add: [] as number[],
    del: [] as number[],
    floor: [] as number[],
    hl: [] as number[],
  };
  const conf = JSON.stringify(w.a.netConf());
  for (let i = 0; i < plan.rssSamples; i++) {
    const id = `rss-${i}`;
    kib.add.push(await peak(w.a.installed.path, cniEnv(w.a, "ADD", id), conf));
    kib.del.push(await peak(w.a.installed.path, cniEnv(w.a, "DEL", id), conf));
    kib.floor.push(await peak(w.floor, cniEnv(w.a, "VERSION", ""), "{}"));
    if (w.hostLocal) {
      kib.hl.push(await peak(HOST_LOCAL, cniEnv(w.a, "ADD", id), w.hostLocalConf(id)));
    }
  }
  const rows: [string, number[]][] = [
    ["milo-ipam ADD, no agent", kib.add],
    ["milo-ipam DEL, no agent", kib.del],
    ["bare `deno run` (same flags)", kib.floor],
    ["host-local ADD", kib.hl],
  ];
  return rows.filter(([, xs]) => xs.length).map(([label, xs]) => ({
    label,
    samples: xs.length,
    medianKiB: median(xs),
    maxKiB: Math.max(...xs),
  }));
}
