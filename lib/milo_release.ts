/**
 * Releasing a claim by name only while it is the object the caller means:
 * what a fresh GET must find, what Milo's answer to the DELETE says, and
 * making again a newer claim of the name that the DELETE removed in its place.
 */
import { isSharedName } from "./claims.ts";
import { CniError, errorText } from "./errors.ts";
import { type IPClaim, IPClaimSchema, remakeBody, statusError, statusOf } from "./milo_objects.ts";

/** What releasing a claim by name and uid found. */
export type Release = "released" | "absent" | "changed";

/** Why a claim of a name other sandboxes make again is not deleted under reclaimPolicy Delete. */
const SHARED_DELETE = "name other sandboxes make again: Milo deletes by name, and an address " +
  "freed in place of a newer claim could not be given back; left alone";

/** The Milo client's calls a release makes. */
export interface ReleaseCalls {
  /** The client's namespace: a claim made again is made there. */
  namespace: string;
  getClaimAt(name: string): Promise<{ claim: IPClaim | null; serverTime: number }>;
  getClaim(name: string): Promise<IPClaim | null>;
  createClaim(body: Record<string, unknown>): Promise<IPClaim | null>;
  /**
   * DELETEs the claim `name` with `options` as its body: Milo's answer
   * (accepted at 200, 202, 404 and 409) and `what` names the request.
   */
  deleteWith(
    name: string,
    options: Record<string, unknown>,
  ): Promise<{ status: number; body: unknown; what: string }>;
}

/**
 * Releases the claim `name` only when a fresh GET finds it `mine` (see
 * `MiloClient.releaseIf`): a name other sandboxes make again under a
 * reclaimPolicy other than Retain is left (`note`); a newer claim the DELETE
 * removed in its place is made again (`changed`).
 */
export async function releaseIf(
  milo: ReleaseCalls,
  name: string,
  mine: (claim: IPClaim, serverTime: number) => boolean,
  note: (why: string) => void,
): Promise<Release> {
  const { claim: now, serverTime } = await milo.getClaimAt(name);
  if (!now) return "absent";
  const uid = now.metadata.uid;
  if (!uid || !mine(now, serverTime)) return "changed";
  if (isSharedName(name) && now.spec.reclaimPolicy !== "Retain") {
    note(`reclaimPolicy ${now.spec.reclaimPolicy ?? "(the class's)"} under a ${SHARED_DELETE}`);
    return "changed";
  }
  const options = { kind: "DeleteOptions", apiVersion: "v1", preconditions: { uid } };
  const a = await milo.deleteWith(name, options);
  if (a.status === 404) return "absent";
  if (a.status === 409) {
    const st = statusOf(a.body);
    if (st?.reason === "Conflict") return "changed";
    throw statusError(a.what, 409, st);
  }
  const gone = IPClaimSchema.safeParse(a.body).data;
  if (!gone?.metadata.uid || gone.metadata.uid === uid) return "released";
  await remake(milo, gone, uid);
  note(`the DELETE removed a newer claim of that name (uid ${gone.metadata.uid}): made again`);
  return "changed";
}

/** Makes `gone` (deleted in place of `uid`) again, or fails naming it. */
async function remake(milo: ReleaseCalls, gone: IPClaim, uid: string): Promise<void> {
  const name = gone.metadata.name;
  try {
    await milo.createClaim(remakeBody(milo.namespace, gone));
  } catch (err) {
    // Made again already (its holder's retry): Milo refuses the name as taken.
    if (err instanceof CniError && err.outcome === "conflict" && await milo.getClaim(name)) {
      return;
    }
    throw new CniError(
      "transient",
      `the DELETE of claim ${name} (uid ${uid}) removed a newer claim of that name ` +
        `(uid ${gone.metadata.uid}), and making it again failed`,
      `${errorText(err)}; Milo does not check a DELETE's uid precondition`,
    );
  }
}
