/**
 * Milo's quota admission refusing a create. Every quota failure is 403
 * Forbidden, its message saying which (`milo-os/milo`
 * `pkg/quota/admission/plugin.go` `userFacingClaimError`): the quota reached
 * is exhaustion, as a full pool is (code 100); a check that took too long, a
 * previous attempt being cleaned up or an error checking it pass (11).
 */
import { clip, CniError, QUOTE_CHARS } from "./errors.ts";

/** What Milo's quota admission says when a project's quota of the kind is used up. */
const QUOTA_REACHED = "You've reached your quota for this resource type";

/**
 * The failure a 403's Status means when it is Milo's quota admission's, else
 * undefined. Its message is Milo's own words, quoted.
 */
export function quotaRefusal(st: { message?: string } | undefined): CniError | undefined {
  const m = st?.message ?? "";
  const at = m.indexOf(QUOTA_REACHED);
  if (at >= 0) {
    return new CniError(
      "exhausted",
      "Milo's quota of claims for the project is reached (403)",
      `${clip(m.slice(at), QUOTE_CHARS)}; raise the project's quota of ipclaims in Milo, or ` +
        "release unused claims (milo-ipam release, decommission)",
    );
  }
  if (
    /checked against your quota|cleaning up from a previous attempt|checking your quota/.test(m)
  ) {
    return new CniError(
      "transient",
      "Milo's quota check did not complete (403): try again",
      clip(m, QUOTE_CHARS),
    );
  }
  return undefined;
}
