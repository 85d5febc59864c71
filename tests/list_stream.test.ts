// A list answer read as a stream (lib/list_stream.ts): every item and the other fields as
// JSON.parse reads them, whatever the chunks; malformed answers refused; an item over its cap
// refused without reading further; the whole text never held.
import assert from "node:assert/strict";
import { CniError } from "../lib/errors.ts";
import { keptSize } from "../lib/list_bound.ts";
import { readList } from "../lib/list_stream.ts";

const encode = (text: string) => new TextEncoder().encode(text);

/** `bytes` in chunks of `size()` bytes each; `pulled` counts the chunks handed out. */
function chunked(bytes: Uint8Array, size: () => number) {
  let at = 0;
  const s = {
    pulled: 0,
    stream: new ReadableStream<Uint8Array>({
      pull(c) {
        if (at >= bytes.length) return c.close();
        const n = size();
        c.enqueue(bytes.slice(at, at + n));
        at += n;
        s.pulled++;
      },
    }),
  };
  return s;
}

async function read(text: string, size = () => 7, maxItemBytes = 1 << 20) {
  const items: unknown[] = [];
  const head = await readList(chunked(encode(text), size).stream, {
    what: "the list",
    maxItemBytes,
    item: (v) => void items.push(v),
  });
  return { head, items };
}

Deno.test("items and fields as JSON.parse reads them, in any chunking", async () => {
  // Strings that end a chunk inside an escape, quotes, backslash runs, structure in strings.
  const tricky = ['a"b', "c\\", '\\\\"', "\\", "é€😀", '"', "", "\u0000x", "}]{[", ",:"];
  for (let trial = 0; trial < 120; trial++) {
    const items = Array.from({ length: 12 }, (_, i) => ({
      i,
      s: tricky[(i + trial) % tricky.length].repeat(1 + (i % 3)),
      n: [1, 2.5e3, -0, true, null, { x: '\\"' }],
      [tricky[i % tricky.length]]: "k",
    }));
    const doc = { kind: "L", metadata: { continue: `t${trial}"\\` }, items, after: [{ y: "}" }] };
    const text = JSON.stringify(doc, null, trial % 4);
    const max = trial % 5 === 0 ? 3 : 40;
    const { head, items: got } = await read(text, () => 1 + Math.floor(Math.random() * max));
    const want = JSON.parse(text);
    assert.deepEqual(got, want.items, `trial ${trial}`);
    assert.deepEqual(head, { kind: "L", metadata: want.metadata, after: want.after });
  }
});

Deno.test("a list without items, items null, and an empty list", async () => {
  assert.deepEqual(await read('{"metadata":{}}'), { head: { metadata: {} }, items: [] });
  assert.deepEqual(await read('{"items":null}'), { head: {}, items: [] });
  assert.deepEqual(await read(' { "items" : [ ] } \n'), { head: {}, items: [] });
  assert.deepEqual((await read('{"items":[1,"x",null]}')).items, [1, "x", null]);
});

Deno.test("a malformed answer is a protocol error naming where", async () => {
  const cases: [string, RegExp][] = [
    ["", /not a JSON object/],
    ["[]", /not a JSON object/],
    ['{"items":[1,]}', /Unexpected/],
    ['{"items":[1 2]}', /expected , or \] after an item/],
    ['{"a":1,}', /expected a field name/],
    ['{"items":[{"a":1}]', /expected , or \} after a field/],
    ['{"items":[{"a":1}', /expected , or \] after an item/],
    ['{"items":[{"a":1', /the answer ends inside item 0/],
    ['{"items":[]} x', /text after the list's end/],
    ['{"items":"x"}', /items is not an array/],
    ['{"items":[],"items":[]}', /two items fields/],
    ['{"a" 1}', /expected : after a field name/],
  ];
  for (const [text, why] of cases) {
    const err = await read(text).then(() => undefined, (e) => e);
    assert.ok(err instanceof CniError, `${JSON.stringify(text)}: ${err}`);
    assert.equal(err.code, 105);
    assert.equal(err.message, "the list is not valid JSON");
    assert.match(err.details, why, JSON.stringify(text));
    assert.match(err.details, /\(at byte \d+\)$/);
  }
});

Deno.test("an item over its cap is refused before the rest is read; no field becomes a prototype", async () => {
  const big = JSON.stringify({ items: [{ a: "x".repeat(300) }, ...Array(1_000).fill({ b: 1 })] });
  const s = chunked(encode(big), () => 64);
  const err = await readList(s.stream, { what: "the list", maxItemBytes: 100, item: () => {} })
    .then(() => undefined, (e) => e);
  assert.ok(err instanceof CniError);
  assert.match(err.message, /the list has a value over 100 bytes \(item 0\)/);
  assert.ok(s.pulled < 10, `read ${s.pulled} chunks of ${Math.ceil(big.length / 64)}`);
  const { head } = await read('{"__proto__":{"polluted":1},"items":[]}');
  assert.equal(Object.getPrototypeOf(head), Object.prototype);
  assert.equal((head as { polluted?: number }).polluted, undefined);
});

Deno.test("what an item throws ends the read, and the body is cancelled", async () => {
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    start: (c) => c.enqueue(encode('{"items":[1,2,')),
    cancel: () => void (cancelled = true),
  });
  const err = await readList(body, {
    what: "the list",
    maxItemBytes: 100,
    item: (v) => {
      if (v === 2) throw new Error("enough");
    },
  }).then(() => undefined, (e) => e);
  assert.equal(err.message, "enough");
  assert.ok(cancelled);
});

Deno.test("keptSize estimates the memory of what is kept", () => {
  assert.equal(keptSize("abcd"), 20);
  assert.equal(keptSize("€"), 18, "two bytes a character past Latin-1");
  assert.equal(keptSize(7), 8);
  assert.equal(keptSize([1, "ab"]), 24 + (8 + 8) + (8 + 18));
  assert.equal(keptSize({ a: "xy", b: { c: null } }), 24 + (16 + 18) + (16 + 24 + (16 + 8)));
});
