// Parsing is linear and bounded (issue 38): what reads a network config, prevResult, CNI_ARGS,
// a Milo answer or an agent frame refuses a text over its bound before any work on it, and its
// work is counted here in operations (characters scanned, elements read, bytes copied, parses
// run), never in wall time.
import assert from "node:assert/strict";
import { MAX_CNI_ARGS_CHARS, parseCniArgs, readCniEnv } from "../lib/cni.ts";
import { NETWORK_KEYS, NODE_ONLY_KEYS, parseNodeConfig } from "../lib/config.ts";
import {
  MAX_KEY_CHARS,
  MAX_RECORD_KEYS,
  nearestKey,
  SUGGEST_MAX_CHARS,
} from "../lib/config_fields.ts";
import { CniError } from "../lib/errors.ts";
import { FrameReader } from "../lib/frames.ts";
import { invoke } from "../lib/invoke.ts";
import { JSON_BOUND, type JsonBound, overBound } from "../lib/json_bound.ts";
import { readList } from "../lib/list_stream.ts";
import { MiloClient } from "../lib/milo.ts";
import { statusOf } from "../lib/milo_objects.ts";
import { MAX_PREV_IPS, parseNetConf, parsePrevResult } from "../lib/netconf.ts";
import { MAX_STDIN_BYTES } from "../lib/stdin.ts";
import { withTempDir } from "../testing/stub_invocation.ts";

const node = parseNodeConfig(
  { milo: { url: "https://milo.example.com", tokenFile: "/t" }, cluster: "c", node: "n" },
  "/etc/milo-ipam/node.json",
);
const ipam = { type: "milo-ipam", classes: { ipv4: "vpc-pods-ipv4" } };
const conf = (over: Record<string, unknown> = {}, top: Record<string, unknown> = {}) =>
  JSON.stringify({ cniVersion: "1.1.0", name: "vpc", ipam: { ...ipam, ...over }, ...top });

function refused(fn: () => unknown, code: number, pattern: RegExp): CniError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof CniError, String(err));
    assert.equal(err.code, code, err.message);
    assert.match(`${err.message} ${err.details}`, pattern);
    return err;
  }
  assert.fail("accepted");
}

/**
 * Runs `fn` with `owner[name]` wrapped: `count` gets each call's `this`,
 * arguments and result. The original is put back whatever happens.
 */
function counting<T>(
  // deno-lint-ignore no-explicit-any
  owner: any,
  name: string,
  // deno-lint-ignore no-explicit-any
  count: (self: any, args: any[], result: any) => void,
  fn: () => T,
): T {
  const original = owner[name];
  owner[name] = function (this: unknown, ...args: unknown[]) {
    const result = original.apply(this, args);
    count(this, args, result);
    return result;
  };
  try {
    return fn();
  } finally {
    owner[name] = original;
  }
}

/** How often JSON.parse runs while `fn` runs (and settles), and what it threw (or undefined). */
async function parses(fn: () => unknown): Promise<{ n: number; err: unknown }> {
  let n = 0, err: unknown;
  const original = JSON.parse;
  JSON.parse = (...a: Parameters<typeof JSON.parse>) => (n++, original(...a));
  try {
    await fn();
  } catch (e) {
    err = e;
  } finally {
    JSON.parse = original;
  }
  return { n, err };
}

/** What JSON_BOUND counts of a value, from the value itself. */
function measure(v: unknown, depth = 1): JsonBound {
  const escapes = (s: string) => (JSON.stringify(s).match(/\\(u[0-9a-f]{4}|.)/g) ?? []).length;
  if (typeof v === "string") return { entries: 0, depth: depth - 1, escapes: escapes(v) };
  if (v === null || typeof v !== "object") return { entries: 0, depth: depth - 1, escapes: 0 };
  const values = Array.isArray(v) ? v : Object.values(v);
  const m = {
    entries: 1 + Math.max(0, values.length - 1),
    depth,
    escapes: Array.isArray(v) ? 0 : Object.keys(v).reduce((n, k) => n + escapes(k), 0),
  };
  for (const x of values) {
    const r = measure(x, depth + 1);
    m.entries += r.entries;
    m.depth = Math.max(m.depth, r.depth);
    m.escapes += r.escapes;
  }
  return m;
}

/** A random JSON value from a seeded generator: strings that trip a scanner, nesting, keys. */
function randomValue(next: () => number, depth = 0): unknown {
  const tricky = ["a", "\\", '"', '\\"', "[", "{,", "é", "x\\\\", "\n\t", "\u0001", "}]"];
  const pick = <T>(xs: T[]) => xs[Math.floor(next() * xs.length)];
  const r = next();
  if (depth > 5 || r < 0.3) return next() < 0.6 ? pick(tricky).repeat(1 + pick([0, 1, 3])) : 42;
  const n = Math.floor(next() * 4);
  if (r < 0.65) return Array.from({ length: n }, () => randomValue(next, depth + 1));
  return Object.fromEntries(
    Array.from({ length: n }, (_, i) => [pick(tricky) + i, randomValue(next, depth + 1)]),
  );
}

