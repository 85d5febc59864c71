import * as z from "zod/mini";
import type { IpamConfig } from "./config.ts";
import {
  CniError,
  errorText,
  isTransientStatus,
  type Outcome,
  outcomeOfHttpStatus,
} from "./errors.ts";

/** Path of Milo's IPAM API, appended to `milo.url`. */
export const API_PATH = "/apis/ipam.miloapis.com/v1alpha1";

const stringMap = z.optional(z.record(z.string(), z.string()));

/** An IPClaim as Milo answers it (only the fields milo-ipam reads are checked). */
export const IPClaimSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    uid: z.optional(z.string()),
    labels: stringMap,
    annotations: stringMap,
    creationTimestamp: z.optional(z.string()),
  }),
  spec: z._default(
    z.looseObject({ className: z.optional(z.string()), ipFamily: z.optional(z.string()) }),
    {},
  ),
  status: z._default(
    z.looseObject({
      phase: z.optional(z.string()),
      address: z.optional(z.string()),
      allocatedCIDR: z.optional(z.string()),
      poolRef: z.optional(z.looseObject({ name: z.string() })),
    }),
    {},
  ),
});

/** A validated IPClaim. */
export type IPClaim = z.infer<typeof IPClaimSchema>;

const IPClaimListSchema = z.looseObject({ items: z.array(IPClaimSchema) });
const IPClassListSchema = z.looseObject({
  items: z.array(z.looseObject({ metadata: z.looseObject({ name: z.string() }) })),
});
const StatusSchema = z.looseObject({
  kind: z.literal("Status"),
  message: z.optional(z.string()),
  reason: z.optional(z.string()),
  details: z.optional(z.looseObject({
    name: z.optional(z.string()),
    causes: z.optional(z.array(z.looseObject({
      type: z.optional(z.string()),
      field: z.optional(z.string()),
      message: z.optional(z.string()),
    }))),
  })),
});

/** A Kubernetes Status object as Milo sends with every error. */
export type MiloStatus = z.infer<typeof StatusSchema>;

/** How the client reaches Milo and how long it may try. */
export interface ClientOptions {
  baseUrl: string;
  namespace: string;
  token: string;
  requestMs: number;
  /** Absolute deadline (ms since epoch) of the whole invocation. */
  deadline: number;
  client?: Deno.HttpClient;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

const MAX_ATTEMPTS = 8;
const BACKOFF_BASE_MS = 100;
const BACKOFF_CAP_MS = 1_000;

type Answer = { status: number; body: unknown };

/** A thin Milo IPAM client: deadlines, bounded jittered retries, Status-aware errors. */
export class MiloClient {
  /** HTTP requests sent so far (every attempt counts). */
  requests = 0;
  readonly #o: ClientOptions;
  readonly #fetch: typeof fetch;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #random: () => number;

  constructor(options: ClientOptions) {
    this.#o = options;
    this.#fetch = options.fetch ?? fetch;
    this.#sleep = options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.#random = options.random ?? Math.random;
  }

  /** Builds a client from config: reads the token (every invocation) and TLS files. */
  static async open(cfg: IpamConfig, deadline: number): Promise<MiloClient> {
    const m = cfg.milo;
    const [token, ca, cert, key] = await Promise.all([
      readConfigFile("milo.tokenFile", m.tokenFile),
      m.caFile ? readConfigFile("milo.caFile", m.caFile) : undefined,
      m.certFile ? readConfigFile("milo.certFile", m.certFile) : undefined,
      m.keyFile ? readConfigFile("milo.keyFile", m.keyFile) : undefined,
    ]);
    const bearer = token.trim();
    if (!bearer) throw new CniError("config", `field ipam.milo.tokenFile: ${m.tokenFile} is empty`);
    let client: Deno.HttpClient | undefined;
    if (ca || cert) {
      try {
        client = Deno.createHttpClient({
          ...(ca ? { caCerts: [ca] } : {}),
          ...(cert && key ? { cert, key } : {}),
        });
      } catch (err) {
        throw new CniError(
          "config",
          "cannot load TLS material from milo.caFile/certFile/keyFile",
          errorText(err),
        );
      }
    }
    return new MiloClient({
      baseUrl: m.url.replace(/\/+$/, ""),
      namespace: m.namespace,
      token: bearer,
      requestMs: cfg.timeouts.requestMs,
      deadline,
      client,
    });
  }

