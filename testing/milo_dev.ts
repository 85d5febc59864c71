/**
 * The one way tests, the bench and the demo run milo-dev: `milo-dev/main.ts`
 * as a child process (optionally under a command prefix such as
 * `ip netns exec NS`), with helpers for its admin port and its API.
 */

import { isIP } from "node:net";
import type { Limits } from "../milo-dev/limits.ts";
import type { QuotaSettings } from "../milo-dev/quota.ts";
import type { RetentionSettings, SweepResult } from "../milo-dev/retention.ts";
import type { Stats } from "../milo-dev/stats.ts";
import { loadSeedFile } from "../milo-dev/seed.ts";
import { parseHostPort } from "../milo-dev/server.ts";
import type { IPClaim } from "../lib/milo_objects.ts";
import { Child, type Ready } from "./child.ts";
import { DEV_SEED } from "./seeds.ts";
import { makeTestCA } from "./testca.ts";

/** Options of {@link startMiloDev}; everything has a default. */
export interface MiloDevOptions {
  /** Seed document, or the path of a seed file (JSON, or YAML by extension); default {@link DEV_SEED}. */
  seed?: object | string;
  /** HTTPS: `true` makes a throwaway test CA; or the server's own cert and key (and the CA to trust). */
  tls?: boolean | { certFile: string; keyFile: string; caFile?: string };
  /** API address `HOST:PORT`; default `127.0.0.1:0`. A restart binds the same port again. */
  listen?: string;
  /** Admin address `HOST:PORT` (loopback); default `127.0.0.1:0`. */
  admin?: string;
  /** Directory for the seed file, database and CA; default a temp dir that `stop()` removes. */
  dir?: string;
  /** SQLite file; default `DIR/milo.db`. */
  dbPath?: string;
  /** Command milo-dev runs under, e.g. `["ip", "netns", "exec", NS]` (it must exec its argument). */
  prefix?: string[];
  /** Bearer token of the helpers' own API calls; default the seed's first. */
  token?: string;
  /**
   * `--allocations-per-second`: claim creates admitted per sliding second (0:
   * unlimited); a restart keeps it. Default 0, unlike milo-dev's own default
   * of 370 (Milo's ceiling), because the bench seeds its sweep at well over
   * 370 creates a second; a test of the ceiling sets it here or at run time.
   */
  allocationsPerSecond?: number;
}

/** A running milo-dev child process. */
export interface MiloDev {
  url: string;
  adminUrl: string;
  dbPath: string;
  seedPath: string;
  /** CA bundle that verifies the server when it serves TLS. */
  caFile?: string;
  /** Bearer token of the helpers' own API calls. */
  token: string;
  /** PUT /faults: replaces the fault settings. */
  setFaults(f: Record<string, unknown>): Promise<void>;
  clearFaults(): Promise<void>;
  /** GET /limits: the limits in force. */
  limits(): Promise<Limits>;
  /** PUT /limits, e.g. `{ allocationsPerSecond: 5 }` (0: unlimited); answers the limits in force. */
  setLimits(l: Partial<Limits>): Promise<Limits>;
  /** GET /retention: `recreate`, `sweepInterval`, `leaseGrace` in force. */
  retention(): Promise<RetentionSettings>;
  /**
   * PUT /retention, e.g. `{ recreate: "Conflict" }` (unnamed settings back to
   * the seed's `retention`); answers the settings in force.
   */
  setRetention(r: Partial<RetentionSettings>): Promise<RetentionSettings>;
  /**
   * POST /retention/sweep: one lease-sweeper pass now, or as if `advance` (a
   * Go duration, e.g. `"25h"`) had passed, so a test ages a lease without waiting.
   */
  sweep(advance?: string): Promise<SweepResult>;
  /**
   * PUT /quota, e.g. `{ limits: { "tenant-a": 4 } }` or `{ grantDelayMs: 500 }`
   * (unnamed settings back to Milo's: the seed's limits, decisions at once,
   * `ClaimWaitTimeout` 30 s); answers the settings in force.
   */
  setQuota(q: Partial<QuotaSettings>): Promise<QuotaSettings>;
  /**
   * The counters, with `lists`, `listRowsScanned`, `listsByKind`, `throttled`,
   * `allocations`, and the gauge `retained`.
   */
  stats(): Promise<Stats>;
  resetStats(): Promise<void>;
  /** Sends a signal (default SIGKILL) and waits for the process to exit. */
  kill(signal?: Deno.Signal): Promise<void>;
  /**
   * Starts the server again (killing it first if it runs) on the same ports,
   * database and flags; faults and limits set at run time are gone.
   */
  restart(): Promise<void>;
  /** SIGTERM, wait (SIGKILL after 10 s), remove the temp dir it made. */
  stop(): Promise<void>;
  /** fetch() that trusts {@link caFile}. */
  fetch(input: string, init?: RequestInit): Promise<Response>;
  /** Lists IPClaims of all namespaces with the seed token of `project` (default: {@link token}). */
  listClaims(project?: string, labelSelector?: string): Promise<IPClaim[]>;
  /** The last lines the child wrote to stderr. */
  stderrTail(): string;
}

