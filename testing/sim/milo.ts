/**
 * Milo as the simulated world sees it: one tenant's IPClaims and
 * IPAllocations, answering POST, GET, DELETE and LIST of claims over a
 * simulated network, with Milo's semantics as testing/stub_milo.ts documents
 * them and milo-dev implements them (its Status shapes are milo-dev's,
 * milo-dev/status.ts):
 *
 * - a DELETE removes the claim of that name whatever its preconditions say
 *   (`AllocatingREST.Delete`, `internal/registry/ipam/ipclaim/storage.go`,
 *   reads the claim by name); under reclaimPolicy Retain its address is kept
 *   for the name (the allocation retained, unbound) until the class's
 *   retention lease ends, then freed;
 * - a create first probes for a retained allocation of its name and re-binds
 *   it, the same address, without looking at a pinned `spec.address`
 *   (`internal/allocator/reclaim.go`); a live claim's name is refused as
 *   Conflict, "already bound" (the probe finds its allocation); the later of
 *   two creates of one name that overlap answers 500 (its allocation insert
 *   finds the other's: milo-dev/overlap.ts); a pinned address another claim
 *   or retained allocation holds is 409 "address already allocated"; a pool
 *   with no free address is 507 (FirstFit: the lowest free address, so a
 *   freed address is the next claim's);
 * - a LIST answers every match at once (no paging, `internal/storage/postgres/store.go`
 *   `GetList`), with its `Date`;
 * - a create into a namespace being deleted is 403 (`access/namespace.go`
 *   `RefuseNamespace`); quota admission refuses with 403 Forbidden
 *   (`milo-os/milo` `pkg/quota/admission/plugin.go` `userFacingClaimError`);
 *   overload answers 429 (priority and fairness, before the request runs,
 *   `Retry-After`, text/plain) or 503; a request may run and its answer be
 *   lost (latency past the client's timeout, a connection reset).
 *
 * Every request travels, is handled at an instant, and its answer travels
 * back, each a simulated event; every fault and latency is drawn from a
 * stream named after the request's sender and what it asks (prng.ts).
 */
import { allocationName } from "../../lib/milo_objects.ts";
import {
  type ApiError,
  conflict,
  exhausted,
  forbidden,
  injected,
  namespaceRefused,
  notFound,
  releaseFailed,
} from "../../milo-dev/status.ts";
import { fixture } from "../milo_fixtures.ts";
import type { Json, WireClaim } from "../stub_types.ts";
import type { Prng } from "./prng.ts";
import type { Scheduler } from "./scheduler.ts";

/** Milo's tenant front door, as node configs name it. */
export const MILO_BASE =
  "https://milo.sim/apis/resourcemanager.miloapis.com/v1alpha1/projects/tenant-sim/control-plane";
const API = "/apis/ipam.miloapis.com/v1alpha1";
const BASE_PATH = new URL(MILO_BASE).pathname;
const CLAIMS = new RegExp(`^${API}/namespaces/([^/]+)/ipclaims(?:/([^/]+))?$`);

/** An answer to build when it is delivered, and its status. */
type Answer = (() => Response) & { status: number };

/** What goes wrong at Milo for a while (the world's script turns these on). */
export type Episode =
  | "overload" // 429 (priority and fairness) and 503, before the request runs
  | "slow" // answers slower than the clients' timeouts: lost after Milo acted
  | "stalled" // requests held before Milo runs them (a queue, a proxy): run after their sender gave up
  | "flaky" // connections refused before, or reset after, Milo acted
  | "down" // every connection refused
  | "quota" // quota admission refuses creates (403)
  | "release-fail" // DELETEs fail with 500, the claim left Releasing
  | "racer"; // someone deletes a stable name's claim by hand right after a release read it

/** An allocation: bound to a claim, or retained for its name after the claim's deletion. */
interface Allocation {
  name: string;
  family: "IPv4" | "IPv6";
  /** The address (IPv4) or the block's first address (IPv6 /96). */
  address: string;
  claimUid?: string;
  /** When a retained allocation's lease ends and its address is free again. */
  expiresAt?: number;
}

