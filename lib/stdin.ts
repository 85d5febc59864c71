import { CniError } from "./errors.ts";

const CHUNK = 64 * 1024;

/** Reads all of stdin as UTF-8, refusing more than `max` bytes. */
export async function readStdin(max: number): Promise<string> {
  const buf = new Uint8Array(max + 1);
  let total = 0;
  for (;;) {
    const n = await Deno.stdin.read(buf.subarray(total, Math.min(total + CHUNK, max + 1)));
    if (n === null) break;
    total += n;
    if (total > max) throw new CniError("decode", `network config on stdin exceeds ${max} bytes`);
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(buf.subarray(0, total));
  } catch {
    throw new CniError("decode", "network config on stdin is not valid UTF-8");
  }
}
