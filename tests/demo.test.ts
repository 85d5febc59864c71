/**
 * `deno task demo` on a loaded machine: one core kept busy by a spinning
 * process while the demo runs its story (12 ADDs at once through launchers,
 * CHECKs, DELs, an outage) with the node's own timeouts, retrying calls
 * answered 11 as a kubelet does. It succeeds, ends cleanly (no stack trace,
 * milo-dev stopped, no page URL offered once it is gone) and uses identifiers
 * galactic accepts.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url).pathname;

Deno.test("demo: succeeds and ends cleanly with a core kept busy", async () => {
  const spinner = new Deno.Command(Deno.execPath(), {
    args: ["eval", "for (;;) {}"],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-all", "scripts/demo.ts"],
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    const err = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, `${text}\n${err}`);
    assert.match(text, /distinct IPv4 addresses: 12 of 12/);
    assert.match(text, /12\/12 CHECK ok/);
    assert.match(text, /CHECK web-a1-0: .*"code":104/);
    assert.match(text, /ADD during outage .*error 11/);
    assert.match(text, /ADD retried after Milo is back: ok 10\.40\.0\.\d+\/32/);
    assert.match(text, /\ndemo done; milo-dev stopped/);
    assert.doesNotMatch(text + err, /\bat (file|ext):|Uncaught|Stack backtrace/, "no stack trace");
    assert.doesNotMatch(text, /page: http/, "no URL of a server that is gone");
    // galactic's identifiers: vpc and vpcattachment base62 (internal/cnimaster/config.go).
    const src = await Deno.readTextFile(`${ROOT}scripts/demo.ts`);
    assert.match(src, /vpc: "7b3e"/);
    for (const [, a] of src.matchAll(/"cluster-[ab]": "(\w+)"/g)) {
      assert.match(a, /^[0-9a-zA-Z]{1,3}$/);
    }
  } finally {
    spinner.kill("SIGKILL");
    await spinner.status;
  }
});
