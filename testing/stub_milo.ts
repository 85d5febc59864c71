/**
 * An in-memory Milo for in-process handler tests: a stubbed `fetch` that
 * answers POST/GET/DELETE/LIST of IPClaims, LIST of IPAllocations (bound and
 * retained), LIST of IPClasses (none: a tenant cannot read Milo's class
 * catalog) and GET of the project's quota bucket in the wire shapes of Milo's API (bodies built from the shared
 * fixtures, testing/milo_fixtures.ts), records every request, and lets a test replace
 * or observe any single request (testing/stub_invocation.ts builds a
 * handler's Invocation over it).
 */
import { API_PATH, type ClientOptions, MiloClient } from "../lib/milo.ts";
import { blockStart, cidrContains, parseCidr, parseIp } from "../lib/ip.ts";
import { allocationName } from "../lib/milo_objects.ts";
import { bucketName, projectOf } from "../lib/milo_quota.ts";
import {
  allocationItem,
  fixture,
  namespaceReply,
  reply,
  statusBody,
  statusReply,
} from "./milo_fixtures.ts";

import type { Json, StubClass, StubRequest, WireClaim } from "./stub_types.ts";
export type { Json, StubClass, StubRequest, WireClaim } from "./stub_types.ts";

/**
 * One injected answer: when a request matches `method` and `path` (a string
 * matches a path ending with it), `answer` runs; a Response it returns is the
 * answer, undefined lets the stub answer normally, and a throw fails the fetch.
 * It applies to `times` matching requests (default 1), the first fault first.
 */
export interface Fault {
  method?: string;
  path?: string | RegExp;
  times?: number;
  answer: (
    req: StubRequest,
    stub: StubMilo,
  ) => Response | undefined | Promise<Response | undefined>;
}

/** The base URL a stub client uses: Milo's project front door. */
export const STUB_BASE =
  "https://milo.test/apis/resourcemanager.miloapis.com/v1alpha1/projects/tenant-a/control-plane";
/** The bearer token the stub accepts. */
export const STUB_TOKEN = "stub-token-8c1d2e";

/** A fetch failure as Deno reports a refused connection. */
export function refused(): never {
  throw new TypeError(
    "error sending request for url (https://milo.test/): client error (Connect): " +
      "tcp connect error: Connection refused (os error 111)",
  );
}

/**
 * A fetch failure after the request went out, as Deno reports the request's
 * timeout: Milo may have run it (a create landed, a DELETE removed), its
 * answer lost.
 */
export function lost(): never {
  throw new DOMException("Signal timed out.", "TimeoutError");
}

const CLAIMS = new RegExp(`^${API_PATH}/namespaces/([^/]+)/ipclaims(?:/([^/]+))?$`);
const ALLOCATIONS = new RegExp(`^${API_PATH}/namespaces/([^/]+)/ipallocations$`);
const BUCKET =
  /^\/apis\/quota\.miloapis\.com\/v1alpha1\/namespaces\/milo-system\/allowancebuckets\/([^/]+)$/;

/** Matches one label-selector term (`k=v`, `k==v`, `k!=v`, `k`) against labels. */
function matchesSelector(selector: string, labels: Record<string, string>): boolean {
  return selector.split(",").filter(Boolean).every((term) => {
    const ne = term.indexOf("!=");
    if (ne > 0) return labels[term.slice(0, ne)] !== term.slice(ne + 2);
    const eq = term.indexOf("=");
    if (eq < 0) return term in labels;
    const value = term.slice(eq + 1).replace(/^=/, "");
    return labels[term.slice(0, eq)] === value;
  });
}

