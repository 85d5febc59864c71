/**
 * SHA-256 as lowercase hex by WebCrypto: the reference the plugin's own
 * synchronous digest (lib/sha256.ts) and the names Milo derives are checked
 * against.
 */
export async function webSha256Hex(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, "0")).join("");
}
