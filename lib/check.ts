import { claimName, holderOf, isHeldBy, leaseOf } from "./claims.ts";
import { isPlainObject } from "./config.ts";
import { CniError, settleAll } from "./errors.ts";
import { type Cidr, type Family, formatCidr, miloFamily, parseCidr } from "./ip.ts";
import { familiesOf, type Handler, type Invocation } from "./invocation.ts";

/**
 * CHECK: each family's claim must exist in Milo, be Bound, be held by this
 * attachment, and lease the address that `prevResult` reports.
 */
export const check: Handler = async (inv) => {
  const previous = prevAddresses(inv.conf.prevResult);
  await settleAll(familiesOf(inv.cfg).map((f) => checkFamily(inv, f, previous)));
  return null;
};

async function checkFamily(
  inv: Invocation,
  family: Family,
  previous: Map<Family, Cidr[]> | undefined,
): Promise<void> {
  const name = await claimName(inv.attachment, family);
  inv.touched.push(name);
  const fam = miloFamily(family);
  const claim = await inv.milo.getClaim(name);
  if (!claim) throw new CniError("check", `no ${fam} lease in Milo: claim ${name} is missing`);
  if (!isHeldBy(claim, inv.attachment)) {
    const h = holderOf(claim);
    throw new CniError(
      "check",
      `claim ${name} is held by another attachment`,
      `container=${h.containerId ?? "?"} ifname=${h.ifname ?? "?"}`,
    );
  }
  if (claim.status.phase !== "Bound") {
    throw new CniError(
      "check",
      `${fam} claim ${name} is ${claim.status.phase ?? "without a phase"}, not Bound`,
    );
  }
  const held = leaseOf(claim, family);
  if (!held) throw new CniError("check", `${fam} claim ${name} holds no ${fam} address`);
  if (!previous) return;
  const reported = previous.get(family) ?? [];
  const milo = formatCidr(held);
  if (!reported.some((c) => formatCidr(c) === milo)) {
    const prev = reported.length ? reported.map(formatCidr).join(", ") : "none";
    throw new CniError(
      "check",
      `${fam} address differs: prevResult has ${prev}, Milo's claim ${name} holds ${milo}`,
    );
  }
}

/** The addresses of `prevResult` by family, or undefined when there is no prevResult. */
export function prevAddresses(prev: unknown): Map<Family, Cidr[]> | undefined {
  if (prev === undefined || prev === null) return undefined;
  if (!isPlainObject(prev) || (prev.ips !== undefined && !Array.isArray(prev.ips))) {
    throw new CniError("config", "field prevResult: must be an object with an ips list");
  }
  const out = new Map<Family, Cidr[]>();
  for (const [i, ip] of ((prev.ips ?? []) as unknown[]).entries()) {
    const cidr = isPlainObject(ip) && typeof ip.address === "string" ? parseCidr(ip.address) : null;
    if (!cidr) {
      throw new CniError(
        "config",
        `field prevResult.ips.${i}.address: must be an IP address in CIDR form`,
      );
    }
    out.set(cidr.family, [...(out.get(cidr.family) ?? []), cidr]);
  }
  return out;
}
