/**
 * What the verbs ask of Milo: the seam between the handlers (lib/add.ts,
 * lib/del.ts, lib/check.ts, lib/gc.ts, lib/status.ts) and the wire client
 * (lib/milo.ts `MiloClient`, which implements it, checked at compile time).
 * Handler tests may drive it with an in-memory fake
 * (testing/milo_calls_fake.ts); the wire client is tested at the wire.
 */
import type { IPClaim } from "./milo_objects.ts";
import type { Release, ReleaseEvents } from "./milo_release.ts";

/** A LIST's claims, and Milo's clock when it answered (its `Date` header; NaN without one). */
export interface ClaimList {
  items: IPClaim[];
  serverTime: number;
}

/** What a create's caller hears of its attempts. */
export interface CreateEvents {
  /** An attempt went out and its answer was not read: Milo may run it yet. */
  unanswered(): void;
}

export interface MiloCalls {
  /**
   * Creates a claim: the bound claim (201), or null when its name is taken
   * (Milo's AlreadyExists). Throws Milo's other refusals; a failure after a
   * create went unanswered is `inDoubt` (lib/errors.ts). `heard` hears of
   * each attempt sent without its answer read, whatever the call's end: a
   * create that succeeded on a later attempt may still land after it.
   */
  createClaim(body: Record<string, unknown>, heard?: CreateEvents): Promise<IPClaim | null>;
  /** The claim `name`, or null when Milo has none. */
  getClaim(name: string): Promise<IPClaim | null>;
  /** The claims a label selector names, with Milo's clock of the answer. */
  listClaimsAt(labelSelector: string): Promise<ClaimList>;
  /** Releases `name` only while a fresh read finds it `mine` (lib/milo_release.ts). */
  releaseIf(
    name: string,
    mine: (claim: IPClaim, serverTime: number) => boolean,
    events?: ReleaseEvents,
  ): Promise<Release>;
  /** {@link releaseIf} of the object with `uid`. */
  releaseClaim(name: string, uid: string, events?: ReleaseEvents): Promise<Release>;
  /** Deletes `name` whatever it is now: only an attachment's own name, under its lock. */
  deleteClaim(name: string): Promise<"released" | "absent">;
  /** Requests sent so far (the call's log line). */
  readonly requests: number;
}