/** A class and the pool that serves it (Milo serves a class from one pool: cascade.go). */
interface ClassSpec {
  family: "IPv4" | "IPv6";
  pool: string;
  size: number;
}

/** What the world's trace and checker hear of Milo's changes. */
export interface MiloEvents {
  changed?(what: string): void;
  /**
   * A claim was deleted: by a request of process `by`, or by hand (`by`
   * undefined); `judged`, the uid the DELETE's precondition named (the object
   * its sender judged), if any.
   */
  removed?(claim: WireClaim, by: string | undefined, judged?: string): void;
  /** Process `by` heard Milo's answer to its `method` of `target` (a claim's name). */
  answered?(by: string, method: string, target: string): void;
}

/** Milo's tunables in the simulation. */
export interface MiloOptions {
  /** Addresses of each pool (FirstFit from the first). */
  poolSize: number;
  /** How long an address retained for a name stays its (the class's `retentionLease`). */
  retentionMs: number;
  /** Most claims of the project before quota admission refuses creates. */
  quota: number;
  /** Most one request waits at Milo and on the wire, one way (ms) when nothing is wrong. */
  latencyMs: number;
}

const NS = "default";

function v4(n: number): string {
  return `10.40.${Math.floor(n / 250)}.${(n % 250) + 1}`;
}

function v6(n: number): string {
  return rfc5952(`fd20:0:0:1:0:${(n + 1).toString(16)}::`);
}

/** An address in one spelling: IPv6 as eight groups without leading zeros (for comparing). */
export function canon(ip: string): string {
  if (!ip.includes(":")) return ip;
  const [head, tail] = ip.split("::");
  const h = head ? head.split(":") : [];
  const t = tail === undefined ? [] : tail ? tail.split(":") : [];
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  return [...h, ...Array(fill).fill("0"), ...t].map((g) => parseInt(g, 16).toString(16)).join(":");
}

/** IPv6 as Milo (Go's net/netip) prints it: the first longest run of zero groups as `::`. */
function rfc5952(ip: string): string {
  const g = canon(ip).split(":");
  let best = -1, len = 0;
  for (let i = 0; i < 8;) {
    if (g[i] !== "0") {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === "0") j++;
    if (j - i > len && j - i > 1) [best, len] = [i, j - i];
    i = j;
  }
  if (best < 0) return g.join(":");
  return `${g.slice(0, best).join(":")}::${g.slice(best + len).join(":")}`;
}

/** The simulated Milo: its state, and the fetch each simulated client sends through. */
export class SimMilo {
  readonly #sched: Scheduler;
  readonly #o: MiloOptions;
  readonly claims = new Map<string, WireClaim>();
  readonly #allocs = new Map<string, Allocation>();
  readonly classes: Record<string, ClassSpec>;
  readonly #episodes: { kind: Episode; from: number; to: number }[] = [];
  /** Namespaces being deleted until then (creates refused). */
  #terminatingUntil = -Infinity;
  /** How long the next request sent is held before it runs ({@link holdNext}). */
  #hold = 0;
  /** When a create of each name last committed a new allocation. */
  readonly #committed = new Map<string, number>();
  #uid = 0;
  #rv = 1000;
  readonly events: MiloEvents;
  /** Requests handled. */
  handled = 0;

  constructor(sched: Scheduler, o: MiloOptions, events: MiloEvents = {}) {
    this.#sched = sched;
    this.#o = o;
    this.events = events;
    this.classes = {
      "vpc-pods-ipv4": { family: "IPv4", pool: "vpc-sim-pods-v4", size: o.poolSize },
      "vpc-pods-ipv6": { family: "IPv6", pool: "vpc-sim-pods-v6", size: o.poolSize },
    };
  }

  /** The next request sent waits this long at Milo before it runs (one request held in a queue). */
  holdNext(ms: number): void {
    this.#hold = ms;
  }

  /** Turns `kind` on from now for `ms`. */
  episode(kind: Episode, ms: number): void {
    const now = this.#sched.now();
    this.#episodes.push({ kind, from: now, to: now + ms });
  }

