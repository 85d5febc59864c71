/** Shared pieces of the process tests: the seed, the two modes, and CNI result assertions. */
import assert from "node:assert/strict";
import { PLUGIN_SEED, PLUGIN_TOKEN } from "./seeds.ts";
import type { RunResult } from "./plugin.ts";

/** The token of tenant-a in the plugin seed. */
export const TOKEN = PLUGIN_TOKEN;

/** The milo-dev seed of the process tests. */
export { PLUGIN_SEED };

/** Each process test runs with the plugin working alone and with the node agent answering. */
export const MODES = ["direct", "agent"] as const;

/** Asserts a well-formed CNI error: one JSON object with code/msg/details, exit non-zero. */
export function assertCniError(r: RunResult, code: number, msg?: RegExp, token = TOKEN): void {
  assert.notEqual(r.code, 0, `expected failure, stdout=${r.stdout}`);
  assert.ok(r.json, `stdout must carry the error JSON, stdout=${r.stdout} stderr=${r.stderr}`);
  assert.equal(r.stdout.trim().split("\n").length, 1, "exactly one JSON document on stdout");
  assert.equal(r.json.code, code, `code: ${r.stdout}`);
  assert.equal(typeof r.json.msg, "string");
  assert.equal(typeof r.json.details, "string");
  assert.ok(!r.stdout.includes(token) && !r.stderr.includes(token), "token must never appear");
  assert.doesNotMatch(r.stdout, /\bat .*\.ts:\d+/, "no stack traces");
  if (msg) assert.match(`${r.json.msg} ${r.json.details}`, msg);
}

/** Asserts success (exit 0). */
export function assertOk(r: RunResult): void {
  assert.equal(r.code, 0, `expected success: stdout=${r.stdout} stderr=${r.stderr}`);
}

/** One IP of a result. */
export type ResultIp = { address: string; gateway?: string; version?: string };

/** The IPs of a result. */
export function ipsOf(r: RunResult): ResultIp[] {
  return (r.json?.ips ?? []) as ResultIp[];
}

/** The agent container's memory limit (deploy/base/agent.yaml). */
export const AGENT_LIMIT_MIB = 256;

/** A process's peak resident set so far (`VmHWM`, KiB), from /proc. */
export async function peakKiB(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN);
}

/** A loopback TCP port that was free a moment ago (for a server a test starts itself). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = l.addr.port;
  l.close();
  return port;
}

/** Polls `ok` every 50 ms until it answers true; fails after `ms` naming `what`. */
export async function until(ok: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await ok())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Bounds of {@link waitFor}: attempts and wall time. */
const WAIT = { attempts: 100, ms: 20_000, stepMs: 200 };

/** Polls `probe` until it answers a value (200 ms apart, at most 100 times and 20 s). */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + WAIT.ms;
  let last: unknown;
  for (let i = 0; i < WAIT.attempts && Date.now() < deadline; i++) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, WAIT.stepMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last}` : ""}`);
}
