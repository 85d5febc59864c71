/**
 * What one call's parsing costs the process that does it (the node agent, for
 * every tenant): each of the shapes that cost most within the bounds of
 * docs/limits.md, and a few over them, parsed the way a call parses them, in
 * this process, many times. Prints a markdown table of the time each took.
 *
 *   deno run --allow-read --allow-sys --v8-flags=--max-semi-space-size=1,--heap-growing-percent=50 \
 *     bench/parse.ts [RUNS]
 *
 * (the install's heap flags, as the agent runs). A call's work is the stdin
 * path of lib/invoke.ts (decode, bound, parse, the network config against the
 * node's) or a Milo answer as lib/milo.ts reads one (bound, parse, schema).
 */
import { parseNodeConfig } from "../lib/config.ts";
import { answerJson, JSON_BOUND } from "../lib/json_bound.ts";
import { IPClaimSchema, parse, statusOf } from "../lib/milo_objects.ts";
import { netConfOf, stdinJson } from "../lib/netconf.ts";
import { decodeStdin, MAX_STDIN_BYTES } from "../lib/stdin.ts";

const RUNS = Number(Deno.args[0] ?? 50);
const node = parseNodeConfig(
  { milo: { url: "https://milo.example", tokenFile: "/t" }, cluster: "c", node: "n" },
  "/etc/milo-ipam/node.json",
);
const base = {
  cniVersion: "1.1.0",
  name: "vpc",
  ipam: { type: "milo-ipam", classes: { ipv4: "a" } },
};
const n = JSON_BOUND.entries;

/** `value` as JSON, padded with spaces to `bytes` (stdin's limit by default). */
function padded(value: Record<string, unknown>, bytes = MAX_STDIN_BYTES): string {
  const text = JSON.stringify(value);
  return text.slice(0, -1) + " ".repeat(Math.max(0, bytes - text.length)) + "}";
}

/** A JSON object of `keys` keys named `${prefix}N`, each `value`. */
const keys = (count: number, prefix: string, value: unknown) =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`${prefix}${i}`, value]));

const stdin: [string, string, "ADD" | "CHECK" | "GC"][] = [
  [
    "an unknown key of 1 MiB",
    JSON.stringify({ ...base, ipam: { ...base.ipam, ["k".repeat(MAX_STDIN_BYTES - 150)]: 1 } }),
    "ADD",
  ],
  [
    "an unknown key of 64 characters (a suggestion)",
    JSON.stringify({ ...base, ipam: { ...base.ipam, ["gateway".repeat(9).slice(0, 64)]: 1 } }),
    "ADD",
  ],
  [`one object of ${n - 8} keys`, JSON.stringify({ ...base, ...keys(n - 8, "x", 0) }), "ADD"],
  [
    `a node key of ${n - 8} keys`,
    JSON.stringify({ ...base, ipam: { ...base.ipam, milo: keys(n - 8, "x", 0) } }),
    "ADD",
  ],
  [
    `GC's list of ${Math.floor((n - 8) / 3)} attachments`,
    JSON.stringify({
      ...base,
      "cni.dev/valid-attachments": Array.from(
        { length: Math.floor((n - 8) / 3) },
        (_, i) => ({ containerID: `${i}`.padStart(64, "c"), ifname: "eth0" }),
      ),
    }),
    "GC",
  ],
  [
    `${n / 2 - 8} empty lists, padded to 1 MiB`,
    padded({ ...base, junk: Array(n / 2 - 8).fill([]) }),
    "ADD",
  ],
  [
    "64 levels of lists, padded to 1 MiB",
    padded({ ...base, junk: JSON.parse("[".repeat(63) + "]".repeat(63)) }),
    "ADD",
  ],
  [
    `${n} escapes in a string of 1 MiB`,
    JSON.stringify({ ...base, junk: "\n".repeat(n) + "x".repeat(MAX_STDIN_BYTES - 2 * n - 150) }),
    "ADD",
  ],
  [
    "a number of a million digits",
    `{"cniVersion":"1.1.0","name":"vpc","ipam":{"type":"milo-ipam","classes":{"ipv4":"a"}},"junk":${
      "1".repeat(MAX_STDIN_BYTES - 100)
    }}`,
    "ADD",
  ],
  [
    "16 scope roles of 60 KiB each",
    JSON.stringify({
      ...base,
      ipam: {
        ...base.ipam,
        scope: keys(16, "r", { apiGroup: "g".repeat(60_000), kind: "k", name: "n" }),
      },
    }),
    "ADD",
  ],
  [
    "over: a prevResult of 40,000 addresses",
    JSON.stringify({ ...base, prevResult: { ips: Array(40_000).fill({ address: "1.0.0.1" }) } }),
    "CHECK",
  ],
  ["over: 500,000 commas", JSON.stringify({ ...base, junk: Array(500_000).fill(0) }), "ADD"],
];

const claim = (labels: number) =>
  JSON.stringify({ metadata: { name: "c", labels: keys(labels, "l", "v") } });
const milo: [string, string, (v: unknown) => unknown][] = [
  [`a claim of ${n - 8} labels`, claim(n - 8), (v) => parse(IPClaimSchema, v, "IPClaim")],
  [
    "a Status of 16 causes of 60 KiB",
    JSON.stringify({
      kind: "Status",
      message: "m",
      details: { causes: Array(16).fill({ field: "f", message: "m".repeat(60_000) }) },
    }),
    statusOf,
  ],
  ["over: a claim of 9,000 labels", claim(9_000), (v) => parse(IPClaimSchema, v, "IPClaim")],
];

/** p50, p99 and max of `fn`'s wall time over RUNS runs, and how it ended the last time. */
function time(fn: () => unknown): { p50: number; p99: number; max: number; ended: string } {
  const ms: number[] = [];
  let ended = "";
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now();
    try {
      fn();
      ended = "accepted";
    } catch (err) {
      ended = err instanceof Error ? err.message.slice(0, 60) : String(err);
    }
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  return {
    p50: ms[Math.floor(RUNS / 2)],
    p99: ms[Math.floor(RUNS * 0.99)],
    max: ms[RUNS - 1],
    ended,
  };
}

const rows: string[][] = [];
for (const [what, text, verb] of stdin) {
  const bytes = new TextEncoder().encode(text);
  const t = time(() => netConfOf(stdinJson(decodeStdin(bytes)), node, verb));
  rows.push([
    `stdin: ${what}`,
    `${bytes.length}`,
    t.p50.toFixed(2),
    t.p99.toFixed(2),
    t.max.toFixed(2),
    t.ended,
  ]);
}
for (const [what, text, read] of milo) {
  const t = time(() => read(answerJson(text, "GET", "Milo")));
  rows.push([
    `Milo: ${what}`,
    `${text.length}`,
    t.p50.toFixed(2),
    t.p99.toFixed(2),
    t.max.toFixed(2),
    t.ended,
  ]);
}
console.log(
  `${RUNS} runs each; load average ${Deno.loadavg().map((l) => l.toFixed(2)).join(" ")}\n`,
);
console.log("| input | bytes | p50 ms | p99 ms | max ms | outcome |");
console.log("| --- | ---: | ---: | ---: | ---: | --- |");
for (const r of rows) console.log(`| ${r.join(" | ")} |`);
