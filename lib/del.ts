import { claimName } from "./claims.ts";
import { attemptAll, CniError, combineErrors, errorText } from "./errors.ts";
import { familiesOf, type Handler } from "./invocation.ts";

/**
 * DEL: release each family's claim in Milo. A claim already gone counts as
 * released. Any other failure fails the DEL so the runtime retries it, and
 * records the claims in the release journal, so that `milo-ipam reconcile`
 * finishes the release if the runtime gives up.
 */
export const del: Handler = async (inv) => {
  const named = await Promise.all(
    familiesOf(inv.conf.network).map(async (f) => ({
      f,
      name: await claimName(inv.attachment, f),
    })),
  );
  const claims = named.map((n) => n.name);
  const r = await attemptAll(
    named,
    (n) => inv.milo.deleteClaim(n.name),
    (n) => `release of claim ${n.name} failed`,
  );
  if (!r.failures.length) {
    await inv.journal.drop(inv.attachment).catch(() => false);
    return { claims };
  }
  const e = combineErrors(r.failures);
  const failed = named.filter((n) => !r.done.includes(n)).map((n) => ({ name: n.name }));
  let note: string;
  try {
    const path = await inv.journal.record(inv.attachment, failed, e.message, inv.now());
    note = `journaled for release by milo-ipam reconcile (${path})`;
  } catch (err) {
    note = `could not be journaled: ${errorText(err)}`;
  }
  throw new CniError(e.outcome, e.message, `${e.details}; ${note}`);
};