/** The in-memory Milo. */
export class StubMilo {
  /** Every request received, in order. */
  readonly requests: StubRequest[] = [];
  /** Every backoff the clients of this stub slept (ms); nothing really waits. */
  readonly sleeps: number[] = [];
  /**
   * The namespaces of the project, each live or being deleted: a create into
   * any other, or into one being deleted, is Milo's 403 (`RefuseNamespace`).
   */
  namespaces: Record<string, "live" | "terminating"> = { default: "live" };
  /** IPClasses by name (the classes claims may name; a tenant's LIST shows none). */
  classes: Record<string, StubClass> = {
    "vpc-pods-ipv4": { family: "IPv4", pool: "vpc-7b3e-pods-v4" },
    "vpc-pods-ipv6": { family: "IPv6", pool: "vpc-7b3e-pods-v6" },
  };
  /** The clock of creation timestamps (ms since epoch). */
  now: () => number = Date.now;
  /** The lease of the `n`-th claim (from 0) of a family; the default follows the fixtures. */
  allocate: (family: "IPv4" | "IPv6", n: number) => { allocatedCIDR: string; address?: string } = (
    family,
    n,
  ) =>
    family === "IPv4"
      ? { allocatedCIDR: `10.40.0.${7 + n}/32`, address: `10.40.0.${7 + n}` }
      : { allocatedCIDR: `fd20:0:0:1:0:${(3 + n).toString(16)}::/96` };

  /**
   * What a create of a name whose Retain claim was deleted meets: `rebind`
   * (Milo's `internal/allocator/reclaim.go`: the same address again) or
   * `conflict` (its earlier claim storage: 409).
   */
  retained: "rebind" | "conflict" = "rebind";

  /**
   * A claim DELETE checks its DeleteOptions `preconditions.uid` (409
   * `Conflict`, as Kubernetes' generic stores do). Off, as Milo:
   * `AllocatingREST.Delete` (`internal/registry/ipam/ipclaim/storage.go`)
   * reads the claim by name and deletes it whatever the preconditions say;
   * a test that turns it on models another server and says why.
   */
  checkedPreconditions = false;

  /**
   * The project's `ipclaims-per-project` limit its AllowanceBucket answers
   * (what it holds: the claims stored); undefined: Milo holds no bucket (404).
   */
  quotaLimit: number | undefined = undefined;

  readonly #claims = new Map<string, WireClaim>();
  /** Claims deleted under reclaimPolicy Retain, whose leases are kept for their names, and when. */
  readonly #kept = new Map<string, { claim: WireClaim; at: number }>();
  readonly #faults: (Fault & { left: number })[] = [];
  readonly #counts = { IPv4: 0, IPv6: 0 };
  #version = 48213;

  /** The stubbed fetch. */
  readonly fetch = (async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const text = typeof init?.body === "string" ? init.body : "";
    const req: StubRequest = {
      method: init?.method ?? "GET",
      path: url.pathname.startsWith(new URL(STUB_BASE).pathname)
        ? url.pathname.slice(new URL(STUB_BASE).pathname.length)
        : url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: new Headers(init?.headers),
      body: text ? JSON.parse(text) : undefined,
    };
    this.requests.push(req);
    for (const f of this.#faults) {
      if (f.left <= 0 || !this.#matches(f, req)) continue;
      f.left--;
      const r = await f.answer(req, this);
      if (r) return r;
    }
    const res = this.#serve(req);
    // Every answer carries the server's clock, as Go's net/http (Milo's server) sends it.
    res.headers.set("date", new Date(this.now()).toUTCString());
    return res;
  }) as typeof fetch;

  /**
   * Holds the next DELETE before Milo runs it: its sender gets no answer
   * (timed out), and Milo runs it when the function answered is called (a
   * DELETE run after its sender gave up, on whatever claim the name has then).
   */
  holdNextDelete(): () => void {
    let run: (() => void) | undefined;
    this.inject({
      method: "DELETE",
      answer: (req) => {
        const name = decodeURIComponent(req.path.slice(req.path.lastIndexOf("/") + 1));
        run = () => void this.deleteClaim(name);
        return lost();
      },
    });
    return () => {
      if (!run) throw new Error("no DELETE was held");
      run();
    };
  }

  /** Adds a fault (see {@link Fault}). */
  inject(fault: Fault): void {
    this.#faults.push({ ...fault, left: fault.times ?? 1 });
  }

  /** Removes every fault. */
  clearFaults(): void {
    this.#faults.length = 0;
  }

  /** The stored claim `name`, if any. */
  get(name: string, namespace = "default"): WireClaim | undefined {
    return this.#claims.get(`${namespace}/${name}`);
  }

