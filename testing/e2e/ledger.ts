/**
 * The ledger: Milo's claims against the runtime's live attachments. Three
 * numbers must be 0 after every scenario: duplicate addresses (among claims and
 * retained allocations), claims without a live pod, live pods without a claim
 * (or whose claim holds another address). Retained addresses (Retain claims
 * deleted, waiting for their name) are counted apart: not a leak while their
 * lease runs.
 */
import { formatCidr, parseCidr } from "../../lib/ip.ts";
import type { Claim } from "./milo.ts";

/** The ledger's figures and what made them non-zero. */
export interface Ledger {
  claims: number;
  live: number;
  /** Retained allocations: addresses waiting for a claim of their name. */
  retained: number;
  duplicates: number;
  claimsWithoutPod: number;
  podsWithoutClaim: number;
  details: string[];
}

/** A live attachment as the ledger reads it (the e2e's result cache, or podman's containers). */
export interface LedgerAttachment {
  cluster: string;
  node: string;
  containerId: string;
  ifname: string;
  /** Canonical CIDRs of its result. */
  addresses: string[];
}

/** Canonical CIDR text (so IPv6 spellings compare equal). */
export function normCidr(text: string): string {
  const c = parseCidr(text);
  return c ? formatCidr(c) : text;
}

const key = (cluster?: string, cid?: string, ifn?: string) => `${cluster}|${cid}|${ifn}`;

/** The attachment key a claim records in its annotations. */
function claimKey(c: Claim): string {
  const ann = c.metadata.annotations ?? {};
  return key(
    ann["milo-ipam.io/cluster"],
    ann["milo-ipam.io/container-id"],
    ann["milo-ipam.io/ifname"],
  );
}

function duplicates(claims: Claim[], retained: string[], details: string[]): number {
  const byAddr = new Map<string, number>();
  for (const a of [...claims.map((c) => c.status?.allocatedCIDR ?? ""), ...retained]) {
    byAddr.set(normCidr(a), (byAddr.get(normCidr(a)) ?? 0) + 1);
  }
  let n = 0;
  for (const [a, count] of byAddr) {
    if (count > 1) {
      n += count - 1;
      details.push(`address ${a} held by ${count} claims or retained allocations`);
    }
  }
  return n;
}

/** Compares the claims (and the retained allocations' CIDRs) with the live attachments. */
export function computeLedger(
  claims: Claim[],
  live: LedgerAttachment[],
  retained: string[] = [],
): Ledger {
  const details: string[] = [];
  const dup = duplicates(claims, retained, details);
  const liveKeys = new Map(live.map((l) => [key(l.cluster, l.containerId, l.ifname), l]));
  const claimByKey = new Map<string, Claim[]>();
  let claimsWithoutPod = 0;
  for (const c of claims) {
    const k = claimKey(c);
    claimByKey.set(k, [...(claimByKey.get(k) ?? []), c]);
    if (!liveKeys.has(k)) {
      claimsWithoutPod++;
      details.push(`claim ${c.metadata.name} (${k}, ${c.status?.allocatedCIDR}) has no live pod`);
    }
  }
  let podsWithoutClaim = 0;
  for (const [k, l] of liveKeys) {
    const held = (claimByKey.get(k) ?? []).map((c) => normCidr(c.status?.allocatedCIDR ?? ""));
    const missing = l.addresses.filter((a) => !held.includes(a));
    if (!held.length || missing.length) {
      podsWithoutClaim++;
      details.push(`live pod ${k} on ${l.node} (${l.addresses}) has no claim for ${missing}`);
    }
  }
  return {
    claims: claims.length,
    live: live.length,
    retained: retained.length,
    duplicates: dup,
    claimsWithoutPod,
    podsWithoutClaim,
    details,
  };
}

/** The ledger line the e2e prints after a scenario, naming the mode. */
export function ledgerLine(mode: string, scenario: string, l: Ledger): string {
  return `ledger [${mode}] after ${scenario}: claims=${l.claims} live=${l.live} ` +
    `retained=${l.retained} | ` +
    `duplicate addresses=${l.duplicates} claims without a live pod=${l.claimsWithoutPod} ` +
    `live pods without a claim=${l.podsWithoutClaim}`;
}
