/**
 * Making a claim again for the sandbox that still holds its address: after a
 * DELETE removed it in place of another claim (Milo ignores a DELETE's uid
 * precondition), after Milo lost it (its namespace deleted, a claim deleted
 * by hand), or when the release journal owes it. The claim is posted as it
 * was with its address pinned (`spec.address`: under Retain, Milo's reclaim
 * probe re-binds the retained allocation of the name first, the same
 * address), and whatever Milo answers is verified, for an answer that says
 * "taken" proves nothing about who took it: the same holder on the same
 * address, or two sandboxes on one address, reported as a {@link Duplicate}.
 */
import { KEYS, PREFIX } from "./claims.ts";
import { CniError, toCniError } from "./errors.ts";
import { describeHolder } from "./holder.ts";
import { ipValue, parseCidr, parseIp } from "./ip.ts";
import { type IPClaim, MiloRefusal } from "./milo_objects.ts";

/** The Milo client's calls a restore makes. */
export interface RestoreCalls {
  /** `heard.unanswered`: as lib/milo_calls.ts `CreateEvents`. */
  createClaim(
    body: Record<string, unknown>,
    heard?: { unanswered(): void },
  ): Promise<IPClaim | null>;
  getClaim(name: string): Promise<IPClaim | null>;
  /** Releases the claim `name` while its uid is `uid` (lib/milo_release.ts). */
  releaseClaim(name: string, uid: string): Promise<unknown>;
}

/**
 * One address that two sandboxes use: `holder` runs on it without its
 * claim, and Milo records `now` there instead (another claim of the name, or
 * the address taken under another name).
 */
export interface Duplicate {
  claim: string;
  address: string;
  /** The sandbox that uses the address, as its claim recorded it. */
  holder: string;
  /** Who Milo records now. */
  now: string;
}

/** What restoring a claim found: made again, already there as it was, or a duplicate. */
export type Restored = { outcome: "made" | "present" } | {
  outcome: "duplicate";
  duplicate: Duplicate;
};

/**
 * Posts `body` (a claim as it was, `spec.address` pinned) and verifies the
 * answer. Throws when Milo could not be asked (the caller owes the restore).
 * `heard` hears of each create that went unanswered: it may land yet, after
 * the holder's DEL.
 */
export async function restoreClaim(
  milo: RestoreCalls,
  body: Record<string, unknown>,
  heard?: { unanswered(): void },
): Promise<Restored> {
  const meta = body.metadata as { name: string; annotations?: Record<string, string> };
  const address = (body.spec as { address?: string }).address ?? "";
  const holder = holderText(meta.annotations ?? {});
  const duplicate = (now: string): Restored => ({
    outcome: "duplicate",
    duplicate: { claim: meta.name, address, holder, now },
  });
  let made: IPClaim | null = null;
  let refused: CniError | undefined;
  try {
    made = await milo.createClaim(body, heard);
  } catch (err) {
    refused = toCniError(err);
    if (refused.outcome !== "conflict") throw refused;
  }
  const found = made ?? await milo.getClaim(meta.name);
  if (!found) {
    if (refused instanceof MiloRefusal && refused.refusal.kind === "address-taken") {
      return duplicate(`another claim holds ${address} (Milo: ${refused.details})`);
    }
    throw new CniError(
      "transient",
      `claim ${meta.name} could not be made again, and is not there`,
      refused ? `${refused.message}: ${refused.details}` : "Milo refused the name, then had none",
    );
  }
  const mine = sameHolder(found, meta.annotations ?? {});
  if (mine && leases(found, address)) return { outcome: made ? "made" : "present" };
  if (mine && made?.metadata.uid) {
    // Milo re-bound the name's retained address, not the one pinned: that address is the
    // last holder's of the name, who may run on it. The claim made leases nothing this holder
    // uses: released, the address left retained for the name.
    const released = await milo.releaseClaim(meta.name, made.metadata.uid)
      .then(() => "released again", (err) => `not released: ${toCniError(err).message}`);
    return duplicate(
      `claim ${meta.name} was made again on ${leased(made)}, the address Milo kept for the ` +
        `name (its last holder's), not ${address}: ${released}`,
    );
  }
  return duplicate(`claim ${meta.name} now records ${describeHolder(found)} on ${leased(found)}`);
}

/** True when `claim` records the holder `annotations` name (the ADD's id aside). */
function sameHolder(claim: IPClaim, annotations: Record<string, string>): boolean {
  const got = claim.metadata.annotations ?? {};
  const keys = new Set([...Object.keys(annotations), ...Object.keys(got)]);
  return [...keys].every((k) =>
    !k.startsWith(PREFIX) || k === KEYS.addId || annotations[k] === got[k]
  );
}

/** The address a claim leases: `status.address`, else its CIDR's first address. */
export function leased(claim: IPClaim): string {
  return claim.status.address ?? claim.status.allocatedCIDR?.split("/")[0] ?? "(none)";
}

/**
 * True when `claim` leases `address` (an address, or a CIDR as an ADD
 * answered it), compared as addresses, not as text.
 */
export function leases(claim: IPClaim, address: string): boolean {
  const want = parseCidr(address) ?? parseIp(address);
  const got = parseIp(leased(claim));
  return !!want && !!got && want.family === got.family && ipValue(want) === ipValue(got);
}

function holderText(annotations: Record<string, string>): string {
  const a = (k: keyof typeof KEYS) => annotations[KEYS[k]] ?? "?";
  return `pod=${a("pod")} container=${a("containerId")} ifname=${a("ifname")} ` +
    `node=${a("node")} host=${a("host")}`;
}
