/**
 * SHA-256 (FIPS 180-4) of short texts, synchronously. Claim names, lock and
 * journal files and long label values are hashes of a few dozen bytes;
 * `crypto.subtle.digest` answers them through the runtime's thread pool (a
 * hand-off of about 70 µs each, more when the pool is idle), this in a few
 * microseconds on the calling thread.
 *
 * Not `node:crypto`'s `createHash`, synchronous too: importing it costs every
 * exec'd plugin that does the work itself. Paired whole-process runs on
 * 2026-12-04 (1-minute load 0.4–1.0, 2 cores; bench/results/2026-12-04-sha256.md):
 * an ADD and its DEL through the install without an agent took 0.82–0.84× the
 * wall time (0.83× the CPU) with this file as with `createHash`, 11–12 ms a
 * process; a process hashing one attachment key 0.50×. Through the agent the
 * two are even (0.98–1.02×, the agent's CPU per call the same): `createHash` is
 * a few µs faster per hash once warm, and a call hashes its attachment once.
 */

const K = new Uint32Array([
  0x428a2f98,
  0x71374491,
  0xb5c0fbcf,
  0xe9b5dba5,
  0x3956c25b,
  0x59f111f1,
  0x923f82a4,
  0xab1c5ed5,
  0xd807aa98,
  0x12835b01,
  0x243185be,
  0x550c7dc3,
  0x72be5d74,
  0x80deb1fe,
  0x9bdc06a7,
  0xc19bf174,
  0xe49b69c1,
  0xefbe4786,
  0x0fc19dc6,
  0x240ca1cc,
  0x2de92c6f,
  0x4a7484aa,
  0x5cb0a9dc,
  0x76f988da,
  0x983e5152,
  0xa831c66d,
  0xb00327c8,
  0xbf597fc7,
  0xc6e00bf3,
  0xd5a79147,
  0x06ca6351,
  0x14292967,
  0x27b70a85,
  0x2e1b2138,
  0x4d2c6dfc,
  0x53380d13,
  0x650a7354,
  0x766a0abb,
  0x81c2c92e,
  0x92722c85,
  0xa2bfe8a1,
  0xa81a664b,
  0xc24b8b70,
  0xc76c51a3,
  0xd192e819,
  0xd6990624,
  0xf40e3585,
  0x106aa070,
  0x19a4c116,
  0x1e376c08,
  0x2748774c,
  0x34b0bcb5,
  0x391c0cb3,
  0x4ed8aa4a,
  0x5b9cca4f,
  0x682e6ff3,
  0x748f82ee,
  0x78a5636f,
  0x84c87814,
  0x8cc70208,
  0x90befffa,
  0xa4506ceb,
  0xbef9a3f7,
  0xc67178f2,
]);

const H0 = [
  0x6a09e667,
  0xbb67ae85,
  0x3c6ef372,
  0xa54ff53a,
  0x510e527f,
  0x9b05688c,
  0x1f83d9ab,
  0x5be0cd19,
];

const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));

/** The SHA-256 digest of `bytes`. */
function sha256(bytes: Uint8Array): Uint8Array {
  // The message, a 1 bit, zeros, and the bit length in the last 8 bytes of a 64-byte block.
  const blocks = Math.ceil((bytes.byteLength + 9) / 64);
  const msg = new Uint8Array(blocks * 64);
  msg.set(bytes);
  msg[bytes.byteLength] = 0x80;
  const view = new DataView(msg.buffer);
  const bits = bytes.byteLength * 8;
  view.setUint32(msg.byteLength - 8, Math.floor(bits / 0x1_0000_0000));
  view.setUint32(msg.byteLength - 4, bits >>> 0);
  const state = H0.slice();
  const w = new Uint32Array(64);
  for (let at = 0; at < msg.byteLength; at += 64) {
    for (let t = 0; t < 16; t++) w[t] = view.getUint32(at + 4 * t);
    for (let t = 16; t < 64; t++) {
      const s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >>> 3);
      const s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >>> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    let [a, b, c, d, e, f, g, h] = state;
    for (let t = 0; t < 64; t++) {
      const t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] +
        w[t];
      const t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    [a, b, c, d, e, f, g, h].forEach((v, i) => state[i] = (state[i] + v) | 0);
  }
  const out = new Uint8Array(32);
  const o = new DataView(out.buffer);
  state.forEach((v, i) => o.setUint32(4 * i, v >>> 0));
  return out;
}

/** The SHA-256 of a text's UTF-8 bytes, as 64 lowercase hex digits. */
export function sha256Hex(text: string): string {
  return Array.from(sha256(new TextEncoder().encode(text)), (b) => b.toString(16).padStart(2, "0"))
    .join("");
}
