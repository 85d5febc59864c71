import { answerDiffers, type Attachment, claimBody, leaseOf } from "./claims.ts";
import { describeHolder, holderOf, madeBy, mismatches, recordsAnother } from "./holder.ts";
import { encodeResult, type Lease } from "./cni.ts";
import { requireIdentityGrant } from "./identity_grant.ts";
import { clip, CniError, combineErrors, errorText, toCniError, withNote } from "./errors.ts";
import { cidrContains, type Family, formatCidr, miloFamily } from "./ip.ts";
import { claimNamesOf, familiesOf, type Handler, type Invocation } from "./invocation.ts";
import { afterFailedAdd, type Holding } from "./lease.ts";
import type { JournalHold } from "./journal.ts";
import { withAttachmentLock } from "./lockfile.ts";
import type { MiloCalls } from "./milo_calls.ts";
import { type IPClaim, MiloRefusal } from "./milo_objects.ts";
import { requestedAddresses } from "./requested.ts";
import { grantedScope, namesScope } from "./scope_grant.ts";
import type { NetworkConfig } from "./config.ts";
import { recheckAt, refuseWhileDeleting } from "./late_deletes.ts";

type Requested = ReturnType<typeof requestedAddresses>;

/**
 * A family's lease: its claim, whether this ADD made it (`fresh`) or found it
 * its own, and the create that makes it again (its address pinned).
 */
type Held = Lease & { name: string; uid?: string; fresh: boolean; body: Record<string, unknown> };

/**
 * ADD: lease one address per configured family from Milo. Retries of the same
 * attachment find their own claim (409 then GET). A failure in one family
 * releases the other within the reserved rollback slice of `totalMs`; what
 * the rollback did is part of the error. The attachment's lock is held
 * throughout (a concurrent ADD or DEL of it waits), and so is a release
 * journal entry of it, dropped only when the ADD succeeded. The node's record
 * (lib/holdings.ts) says `adding` before the first create and `held` once the
 * ADD succeeded; when the ADD failed and Milo answered every create it sent
 * it is what it was before (an earlier ADD's lease, or none), and left
 * `adding` (in doubt) otherwise. Refused while the
 * pod's namespace owes its share of the release journal (lib/journal.ts).
 * Claims are made in the address space the node config grants the pod's
 * namespace for the network (lib/scope_grant.ts), whatever scope the network
 * config names.
 */
export const add: Handler = async (inv) => {
  const full = inv.journal.full(inv.attachment);
  if (full) {
    throw new CniError(
      "transient",
      `${full.owed} releases are owed to Milo for ${full.share} (its limit ${full.limit}): ` +
        "ADD refused until reconcile makes them",
      `release journal ${inv.journal.dir}; run milo-ipam reconcile once Milo answers; ` +
        "other namespaces' ADDs go on",
    );
  }
  requireIdentityGrant(inv.node, inv.attachment);
  const net = {
    ...inv.conf.network,
    scope: grantedScope(inv.node, inv.attachment, inv.conf.network),
  };
  const names = claimNamesOf(inv);
  const requested = requestedAddresses(inv.conf, inv.env.args, inv.node, inv.attachment);
  return await withAttachmentLock(inv.node.stateDir, inv.attachment, async () => {
    refuseWhileDeleting(inv.node, names, inv.now());
    const entry = await inv.journal.hold(inv.attachment);
    const previous = inv.holdings.read(inv.attachment);
    let leased = false;
    let adding: Holding | undefined;
    /** Set when a create this ADD sent went unanswered: it may land yet. */
    let inDoubt = false;
    const heard = { unanswered: false };
    try {
      adding = inv.holdings.adding(inv.attachment, inv.callId, names, inv.now(), inv.deadline);
      const held = await leaseAll(
        { ...inv, milo: hearing(inv.milo, heard) },
        net,
        entry,
        requested,
      );
      const claims = held.map((h) => ({
        name: h.name,
        uid: h.uid,
        address: formatCidr(h.cidr),
        body: h.body,
      }));
      const owed = await entry?.doubt();
      const now = inv.now();
      const recheck = recheckAt(inv.node, claims.map((c) => c.name), now);
      inv.holdings.held(inv.attachment, inv.callId, claims, now, {
        unanswered: heard.unanswered,
        owed,
        recheckAt: recheck,
      });
      await entry?.remove();
      leased = true;
      return {
        output: encodeResult(inv.conf.cniVersion, held, inv.conf.network.gateways),
        claims: claimNamesOf(inv),
        addresses: claims.map((c) => c.address),
      };
    } catch (err) {
      inDoubt = toCniError(err).inDoubt;
      throw err;
    } finally {
      entry?.close();
      if (!leased && adding) settle(inv, previous, adding, inDoubt || heard.unanswered);
    }
  });
};

