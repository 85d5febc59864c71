/**
 * Milo as the e2e sees it: milo-dev running inside the milo namespace
 * (through testing/milo_dev.ts), and the admin client that reaches its
 * loopback-only admin port and its API through the relay in that namespace:
 * faults, stats, claims, pool status, deleting a claim behind the plugin's back.
 */
import * as z from "zod/mini";
import { type IPClaim, IPClaimSchema } from "../../lib/milo_objects.ts";
import type { Stats } from "../../milo-dev/stats.ts";
import { eachLine } from "../child.ts";
import { type MiloDev, startMiloDev } from "../milo_dev.ts";
import { E2E_TOKEN } from "../seeds.ts";
import type { RelayAnswer, RelayRequest } from "./relay.ts";
import { ADMIN_ADDR, MILO_ADDR, MILO_PORT } from "./topology.ts";

const RELAY = new URL("./relay.ts", import.meta.url).pathname;
const RELAY_TIMEOUT_MS = 15_000;

/** The tenant of the e2e seed. */
export const PROJECT = "tenant-a";
/** Bearer token of {@link PROJECT}. */
export const TOKEN = E2E_TOKEN;
/** The IPv4 pool of the e2e seed. */
export const POOL_V4 = "vpc-7b3e-pods-v4";

/** An IPClaim as milo-dev answers it. */
export type Claim = IPClaim;

/** An HTTP answer relayed from inside the milo namespace; `body` is decoded JSON or text. */
export interface Relayed {
  status: number;
  body: unknown;
}

/** Where milo-dev keeps its files and which TLS material it serves. */
export interface MiloFiles {
  dir: string;
  seed: string;
  certFile: string;
  keyFile: string;
  caFile: string;
}

const ClaimList = z.looseObject({ items: z.array(IPClaimSchema) });

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** milo-dev in its namespace, and the relay through which the test talks to it. */
export class MiloAdmin {
  /** The API's base URL as the nodes reach it. */
  readonly url = `https://${MILO_ADDR}:${MILO_PORT}`;
  readonly #ns: string;
  readonly #files: MiloFiles;
  #dev?: MiloDev;
  #relay?: Deno.ChildProcess;
  #writer?: WritableStreamDefaultWriter<Uint8Array>;
  #pending = new Map<number, (a: RelayAnswer) => void>();
  #id = 0;

  constructor(ns: string, files: MiloFiles) {
    this.#ns = ns;
    this.#files = files;
  }

  /** Starts milo-dev (or restarts it on the same ports and database) and the relay. */
  async start(): Promise<void> {
    if (this.#dev) return await this.#dev.restart();
    const f = this.#files;
    this.#dev = await startMiloDev({
      prefix: ["ip", "netns", "exec", this.#ns],
      dir: f.dir,
      seed: f.seed,
      listen: `${MILO_ADDR}:${MILO_PORT}`,
      admin: ADMIN_ADDR,
      tls: { certFile: f.certFile, keyFile: f.keyFile, caFile: f.caFile },
    });
    this.#startRelay();
  }

  /** SIGKILLs milo-dev (the process itself: `ip netns exec` execs it); start() restarts it. */
  async kill(): Promise<void> {
    await this.#dev?.kill("SIGKILL");
  }

  /** Stops milo-dev and the relay. */
  async stop(): Promise<void> {
    const dev = this.#dev;
    this.#dev = undefined;
    await dev?.stop().catch(() => {});
    const relay = this.#relay;
    this.#relay = undefined;
    if (!relay) return;
    await this.#writer?.close().catch(() => {});
    try {
      relay.kill("SIGKILL");
    } catch { /* gone */ }
    await relay.status;
  }

