/**
 * The credentials this process read, and every text scrubbed of them before
 * it is printed, logged or quoted in an error: by value (each token read,
 * even cut short at the end of a text) and by shape (a bearer header, the
 * value Deno quotes in a header error).
 */

/** The credentials this process read, scrubbed by value from every text (the latest kept). */
const secrets: string[] = [];
/** How many credentials a process remembers (token rotations of a long-lived agent). */
const MAX_SECRETS = 16;
/** A value shorter than this is not scrubbed (it would cut words, and no token is that short). */
const MIN_SECRET_CHARS = 4;

/**
 * Marks `value` (a token just read) as a secret: {@link redact} removes it
 * from every text from now on, whatever surrounds it.
 */
export function scrubValue(value: string): void {
  if (value.length < MIN_SECRET_CHARS || secrets.includes(value)) return;
  secrets.push(value);
  if (secrets.length > MAX_SECRETS) secrets.shift();
}

/**
 * Removes every credential: each token this process read, by value, and
 * anything shaped like one: a bearer value (to the next quote, across line
 * breaks, since a token file with two lines makes one header value of both)
 * and the value Deno quotes in a header error.
 */
export function redact(text: string): string {
  let out = text;
  for (const s of secrets) {
    if (out.includes(s)) out = out.split(s).join("[redacted]");
    const head = headAtEnd(out, s);
    if (head) out = `${out.slice(0, out.length - head)}[redacted]`;
  }
  return out
    .replace(/(invalid header value:?\s*)"[^"]*"?/gi, '$1"[redacted]"')
    // To the end of the line: a token may hold any visible character, quotes included.
    .replace(/\bbearer\b[^\n]*/gi, "Bearer [redacted]");
}

/**
 * Length of the longest head of `secret` (at least {@link MIN_SECRET_CHARS})
 * that ends `text`, possibly followed by a cut mark: what remains of a token
 * a server cut off before quoting it. 0: none.
 */
function headAtEnd(text: string, secret: string): number {
  const t = text.endsWith("…") ? text.slice(0, -1) : text;
  const last = t.at(-1);
  for (let n = Math.min(secret.length - 1, t.length); n >= MIN_SECRET_CHARS; n--) {
    if (secret[n - 1] === last && t.endsWith(secret.slice(0, n))) return n + text.length - t.length;
  }
  return 0;
}

/** JSON text of `value` with every string in it {@link redact}ed (logs and reports). */
export function redactedJson(value: unknown, indent?: number): string {
  return JSON.stringify(value, (_k, v) => typeof v === "string" ? redact(v) : v, indent);
}