  /** Releases the HTTP client. */
  close(): void {
    this.#o.client?.close();
  }

  #claimsPath(name?: string): string {
    const ns = encodeURIComponent(this.#o.namespace);
    return `${API_PATH}/namespaces/${ns}/ipclaims${name ? `/${encodeURIComponent(name)}` : ""}`;
  }

  /** POSTs a claim: the bound claim on 201, or `null` when the name exists (409). */
  async createClaim(body: Record<string, unknown>): Promise<IPClaim | null> {
    const a = await this.#call("POST", this.#claimsPath(), body, [201, 409]);
    return a.status === 409 ? null : parse(IPClaimSchema, a.body, "IPClaim");
  }

  /** GETs a claim, or `null` when Milo has none of that name. */
  async getClaim(name: string): Promise<IPClaim | null> {
    const a = await this.#call("GET", this.#claimsPath(name), undefined, [200, 404], name);
    return a.status === 404 ? null : parse(IPClaimSchema, a.body, "IPClaim");
  }

  /** DELETEs a claim: `released` on 200/202, `absent` on 404. */
  async deleteClaim(name: string): Promise<"released" | "absent"> {
    const a = await this.#call("DELETE", this.#claimsPath(name), undefined, [200, 202, 404], name);
    return a.status === 404 ? "absent" : "released";
  }

  /** LISTs claims matching a label selector. */
  async listClaims(labelSelector: string): Promise<IPClaim[]> {
    const q = `?labelSelector=${encodeURIComponent(labelSelector)}`;
    const a = await this.#call("GET", this.#claimsPath() + q, undefined, [200]);
    return parse(IPClaimListSchema, a.body, "IPClaimList").items;
  }

  /** LISTs the names of the IPClasses visible to this project. */
  async listClassNames(): Promise<string[]> {
    const a = await this.#call("GET", `${API_PATH}/ipclasses`, undefined, [200]);
    return parse(IPClassListSchema, a.body, "IPClassList").items.map((c) => c.metadata.name);
  }

  /** One request with retries; a 404 is accepted only as Milo's NotFound for `name`. */
  async #call(
    method: string,
    path: string,
    body: unknown,
    accept: number[],
    name?: string,
  ): Promise<Answer> {
    const o = this.#o;
    const url = o.baseUrl + path;
    const what = `${method} ${path}`;
    let last = "no attempt made";
    let attempts = 0;
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const remaining = o.deadline - Date.now();
      if (remaining <= 0) break;
      let wait = this.#backoff(attempt);
      this.requests++;
      attempts++;
      try {
        const res = await this.#fetch(url, {
          method,
          headers: {
            authorization: `Bearer ${o.token}`,
            accept: "application/json",
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(Math.min(o.requestMs, remaining)),
          ...(o.client ? { client: o.client } : {}),
        });
        const text = await res.text();
        const json = parseJson(text);
        const st = res.ok ? undefined : statusOf(json);
        if (accept.includes(res.status)) {
          if (res.status === 404 && (st?.reason !== "NotFound" || st.details?.name !== name)) {
            throw new CniError(
              "protocol",
              `${what}: HTTP 404 that is not Milo's NotFound for ${name}`,
              `is milo.url the Milo API base? ${st?.message ?? text.slice(0, 200)}`,
            );
          }
          return { status: res.status, body: json };
        }
        if (!isTransientStatus(res.status)) throw statusError(what, res.status, st);
        last = `Milo answered ${res.status}${st?.message ? `: ${st.message}` : ""}`;
        const after = retryAfterMs(res.headers.get("retry-after"));
        if (after !== undefined) wait = Math.max(wait, after);
      } catch (err) {
        if (err instanceof CniError) throw err;
        if (err instanceof Deno.errors.NotCapable || isNotCapable(err)) {
          throw new CniError(
            "sandbox",
            `the permission sandbox refused ${method} ${new URL(url).host}`,
            `${errorText(err)}; reinstall milo-ipam with a config that names this Milo host`,
          );
        }
        if (isTlsFailure(err)) {
          throw new CniError(
            "config",
            `TLS verification of ${new URL(url).host} failed (check milo.caFile)`,
            errorText(err),
          );
        }
        last = isTimeout(err)
          ? `request timed out after ${Math.round(Math.min(o.requestMs, remaining))} ms`
          : errorText(err);
      }
      if (attempt === MAX_ATTEMPTS || Date.now() + wait >= o.deadline) break;
      await this.#sleep(wait);
    }
    throw new CniError(
      "transient",
      `Milo unreachable or overloaded: ${what}`,
      `${last}; gave up within the timeouts.totalMs deadline after ${attempts} attempt(s)`,
    );
  }

  #backoff(attempt: number): number {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (attempt - 1));
    return Math.round(ceiling / 2 + this.#random() * ceiling / 2);
  }
}