  /** The episodes in force now. */
  troubles(): Set<Episode> {
    const now = this.#sched.now();
    return new Set(this.#episodes.filter((e) => e.from <= now && now < e.to).map((e) => e.kind));
  }

  /** Until when the last episode runs. */
  get troubledUntil(): number {
    return Math.max(-Infinity, ...this.#episodes.map((e) => e.to));
  }

  /** Deletes every claim of the namespace (as its deletion does) and refuses creates for `ms`. */
  deleteNamespace(ms: number): void {
    for (const name of [...this.claims.keys()].sort()) {
      this.#remove(name, "namespace deleted", undefined);
    }
    this.#terminatingUntil = this.#sched.now() + ms;
  }

  /** Deletes one claim by hand (an operator, a tool), as Milo's DELETE does. */
  deleteByHand(name: string): boolean {
    if (!this.claims.has(name)) return false;
    this.#remove(name, "deleted by hand", undefined);
    return true;
  }

  /** The address a retained allocation keeps for `name`, if any. */
  retainedFor(name: string): string | undefined {
    this.#expire();
    const a = this.#allocs.get(name);
    return a && !a.claimUid ? a.address : undefined;
  }

  /** A fetch for one simulated client: its requests leave from the calling process. */
  readonly fetch =
    ((input: RequestInfo | URL, init?: RequestInit) => this.#request(input, init)) as typeof fetch;

  #request(input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> {
    const sched = this.#sched;
    const proc = sched.current();
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init.method ?? "GET";
    const path = url.pathname.startsWith(BASE_PATH)
      ? url.pathname.slice(BASE_PATH.length)
      : url.pathname;
    const body = typeof init.body === "string" ? JSON.parse(init.body) as Json : undefined;
    const target = CLAIMS.exec(path)?.[2] ??
      String((body?.metadata as Json | undefined)?.name ?? "list");
    const rng = sched.rng(`milo ${proc.name} ${method} ${target}`);
    const signal = init.signal ?? undefined;
    return new Promise<Response>((resolve, reject) => {
      let done = false;
      const finish = (f: () => void) => {
        if (done) return;
        done = true;
        signal?.removeEventListener("abort", onAbort);
        f();
      };
      // The sender's timeout fires from a timer of its own: its failure reaches the sender
      // through an event of the sender's (a killed process hears nothing).
      const onAbort = () =>
        sched.after(0, `milo ${proc.name} ${method} ${target} aborted`, () =>
          finish(() => {
            this.events.changed?.(`milo: ${proc.name} gave up its ${method} ${target}`);
            reject(signal!.reason);
          }), proc);
      if (signal?.aborted) return void onAbort();
      signal?.addEventListener("abort", onAbort);
      const troubles = this.troubles();
      if (troubles.has("down") || (troubles.has("flaky") && rng.chance(0.15))) {
        return finish(() => reject(connectRefused()));
      }
      const quick = () => rng.skewed(1, this.#o.latencyMs);
      const key = `milo ${proc.name} ${method} ${target}`;
      const back = (r: () => Response | Error) =>
        sched.after(
          this.troubles().has("slow") ? rng.skewed(1, 5_000) : quick(),
          `${key} answer`,
          () => {
            const res = r();
            finish(() => {
              if (res instanceof Error) return reject(res);
              this.events.answered?.(proc.name, method, target);
              resolve(res);
            });
          },
          proc,
        );
      const stalled = troubles.has("stalled");
      const held = this.#hold;
      this.#hold = 0;
      sched.after(quick(), `${key} arrives`, () => {
        // Priority and fairness refuses at once what its queues cannot take; the rest waits
        // its turn (long, when Milo is stalled), and runs a while after it starts.
        const refused = this.#refuse(rng, this.troubles());
        if (refused) return back(refused);
        const startedAt = sched.now() + (stalled ? rng.skewed(0, 25_000) : 0) + held;
        sched.after(
          startedAt - sched.now() + rng.skewed(0, stalled ? 3_000 : 20),
          `${key} runs`,
          () => {
            const now = this.troubles();
            const answer = this.#handle(
              method,
              path,
              url.searchParams,
              body,
              rng,
              now,
              startedAt,
              proc.name,
            );
            const reset = now.has("flaky") && rng.chance(0.15);
            this.events.changed?.(
              `milo: ${method} ${target} of ${proc.name}: ${answer.status}${
                reset ? ", reset" : ""
              }`,
            );
            back(reset ? () => connectionReset() : answer);
          },
          null,
        );
      }, null);
    });
  }

  /** Priority and fairness's 429, or a 503, before the request runs (none when not overloaded). */
  #refuse(rng: Prng, troubles: Set<Episode>): Answer | undefined {
    if (!troubles.has("overload") || !rng.chance(0.5)) return undefined;
    if (rng.chance(0.6)) {
      const after = String(rng.int(1, 3));
      const date = this.#date();
      return Object.assign(() =>
        new Response("Too many requests, please try again later.\n", {
          status: 429,
          headers: { "content-type": "text/plain", "retry-after": after, date },
        }), { status: 429 });
    }
    return this.#error(injected(503, 1));
  }

  /** One request at Milo, handled now; answers how to build its Response when it is delivered. */
  #handle(
    method: string,
    path: string,
    query: URLSearchParams,
    body: Json | undefined,
    rng: Prng,
    troubles: Set<Episode>,
    startedAt: number,
    by: string,
  ): Answer {
    this.handled++;
    this.#expire();
    const m = CLAIMS.exec(path);
    if (!m || m[1] !== NS) return this.#error(notFound("ipclaims", m?.[2] ?? ""));
    const name = m[2];
    try {
      if (!name && method === "POST") {
        return this.#json(201, this.#create(body ?? {}, rng, troubles, startedAt));
      }
      if (!name && method === "GET") {
        return this.#json(200, this.#list(query.get("labelSelector") ?? ""));
      }
      if (name && method === "GET") {
        const c = this.claims.get(name);
        if (!c) throw notFound("ipclaims", name);
        // A release's read of its own stable name's claim (a DEL's, the journal's, the sweep's).
        const own = c.metadata.annotations?.["milo-ipam.io/container-id"]?.slice(0, 8) ?? "-";
        const release = / reconcile$| sweep$/.test(by) || new RegExp(` ${own} DEL#`).test(by);
        if (troubles.has("racer") && release && /^(podid|slot)-/.test(name)) {
          this.#race(c, rng);
        }
        return this.#json(200, structuredClone(c));
      }
      if (name && method === "DELETE") {
        if (troubles.has("release-fail") && rng.chance(0.5) && this.claims.has(name)) {
          this.claims.get(name)!.status.phase = "Releasing";
          throw releaseFailed(name);
        }
        const judged = (body as { preconditions?: { uid?: unknown } } | undefined)?.preconditions
          ?.uid;
        return this.#json(
          200,
          this.#delete(name, by, typeof judged === "string" ? judged : undefined),
        );
      }
      return this.#error(notFound("ipclaims", name ?? ""));
    } catch (err) {
      if (err instanceof Error && "status" in err) return this.#error(err as ApiError);
      throw err;
    }
  }

  #create(body: Json, rng: Prng, troubles: Set<Episode>, started: number): WireClaim {
    const meta = body.metadata as WireClaim["metadata"];
    const spec = body.spec as WireClaim["spec"];
    const name = meta.name;
    const cls = this.classes[spec.className ?? ""];
    if (!cls) throw notFound("ipclasses", spec.className ?? "");
    if (this.#sched.now() < this.#terminatingUntil) throw namespaceRefused(NS, true);
    if (troubles.has("quota") && rng.chance(0.5)) {
      throw forbidden("ipclaims", name, rng.pick(QUOTA_REFUSALS));
    }
    if (this.claims.size >= this.#o.quota) throw forbidden("ipclaims", name, QUOTA_REFUSALS[0]);
    const live = this.claims.get(name);
    if (live) {
      // The reclaim probe finds the live claim's allocation: "already bound" (reclaim.go); a
      // create that started before another create of the name committed fails its insert (500).
      if ((this.#committed.get(name) ?? -Infinity) > started) {
        throw allocationExists(name, cls.pool);
      }
      throw conflict(
        "ipclaims",
        name,
        `ipam: retained allocation does not match this claim: an allocation under this ` +
          `identity is already bound to "${name}"`,
      );
    }
    const kept = this.#allocs.get(name);
    let address: string;
    if (kept && !kept.claimUid && kept.family === cls.family) {
      address = kept.address;
    } else if (spec.address) {
      address = cls.family === "IPv6" ? rfc5952(spec.address) : spec.address;
      if (this.#holder(address)) {
        throw conflict("ipclaims", "", `ipam: address already allocated: ${address}`);
      }
    } else {
      const free = this.#firstFree(cls);
      if (free === undefined) {
        const e = exhausted(cls.pool, spec.className!, cls.family === "IPv4" ? 32 : 96, 100);
        throw e;
      }
      address = free;
    }
    const uid = `00000000-0000-4000-8000-${String(++this.#uid).padStart(12, "0")}`;
    const now = this.#sched.now();
    const claim: WireClaim = {
      apiVersion: "ipam.miloapis.com/v1alpha1",
      kind: "IPClaim",
      metadata: {
        name,
        namespace: NS,
        uid,
        resourceVersion: String(++this.#rv),
        creationTimestamp: new Date(now).toISOString().replace(/\.\d{3}Z$/, "Z"),
        ...(meta.labels ? { labels: { ...meta.labels } } : {}),
        ...(meta.annotations ? { annotations: { ...meta.annotations } } : {}),
      },
      spec: { ...spec, ipFamily: cls.family, ownerRef: OWNER },
      status: {
        phase: "Bound",
        ...(cls.family === "IPv4"
          ? { allocatedCIDR: `${address}/32`, address }
          : { allocatedCIDR: `${address}/96` }),
        poolRef: { name: cls.pool },
        boundAllocationRef: { name: allocationName(NS, name) },
      },
    };
    this.claims.set(name, claim);
    this.#allocs.set(name, { name, family: cls.family, address, claimUid: uid });
    if (!kept) this.#committed.set(name, now);
    this.events.changed?.(
      `milo: ${kept ? "re-bound" : "made"} ${name} ${address} for ${holderOf(claim)} (uid …${
        uid.slice(-4)
      })`,
    );
    return structuredClone(claim);
  }

  /** Someone deletes the claim `c` by hand a moment after a GET read it (a racing tool). */
  #race(c: WireClaim, rng: Prng): void {
    const uid = c.metadata.uid;
    this.#sched.after(rng.int(1, 40), `milo racer ${c.metadata.name}`, () => {
      if (this.claims.get(c.metadata.name)?.metadata.uid === uid) {
        this.#remove(c.metadata.name, "deleted by a racing hand", undefined);
      }
    }, null);
  }

  /** Milo's DELETE: by name, whatever `judged` (its precondition's uid) says. */
  #delete(name: string, by: string, judged: string | undefined): WireClaim {
    const c = this.claims.get(name);
    if (!c) throw notFound("ipclaims", name);
    this.#remove(name, "deleted", by, judged);
    return {
      ...c,
      metadata: { ...c.metadata, resourceVersion: String(++this.#rv) },
      status: { ...c.status, phase: "Releasing" },
    };
  }

  #remove(name: string, why: string, by: string | undefined, judged?: string): void {
    const c = this.claims.get(name)!;
    this.claims.delete(name);
    this.events.removed?.(c, by, judged);
    const a = this.#allocs.get(name);
    if (a && c.spec.reclaimPolicy === "Retain") {
      a.claimUid = undefined;
      a.expiresAt = this.#sched.now() + this.#o.retentionMs;
    } else this.#allocs.delete(name);
    this.events.changed?.(
      `milo: ${why} ${name} ${a?.address ?? "?"} of ${holderOf(c)}${
        c.spec.reclaimPolicy === "Retain" ? " (retained)" : ""
      }`,
    );
  }

  #list(selector: string): Json {
    const items = [...this.claims.values()].filter((c) =>
      matches(selector, c.metadata.labels ?? {})
    );
    const base = fixture<Json>("ipclaim-list.json");
    return {
      ...base,
      metadata: { resourceVersion: String(this.#rv) },
      items: structuredClone(items),
    };
  }

  /** Frees retained allocations whose lease ended (Milo's lease sweeper). */
  #expire(): void {
    const now = this.#sched.now();
    for (const [name, a] of this.#allocs) {
      if (!a.claimUid && a.expiresAt !== undefined && a.expiresAt <= now) {
        this.#allocs.delete(name);
        this.events.changed?.(`milo: retention of ${name} ${a.address} ended`);
      }
    }
  }

  #holder(address: string): Allocation | undefined {
    for (const a of this.#allocs.values()) if (canon(a.address) === canon(address)) return a;
    return undefined;
  }

  #firstFree(cls: ClassSpec): string | undefined {
    const used = new Set([...this.#allocs.values()].map((a) => canon(a.address)));
    for (let n = 0; n < cls.size; n++) {
      const a = cls.family === "IPv4" ? v4(n) : v6(n);
      if (!used.has(canon(a))) return a;
    }
    return undefined;
  }

  #date(): string {
    return new Date(this.#sched.now()).toUTCString();
  }

  #json(status: number, body: unknown): Answer {
    const text = JSON.stringify(body);
    const date = this.#date();
    return Object.assign(() =>
      new Response(text, {
        status,
        headers: { "content-type": "application/json", date },
      }), { status });
  }

  #error(e: ApiError): Answer {
    const text = JSON.stringify(e.status);
    const date = this.#date();
    return Object.assign(() =>
      new Response(text, {
        status: e.status.code,
        headers: { "content-type": "application/json", date, ...e.headers },
      }), { status: e.status.code });
  }
}

