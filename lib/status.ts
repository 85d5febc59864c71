import { CniError, toCniError } from "./errors.ts";
import type { Handler } from "./invocation.ts";
import { STATUS_PROBE } from "./milo_objects.ts";

export { STATUS_PROBE } from "./milo_objects.ts";

/**
 * STATUS: one GET of {@link STATUS_PROBE} in the node's namespace. Milo's
 * answer, 404 NotFound (or the claim, if someone made one of that name),
 * proves it reachable and the token accepted for that namespace's claims; it
 * reads one row by key (the generic store's Get), never a LIST, and needs no
 * IPClass (a tenant cannot read Milo's class catalog). Anything else is code
 * 50 with the reason.
 */
export const status: Handler = async (inv) => {
  try {
    await inv.milo.getClaim(STATUS_PROBE);
  } catch (err) {
    const e = toCniError(err);
    throw new CniError("unavailable", `Milo is not usable: ${e.message}`, e.details);
  }
  return { claims: [] };
};
