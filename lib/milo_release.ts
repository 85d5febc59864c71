/**
 * Releasing a claim by name only while it is the object the caller means:
 * what a fresh GET must find, what Milo's answer to the DELETE says, and
 * making again a newer claim of the name that the DELETE removed in its place.
 *
 * Milo ignores a DELETE's uid precondition (`AllocatingREST.Delete`,
 * `internal/registry/ipam/ipclaim/storage.go`, reads the claim by name), so
 * a DELETE is never sent twice blind: one that went unanswered may have
 * removed the claim, and the name may have been made again since (a
 * re-created pod's sandbox, re-bound to its retained address). A DELETE is
 * sent again only after a fresh GET finds the same object still there.
 */
import { isSharedName } from "./claims.ts";
import { CniError, errorText, Unanswered } from "./errors.ts";
import { type IPClaim, IPClaimSchema, remakeBody, statusError, statusOf } from "./milo_objects.ts";
import { type Duplicate, restoreClaim } from "./restore.ts";

/** What releasing a claim by name and uid found. */
export type Release = "released" | "absent" | "changed";

/** Why a claim of a name other sandboxes make again is not deleted under reclaimPolicy Delete. */
const SHARED_DELETE = "name other sandboxes make again: Milo deletes by name, and an address " +
  "freed in place of a newer claim could not be given back; left alone";

/** Rounds of GET and DELETE a release makes while its DELETEs go unanswered. */
const MAX_ROUNDS = 8;

/** A claim the caller owes Milo again: a DELETE removed it in place of the one judged. */
export interface OwedRemake {
  /** The claim as it was, its address pinned (what makes it again). */
  body: Record<string, unknown>;
  why: string;
}

/** What a release tells its caller besides its outcome. */
export interface ReleaseEvents {
  /** Why it did something else than release (the caller's log or report). */
  note?(why: string): void;
  /** A newer claim it removed could not be made again now: the caller journals it. */
  owed?(remake: OwedRemake): void;
  /** A newer claim it removed has its address held by another now: two sandboxes, one address. */
  duplicate?(d: Duplicate): void;
}

/**
 * What the releases of one call heard besides their outcomes: claims owed
 * again (the caller journals them) and duplicates (logged, counted, never
 * silent).
 */
export class ReleaseTally {
  readonly owed: OwedRemake[] = [];
  readonly duplicates: Duplicate[] = [];

  /** Events of one release that tell this tally; `note` hears its notes. */
  of(note?: (why: string) => void): ReleaseEvents {
    return {
      note,
      owed: (x) => this.owed.push(x),
      duplicate: (d) => this.duplicates.push(d),
    };
  }

  /** A handler result's share: the duplicates found, if any. */
  result(): { duplicates?: Duplicate[] } {
    return this.duplicates.length ? { duplicates: this.duplicates } : {};
  }
}

/** The Milo client's calls a release makes. */
export interface ReleaseCalls {
  /** The client's namespace: a claim made again is made there. */
  namespace: string;
  getClaimAt(name: string): Promise<{ claim: IPClaim | null; serverTime: number }>;
  getClaim(name: string): Promise<IPClaim | null>;
  createClaim(body: Record<string, unknown>): Promise<IPClaim | null>;
  /**
   * DELETEs the claim `name` with `options` as its body, sent again only
   * when Milo certainly did not act on it: Milo's answer (accepted at 200,
   * 202, 404 and 409) and `what` names the request; an answer that may have
   * been lost after Milo acted throws `Unanswered` (lib/milo.ts).
   */
  deleteOnce(
    name: string,
    options: Record<string, unknown>,
  ): Promise<{ status: number; body: unknown; what: string }>;
  /**
   * Waits before round `round` (from 1) of GET and DELETE, as the client backs
   * off between attempts; false when the deadline leaves no time for one.
   */
  backOff(round: number): Promise<boolean>;
}

