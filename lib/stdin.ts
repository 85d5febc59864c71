import { CniError } from "./errors.ts";

/** Largest network config accepted on stdin. */
export const MAX_STDIN_BYTES = 1024 * 1024;

const CHUNK = 64 * 1024;

/**
 * Reads all of stdin, keeping at most one byte over {@link MAX_STDIN_BYTES}
 * (which the decoder refuses). Synchronous: nothing else runs before the
 * config is in, and a blocking read spares the event loop a thread hand-off
 * per chunk.
 */
export function readStdinBytes(): Uint8Array {
  const buf = new Uint8Array(MAX_STDIN_BYTES + 1);
  let total = 0;
  while (total < buf.length) {
    const n = Deno.stdin.readSync(buf.subarray(total, Math.min(total + CHUNK, buf.length)));
    if (n === null) break;
    total += n;
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
