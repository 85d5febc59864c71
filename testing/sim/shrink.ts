/**
 * The shortest script that still shows a violation: the steps after it cut,
 * then chunks of steps dropped, halves first, down to single steps, each
 * candidate replayed from the start (the same seed: every activity's chance
 * is drawn from streams named after it, so dropping a step leaves the
 * others' draws alone), keeping it while a violation of the same kind
 * remains. Bounded by a number of replays.
 */
import type { Step } from "./script.ts";
import { type SimOptions, type SimResult, simulate } from "./world.ts";

/** Shrinks the run `found` (of options `o`); answers the shortest run found with the same kind. */
export async function shrink(
  o: SimOptions,
  found: SimResult,
  maxRuns = 40,
  onTry?: (steps: number, kept: boolean) => void,
): Promise<SimResult> {
  const kind = found.violation!.kind;
  let best = found;
  let runs = 0;
  const tryScript = async (script: Step[]): Promise<boolean> => {
    runs++;
    const r = await simulate({ ...o, script, onLine: undefined });
    const kept = r.violation?.kind === kind;
    onTry?.(script.length, kept);
    if (kept) best = r;
    return kept;
  };
  let script = found.script.slice(0, found.violation!.step + 1);
  if (script.length < found.script.length && !await tryScript(script)) script = found.script;
  let chunk = Math.max(1, Math.floor(script.length / 2));
  while (runs < maxRuns && script.length > 0) {
    let dropped = false;
    for (let i = 0; i < script.length && runs < maxRuns; i += chunk) {
      const candidate = [...script.slice(0, i), ...script.slice(i + chunk)];
      if (await tryScript(candidate)) {
        script = best.script.slice(0, best.violation!.step + 1);
        dropped = true;
        i -= chunk;
      }
    }
    if (!dropped) {
      if (chunk === 1) break;
      chunk = Math.max(1, Math.floor(chunk / 2));
    }
  }
  return best;
}
