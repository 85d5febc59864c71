import { claimBody, holderOf, isHeldBy, leaseOf } from "./claims.ts";
import { encodeResult, type Lease } from "./cni.ts";
import { CniError, combineErrors, errorText, toCniError } from "./errors.ts";
import { type Family, miloFamily } from "./ip.ts";
import { claimNamesOf, familiesOf, type Handler, type Invocation } from "./invocation.ts";
import type { JournalHold } from "./journal.ts";
import { lockAttachment } from "./lockfile.ts";
import type { IPClaim } from "./milo_objects.ts";

/** A lease this ADD holds: the claim's name and uid besides the address. */
type Held = Lease & { name: string; uid?: string };

/**
 * ADD: lease one address per configured family from Milo. Retries of the same
 * attachment find their own claim (409 then GET). A failure in one family
 * releases the other within the reserved rollback slice of `totalMs`; what
 * the rollback did is part of the error. The attachment's lock is held
 * throughout (a concurrent ADD or DEL of it waits), and so is a release
 * journal entry of it, dropped only when the ADD succeeds. The ADD stays
 * marked in doubt (see lib/journal.ts) unless it succeeded or Milo answered
 * every create it sent.
 */
export const add: Handler = async (inv) => {
  const lock = await lockAttachment(inv.node.stateDir, inv.attachment);
  try {
    const entry = await inv.journal.hold(inv.attachment);
    let leased = false;
    try {
      inv.journal.beginAdd(inv.attachment);
      const done = await leaseAll(inv, entry);
      await entry?.remove();
      leased = true;
      return done;
    } finally {
      entry?.close();
      if (leased || inv.milo.unansweredCreates === 0) inv.journal.settleAdd(inv.attachment);
    }
  } finally {
    lock.close();
  }
};

async function leaseAll(inv: Invocation, entry: JournalHold | null) {
  const families = familiesOf(inv.conf.network);
  const settled = await Promise.allSettled(families.map((f) => leaseFamily(inv, f, entry)));
  const failures = settled.flatMap((s) => s.status === "rejected" ? [toCniError(s.reason)] : []);
  const held = settled.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  if (failures.length) {
    const e = combineErrors(failures);
    if (!held.length) throw e;
    const notes = await Promise.all(held.map((h) => rollBack(inv, h, e.message, entry)));
    throw new CniError(e.outcome, e.message, [e.details, ...notes].filter(Boolean).join("; "));
  }
  return {
    output: encodeResult(inv.conf.cniVersion, held, inv.conf.network.gateways),
    claims: claimNamesOf(inv),
  };
}

async function leaseFamily(
  inv: Invocation,
  family: Family,
  entry: JournalHold | null,
): Promise<Held> {
  const net = inv.conf.network;
  const body = claimBody(inv.node.milo.namespace, net, inv.attachment, family);
  const name = (body.metadata as { name: string }).name;
  const created = await inv.milo.createClaim(body);
  const claim = created ?? await ownExisting(inv, name, net.classes[family]!);
  const phase = claim.status.phase;
  if (phase !== "Bound") {
    const outcome = phase === "Releasing" || phase === "Pending" ? "transient" : "rejected";
    throw new CniError(outcome, `claim ${name} is ${phase ?? "without a phase"}, not Bound`);
  }
  try {
    return {
      family,
      cidr: leaseOf(claim, family, net.prefixLengths),
      name,
      uid: claim.metadata.uid,
    };
  } catch (err) {
    const e = toCniError(err);
    const note = await rollBack(inv, { family, name, uid: claim.metadata.uid }, e.message, entry);
    throw new CniError(e.outcome, e.message, `${e.details}; ${note}`);
  }
}

/** The claim `name` that already exists, if it is this attachment's own with the right class. */
async function ownExisting(inv: Invocation, name: string, className: string): Promise<IPClaim> {
  const claim = await inv.milo.getClaim(name);
  if (!claim) {
    throw new CniError(
      "transient",
      `claim ${name} vanished between create and read`,
      "retry the ADD",
    );
  }
  if (!isHeldBy(claim, inv.attachment)) {
    const h = holderOf(claim);
    throw new CniError(
      "conflict",
      `claim ${name} exists and is held by another attachment`,
      `held by cluster=${h.cluster ?? "?"} container=${h.containerId ?? "?"} ifname=${
        h.ifname ?? "?"
      }`,
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
  return claim;
}

/**
 * Releases a claim this ADD holds, within the rollback slice, and only while
 * it is the same object (uid). A failed rollback goes to the release journal.
 * Answers a note for the error's details.
 */
async function rollBack(
  inv: Invocation,
  h: Pick<Held, "family" | "name" | "uid">,
  cause: string,
  entry: JournalHold | null,
): Promise<string> {
  const what = `${miloFamily(h.family)} claim ${h.name}`;
  try {
    const r = h.uid
      ? await inv.rollback.releaseClaim(h.name, h.uid)
      : await inv.rollback.deleteClaim(h.name);
    return r === "changed"
      ? `rollback: ${what} is now another object; left alone`
      : `rollback: ${what} released`;
  } catch (err) {
    const e = toCniError(err);
    try {
      const claim = [{ name: h.name, uid: h.uid }];
      await inv.journal.record(inv.attachment, claim, cause, inv.now(), entry);
      return `rollback of ${what} failed (${e.message}); journaled for release by reconcile`;
    } catch (jerr) {
      return `rollback of ${what} failed (${e.message}) and could not be journaled (${
        errorText(jerr)
      })`;
    }
  }
}
