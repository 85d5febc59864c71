/**
 * A kubelet-like driver on top of the {@link Runtime}: a failed ADD is torn
 * down with DEL (as containerd does) and retried with a new sandbox ID, a
 * failed DEL is retried, CHECK is retried on code 11; all bounded, all counted.
 */
import { sleep } from "./pool.ts";
import type { CniCall, Pod, Runtime } from "./runtime.ts";

/** The CNI code of a transient failure. */
export const TRANSIENT = 11;
const MAX_ADD_ATTEMPTS = 8;
const MAX_DEL_ATTEMPTS = 12;
const MAX_CHECK_ATTEMPTS = 8;

/** What the driver did. */
export interface Driver {
  addCalls: number;
  addFailures: Record<string, number>;
  killed: number;
  checkCalls: number;
  checkRetries: number;
  delCalls: number;
  delRetries: number;
  gaveUp: string[];
  lastFailure?: string;
}

/** Zeroed counters. */
export function newDriver(): Driver {
  return {
    addCalls: 0,
    addFailures: {},
    killed: 0,
    checkCalls: 0,
    checkRetries: 0,
    delCalls: 0,
    delRetries: 0,
    gaveUp: [],
  };
}

/** A failed call in one line, for assertion messages. */
export function describe(c: CniCall): string {
  return `code=${c.code} msg=${c.msg} stdout=${c.stdout.slice(0, 300)} stderr=${
    c.stderr.slice(0, 300)
  }`;
}

/** DEL until it succeeds (bounded), as a runtime retries a failed teardown. */
export async function delPod(rt: Runtime, d: Driver, pod: Pod): Promise<boolean> {
  for (let i = 1; i <= MAX_DEL_ATTEMPTS; i++) {
    d.delCalls++;
    const r = await rt.cni("DEL", pod);
    if (r.ok) return true;
    d.delRetries++;
    await sleep(Math.min(250 * i, 2_000));
  }
  d.gaveUp.push(`DEL ${pod.containerId}`);
  return false;
}

/**
 * Sandbox start, kubelet/containerd style: ADD; on failure tear the attempt
 * down with DEL and retry with a new sandbox (container) ID, bounded.
 * `kill(attempt)` may return a delay after which the plugin is SIGKILLed.
 */
export async function startPod(
  rt: Runtime,
  d: Driver,
  pod: Pod,
  kill: (attempt: number) => number | undefined = () => undefined,
): Promise<boolean> {
  const base = pod.containerId;
  for (let attempt = 1; attempt <= MAX_ADD_ATTEMPTS; attempt++) {
    if (attempt > 1) pod.containerId = `${base}r${attempt}`;
    const killAfterMs = kill(attempt);
    if (killAfterMs !== undefined) d.killed++;
    d.addCalls++;
    const r = await rt.cni("ADD", pod, { killAfterMs });
    if (r.ok) return true;
    const why = killAfterMs !== undefined ? "killed" : `code ${r.code}`;
    d.addFailures[why] = (d.addFailures[why] ?? 0) + 1;
    d.lastFailure = describe(r);
    if (!(await delPod(rt, d, pod))) return false;
    await sleep(Math.min(200 * attempt, 1_500));
  }
  d.gaveUp.push(`ADD ${base}: ${MAX_ADD_ATTEMPTS} attempts, last: ${d.lastFailure}`);
  return false;
}

/** The delegate's CHECK, retried on 11 and on a process that printed no CNI error. */
export async function checkPod(rt: Runtime, d: Driver, pod: Pod): Promise<CniCall> {
  let r: CniCall | undefined;
  for (let i = 1; i <= MAX_CHECK_ATTEMPTS; i++) {
    d.checkCalls++;
    r = await rt.ipamCheck(pod);
    if (r.ok || (r.code !== TRANSIENT && r.code !== 0)) return r;
    d.checkRetries++;
    await sleep(Math.min(250 * i, 2_000));
  }
  return r!;
}