  #startRelay(): void {
    const child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        this.#ns,
        Deno.execPath(),
        "run",
        "--no-config",
        "--no-lock",
        "--allow-net",
        `--allow-read=${this.#files.caFile}`,
        RELAY,
        this.#files.caFile,
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
      env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
    }).spawn();
    this.#relay = child;
    this.#writer = child.stdin.getWriter();
    eachLine(child.stdout, (l) => {
      const a = JSON.parse(l) as RelayAnswer;
      this.#pending.get(a.id)?.(a);
      this.#pending.delete(a.id);
    });
  }

  /** An HTTP request made from inside the milo namespace. */
  async fetch(
    method: string,
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Relayed> {
    const id = ++this.#id;
    const { promise, resolve } = Promise.withResolvers<RelayAnswer>();
    this.#pending.set(id, resolve);
    const req: RelayRequest = {
      id,
      method,
      url,
      headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      timeoutMs: RELAY_TIMEOUT_MS,
    };
    await this.#writer!.write(new TextEncoder().encode(JSON.stringify(req) + "\n"));
    const t = setTimeout(() => resolve({ id, error: "relay gave no answer in 20 s" }), 20_000);
    const a = await promise;
    clearTimeout(t);
    if (a.error) throw new Error(`${method} ${url}: ${a.error}`);
    const text = a.body ?? "";
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch { /* not JSON */ }
    return { status: a.status!, body: parsed };
  }

  async #admin(method: string, path: string, body?: unknown): Promise<unknown> {
    const r = await this.fetch(method, `http://${ADMIN_ADDR}${path}`, body);
    if (r.status >= 300) throw new Error(`admin ${method} ${path}: ${r.status} ${r.body}`);
    return r.body;
  }

  #api(path: string, method = "GET"): Promise<Relayed> {
    const url = `${this.url}/apis/resourcemanager.miloapis.com/v1alpha1/projects/${PROJECT}` +
      `/control-plane/apis/ipam.miloapis.com/v1alpha1${path}`;
    return this.fetch(method, url, undefined, { authorization: `Bearer ${TOKEN}` });
  }

  /** Replaces milo-dev's faults (admin PUT /faults). */
  async setFaults(f: Record<string, unknown>): Promise<void> {
    await this.#admin("PUT", "/faults", f);
  }

  /** Clears every fault. */
  async clearFaults(): Promise<void> {
    await this.#admin("DELETE", "/faults");
  }

  /** milo-dev's request counters since its last start. */
  async stats(): Promise<Stats> {
    const s = await this.#admin("GET", "/stats");
    if (!isRecord(s) || !isRecord(s.faults)) throw new Error(`admin /stats: ${s}`);
    return s as unknown as Stats;
  }

  /** Every IPClaim of the tenant, read through the API (faults must be off). */
  async claims(labelSelector?: string): Promise<Claim[]> {
    const q = labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : "";
    const r = await this.#api(`/namespaces/default/ipclaims${q}`);
    if (r.status !== 200) throw new Error(`list claims: ${r.status} ${JSON.stringify(r.body)}`);
    return ClaimList.parse(r.body).items;
  }

  /**
   * The CIDRs of the tenant's retained IPAllocations (their claim deleted under
   * Retain, waiting for a claim of the same name or their lease's end).
   */
  async retained(): Promise<string[]> {
    const r = await this.#api("/namespaces/default/ipallocations");
    if (r.status !== 200) {
      throw new Error(`list allocations: ${r.status} ${JSON.stringify(r.body)}`);
    }
    const items = isRecord(r.body) && Array.isArray(r.body.items) ? r.body.items : [];
    return items.flatMap((a) => {
      const spec = isRecord(a) && isRecord(a.spec) ? a.spec : {};
      const status = isRecord(a) && isRecord(a.status) ? a.status : {};
      const cidr = status.allocatedCIDR;
      return spec.claimRef === undefined && typeof cidr === "string" ? [cidr] : [];
    });
  }

  /** Deletes a claim behind the plugin's back (an operator, through the API); the HTTP status. */
  async deleteClaim(name: string): Promise<number> {
    return (await this.#api(`/namespaces/default/ipclaims/${name}`, "DELETE")).status;
  }

  /** The pool's status (capacity) as Milo reports it. */
  async poolStatus(name = POOL_V4): Promise<Record<string, unknown> | undefined> {
    const url = `${this.url}/apis/ipam.miloapis.com/v1alpha1/ippools/${name}`;
    const r = await this.fetch("GET", url, undefined, { authorization: `Bearer ${TOKEN}` });
    return isRecord(r.body) && isRecord(r.body.status) ? r.body.status : undefined;
  }
}