/**
 * `milo` whose creates tell `heard` when one of their attempts went
 * unanswered, whatever the create's end: the ADD's own doubt.
 */
function hearing(milo: MiloCalls, heard: { unanswered: boolean }): MiloCalls {
  const events = { unanswered: () => void (heard.unanswered = true) };
  return {
    createClaim: (body) => milo.createClaim(body, events),
    getClaim: (name) => milo.getClaim(name),
    listClaimsAt: (selector) => milo.listClaimsAt(selector),
    releaseIf: (name, mine, e) => milo.releaseIf(name, mine, e),
    releaseClaim: (name, uid, e) => milo.releaseClaim(name, uid, e),
    deleteClaim: (name) => milo.deleteClaim(name),
    get requests() {
      return milo.requests;
    },
  };
}

/**
 * The record after a failed ADD (lib/lease.ts `afterFailedAdd`): the one it
 * found, in doubt or not, when Milo answered every create it sent; else its
 * own `adding` record, in doubt. Never throws.
 */
function settle(
  inv: Invocation,
  previous: Holding | undefined,
  adding: Holding,
  unanswered: boolean,
): void {
  try {
    const after = afterFailedAdd(previous, adding, unanswered);
    if (after === adding) return;
    if (after) inv.holdings.put(inv.attachment, after);
    else inv.holdings.remove(inv.attachment);
  } catch {
    // Left `adding`: the DEL after it journals its claims in doubt, which costs a wait only.
  }
}

async function leaseAll(
  inv: Invocation,
  net: NetworkConfig,
  entry: JournalHold | null,
  requested: Requested,
): Promise<Held[]> {
  const families = familiesOf(net);
  const settled = await Promise.allSettled(
    families.map((f) => leaseFamily(inv, net, f, entry, requested[f])),
  );
  const failures = settled.flatMap((s) => s.status === "rejected" ? [toCniError(s.reason)] : []);
  const held = settled.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  if (failures.length) {
    const e = combineErrors(failures);
    // Only what this ADD made is undone: a claim it found its own is an earlier ADD's
    // lease (its runtime may have it), released by the attachment's DEL.
    const made = held.filter((h) => h.fresh);
    if (!made.length) throw e;
    const rolled = await Promise.all(made.map((h) => rollBack(inv, h, e.message, entry)));
    throw rolledBack(e, rolled);
  }
  return held;
}

async function leaseFamily(
  inv: Invocation,
  net: NetworkConfig,
  family: Family,
  entry: JournalHold | null,
  address: string | undefined,
): Promise<Held> {
  const body = claimBody(inv.node.milo.namespace, net, inv.attachment, family, address, inv.callId);
  const name = (body.metadata as { name: string }).name;
  const { made, existing } = await create(inv, name, body, address);
  const [claim, fresh] = made
    ? [made, true]
    : await ownExisting(inv, name, net, family, body, existing!);
  if (fresh) await mustBePosted(inv, family, body, claim, entry);
  const phase = claim.status.phase;
  if (phase !== "Bound") {
    const outcome = phase === "Releasing" || phase === "Pending" ? "transient" : "rejected";
    throw new CniError(outcome, `claim ${name} is ${phase ?? "without a phase"}, not Bound`);
  }
  try {
    const cidr = leaseOf(claim, family, net.prefixLengths);
    // Milo binds the block a requested address lies in (`parseRequestedBlock`
    // masks it to the class's prefix length): a /96 holding it is that address's.
    if (address && !cidrContains(cidr, { family, ip: address })) {
      throw new CniError(
        fresh ? "protocol" : "conflict",
        `claim ${name} holds ${cidr.ip}, not the requested ${address}`,
        fresh ? "Milo bound another address than the one posted" : "DEL the attachment first",
      );
    }
    const pinned = { ...body, spec: { ...(body.spec as object), address: cidr.ip } };
    return { family, cidr, name, uid: claim.metadata.uid, fresh, body: pinned };
  } catch (err) {
    const e = toCniError(err);
    if (!fresh) throw e;
    const rolled = await rollBack(inv, { family, name, uid: claim.metadata.uid }, e.message, entry);
    throw rolledBack(e, [rolled]);
  }
}