Deno.test("overBound() counts what JSON.parse builds: a text at its bound passes, one over fails", () => {
  let seed = 38;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  for (let i = 0; i < 3_000; i++) {
    const v = randomValue(next);
    const text = JSON.stringify(v, null, i % 3 === 0 ? 1 : undefined);
    const m = measure(v);
    assert.equal(overBound(text, m), undefined, text);
    if (m.entries) assert.match(overBound(text, { ...m, entries: m.entries - 1 })!, /commas/);
    if (m.depth) assert.match(overBound(text, { ...m, depth: m.depth - 1 })!, /deeper/);
    if (m.escapes) assert.match(overBound(text, { ...m, escapes: m.escapes - 1 })!, /escapes/);
  }
});

Deno.test("overBound() reads each character at most twice, whatever the text", () => {
  const MiB = 1 << 20;
  const shapes: Record<string, string> = {
    "escaped quotes": '"' + '\\"'.repeat(MiB / 2 - 1) + '"',
    "a backslash run": '"' + "\\".repeat(MiB - 3) + 'x"',
    "escapes": '"' + "\\n".repeat(MiB / 2 - 1) + '"',
    // Many strings before the only backslash: each string must not look for it again.
    "strings, then a backslash": "[" + '"",'.repeat(MiB / 3 - 4) + '"\\n"]',
    "an unterminated string": '["' + "x".repeat(MiB - 2),
    "structure": "[".repeat(MiB / 2) + "]".repeat(MiB / 2),
    "commas": "[" + "0,".repeat(MiB / 2 - 1) + "0]",
  };
  for (const [what, text] of Object.entries(shapes)) {
    const bound = { entries: Infinity, depth: Infinity, escapes: Infinity };
    let scanned = 0;
    const { test } = RegExp.prototype;
    RegExp.prototype.test = function (this: RegExp, s: string) {
      const from = this.lastIndex, hit = test.call(this, s);
      scanned += (hit ? this.lastIndex : s.length) - from;
      return hit;
    };
    try {
      counting(String.prototype, "indexOf", (s: string, [, from = 0], at: number) => {
        scanned += (at < 0 ? s.length : at + 1) - from;
      }, () => overBound(text, bound));
    } finally {
      RegExp.prototype.test = test;
    }
    assert.ok(scanned <= 2 * text.length, `${what}: ${scanned} characters read of ${text.length}`);
  }
});

Deno.test("stdinJson() refuses a network config over JSON_BOUND (6) before parsing it", async () => {
  const ips = Array.from({ length: 40_000 }, (_, i) => ({ address: i % 2 ? "1.0.0.1" : "::1" }));
  const cases: [string, string, RegExp][] = [
    ["40,000 prevResult addresses", conf({}, { prevResult: { ips } }), /more than 8192 objects/],
    ["10,000 empty objects", conf({}, { junk: Array(10_000).fill({}) }), /more than 8192 objects/],
    ["65 nested lists", conf({}, { junk: JSON.parse("[".repeat(65) + "]".repeat(65)) }), /deeper/],
    ["9,000 escapes", conf({}, { junk: "\n".repeat(9_000) }), /more than 8192 escapes/],
  ];
  for (const [what, text, says] of cases) {
    assert.ok(text.length <= MAX_STDIN_BYTES, `${what} fits stdin`);
    const r = await parses(() => parseNetConf(text, node, "CHECK"));
    assert.ok(r.err instanceof CniError, `${what}: ${r.err}`);
    assert.equal(r.err.code, 6, `${what}: ${r.err.message}`);
    assert.match(r.err.message, says);
    assert.match(r.err.details, /docs\/limits\.md/);
    assert.equal(r.n, 0, `${what}: parsed ${r.n} times`);
  }
  const at = JSON_BOUND.entries;
  const fits = await parses(() =>
    parseNetConf(conf({}, { junk: Array(at - 8).fill(0) }), node, "ADD")
  );
  assert.deepEqual(fits, { n: 1, err: undefined }, "at the bound: parsed once");
});

