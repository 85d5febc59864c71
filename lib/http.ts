/**
 * What both API clients (Milo and Kubernetes) share below `fetch`: files read
 * with sandbox-aware errors, the token's shape, TLS material into one HTTP
 * client with proxies dropped from the environment, bodies read up to a cap,
 * `Retry-After`, and the classification of fetch failures.
 */
import type { NodeConfig } from "./config.ts";
import { clip, CniError, errorText, QUOTE_CHARS, SANDBOX_ADVICE } from "./errors.ts";
import { scrubValue } from "./redact.ts";
import { PROXY_ENV_VARS } from "./permissions.ts";
import { type Timer, timer } from "./timers.ts";

/** A token: one line of visible ASCII without inner whitespace. */
const TOKEN_SHAPE = /^[\x21-\x7e]+$/;

/** The token in a file's text (one trailing newline allowed), or undefined when it is not one. */
export function tokenOf(text: string): string | undefined {
  const t = text.replace(/\r?\n$/, "");
  if (!TOKEN_SHAPE.test(t)) return undefined;
  scrubValue(t);
  return t;
}

/** Reads a file the config names; a sandbox refusal is code 106, anything else config (7). */
export async function readConfigFile(field: string, path: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) {
      throw new CniError(
        "sandbox",
        `the permission sandbox refused reading ${field} ${path}`,
        `${errorText(err)}; ${SANDBOX_ADVICE}`,
      );
    }
    throw new CniError("config", `field ${field}: cannot read ${path}`, errorText(err));
  }
}

/** Reads and checks the Milo bearer token; errors name the file, never its content. */
export async function readToken(node: NodeConfig): Promise<string> {
  const file = node.milo.tokenFile;
  const text = await readConfigFile("milo.tokenFile", file);
  const token = tokenOf(text);
  if (token === undefined) {
    throw new CniError(
      "config",
      `field milo.tokenFile: ${file} does not hold one token`,
      text.trim()
        ? "the token must be one line of visible ASCII without spaces (after a rotation, " +
          "write the new token alone, then rename it over the file)"
        : "the file is empty",
    );
  }
  return token;
}

/** A Milo request's headers: the bearer token, JSON accepted and, with a body, sent. */
export function miloHeaders(token: string, hasBody: boolean): Headers {
  try {
    return new Headers({
      authorization: `Bearer ${token}`,
      accept: "application/json",
      ...(hasBody ? { "content-type": "application/json" } : {}),
    });
  } catch {
    throw new CniError(
      "config",
      "the Milo token cannot be sent as an HTTP header",
      "milo.tokenFile must hold one line of visible ASCII",
    );
  }
}

/** Removes proxy variables from the environment so fetch never sends the token through one. */
export function dropProxyEnv(): void {
  for (const k of PROXY_ENV_VARS) {
    try {
      Deno.env.delete(k);
    } catch {
      // Not granted: then Deno cannot read it either.
    }
  }
}

/** The files and proxy an HTTP client to Milo is built from. */
export interface TlsMaterial {
  ca?: string;
  cert?: string;
  key?: string;
  proxy?: string;
}

/** Reads the node's CA, client certificate and key (each file when configured). */
export async function readTlsMaterial(node: NodeConfig): Promise<TlsMaterial> {
  const m = node.milo;
  const [ca, cert, key] = await Promise.all([
    m.caFile ? readConfigFile("milo.caFile", m.caFile) : undefined,
    m.certFile ? readConfigFile("milo.certFile", m.certFile) : undefined,
    m.keyFile ? readConfigFile("milo.keyFile", m.keyFile) : undefined,
  ]);
  return { ca, cert, key, proxy: m.proxy };
}

/** An HTTP client for the material, or undefined when the defaults do. */
export function createHttpClient(
  t: TlsMaterial,
  what = "milo.caFile/certFile/keyFile",
): Deno.HttpClient | undefined {
  dropProxyEnv();
  if (!t.ca && !t.cert && !t.proxy) return undefined;
  try {
    return Deno.createHttpClient({
      ...(t.ca ? { caCerts: [t.ca] } : {}),
      ...(t.cert && t.key ? { cert: t.cert, key: t.key } : {}),
      ...(t.proxy ? { proxy: { url: t.proxy } } : {}),
    });
  } catch (err) {
    throw new CniError("config", `cannot load TLS material from ${what}`, errorText(err));
  }
}

/** The HTTP client for the node's TLS material and proxy, or undefined for the default. */
export async function httpClientFor(node: NodeConfig): Promise<Deno.HttpClient | undefined> {
  return createHttpClient(await readTlsMaterial(node));
}

/**
 * The body of `server`'s answer to `what` (method and path) as text: a
 * redirect is refused, never followed (protocol error naming its Location),
 * and so is a body over `max` bytes (the rest is never read; `overflow`
 * makes that error).
 */
