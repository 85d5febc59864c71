/**
 * An in-memory fake of the verbs' seam to Milo (lib/milo_calls.ts
 * `MiloCalls`): no HTTP, no wire shapes, Milo's semantics where the handlers
 * meet them: a create of a taken name is AlreadyExists (null); DELETE goes by
 * name, whatever the uid judged (`AllocatingREST.Delete`,
 * `internal/registry/ipam/ipclaim/storage.go`); a Retain claim's address is
 * kept for its name and re-bound by the next create of it before a pinned
 * address is looked at (`internal/allocator/reclaim.go`); a pinned address
 * another claim holds is 409 "address already allocated". Releases run the
 * real lib/milo_release.ts over it. `fail` makes the next calls of a method
 * throw what a test gives.
 */
import { CniError } from "../lib/errors.ts";
import type { ClaimList, MiloCalls } from "../lib/milo_calls.ts";
import { type IPClaim, MiloRefusal } from "../lib/milo_objects.ts";
import { type Release, type ReleaseEvents, releaseIf } from "../lib/milo_release.ts";

type Method = "create" | "get" | "list" | "delete";

export class FakeMiloCalls implements MiloCalls {
  readonly claims = new Map<string, IPClaim>();
  /** Addresses kept for the names of Retain claims deleted. */
  readonly retained = new Map<string, IPClaim["status"]>();
  requests = 0;
  /** Milo's clock (ms since epoch). */
  now = () => Date.now();
  readonly #faults: { method: Method; error: () => Error; left: number }[] = [];
  #next = 0;

  /** The next `times` calls of `method` throw `error()`. */
  fail(method: Method, error: () => Error, times = 1): void {
    this.#faults.push({ method, error, left: times });
  }

  #call(method: Method): void {
    this.requests++;
    const f = this.#faults.find((x) => x.method === method && x.left > 0);
    if (!f) return;
    f.left--;
    throw f.error();
  }

  createClaim(body: Record<string, unknown>): Promise<IPClaim | null> {
    this.#call("create");
    const meta = body.metadata as IPClaim["metadata"];
    const spec = body.spec as IPClaim["spec"];
    if (this.claims.has(meta.name)) return Promise.resolve(null);
    const kept = this.retained.get(meta.name);
    const v6 = spec.ipFamily === "IPv6";
    const pinned = spec.address;
    if (!kept && pinned && [...this.claims.values()].some((c) => leased(c) === pinned)) {
      return Promise.reject(
        new MiloRefusal(
          { kind: "address-taken" },
          "conflict",
          `Milo: ipam: address already allocated: ${pinned}`,
          "POST ipclaims: HTTP 409 Conflict",
        ),
      );
    }
    this.retained.delete(meta.name);
    const n = ++this.#next;
    const address = pinned ?? (v6 ? `fd20::${n.toString(16)}:0:0` : `10.50.0.${n}`);
    const claim: IPClaim = {
      metadata: {
        name: meta.name,
        uid: crypto.randomUUID(),
        labels: meta.labels ?? {},
        annotations: meta.annotations ?? {},
        creationTimestamp: new Date(this.now()).toISOString().replace(/\.\d+Z$/, "Z"),
      },
      spec: { ...spec },
      status: kept ?? {
        phase: "Bound",
        ...(v6 ? { allocatedCIDR: `${address}/96` } : { allocatedCIDR: `${address}/32`, address }),
      },
    };
    this.claims.set(meta.name, claim);
    return Promise.resolve(structuredClone(claim));
  }

  getClaim(name: string): Promise<IPClaim | null> {
    this.#call("get");
    const c = this.claims.get(name);
    return Promise.resolve(c ? structuredClone(c) : null);
  }

  listClaimsAt(labelSelector: string): Promise<ClaimList> {
    this.#call("list");
    const terms = labelSelector.split(",").filter(Boolean).map((t) => t.split("="));
    const items = [...this.claims.values()].filter((c) =>
      terms.every(([k, v]) => c.metadata.labels?.[k] === v)
    );
    return Promise.resolve({ items: structuredClone(items), serverTime: this.now() });
  }

  releaseIf(
    name: string,
    mine: (claim: IPClaim, serverTime: number) => boolean,
    events?: ReleaseEvents,
  ): Promise<Release> {
    return releaseIf(
      {
        namespace: "default",
        getClaimAt: async (n) => ({ claim: await this.getClaim(n), serverTime: this.now() }),
        getClaim: (n) => this.getClaim(n),
        createClaim: (b) => this.createClaim(b),
        deleteOnce: (n) => {
          this.#call("delete");
          const gone = this.#delete(n);
          return Promise.resolve(
            gone ? { status: 200, body: gone, what: `DELETE ${n}` } : {
              status: 404,
              body: { kind: "Status", reason: "NotFound", details: { name: n } },
              what: `DELETE ${n}`,
            },
          );
        },
        backOff: () => Promise.resolve(true),
      },
      name,
      mine,
      events,
    );
  }

  releaseClaim(name: string, uid: string, events?: ReleaseEvents): Promise<Release> {
    return this.releaseIf(name, (c) => c.metadata.uid === uid, events);
  }

  deleteClaim(name: string): Promise<"released" | "absent"> {
    this.#call("delete");
    return Promise.resolve(this.#delete(name) ? "released" : "absent");
  }

  /** Milo's DELETE: by name; under Retain the address stays for the name. */
  #delete(name: string): IPClaim | undefined {
    const c = this.claims.get(name);
    if (!c) return undefined;
    this.claims.delete(name);
    if (c.spec.reclaimPolicy === "Retain") this.retained.set(name, c.status);
    return structuredClone(c);
  }
}

/** The address a claim leases. */
function leased(c: IPClaim): string | undefined {
  return c.status.address ?? c.status.allocatedCIDR?.split("/")[0];
}

/** A failure as the wire client reports Milo unreachable after sending (a create may land). */
export function unanswered(): CniError {
  const e = new CniError("transient", "Milo unreachable or overloaded: POST ipclaims", "timed out");
  e.inDoubt = true;
  return e;
}
