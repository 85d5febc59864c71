import { CniError } from "./errors.ts";

/** Largest network config accepted on stdin. */
export const MAX_STDIN_BYTES = 1024 * 1024;

const CHUNK = 64 * 1024;

/** Reads all of stdin, refusing more than {@link MAX_STDIN_BYTES}. */
export async function readStdinBytes(): Promise<Uint8Array> {
  const buf = new Uint8Array(MAX_STDIN_BYTES + 1);
  let total = 0;
  for (;;) {
    const n = await Deno.stdin.read(buf.subarray(total, Math.min(total + CHUNK, buf.length)));
    if (n === null) break;
    total += n;
    if (total > MAX_STDIN_BYTES) break;
  }
  return buf.subarray(0, total);
}

/** Decodes stdin bytes as UTF-8, refusing more than {@link MAX_STDIN_BYTES}. */
export function decodeStdin(bytes: Uint8Array): string {
  if (bytes.byteLength > MAX_STDIN_BYTES) {
    throw new CniError("decode", `network config on stdin exceeds ${MAX_STDIN_BYTES} bytes`);
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new CniError("decode", "network config on stdin is not valid UTF-8");
  }
}
