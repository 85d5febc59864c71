import { claimName, leaseOf } from "./claims.ts";
import { describeHolder, mismatches } from "./holder.ts";
import { CniError, settleAll } from "./errors.ts";
import { type Family, formatCidr, miloFamily } from "./ip.ts";
import { familiesOf, type Handler, type Invocation } from "./invocation.ts";

/**
 * CHECK: each family's claim must exist in Milo, be Bound, record this
 * attachment's holder (node, host, network, pod), and lease the address that
 * `prevResult` reports (with whatever mask it reports it: the IPv4 address,
 * the IPv6 block's first address or Milo's `status.address`).
 */
export const check: Handler = async (inv) => {
  const claims = await settleAll(familiesOf(inv.conf.network).map((f) => checkFamily(inv, f)));
  return { claims };
};

async function checkFamily(inv: Invocation, family: Family): Promise<string> {
  const name = claimName(inv.attachment, family);
  const fam = miloFamily(family);
  const claim = await inv.milo.getClaim(name);
  if (!claim) throw new CniError("check", `no ${fam} lease in Milo: claim ${name} is missing`);
  const differs = mismatches(claim, inv.attachment);
  if (differs.length) {
    throw new CniError(
      "check",
      `claim ${name} is held by another holder (${differs.join(", ")} differ)`,
      `held by ${describeHolder(claim)}`,
    );
  }
  if (claim.status.phase !== "Bound") {
    throw new CniError(
      "check",
      `${fam} claim ${name} is ${claim.status.phase ?? "without a phase"}, not Bound`,
    );
  }
  const held = leaseOf(claim, family, inv.conf.network.prefixLengths);
  const previous = inv.conf.prevResult;
  if (!previous) return name;
  // The address, whatever mask the master reports it with: galactic-tap shows an IPv4 lease
  // as /25 (the host gateway's mask), and a master may re-mask what IPAM returned.
  const reported = previous.get(family) ?? [];
  if (!reported.some((c) => c.ip === held.ip)) {
    const prev = reported.length ? reported.map(formatCidr).join(", ") : "none";
    throw new CniError(
      "check",
      `${fam} address differs: prevResult has ${prev}, Milo's claim ${name} holds ${
        formatCidr(held)
      }`,
    );
  }
  return name;
}