Deno.test("refuseUnknownKeys() refuses a key over MAX_KEY_CHARS (7) naming the limit, quoting 40 characters", () => {
  const key = "k".repeat(MAX_STDIN_BYTES - 200);
  const e = refused(() => parseNetConf(conf({ [key]: 1 }), node, "ADD"), 7, /MAX_KEY_CHARS/);
  assert.match(e.message, new RegExp(`ipam\\.k{39}…: a key of ${key.length} characters`));
  assert.ok(e.message.length + e.details.length < 1_000, "the error quotes a head of the key");
  const over = key.slice(0, MAX_KEY_CHARS + 1), longest = key.slice(0, MAX_KEY_CHARS);
  refused(() => parseNetConf(conf({ [over]: 1 }), node, "ADD"), 7, /at most 253 \(MAX_KEY/);
  refused(() => parseNetConf(conf({ [longest]: 1 }), node, "ADD"), 7, /unknown key; no known key/);
});

Deno.test("refuseUnknownKeys() refuses a record over MAX_RECORD_KEYS (7) before checking an entry", () => {
  const role = { apiGroup: "g", kind: "Network", name: "x", nme: "typo" };
  const roles = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`r${i}`, role]));
  refused(() => parseNetConf(conf({ scope: roles(1_000) }), node, "ADD"), 7, /1000 entries.*16/);
  refused(
    () => parseNetConf(conf({ scope: roles(MAX_RECORD_KEYS) }), node, "ADD"),
    7,
    /scope\.r0\.nme: unknown key/,
  );
});

Deno.test("nearestKey() compares a key of at most SUGGEST_MAX_CHARS once with each known key, a longer one with none", () => {
  const known = [...NETWORK_KEYS, ...NODE_ONLY_KEYS];
  let reads = 0;
  const watched = new Proxy(known, {
    get: (t, p, r) => (typeof p === "string" && /^\d+$/.test(p) && reads++, Reflect.get(t, p, r)),
  });
  assert.equal(nearestKey("x".repeat(SUGGEST_MAX_CHARS + 1), watched), undefined);
  assert.equal(reads, 0, "a long key is compared with no known key");
  assert.equal(nearestKey("prefixLength" + "s".repeat(52), watched), "prefixLengths");
  assert.equal(reads, known.length, "each known key once");
  // The work of one suggestion, in steps of the edit distance, whatever the key.
  const longest = Math.max(...known.map((k) => k.length));
  assert.ok(SUGGEST_MAX_CHARS * longest * known.length <= 50_000);
});

Deno.test("parsePrevResult() refuses more than MAX_PREV_IPS addresses (7) before reading one, and reads each once", () => {
  const watched = (n: number) => {
    const c = { reads: 0 };
    const ips = new Proxy(Array.from({ length: n }, (_, i) => ({ address: `10.0.0.${i % 250}` })), {
      get: (
        t,
        p,
        r,
      ) => (typeof p === "string" && /^\d+$/.test(p) && c.reads++, Reflect.get(t, p, r)),
    });
    return { c, prev: { ips } };
  };
  const big = watched(40_000);
  refused(() => parsePrevResult(big.prev), 7, /40000 addresses; at most 64 \(MAX_PREV_IPS\)/);
  assert.equal(big.c.reads, 0);
  const fits = watched(MAX_PREV_IPS);
  assert.equal(parsePrevResult(fits.prev)?.get("ipv4")?.length, MAX_PREV_IPS);
  assert.equal(fits.c.reads, MAX_PREV_IPS);
});

Deno.test("parseCniArgs() refuses a CNI_ARGS over MAX_CNI_ARGS_CHARS (4) unread", () => {
  const args = "x".repeat(128 * 1024);
  refused(
    () => parseCniArgs(args),
    4,
    new RegExp(`131072 characters; at most ${MAX_CNI_ARGS_CHARS}`),
  );
  const env: Record<string, string> = {
    CNI_COMMAND: "ADD",
    CNI_CONTAINERID: "c1",
    CNI_IFNAME: "eth0",
    CNI_NETNS: "/var/run/netns/x",
    CNI_ARGS: args,
  };
  refused(() => readCniEnv((k) => env[k]), 4, /MAX_CNI_ARGS_CHARS/);
  const bad = refused(() => parseCniArgs("x".repeat(1_000)), 4, /malformed/);
  assert.ok(bad.details.length < 120, "a malformed entry is quoted in part");
});