/**
 * The claim `name` that already exists, when it is this attachment's own
 * with the right class and address space: recorded for this node, host,
 * network and pod. Under pod or network identity a claim held by anyone else
 * fails the ADD as transient, naming the holder: one holder at a time, and
 * the ADD never releases it. Under attachment identity, one recorded for
 * another pod on this node and host (the runtime gave the same container ID
 * to a new pod, so the old one's sandbox is gone) is released by its uid and
 * made again (answered with `true`: a create's answer); any other holder
 * fails the ADD, naming it.
 */
async function ownExisting(
  inv: Invocation,
  name: string,
  net: NetworkConfig,
  family: Family,
  body: Record<string, unknown>,
  claim: IPClaim,
): Promise<[IPClaim, boolean]> {
  const className = net.classes[family]!;
  const differs = mismatches(claim, inv.attachment);
  const uid = claim.metadata.uid;
  const identity = inv.attachment.identity ?? "attachment";
  if (differs.includes("cluster")) {
    // Two clusters given one name: never held, released or retried against each other.
    throw new CniError(
      "conflict",
      `claim ${name} is another cluster's: it records cluster uid ${
        holderOf(claim).clusterUid
      }, this node config's cluster ${inv.attachment.cluster} is ${inv.attachment.clusterUid}`,
      "two clusters share the cluster name: give each its own (node config cluster), with the " +
        "UID of its kube-system namespace (clusterUid)",
    );
  }
  if (differs.length && identity !== "attachment") {
    const h = holderOf(claim);
    const who = sameNamespace(claim, inv.attachment)
      ? `container ${h.containerId ?? "?"} on node ${h.node ?? "?"}`
      : "a pod of another namespace";
    throw new CniError(
      "transient",
      `claim ${name} (${identity} identity) is held by ${who}: no second holder; retry once ` +
        "it is released",
      `held by ${holderText(claim, inv.attachment)}; released by that sandbox's DEL, ` +
        "milo-ipam reconcile on its node, or the sweep once its pod is gone",
    );
  }
  const reused = differs.length === 1 && differs[0] === "pod" &&
    holderOf(claim).host === inv.attachment.host;
  if (reused && uid) {
    await inv.milo.releaseClaim(name, uid);
    const made = await inv.milo.createClaim(body).catch((err) => {
      if (toCniError(err).outcome === "conflict") return null;
      throw err;
    });
    if (made) return [made, true];
    throw new CniError(
      "transient",
      `claim ${name} of another pod was released, and made again by another call before this one`,
      "retry the ADD",
    );
  }
  if (differs.length) {
    throw new CniError(
      "conflict",
      `claim ${name} exists and is held by another holder (${differs.join(", ")} differ)`,
      `held by ${holderText(claim, inv.attachment)}`,
    );
  }
  if (claim.spec.className !== className) {
    throw new CniError(
      "conflict",
      `claim ${name} of this attachment has class ${
        claim.spec.className ?? "(none)"
      }, config says ${className}`,
      "DEL the attachment before changing its classes",
    );
  }
  if (!namesScope(claim.spec.scope, net.scope ?? {}, "exact")) {
    throw new CniError(
      "conflict",
      `claim ${name} of this attachment is in another address space than the one granted`,
      `its scope ${clip(JSON.stringify(claim.spec.scope ?? {}), 300)}; granted ${
        clip(JSON.stringify(net.scope ?? {}), 300)
      }: DEL the attachment before its network's space changes`,
    );
  }
  // Made by this ADD: a create whose answer was lost, found by its retry.
  return [claim, madeBy(claim) === inv.callId];
}