const OWNER = { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: "tenant-sim" };

/** Quota admission's refusals (`userFacingClaimError`), each a 403 Forbidden. */
const QUOTA_REFUSALS = [
  "You've reached your quota for this resource type. Delete unused resources to free up " +
  "capacity, or contact support to request a higher limit.",
  "Your request took too long to be checked against your quota. Please try again in a moment " +
  "— if this keeps happening, contact support.",
  "We're still cleaning up from a previous attempt to create this resource. Please try again " +
  "in a few seconds.",
];

/** milo-dev/status.ts `allocationExists`, in this simulation's project and namespace. */
function allocationExists(name: string, pool: string): ApiError {
  return injectedAllocationExists(allocationName(NS, name), pool);
}

function injectedAllocationExists(alloc: string, pool: string): ApiError {
  const g = "ipam.miloapis.com";
  const err = `ipam: allocation already exists: an allocation already exists for ` +
    `"project/tenant-sim/${g}/ipallocations/${NS}/${alloc}" in pool "project/tenant-sim/${g}/ippools/${pool}"`;
  const e = injected(500, 0);
  e.status.message = `Internal error occurred: ${err}`;
  e.status.details = { causes: [{ message: err }] };
  return e;
}

/** Who a claim records, in one line. */
export function holderOf(c: WireClaim): string {
  const a = c.metadata.annotations ?? {};
  return `${a["milo-ipam.io/pod"] ?? "?"} ${(a["milo-ipam.io/container-id"] ?? "?").slice(0, 8)}/${
    a["milo-ipam.io/ifname"] ?? "?"
  }@${a["milo-ipam.io/node"] ?? "?"}`;
}

/** Matches one label selector (`k=v`, `k==v`, `k!=v`, `k`) against labels. */
function matches(selector: string, labels: Record<string, string>): boolean {
  return selector.split(",").filter(Boolean).every((term) => {
    const ne = term.indexOf("!=");
    if (ne > 0) return labels[term.slice(0, ne)] !== term.slice(ne + 2);
    const eq = term.indexOf("=");
    if (eq < 0) return term in labels;
    return labels[term.slice(0, eq)] === term.slice(eq + 1).replace(/^=/, "");
  });
}

/** Deno's fetch failing to connect (never sent: lib/http.ts `neverSent`). */
function connectRefused(): TypeError {
  return new TypeError(
    "error sending request for url (https://milo.sim/): client error (Connect): " +
      "tcp connect error: Connection refused (os error 111)",
  );
}

/** Deno's fetch losing the connection after the request went out (Milo may have acted). */
function connectionReset(): TypeError {
  return new TypeError(
    "error sending request for url (https://milo.sim/): connection error: " +
      "Connection reset by peer (os error 104)",
  );
}