/**
 * Releases the claim `name` only when a fresh GET finds it `mine` (see
 * `MiloClient.releaseIf`): a name other sandboxes make again under a
 * reclaimPolicy other than Retain is left (`note`); a DELETE that went
 * unanswered is followed by a GET, and sent again only while the same object
 * is there; a newer claim the DELETE removed in its place is made again
 * (`changed`), or owed, or reported as a duplicate.
 */
export async function releaseIf(
  milo: ReleaseCalls,
  name: string,
  mine: (claim: IPClaim, serverTime: number) => boolean,
  events: ReleaseEvents = {},
): Promise<Release> {
  const note = (why: string) => events.note?.(why);
  /** The uid of the object a DELETE was sent for that went unanswered. */
  let sent: string | undefined;
  let last: Unanswered | undefined;
  let rounds = 0;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    if (round > 0 && !await milo.backOff(round)) break;
    const { claim: now, serverTime } = await milo.getClaimAt(name);
    if (!now) return sent ? "released" : "absent";
    const uid = now.metadata.uid;
    if (sent !== undefined && uid !== sent) {
      note(`the name was made again after a DELETE whose answer was lost (uid ${uid}): left alone`);
      return "changed";
    }
    if (!uid || !mine(now, serverTime)) return "changed";
    if (isSharedName(name) && now.spec.reclaimPolicy !== "Retain") {
      note(`reclaimPolicy ${now.spec.reclaimPolicy ?? "(the class's)"} under a ${SHARED_DELETE}`);
      return "changed";
    }
    const options = { kind: "DeleteOptions", apiVersion: "v1", preconditions: { uid } };
    let a: { status: number; body: unknown; what: string };
    try {
      rounds++;
      a = await milo.deleteOnce(name, options);
    } catch (err) {
      if (!(err instanceof Unanswered)) throw err;
      sent = uid;
      last = err;
      continue;
    }
    if (a.status === 404) return sent ? "released" : "absent";
    if (a.status === 409) {
      const st = statusOf(a.body);
      if (st?.reason === "Conflict") return "changed";
      throw statusError(a.what, 409, st);
    }
    const gone = IPClaimSchema.safeParse(a.body).data;
    if (!gone?.metadata.uid || gone.metadata.uid === uid) return "released";
    await remake(milo, gone, uid, events);
    return "changed";
  }
  throw new CniError(
    "transient",
    `Milo unreachable or overloaded: ${last?.what ?? `DELETE of claim ${name}`}`,
    `${last?.details ?? "no time left"}; each DELETE sent only once a GET found the same claim ` +
      "still there (an answer may be lost after Milo ran it, and Milo does not check a " +
      `DELETE's uid precondition); gave up within the deadline after ${rounds} attempt(s)`,
  );
}

/**
 * Makes `gone` (deleted in place of `uid`) again, its address pinned, and
 * verifies what Milo answers (lib/restore.ts); what cannot be made now is
 * owed, and an address another holds now is a duplicate.
 */
async function remake(
  milo: ReleaseCalls,
  gone: IPClaim,
  uid: string,
  events: ReleaseEvents,
): Promise<void> {
  const name = gone.metadata.name;
  const removed = `the DELETE removed a newer claim of that name (uid ${gone.metadata.uid})`;
  const body = remakeBody(milo.namespace, gone);
  try {
    const again = {
      ...milo,
      releaseClaim: (n: string, uid: string) => releaseIf(milo, n, (c) => c.metadata.uid === uid),
    };
    const r = await restoreClaim(again, body);
    if (r.outcome === "duplicate") {
      events.duplicate?.(r.duplicate);
      events.note?.(`${removed}; its address is now another's: ${r.duplicate.now}`);
    } else events.note?.(`${removed}: made again`);
  } catch (err) {
    const why = `the DELETE of claim ${name} (uid ${uid}) removed a newer claim of that name ` +
      `(uid ${gone.metadata.uid}), and making it again failed: ${errorText(err)}`;
    if (!events.owed) {
      throw new CniError("transient", why, "Milo does not check a DELETE's uid precondition");
    }
    events.owed({ body, why });
    events.note?.(`${why}; owed`);
  }
}