/**
 * False when the holder `claim` records is a pod of another namespace than
 * `a`'s: an error this ADD returns describes it only otherwise. A holder that
 * records no pod is a sandbox of no namespace (a runtime without Kubernetes'
 * arguments, which no network config of a namespace can make).
 */
function sameNamespace(claim: IPClaim, a: Attachment): boolean {
  const pod = holderOf(claim).pod;
  if (pod === undefined || !pod.includes("/")) return true;
  return pod.slice(0, pod.indexOf("/")) === (a.podNamespace ?? "");
}

/**
 * The holder a claim records, for an error of this ADD: in full within the
 * ADD's namespace; of a holder in another namespace nothing is named (no pod,
 * node, host or container), for the error reaches this namespace's users.
 */
function holderText(claim: IPClaim, a: Attachment): string {
  return sameNamespace(claim, a)
    ? describeHolder(claim)
    : "a pod of another namespace (not named here: its namespace's users alone may see it)";
}

/**
 * POSTs the claim: `made`, the bound claim; or `existing`, the claim of this
 * name Milo already holds. Milo answers a create of an existing name with 409
 * AlreadyExists or Conflict (a re-binding Milo's reclaim probe finds the live
 * claim's allocation "already bound", `internal/allocator/reclaim.go`), so on
 * any 409 the name is read before the refusal is believed. A 409 with no
 * claim of the name is named for what it means here: a retained allocation
 * of this name that an older Milo will not re-bind or that does not match the
 * claim (the field named), or a requested address that is taken.
 */
async function create(
  inv: Invocation,
  name: string,
  body: Record<string, unknown>,
  address: string | undefined,
): Promise<{ made?: IPClaim; existing?: IPClaim }> {
  /** Milo's 409; undefined for AlreadyExists. */
  let refused: MiloRefusal | undefined;
  try {
    const made = await inv.milo.createClaim(body);
    if (made) return { made };
  } catch (err) {
    if (!(err instanceof MiloRefusal) || err.outcome !== "conflict") throw err;
    refused = err;
  }
  const existing = await inv.milo.getClaim(name);
  if (existing) return { existing };
  const said = refused?.details ?? "";
  const kind = refused?.refusal.kind;
  if (!refused || kind === "bound") {
    throw new CniError(
      "transient",
      `claim ${name} existed when Milo refused its create, and is gone now`,
      refused ? `${said}; retry the ADD` : "retry the ADD",
    );
  }
  if (kind === "no-rebind") {
    throw new CniError(
      "conflict",
      `claim ${name}: Milo holds a retained allocation of this name and refuses to re-bind it`,
      `${said}; this Milo predates re-binding by name`,
    );
  }
  if (kind === "retained-mismatch") {
    throw new CniError(
      "conflict",
      `claim ${name}: Milo's retained allocation of this name does not match the claim`,
      `${said}; the network's class, scope or prefix length changed since it was retained`,
    );
  }
  if (address && kind === "address-taken") {
    throw new CniError("conflict", `requested address ${address} is taken`, said);
  }
  throw refused;
}

/**
 * Milo's 201 must be the claim this ADD posted: the same name, the holder
 * posted (its `milo-ipam.io/` annotations, exactly), the class and the family
 * ({@link answerDiffers}). Any other answer fails the ADD with 105, and what
 * is released depends on what the answer may be, for an ADD never releases a
 * claim that is not this attachment's:
 *
 * - Another name: the answer is not the claim posted, and no DELETE of
 *   another name is ever sent for it (it may be anyone's claim), so it is
 *   left alone. Whether the claim posted was made is unknown; if it was, it
 *   is this attachment's and holds the name posted: the attachment's DEL
 *   (which the runtime sends after a failed ADD) deletes it by that name, or
 *   reconcile releases it as an orphan. Nothing is deleted by that name here
 *   without its uid, which the answer did not give.
 * - This name, but recording another attachment (cluster, container,
 *   interface) or another host: it may be another holder's claim answered in
 *   place of a 409, so it is left alone too, as {@link ownExisting} leaves one.
 * - This name and this attachment and host, but another node, network, pod,
 *   class or family, or a holder annotation missing: the object this POST
 *   made, not as posted; it is released by the uid answered (only while it is
 *   that object), or journaled when that fails.
 */
