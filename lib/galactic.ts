/**
 * What milo-ipam does for a galactic config: one whose master stanza names
 * `vpc` and `vpcattachment`, both base62, as galactic's masters require before
 * they delegate (datum-cloud/galactic `internal/cnimaster/config.go`
 * IsValidBase62; a config with anything else never reaches milo-ipam through
 * them). galactic keys an attachment by the values the two encode, and keeps
 * announcing a removed pod's prefix for a while; so milo-ipam keys a slot by
 * those values, holds every released address (lib/claims.ts `claimBody`),
 * and refuses a family without a gateway.
 */
import type { NetworkConfig } from "./config.ts";
import { CniError } from "./errors.ts";
import { FAMILIES } from "./ip.ts";

/** The master stanza's galactic identifiers, as lib/netconf.ts reads them. */
export interface GalacticIds {
  vpc?: string;
  vpcattachment?: string;
}

const BASE62 = /^[0-9a-zA-Z]+$/;
/** kenshaw/baseconv `Digits62`, the digits galactic's `intf.Base62ToHex` reads. */
const DIGITS62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/** True for a galactic config: `vpc` and `vpcattachment` both set and base62. */
export function isGalactic(c: GalacticIds): c is { vpc: string; vpcattachment: string } {
  return c.vpc !== undefined && c.vpcattachment !== undefined && BASE62.test(c.vpc) &&
    BASE62.test(c.vpcattachment);
}

/**
 * The value a base62 identifier encodes, in lowercase hex: how galactic names
 * an attachment's BGPAdvertisement (`internal/crdnames/crdnames.go`
 * BGPAdvertisementName through `intf.Base62ToHex`, which drops leading zeros)
 * and its host interface (`internal/plumbing/intf/intf.go`, zero-padded), so
 * `07b3e` and `7b3e` are one VPC. `id` must be base62 ({@link isGalactic}).
 */
export function galacticValue(id: string): string {
  let v = 0n;
  for (const ch of id) v = v * 62n + BigInt(DIGITS62.indexOf(ch));
  return v.toString(16);
}

/**
 * Refuses (7, naming the key) a galactic config's ADD without a gateway for a
 * family it leases: galactic installs the VRF route and the neighbour entry
 * from each address's gateway and skips a family without one, while
 * galactic-bgp announces its prefix (`internal/hostgw/hostgw.go`
 * ConfigureHostGateway): the pod would be unreachable. The node config's
 * `gateways` (its default for every network) count: root's, the platform's.
 */
export function requireGateways(c: GalacticIds, net: NetworkConfig): void {
  if (!isGalactic(c)) return;
  const missing = FAMILIES.filter((f) => net.classes[f] && !net.gateways[f]);
  if (!missing.length) return;
  throw new CniError(
    "config",
    `field ipam.gateways.${missing[0]}: a galactic config needs a gateway for each family ` +
      "it leases",
    `missing: ${missing.map((f) => `gateways.${f}`).join(", ")}; galactic routes a pod's ` +
      "address only through its gateway and skips a family without one while galactic-bgp " +
      "announces it (datum-cloud/galactic internal/hostgw/hostgw.go): set it in the ipam " +
      "block, or as the node config's default gateways",
  );
}