Deno.test("MiloClient refuses an answer over JSON_BOUND (105) before parsing it, without retrying", async () => {
  const labels = Object.fromEntries(Array.from({ length: 9_000 }, (_, i) => [`l${i}`, "v"]));
  const claim = { metadata: { name: "c1", uid: "u", labels }, status: { phase: "Bound" } };
  let sent = 0;
  const client = new MiloClient({
    baseUrl: "https://milo.test",
    namespace: "default",
    token: "t0ken-value",
    requestMs: 1000,
    deadline: Date.now() + 60_000,
    fetch: (() => {
      sent++;
      return Promise.resolve(new Response(JSON.stringify(claim), { status: 200 }));
    }) as typeof fetch,
  });
  const { n, err } = await parses(() => client.getClaim("c1"));
  assert.ok(err instanceof CniError, String(err));
  assert.equal(err.code, 105);
  assert.match(err.message, /GET .*c1: Milo's answer has more than 8192 objects, lists and commas/);
  assert.equal(n, 0, "never parsed");
  assert.equal(sent, 1, "not asked again");
});

Deno.test("statusOf() checks no Status of more causes than Milo sends (16)", () => {
  const status = (n: number) => ({
    kind: "Status",
    message: "m",
    details: { causes: Array.from({ length: n }, (_, i) => ({ field: `f${i}`, message: "x" })) },
  });
  assert.equal(statusOf(status(16))?.details?.causes?.length, 16);
  assert.equal(statusOf(status(17)), undefined, "more causes than Milo sends: not a Status");
});

Deno.test("readList() holds each item to its bound before parsing it", async () => {
  const labels = Object.fromEntries(Array.from({ length: 9_000 }, (_, i) => [`l${i}`, "v"]));
  const items: unknown[] = [];
  const body = new Response(`{"items":[{"a":1},${JSON.stringify({ labels })},{"b":2}]}`).body!;
  const r = await parses(() =>
    readList(body, {
      what: "Milo's IPClaimList",
      maxItemBytes: 1 << 20,
      bound: JSON_BOUND,
      item: (v) => void items.push(v),
    })
  );
  assert.ok(r.err instanceof CniError, String(r.err));
  assert.equal(r.err.code, 105);
  assert.match(r.err.message, /IPClaimList has an item with more than 8192 objects/);
  assert.deepEqual(items, [{ a: 1 }], "the items before it were read; it was not");
  assert.equal(r.n, 2, "parsed: the field name items and the first item");
});

/** A connection that hands out `bytes` at most `step` at a time. */
function trickle(bytes: Uint8Array, step: number): Deno.Conn {
  let at = 0;
  return {
    read(p: Uint8Array): Promise<number | null> {
      if (at >= bytes.length) return Promise.resolve(null);
      const n = Math.min(step, p.length, bytes.length - at);
      for (let i = 0; i < n; i++) p[i] = bytes[at + i];
      at += n;
      return Promise.resolve(n);
    },
  } as unknown as Deno.Conn;
}

Deno.test("FrameReader copies each byte of a frame once, whatever the reads", async () => {
  const size = 1024 * 1024;
  const bytes = new Uint8Array(8 + size + 10);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, 4);
  bytes.set([1, 2, 3, 4], 4);
  view.setUint32(8, size);
  bytes.fill(7, 12, 12 + size);
  view.setUint32(12 + size, 2);
  const typed = Object.getPrototypeOf(Uint8Array.prototype);
  for (const step of [4 * 1024, 100_000]) {
    const reader = new FrameReader(trickle(bytes.slice(0, 12 + size + 6), step));
    let copied = 0;
    const { set } = typed;
    typed.set = function (this: Uint8Array, src: ArrayLike<number>, at?: number) {
      copied += src.length;
      return set.call(this, src, at);
    };
    try {
      assert.deepEqual(await reader.next(), new Uint8Array([1, 2, 3, 4]));
      const frame = await reader.next();
      assert.equal(frame?.length, size);
      assert.ok(frame?.every((b) => b === 7));
      assert.equal((await reader.next())?.length, 2);
    } finally {
      typed.set = set;
    }
    assert.ok(copied <= size + 128 * 1024, `step ${step}: ${copied} bytes copied for ${size}`);
  }
});

Deno.test("invoke() tells onBound the node's deadline before it parses the network config", async () => {
  await withTempDir(async (dir) => {
    const n = parseNodeConfig(
      {
        milo: { url: "https://milo.example.com", tokenFile: `${dir}/t` },
        cluster: "c",
        node: "n",
        stateDir: dir,
        timeouts: { requestMs: 1000, totalMs: 4000 },
      },
      `${dir}/node.json`,
    );
    const env: Record<string, string> = {
      CNI_COMMAND: "ADD",
      CNI_CONTAINERID: "c1",
      CNI_IFNAME: "eth0",
      CNI_NETNS: "/var/run/netns/x",
    };
    const bounds: number[] = [];
    const stdin = new TextEncoder().encode(conf({ ["k".repeat(MAX_STDIN_BYTES - 200)]: 1 }));
    const reply = await invoke({ env: (k) => env[k], stdin, started: 1_000 }, {
      nodeConfig: () => Promise.resolve(n),
      openMilo: () => Promise.reject(new Error("no Milo")),
      onBound: (deadline) => bounds.push(deadline),
    });
    assert.equal(reply.stdout?.code, 7, JSON.stringify(reply.stdout));
    assert.deepEqual(bounds, [5_000], "the node's totalMs from the start");
  });
});