async function mustBePosted(
  inv: Invocation,
  family: Family,
  body: Record<string, unknown>,
  answer: IPClaim,
  entry: JournalHold | null,
): Promise<void> {
  const differs = answerDiffers(body, answer);
  if (!differs.length) return;
  const posted = (body.metadata as { name: string }).name;
  const got = JSON.stringify(clip(answer.metadata.name, 80));
  const what = `${miloFamily(family)} claim ${posted}`;
  if (answer.metadata.name !== posted) {
    throw new CniError(
      "protocol",
      `Milo answered the create of ${what} with another claim, ${got}`,
      `${differs.join("; ")}; ${got} is not the claim posted: left alone; ${posted} may ` +
        "exist (the answer does not say): this attachment's DEL deletes it by name, or " +
        "milo-ipam reconcile releases it as an orphan",
    );
  }
  const message = `Milo's answer to the create of ${what} is not the claim posted`;
  if (recordsAnother(answer, inv.attachment)) {
    throw new CniError(
      "protocol",
      message,
      `${differs.join("; ")}; it records another holder (${
        holderText(answer, inv.attachment)
      }), so it may not be this attachment's claim: left alone`,
    );
  }
  const rolled = await rollBack(
    inv,
    { family, name: posted, uid: answer.metadata.uid },
    message,
    entry,
  );
  throw rolledBack(new CniError("protocol", message, differs.join("; ")), [rolled]);
}

/** What a rollback did: a note for the error's details; `vanished`: the claim made was gone. */
interface RolledBack {
  note: string;
  vanished?: boolean;
}

/**
 * `e` with the rollbacks' notes; in doubt when a claim this ADD made was gone
 * before its rollback: another's DELETE removed it in place, and that
 * release makes it again (lib/milo_release.ts), maybe after this attachment's
 * DEL. The record stays `adding`, so the DEL journals the name in doubt.
 */
function rolledBack(e: CniError, rolled: RolledBack[]): CniError {
  const noted = withNote(e, rolled.map((r) => r.note).filter(Boolean).join("; "));
  if (rolled.some((r) => r.vanished)) noted.inDoubt = true;
  return noted;
}

/**
 * Releases a claim this ADD holds, within the rollback slice, and only while
 * it is the same object (uid). A failed rollback goes to the release journal.
 */
async function rollBack(
  inv: Invocation,
  h: Pick<Held, "family" | "name" | "uid">,
  cause: string,
  entry: JournalHold | null,
): Promise<RolledBack> {
  const what = `${miloFamily(h.family)} claim ${h.name}`;
  try {
    const r = h.uid
      ? await inv.rollback.releaseClaim(h.name, h.uid)
      : await inv.rollback.deleteClaim(h.name);
    if (r === "changed") return { note: `rollback: ${what} is now another object; left alone` };
    if (r === "absent") {
      return { note: `rollback: ${what} was gone already (in doubt)`, vanished: true };
    }
    return { note: `rollback: ${what} released` };
  } catch (err) {
    const e = toCniError(err);
    try {
      const claim = [{ name: h.name, uid: h.uid }];
      await inv.journal.record(inv.attachment, claim, cause, inv.now(), entry);
      return {
        note: `rollback of ${what} failed (${e.message}); journaled for release by reconcile`,
      };
    } catch (jerr) {
      return {
        note: `rollback of ${what} failed (${e.message}) and could not be journaled (${
          errorText(jerr)
        })`,
      };
    }
  }
}
