/**
 * Every command and task on its command line, as an operator types it:
 * `--help` prints the usage on stdout and exits 0; an unknown flag prints
 * what is wrong and the usage on stderr and exits 2, before anything runs.
 * The subcommands' own flags and their help agree.
 */
import assert from "node:assert/strict";
import { RECONCILE_USAGE } from "../lib/usage.ts";
import { USAGE as SWEEP_LINE } from "../lib/sweep_cli.ts";
import { RELEASE } from "../lib/version.ts";
import { STATE_FORMAT } from "../lib/state_format.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Runs `deno ARGS` from the repository root without the CNI environment. */
async function deno(args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

const run = (file: string) => (args: string[]) => deno(["run", "--allow-all", file, ...args]);

/** Each command line, and what its usage starts with. */
const COMMANDS: [string, (args: string[]) => ReturnType<typeof deno>, RegExp][] = [
  ["milo-ipam", run("main.ts"), /^usage: milo-ipam COMMAND/],
  ["milo-ipam agent", (a) => run("main.ts")(["agent", ...a]), /^usage: milo-ipam agent/],
  [
    "milo-ipam reconcile",
    (a) => run("main.ts")(["reconcile", ...a]),
    /^usage: milo-ipam reconcile/,
  ],
  ["milo-ipam sweep", (a) => run("main.ts")(["sweep", ...a]), /^usage: milo-ipam sweep/],
  ["milo-ipam show", (a) => run("main.ts")(["show", ...a]), /^usage: milo-ipam show/],
  ["milo-ipam release", (a) => run("main.ts")(["release", ...a]), /^usage: milo-ipam release/],
  [
    "milo-ipam decommission",
    (a) => run("main.ts")(["decommission", ...a]),
    /^usage: milo-ipam decommission/,
  ],
  ["milo-ipam version", (a) => run("main.ts")(["version", ...a]), /^usage: milo-ipam version/],
  ["deno task install", run("scripts/install.ts"), /^usage: deno task install/],
  ["deno task demo", run("scripts/demo.ts"), /^usage: deno task demo/],
  ["deno task bench", run("bench/bench.ts"), /^usage: deno task bench/],
  ["node-install", run("scripts/node_install.ts"), /^usage: node-install install/],
  ["image", run("scripts/image.ts"), /^usage: deno run --allow-all scripts\/image\.ts/],
  ["deno task milo-dev", (a) => deno(["task", "--quiet", "milo-dev", ...a]), /usage: milo-dev/],
];

for (const [name, cmd, usage] of COMMANDS) {
  Deno.test(`cli: ${name} --help prints its usage (0); an unknown flag, the usage on stderr (2)`, async () => {
    const help = await cmd(["--help"]);
    assert.equal(help.code, 0, `${name} --help: ${help.stderr}`);
    // milo-dev (milo-dev/main.ts) prints its help on stderr.
    const text = name === "deno task milo-dev" ? help.stderr : help.stdout;
    assert.match(text, usage, `${name} --help: ${text}`);
    assert.doesNotMatch(
      help.stdout + help.stderr,
      /TypeError|at file:|"code":/,
      "no stack, no CNI error",
    );
    const wrong = await cmd(["--no-such-flag"]);
    assert.equal(wrong.code, 2, `${name} --no-such-flag: ${wrong.stdout}${wrong.stderr}`);
    assert.match(wrong.stderr, /no-such-flag/);
    assert.match(wrong.stderr, /usage:/);
    assert.equal(name === "deno task milo-dev" ? "" : wrong.stdout, "", "nothing on stdout");
  });
}

Deno.test("cli: milo-ipam help and -h; a stray word is an unknown command", async () => {
  for (const a of [["help"], ["-h"]]) {
    const r = await run("main.ts")(a);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^usage: milo-ipam COMMAND/);
  }
  const r = await run("main.ts")(["shwo"]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown command "shwo"/);
});

Deno.test("cli: a wrong value is a usage error too; the sweep's makes no report", async () => {
  const sweep = await run("main.ts")(["sweep", "--grace", "soon", "--output", "json"]);
  assert.equal(sweep.code, 2);
  assert.equal(sweep.stdout, "", "no SweepReport for a wrong command line");
  assert.match(sweep.stderr, /--grace soon/);
  const reconcile = await run("main.ts")(["reconcile", "--grace"]);
  assert.equal(reconcile.code, 2);
  assert.match(reconcile.stderr, /usage: milo-ipam reconcile/);
  const show = await run("main.ts")(["show", "--pod", "web-0"]);
  assert.equal(show.code, 2);
  assert.match(show.stderr, /--pod web-0: NAMESPACE\/NAME/);
  const version = await run("main.ts")(["version", "--output", "yaml"]);
  assert.equal(version.code, 2);
});

Deno.test("cli: milo-ipam version prints the release, text and JSON", async () => {
  const text = await run("main.ts")(["version"]);
  assert.equal(text.code, 0);
  assert.match(
    text.stdout,
    new RegExp(`^milo-ipam ${RELEASE} \\(state format ${STATE_FORMAT}; CNI `),
  );
  const json = JSON.parse((await run("main.ts")(["version", "--output", "json"])).stdout);
  assert.equal(json.release, RELEASE);
  assert.equal(json.stateFormat, STATE_FORMAT);
  assert.match(RELEASE, /^\d+\.\d+\.\d+$/);
  const changelog = await Deno.readTextFile(`${ROOT}docs/upgrade.md`);
  assert.ok(changelog.includes(`### ${RELEASE}`), "docs/upgrade.md lists this release");
});

Deno.test("cli: the help of reconcile and sweep names exactly the flags they take", async () => {
  const flags = (text: string) => [...new Set(text.match(/--[a-z][a-z-]+/g) ?? [])].sort();
  // The reconcile's own usage line, as it answers a wrong flag.
  const wrong = await run("main.ts")(["reconcile", "--no-such-flag"]);
  const own = wrong.stderr.split("\n").find((l) => l.includes("Unknown option")) ?? "";
  assert.ok(own, wrong.stderr);
  const reconcileSrc = await Deno.readTextFile(`${ROOT}lib/reconcile_cli.ts`);
  const line = reconcileSrc.match(/"usage: milo-ipam reconcile[^"]*"/)?.[0] ?? "";
  assert.deepEqual(flags(RECONCILE_USAGE), flags(line), "reconcile --help and its flags agree");
  const help = (await run("main.ts")(["sweep", "--help"])).stdout;
  assert.deepEqual(flags(help.split("\n\n")[0]), flags(SWEEP_LINE));
});

Deno.test("cli: deno task milo-dev starts as the README shows it", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "milo-dev", "--listen", "127.0.0.1:0", "--db", ":memory:"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "null",
  }).spawn();
  try {
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const { value } = await reader.read();
    assert.match(value ?? "", /"ready":true/);
    reader.releaseLock();
  } finally {
    child.kill("SIGTERM");
    await child.status;
  }
});
