import { type Attachment, canName, claimName, isHeldBy, madeBy, recordsAnother } from "./claims.ts";
import { attemptAll, CniError, combineErrors, errorText } from "./errors.ts";
import { familiesOf, type Handler, type Invocation } from "./invocation.ts";
import type { Holding } from "./holdings.ts";
import type { JournalClaim } from "./journal.ts";
import { lockAttachment } from "./lockfile.ts";
import type { IPClaim } from "./milo_objects.ts";

/**
 * DEL: release each family's claim in Milo. A claim already gone counts as
 * released. Under pod or network identity a claim is released only while it
 * records this attachment as its holder (by its uid): the late DEL of an old
 * sandbox leaves the next holder's claim alone. Any other failure fails the
 * DEL so the runtime retries it, and records the claims in the release
 * journal, so that `milo-ipam reconcile` finishes the release if the runtime
 * gives up. After an ADD left in doubt (its record still `adding`: killed,
 * or a create unanswered), a released DEL records an in-doubt entry instead:
 * that create may still land. Holds the attachment's lock (see
 * lib/lockfile.ts) throughout. The agent's undo releases nothing unless the
 * ADD it undoes is still the attachment's last, and then only the claims
 * that ADD made ({@link undo}).
 */
export const del: Handler = async (inv) => {
  const lock = await lockAttachment(inv.node.stateDir, inv.attachment);
  try {
    if (inv.undoOf !== undefined) {
      const h = inv.holdings.read(inv.attachment);
      if (h?.addId !== inv.undoOf) {
        const why = h ? "a later ADD of this attachment is recorded" : "the ADD left no lease";
        return { claims: [], skipped: `undo of ADD ${inv.undoOf}: ${why}; nothing released` };
      }
      return await undo(inv, h);
    }
    return await release(inv);
  } finally {
    lock.close();
  }
};

/**
 * The agent's undo of the ADD `h` records: each claim is released only while
 * Milo's claim records that ADD as its maker (`milo-ipam.io/add-id`); one it
 * found is an earlier ADD's lease (the plugin's own, when it took the call
 * over), which its runtime may hold. After an ADD in doubt the names it made
 * or may still make are journaled in doubt, as a DEL's are.
 */
async function undo(inv: Invocation, h: Holding) {
  const names = h.claims.map((c) => c.name);
  const found: string[] = [];
  const r = await attemptAll(
    names,
    async (name) => {
      const done = await inv.milo.releaseIf(name, (c) => madeBy(c) === inv.undoOf);
      if (done === "changed") found.push(name);
    },
    (name) => `undo: release of claim ${name} failed`,
  );
  if (r.failures.length) throw combineErrors(r.failures);
  const gone = names.filter((n) => !found.includes(n));
  if (h.state === "adding" && gone.length) {
    await inv.journal.recordDoubt(inv.attachment, gone, inv.now());
  }
  if (found.length) inv.holdings.forget(inv.attachment, gone);
  else inv.holdings.remove(inv.attachment);
  return {
    claims: gone,
    ...(found.length
      ? {
        skipped: `undo of ADD ${inv.undoOf}: ${
          found.join(", ")
        } made by an earlier ADD: left alone`,
      }
      : {}),
  };
}

async function release(inv: Invocation) {
  const record = inv.holdings.read(inv.attachment);
  const claims = canName(inv.attachment)
    ? familiesOf(inv.conf.network).map((f) => claimName(inv.attachment, f))
    : (record?.claims ?? []).map((c) => c.name);
  const inDoubt = record?.state === "adding";
  const identity = inv.attachment.identity ?? "attachment";
  const others: string[] = [];
  const r = await attemptAll(
    claims,
    async (name) => {
      if (identity === "attachment") return await inv.milo.deleteClaim(name);
      const done = await inv.milo.releaseIf(name, (c) => holds(c, inv.attachment));
      if (done === "changed") others.push(name);
      return done;
    },
    (name) => `release of claim ${name} failed`,
  );
  const skipped = others.length
    ? { skipped: `held by another sandbox, left alone: ${others.join(", ")}` }
    : claims.length
    ? {}
    : { skipped: "pod identity without the pod's name, and no record of this attachment" };
  if (!r.failures.length) {
    if (inDoubt) {
      await inv.journal.recordDoubt(inv.attachment, claims, inv.now()).catch((err) => {
        throw new CniError(
          "io",
          "claims released, but an ADD of this attachment in doubt could not be journaled",
          errorText(err),
        );
      });
    } else await inv.journal.drop(inv.attachment).catch(() => false);
    inv.holdings.remove(inv.attachment);
    return { claims: claims.filter((c) => !others.includes(c)), ...skipped };
  }
  const e = combineErrors(r.failures);
  const failed = await Promise.all(
    claims.filter((name) => !r.done.includes(name)).map((name) => journalClaim(inv, name)),
  );
  let note: string;
  try {
    const path = await inv.journal.record(inv.attachment, failed, e.message, inv.now());
    note = `journaled for release by milo-ipam reconcile (${path})`;
  } catch (err) {
    note = `could not be journaled: ${errorText(err)}`;
  }
  throw new CniError(e.outcome, e.message, `${e.details}; ${note}`);
}

/**
 * The journal's record of a claim this DEL could not release: with its uid
 * when a read within the rollback slice still finds it held by this
 * attachment, so reconcile releases exactly that object.
 */
async function journalClaim(inv: Invocation, name: string): Promise<JournalClaim> {
  try {
    const claim = await inv.rollback.getClaim(name);
    const uid = claim && holds(claim, inv.attachment) ? claim.metadata.uid : undefined;
    return uid ? { name, uid } : { name };
  } catch {
    return { name };
  }
}

/** This attachment holds `claim`: its cluster, container and interface, made on this host. */
const holds = (claim: IPClaim, a: Attachment) => isHeldBy(claim, a) && !recordsAnother(claim, a);