  /** Every stored claim. */
  all(): WireClaim[] {
    return [...this.#claims.values()];
  }

  /** Stores a claim as it is (replacing one of the same name). */
  put(claim: WireClaim): WireClaim {
    this.#claims.set(`${claim.metadata.namespace}/${claim.metadata.name}`, claim);
    return claim;
  }

  /**
   * Deletes a claim as Milo's DELETE does (by name; under Retain its address
   * is kept for the name), behind the plugin's back; answers the claim deleted.
   */
  deleteClaim(name: string, namespace = "default"): WireClaim | undefined {
    const c = this.get(name, namespace);
    this.#delete(namespace, name, undefined);
    return c;
  }

  /** Removes a claim behind the plugin's back. */
  remove(name: string, namespace = "default"): void {
    this.#claims.delete(`${namespace}/${name}`);
  }

  /**
   * Stores the claim a create body makes (as a 201 would answer it), with
   * `over` merged into metadata, spec and status.
   */
  materialize(
    create: Json,
    over: {
      metadata?: Partial<WireClaim["metadata"]>;
      spec?: Partial<WireClaim["spec"]>;
      status?: Partial<WireClaim["status"]>;
    } = {},
  ): WireClaim {
    const meta = create.metadata as WireClaim["metadata"];
    const spec = create.spec as WireClaim["spec"];
    const cls = this.classes[spec.className ?? ""];
    const family = cls?.family ?? (spec.ipFamily === "IPv6" ? "IPv6" : "IPv4");
    const base = fixture<WireClaim>(
      family === "IPv4" ? "ipclaim-bound-ipv4.json" : "ipclaim-bound-ipv6-block.json",
    );
    const lease = this.allocate(family, this.#counts[family]++);
    const claim: WireClaim = {
      apiVersion: base.apiVersion,
      kind: base.kind,
      metadata: {
        name: meta.name,
        namespace: meta.namespace ?? "default",
        uid: crypto.randomUUID(),
        resourceVersion: String(++this.#version),
        creationTimestamp: new Date(this.now()).toISOString().replace(/\.\d{3}Z$/, "Z"),
        ...(meta.labels ? { labels: meta.labels } : {}),
        ...(meta.annotations ? { annotations: meta.annotations } : {}),
        ...over.metadata,
      },
      spec: { ...spec, ipFamily: family, ownerRef: base.spec.ownerRef, ...over.spec },
      status: {
        phase: "Bound",
        ...lease,
        poolRef: { name: cls?.pool ?? base.status.poolRef!.name },
        boundAllocationRef: { name: allocationName(meta.namespace ?? "default", meta.name) },
        ...over.status,
      },
    };
    return this.put(claim);
  }

  /** A client of this stub: the real {@link MiloClient} over the stubbed fetch and sleep. */
  client(
    o: {
      requestMs?: number;
      deadline?: number;
      token?: string;
      namespace?: string;
      deletes?: ClientOptions["deletes"];
    } = {},
  ): MiloClient {
    return new MiloClient({
      baseUrl: STUB_BASE,
      namespace: o.namespace ?? "default",
      token: o.token ?? STUB_TOKEN,
      requestMs: o.requestMs ?? 1_000,
      deadline: o.deadline ?? Date.now() + 60_000,
      fetch: this.fetch,
      sleep: (ms) => {
        this.sleeps.push(ms);
        return Promise.resolve();
      },
      random: () => 0.5,
      ...(o.deletes ? { deletes: o.deletes } : {}),
    });
  }

  /** The recorded requests of `method` whose path ends with `path` (when given). */
  seen(method: string, path?: string): StubRequest[] {
    return this.requests.filter((r) =>
      r.method === method && (path === undefined || r.path.endsWith(path))
    );
  }

  #matches(f: Fault, req: StubRequest): boolean {
    if (f.method && f.method !== req.method) return false;
    if (f.path === undefined) return true;
    return typeof f.path === "string" ? req.path.endsWith(f.path) : f.path.test(req.path);
  }

  #serve(req: StubRequest): Response {
    if (req.headers.get("authorization") !== `Bearer ${STUB_TOKEN}`) return statusReply(401);
    if (req.path === `${API_PATH}/ipclasses` && req.method === "GET") {
      // Milo keeps the catalog in the platform project: a tenant's own key space has none.
      return reply(200, {
        apiVersion: "ipam.miloapis.com/v1alpha1",
        kind: "IPClassList",
        metadata: { resourceVersion: String(this.#version) },
        items: [],
      });
    }
    const bucket = BUCKET.exec(req.path);
    if (bucket && req.method === "GET") return this.#bucket(bucket[1]);
    const allocations = ALLOCATIONS.exec(req.path);
    if (allocations && req.method === "GET") return this.#allocations(allocations[1]);
    const m = CLAIMS.exec(req.path);
    if (!m) {
      return reply(404, {
        kind: "Status",
        apiVersion: "v1",
        metadata: {},
        status: "Failure",
        message: "the server could not find the requested resource",
        reason: "NotFound",
        details: {},
        code: 404,
      });
    }
    const [, ns, name] = m;
    if (!name && req.method === "POST") return this.#create(ns, req.body as Json);
    if (!name && req.method === "GET") return this.#list(ns, req.query);
    if (name && req.method === "GET") {
      const c = this.get(name, ns);
      return c ? reply(200, c) : statusReply(404, { name });
    }
    if (name && req.method === "DELETE") return this.#delete(ns, name, req.body as Json);
    return statusReply(405, {
      message: `method ${req.method} not allowed`,
      reason: "MethodNotAllowed",
    });
  }

  /** The project's AllowanceBucket of IPClaims (milo's `quota.miloapis.com`), if it has one. */
  #bucket(name: string): Response {
    const project = projectOf(STUB_BASE)!;
    if (this.quotaLimit === undefined || name !== bucketName(project)) {
      return reply(404, {
        ...statusBody(404, { name }),
        message: `allowancebuckets.quota.miloapis.com "${name}" not found`,
        details: { name, group: "quota.miloapis.com", kind: "allowancebuckets" },
      });
    }
    const allocated = this.all().length, limit = this.quotaLimit;
    return reply(200, {
      apiVersion: "quota.miloapis.com/v1alpha1",
      kind: "AllowanceBucket",
      metadata: { name, namespace: "milo-system" },
      spec: {
        consumerRef: { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: project },
        resourceType: "ipam.miloapis.com/ipclaims",
      },
      status: {
        limit,
        allocated,
        available: Math.max(0, limit - allocated),
        claimCount: allocated,
      },
    });
  }

  #create(ns: string, body: Json): Response {
    const meta = body?.metadata as WireClaim["metadata"] | undefined;
    const spec = body?.spec as WireClaim["spec"] | undefined;
    if (!meta?.name || !spec) return statusReply(422, { name: String(meta?.name ?? "") });
    if (this.get(meta.name, ns)) return statusReply(409, { name: meta.name });
    const cls = this.classes[spec.className ?? ""];
    if (!cls) {
      return statusReply(400, { message: `IPClass "${spec.className}" not found` });
    }
    if (this.namespaces[ns] !== "live") {
      return namespaceReply(ns, this.namespaces[ns] === "terminating");
    }
    if (spec.ipFamily && spec.ipFamily !== cls.family) {
      return statusReply(400, {
        message:
          `spec.ipFamily ${spec.ipFamily} does not match IPClass "${spec.className}" (${cls.family})`,
      });
    }
    const kept = this.#kept.get(`${ns}/${meta.name}`)?.claim.status;
    if (kept && this.retained === "conflict") {
      return statusReply(409, {
        name: meta.name,
        reason: "Conflict",
        message: `Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "${meta.name}": ` +
          `IPAllocation "alloc-0" (${kept.allocatedCIDR}) was retained when the previous claim ` +
          "of this name was deleted and holds its address; this server does not re-bind a " +
          "retained allocation",
      });
    }
    // Milo's reclaim probe runs before anything else (`ipclaim/storage.go`): a retained
    // allocation of the name is re-bound, and a pinned `spec.address` is not looked at then.
    const pinned = spec.address && !kept ? this.#pin(spec.address) : undefined;
    if (pinned instanceof Response) return pinned;
    this.#kept.delete(`${ns}/${meta.name}`);
    const lease = kept
      ? { status: { allocatedCIDR: kept.allocatedCIDR, address: kept.address } }
      : pinned;
    return reply(201, this.materialize({ ...body, metadata: { ...meta, namespace: ns } }, lease));
  }

  /** The lease of a requested `spec.address`, or Milo's 409 when a claim or a retained one has it. */
  #pin(address: string): { status: WireClaim["status"] } | Response {
    const held = [...this.all(), ...[...this.#kept.values()].map((k) => k.claim)].map((c) =>
      c.status
    );
    const ip = parseIp(address);
    const within = (cidr?: string) => !!ip && !!cidr && cidrContains(parseCidr(cidr)!, ip);
    if (held.some((st) => st.address === address || within(st.allocatedCIDR))) {
      return statusReply(409, {
        reason: "Conflict",
        message: 'Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "": ' +
          `ipam: address already allocated: ${address}`,
      });
    }
    // Milo binds the block the address lies in: `parseRequestedBlock` masks it to the class's
    // prefix length (the stub's IPv6 classes hand out /96 blocks).
    const v6 = parseIp(address)?.family === "ipv6";
    return {
      status: v6
        ? { allocatedCIDR: `${blockStart(parseIp(address)!, 96)}/96` }
        : { allocatedCIDR: `${address}/32`, address },
    };
  }

  #list(ns: string, query: Record<string, string>): Response {
    const items = this.all().filter((c) =>
      c.metadata.namespace === ns &&
      matchesSelector(query.labelSelector ?? "", c.metadata.labels ?? {})
    );
    const from = Number(query.continue ?? 0);
    const limit = Number(query.limit ?? 0) || items.length;
    const page = items.slice(from, from + limit);
    const next = from + limit < items.length ? String(from + limit) : undefined;
    const base = fixture<Json>("ipclaim-list.json");
    return reply(200, {
      ...base,
      metadata: { resourceVersion: String(this.#version), ...(next ? { continue: next } : {}) },
      items: page,
    });
  }

  /** Milo's IPAllocationList of `ns`: one bound to each claim, and the retained ones, by name. */
  #allocations(ns: string): Response {
    const bound = this.all().filter((c) => c.metadata.namespace === ns).map((c) =>
      allocationItem(c, c.status.boundAllocationRef?.name ?? allocationName(ns, c.metadata.name))
    );
    const retained = [...this.#kept.values()].filter((k) => k.claim.metadata.namespace === ns)
      .map((k) => allocationItem(k.claim, allocationName(ns, k.claim.metadata.name), k.at));
    const items = [...bound, ...retained].sort((a, b) =>
      (a.metadata as Json).name! < (b.metadata as Json).name! ? -1 : 1
    );
    const base = fixture<Json>("ipallocation-list.json");
    return reply(200, { ...base, metadata: { resourceVersion: String(this.#version) }, items });
  }

  #delete(ns: string, name: string, options: Json | undefined): Response {
    const c = this.get(name, ns);
    if (!c) return statusReply(404, { name });
    const uid = (options?.preconditions as { uid?: string } | undefined)?.uid;
    if (this.checkedPreconditions && uid !== undefined && uid !== c.metadata.uid) {
      return statusReply(409, {
        name,
        reason: "Conflict",
        message: `Operation cannot be fulfilled on ipclaims.ipam.miloapis.com "${name}": ` +
          `Precondition failed: UID in precondition: ${uid}, UID in object meta: ${c.metadata.uid}`,
      });
    }
    this.remove(name, ns);
    if (c.spec.reclaimPolicy === "Retain") {
      this.#kept.set(`${ns}/${name}`, { claim: c, at: this.now() });
    }
    return reply(200, {
      ...c,
      metadata: { ...c.metadata, resourceVersion: String(++this.#version) },
      status: { ...c.status, phase: "Releasing" },
    });
  }
}