interface SeedTokens {
  projects: { name: string; tokens: string[] }[];
}

/**
 * Waits into the `n`-th next whole second. milo-dev stamps `creationTimestamp`
 * and `Date` in whole seconds, and the sweep counts a claim as newer than the
 * run unless it was stamped before the second of the run's start on Milo's
 * clock, which it takes as the first LIST's `Date` less the time it took to
 * read it: claims a test means to be older are made two seconds before.
 */
export function nextSecond(n = 1): Promise<void> {
  return new Promise((r) => setTimeout(r, (n - 1) * 1_000 + 1_010 - Date.now() % 1_000));
}

/** Starts milo-dev and waits for its ready line; the error carries the child's stderr. */
export async function startMiloDev(opts: MiloDevOptions = {}): Promise<MiloDev> {
  const ownDir = opts.dir === undefined;
  const dir = opts.dir ?? await Deno.makeTempDir({ prefix: "milo-dev-" });
  try {
    let seedPath: string, seed: SeedTokens;
    if (typeof opts.seed === "string") {
      seedPath = opts.seed;
      seed = await loadSeedFile(seedPath);
    } else {
      seed = (opts.seed ?? DEV_SEED) as SeedTokens;
      seedPath = `${dir}/seed.json`;
      await Deno.writeTextFile(seedPath, JSON.stringify(seed, null, 2));
    }
    const listen = opts.listen ?? "127.0.0.1:0";
    const tls = opts.tls === true ? await testCA(`${dir}/tls`, listen) : opts.tls || undefined;
    const child = new Child({
      prefix: opts.prefix ?? [],
      seedPath,
      dbPath: opts.dbPath ?? `${dir}/milo.db`,
      listen,
      admin: opts.admin ?? "127.0.0.1:0",
      // Appended to the command line as they are: the TLS flags and the ceiling.
      extraArgs: [
        ...(tls ? ["--cert", tls.certFile, "--key", tls.keyFile] : []),
        "--allocations-per-second",
        String(opts.allocationsPerSecond ?? 0),
      ],
    });
    const ready = await child.start();
    return new Launched(child, ready, {
      dir: ownDir ? dir : undefined,
      seed,
      token: opts.token ?? seed.projects[0]?.tokens[0] ?? "",
      caFile: tls?.caFile,
      client: tls?.caFile
        ? Deno.createHttpClient({ caCerts: [await Deno.readTextFile(tls.caFile)] })
        : undefined,
    });
  } catch (err) {
    if (ownDir) await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
}

/** A test CA whose server certificate also names the listen address when it is an IP. */
function testCA(dir: string, listen: string) {
  const { host } = parseHostPort(listen);
  return makeTestCA(dir, isIP(host) && host !== "127.0.0.1" && host !== "::1" ? [host] : []);
}

/** The {@link MiloDev} handed out: the child plus the API and admin helpers. */
class Launched implements MiloDev {
  readonly url: string;
  readonly adminUrl: string;
  readonly dbPath: string;
  readonly seedPath: string;
  readonly caFile?: string;
  readonly token: string;
  readonly #child: Child;
  readonly #dir?: string;
  readonly #seed: SeedTokens;
  readonly #client?: Deno.HttpClient;

  constructor(
    child: Child,
    ready: Ready,
    o: {
      dir?: string;
      seed: SeedTokens;
      token: string;
      caFile?: string;
      client?: Deno.HttpClient;
    },
  ) {
    this.#child = child;
    this.url = ready.url;
    this.adminUrl = ready.admin;
    this.dbPath = child.config.dbPath;
    this.seedPath = child.config.seedPath;
    this.caFile = o.caFile;
    this.token = o.token;
    this.#dir = o.dir;
    this.#seed = o.seed;
    this.#client = o.client;
  }

  async #admin(method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await fetch(`${this.adminUrl}${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`milo-dev admin ${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  }

  async setFaults(f: Record<string, unknown>): Promise<void> {
    await this.#admin("PUT", "/faults", f);
  }

  async clearFaults(): Promise<void> {
    await this.#admin("DELETE", "/faults");
  }

  limits(): Promise<Limits> {
    return this.#admin("GET", "/limits") as Promise<Limits>;
  }

  setLimits(l: Partial<Limits>): Promise<Limits> {
    return this.#admin("PUT", "/limits", l) as Promise<Limits>;
  }

  retention(): Promise<RetentionSettings> {
    return this.#admin("GET", "/retention") as Promise<RetentionSettings>;
  }

  setRetention(r: Partial<RetentionSettings>): Promise<RetentionSettings> {
    return this.#admin("PUT", "/retention", r) as Promise<RetentionSettings>;
  }

  sweep(advance?: string): Promise<SweepResult> {
    const body = advance === undefined ? {} : { advance };
    return this.#admin("POST", "/retention/sweep", body) as Promise<SweepResult>;
  }

  setQuota(q: Partial<QuotaSettings>): Promise<QuotaSettings> {
    return this.#admin("PUT", "/quota", q) as Promise<QuotaSettings>;
  }

  stats(): Promise<Stats> {
    return this.#admin("GET", "/stats") as Promise<Stats>;
  }

  async resetStats(): Promise<void> {
    await this.#admin("POST", "/stats/reset");
  }

  kill(signal: Deno.Signal = "SIGKILL"): Promise<void> {
    return this.#child.signal(signal);
  }

  async restart(): Promise<void> {
    if (this.#child.running) await this.#child.signal("SIGKILL");
    await this.#child.start();
  }

  async stop(): Promise<void> {
    try {
      await this.#child.signal("SIGTERM");
    } finally {
      this.#client?.close();
      if (this.#dir) await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
    }
  }

  fetch(input: string, init: RequestInit = {}): Promise<Response> {
    return fetch(input, { ...init, client: this.#client });
  }

  async listClaims(project?: string, labelSelector?: string): Promise<IPClaim[]> {
    const token = project === undefined ? this.token : tokenFor(this.#seed, project);
    const q = labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : "";
    const r = await miloApi<{ items: IPClaim[] }>(this, "GET", `/ipclaims${q}`, { token, project });
    if (r.status !== 200) throw new Error(`listClaims: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.items;
  }

  stderrTail(): string {
    return this.#child.stderrTail();
  }
}

function tokenFor(seed: SeedTokens, project: string): string {
  const p = seed.projects.find((x) => x.name === project);
  if (!p || !p.tokens.length) throw new Error(`seed has no token for project ${project}`);
  return p.tokens[0];
}

/** The answer of {@link miloApi}: `T` is what the caller expects the JSON body to be. */
export interface ApiResult<T = unknown> {
  status: number;
  headers: Headers;
  /** The decoded JSON body (undefined when there was none): an object, a list or a Status. */
  body: T;
}

/**
 * Calls the IPAM API. `path` is relative to `/apis/ipam.miloapis.com/v1alpha1`
 * (e.g. `/namespaces/default/ipclaims`); `project` selects the project path
 * form; `token: null` sends no Authorization header.
 */
export async function miloApi<T = unknown>(
  dev: Pick<MiloDev, "url" | "token" | "fetch">,
  method: string,
  path: string,
  opts: { body?: unknown; token?: string | null; project?: string } = {},
): Promise<ApiResult<T>> {
  const prefix = opts.project === undefined
    ? ""
    : `/apis/resourcemanager.miloapis.com/v1alpha1/projects/${opts.project}/control-plane`;
  const token = opts.token === undefined ? dev.token : opts.token;
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (opts.body !== undefined) headers["content-type"] = "application/json";
  const res = await dev.fetch(`${dev.url}${prefix}/apis/ipam.miloapis.com/v1alpha1${path}`, {
    method,
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

/**
 * The scope of {@link claimBody}: the network of `tests/fixtures/milo/`'s
 * create request, uid included (Milo's address space counts it).
 */
export const FIXTURE_SCOPE = {
  network: {
    apiGroup: "networking.datumapis.com",
    kind: "Network",
    name: "vpc-7b3e",
    uid: "0b6f7c1e-52d4-4b7e-9a41-3f0c8d2e6a19",
  },
};

/** An IPClaim create body for the example seed's classes, in {@link FIXTURE_SCOPE}. */
export function claimBody(
  name: string,
  opts: {
    className?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    address?: string;
    ipFamily?: string;
    scope?: Record<string, unknown> | null;
    reclaimPolicy?: "Delete" | "Retain";
  } = {},
): Record<string, unknown> {
  const spec: Record<string, unknown> = {
    className: opts.className ?? "vpc-pods-ipv4",
    reclaimPolicy: opts.reclaimPolicy ?? "Delete",
  };
  if (opts.ipFamily) spec.ipFamily = opts.ipFamily;
  if (opts.address) spec.address = opts.address;
  if (opts.scope !== null) {
    spec.scope = opts.scope ?? structuredClone(FIXTURE_SCOPE);
  }
  const metadata: Record<string, unknown> = { name, namespace: "default" };
  if (opts.labels) metadata.labels = opts.labels;
  if (opts.annotations) metadata.annotations = opts.annotations;
  return { apiVersion: "ipam.miloapis.com/v1alpha1", kind: "IPClaim", metadata, spec };
}