async function readConfigFile(field: string, path: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) {
      throw new CniError(
        "sandbox",
        `the permission sandbox refused reading ${field} ${path}`,
        errorText(err),
      );
    }
    throw new CniError("config", `field ipam.${field}: cannot read ${path}`, errorText(err));
  }
}

function statusOf(json: unknown): MiloStatus | undefined {
  const r = StatusSchema.safeParse(json);
  return r.success ? r.data : undefined;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function parse<T extends z.ZodMiniType>(schema: T, body: unknown, kind: string): z.infer<T> {
  const r = schema.safeParse(body);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new CniError(
      "protocol",
      `Milo answered a malformed ${kind}`,
      `${i.path.join(".")}: ${i.message}`,
    );
  }
  return r.data;
}

function causes(st: MiloStatus | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of st?.details?.causes ?? []) {
    if (c.field && c.message) out[c.field] = c.message;
  }
  return out;
}

/** Maps a non-retryable Milo answer to a CniError, using the Status object for detail. */
export function statusError(what: string, status: number, st: MiloStatus | undefined): CniError {
  const outcome: Outcome = outcomeOfHttpStatus(status);
  const detail = `${what}: HTTP ${status}${st?.reason ? ` ${st.reason}` : ""}${
    st?.message ? `: ${st.message}` : ""
  }`;
  switch (outcome) {
    case "exhausted": {
      const c = causes(st);
      const pool = c.poolName ?? "(unnamed)", cls = c.className ?? "(unnamed)";
      return new CniError(outcome, `Milo pool ${pool} serving class ${cls} is exhausted`, detail);
    }
    case "auth":
      return new CniError(
        outcome,
        status === 401
          ? "Milo rejected the token (401): check milo.tokenFile"
          : "Milo forbids this request (403): check the token's project and the class",
        detail,
      );
    default:
      return new CniError(
        outcome,
        st?.message ? `Milo: ${st.message}` : `Milo answered HTTP ${status}`,
        detail,
      );
  }
}

/** Parses `Retry-After` (seconds or HTTP date) into milliseconds. */
export function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function isTimeout(err: unknown): boolean {
  return err instanceof DOMException && (err.name === "TimeoutError" || err.name === "AbortError");
}

function isNotCapable(err: unknown): boolean {
  return err instanceof Error && (err.name === "NotCapable" || isNotCapable(err.cause));
}

function isTlsFailure(err: unknown): boolean {
  const text = err instanceof Error ? `${err.message} ${String(err.cause ?? "")}` : "";
  return /certificate|UnknownIssuer|InvalidCertificate/i.test(text);
}