export async function readAnswer(
  res: Response,
  max: number,
  what: string,
  server: string,
  overflow?: () => CniError,
): Promise<string> {
  if (res.status >= 300 && res.status < 400) {
    await res.body?.cancel();
    throw new CniError(
      "protocol",
      `${what}: ${server} answered a redirect (${res.status}); redirects are not followed`,
      `Location: ${clip(res.headers.get("location") ?? "(none)", QUOTE_CHARS)}`,
    );
  }
  return await readCapped(
    res,
    max,
    overflow ?? (() =>
      new CniError(
        "protocol",
        `${what}: ${server}'s answer exceeds ${max} bytes`,
        `HTTP ${res.status}`,
      )),
  );
}

/** A body as JSON, or undefined when it is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

async function readCapped(
  res: Response,
  max: number,
  tooBig: () => CniError,
): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      await reader.cancel();
      throw tooBig();
    }
    chunks.push(value);
  }
  const all = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all);
}

/** The signal of one request whose answer is read as a stream; see {@link streamSignal}. */
export interface StreamSignal {
  signal: AbortSignal;
  /** The answer moved: its head, or a chunk of its body, arrived. */
  moved(): void;
  /** The request is done: no more timeouts. */
  stop(): void;
}

/**
 * The signal of one request whose answer is read as a stream (a LIST, which
 * may be a whole tenant in one answer): it aborts with a TimeoutError when
 * the answer's head has not come within `headMs`, or once it has, when
 * `idleMs` pass without a chunk of its body; and at `deadlineMs` from now
 * whatever the answer does. A large answer that keeps coming is read to its
 * end; a server that stalls mid-answer is given up on as fast as a request
 * that is not answered.
 */
export function streamSignal(idleMs: number, deadlineMs: number, headMs = idleMs): StreamSignal {
  const idle = new AbortController();
  let last = performance.now(), limit = headMs, t: Timer | undefined, stopped = false;
  const arm = (ms: number) => {
    t = timer(ms);
    t.done.then(() => {
      const quiet = performance.now() - last;
      if (stopped) return;
      if (quiet >= limit) {
        idle.abort(new DOMException("no answer within the request timeout", "TimeoutError"));
      } else arm(limit - quiet);
    });
  };
  arm(headMs);
  return {
    signal: AbortSignal.any([idle.signal, AbortSignal.timeout(Math.max(0, deadlineMs))]),
    moved: () => {
      last = performance.now();
      if (limit === idleMs || stopped) return;
      limit = idleMs;
      t?.cancel();
      arm(idleMs);
    },
    stop: () => {
      stopped = true;
      t?.cancel();
    },
  };
}

/** Parses `Retry-After` (seconds or HTTP date) into milliseconds. */
export function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** True for a request that timed out or was aborted. */
export function isTimeout(err: unknown): boolean {
  return err instanceof DOMException && (err.name === "TimeoutError" || err.name === "AbortError");
}

/**
 * True when a fetch failed before its request could reach the server: the
 * connection was never made (refused, unreachable, a name not resolved).
 * Anything else (a timeout, a connection lost later) may have been executed.
 */
export function neverSent(err: unknown): boolean {
  const text = err instanceof Error ? `${err.message} ${errorText(err.cause)}` : "";
  return /tcp connect error|connection refused|dns error|failed to lookup address/i.test(text);
}

/** True when the sandbox refused (also as the cause of a fetch TypeError). */
export function isNotCapable(err: unknown): boolean {
  return err instanceof Deno.errors.NotCapable ||
    err instanceof Error && (err.name === "NotCapable" || isNotCapable(err.cause));
}

/** True when TLS verification failed. */
export function isTlsFailure(err: unknown): boolean {
  const text = err instanceof Error ? `${err.message} ${String(err.cause ?? "")}` : "";
  return /certificate|UnknownIssuer|InvalidCertificate/i.test(text);
}

/** How a server names itself in the errors of {@link fatalFetchError}. */
export interface FetchTarget {
  /** What the sandbox refused: `GET milo.example` or `connecting to k8s:6443`. */
  refused: string;
  /** What to do about a refusal, when there is advice. */
  hint?: string;
  /** What failed TLS verification: `milo.example failed (check milo.caFile)`. */
  tls: string;
}

/** A fetch failure that retrying cannot cure (the sandbox, TLS) as a CniError; else undefined. */
export function fatalFetchError(err: unknown, t: FetchTarget): CniError | undefined {
  if (isNotCapable(err)) {
    return new CniError(
      "sandbox",
      `the permission sandbox refused ${t.refused}`,
      `${errorText(err)}; ${t.hint ?? SANDBOX_ADVICE}`,
    );
  }
  if (isTlsFailure(err)) {
    return new CniError("config", `TLS verification of ${t.tls}`, errorText(err));
  }
  return undefined;
}

/**
 * Why one attempt at Milo failed, to retry; a failure retrying cannot cure
 * (a refused host, TLS, a CniError) is thrown.
 */
export function miloFetchFailure(
  err: unknown,
  method: string,
  url: string,
  timeoutMs: number,
): string {
  if (err instanceof CniError) throw err;
  const host = new URL(url).host;
  const fatal = fatalFetchError(err, {
    refused: `${method} ${host}`,
    hint: "reinstall milo-ipam with a node config that names this Milo host",
    tls: `${host} failed (check milo.caFile)`,
  });
  if (fatal) throw fatal;
  return isTimeout(err) ? `request timed out after ${Math.round(timeoutMs)} ms` : errorText(err);
}
