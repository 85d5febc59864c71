import assert from "node:assert/strict";
import { sha256Hex } from "../lib/sha256.ts";
import { webSha256Hex } from "../testing/web_digest.ts";

Deno.test("sha256Hex: FIPS 180-4 vectors, and WebCrypto's digest at every length across block edges", async () => {
  assert.equal(
    sha256Hex(""),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
  assert.equal(
    sha256Hex("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.equal(
    sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
  );
  for (let n = 0; n <= 200; n++) {
    const text = Array.from({ length: n }, (_, i) => i % 17 === 5 ? "é" : "abcxyz019-_.\0"[i % 13])
      .join("");
    assert.equal(sha256Hex(text), await webSha256Hex(text), `length ${n}`);
  }
});
