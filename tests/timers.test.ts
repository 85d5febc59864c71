import assert from "node:assert/strict";
import { after, timer, within } from "../lib/timers.ts";

const TIMERS = new URL("../lib/timers.ts", import.meta.url).href;

/** Runs a script importing lib/timers.ts in its own Deno process; answers its exit and stdout. */
async function script(body: string): Promise<{ code: number; stdout: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--no-config", `import { after, timer } from "${TIMERS}";\n${body}`],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(20_000),
  }).output();
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout).trim() };
}

Deno.test("timers: within answers the promise, or onTimeout when it is slower", async () => {
  assert.equal(await within(Promise.resolve("value"), 5_000, () => "late"), "value");
  const never = new Promise<string>(() => {});
  assert.equal(await within(never, 1, () => "late"), "late");
  const order: string[] = [];
  await Promise.all([after(30).then(() => order.push("30")), after(1).then(() => order.push("1"))]);
  assert.deepEqual(order, ["1", "30"]);
  const t = timer(1);
  t.cancel();
  assert.equal(await within(t.done.then(() => "fired"), 50, () => "cancelled"), "cancelled");
});

Deno.test("timers: a pending timer keeps a process alive; a cancelled one neither fires nor does", async () => {
  const fired = await script(`await after(50); console.log("fired");`);
  assert.deepEqual(fired, { code: 0, stdout: "fired" });
  // Held open, this process would outlive the 20 s bound of script().
  const cancelled = await script(
    `const t = timer(60_000); t.done.then(() => console.log("fired")); t.cancel(); console.log("end");`,
  );
  assert.deepEqual(cancelled, { code: 0, stdout: "end" });
});
