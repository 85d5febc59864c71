import { claimBody, holderOf, isHeldBy, leaseOf } from "./claims.ts";
import { encodeResult, type Lease } from "./cni.ts";
import { attemptAll, CniError, combineErrors, toCniError } from "./errors.ts";
import { type Family, miloFamily } from "./ip.ts";
import { familiesOf, type Handler, type Invocation } from "./invocation.ts";

/**
 * ADD: lease one address per configured family from Milo. Retries of the same
 * attachment find their own claim (409 then GET); a failure in one family
 * releases the other before the error is returned.
 */
export const add: Handler = async (inv) => {
  const families = familiesOf(inv.cfg);
  const settled = await Promise.allSettled(families.map((f) => leaseFamily(inv, f)));
  const failures = settled.flatMap((s) => s.status === "rejected" ? [toCniError(s.reason)] : []);
  const leases = settled.flatMap((s) => s.status === "fulfilled" ? [s.value] : []);
  if (failures.length) {
    const rollback = await attemptAll(
      leases,
      (l) => inv.milo.deleteClaim(l.name),
      (l) => `rollback of claim ${l.name} failed`,
    );
    failures.push(...rollback.failures);
    throw combineErrors(failures);
  }
  return encodeResult(inv.conf.cniVersion, leases, inv.cfg.gateways);
};

async function leaseFamily(inv: Invocation, family: Family): Promise<Lease & { name: string }> {
  const body = await claimBody(inv.cfg, inv.attachment, family);
  const name = (body.metadata as { name: string }).name;
  inv.touched.push(name);
  const className = inv.cfg.classes[family];
  let claim = await inv.milo.createClaim(body);
  if (!claim) {
    claim = await inv.milo.getClaim(name);
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
  }
  const phase = claim.status.phase;
  if (phase !== "Bound") {
    const outcome = phase === "Releasing" || phase === "Pending" ? "transient" : "rejected";
    throw new CniError(outcome, `claim ${name} is ${phase ?? "without a phase"}, not Bound`);
  }
  const cidr = leaseOf(claim, family);
  if (!cidr) {
    throw new CniError(
      "protocol",
      `claim ${name} is Bound without an ${miloFamily(family)} address`,
      JSON.stringify(claim.status),
    );
  }
  return { family, cidr, name };
}
