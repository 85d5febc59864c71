/**
 * The evidence the node reconcile needs before it judges a galactic
 * attachment by its absence from the result caches (lib/liveness.ts).
 *
 * galactic attaches pods through galactic-veth and VMs through galactic-tap
 * (datum-cloud/galactic `cmd/galactic-tap/main.go`: Kata, Firecracker,
 * kraftlet). A pod's runtime is the kubelet's CRI runtime, whose libcni cache
 * names it; a VM's runtime may keep none, or keep it where `resultsDirs` does
 * not look, and then its live VM would look like a pod whose DEL never came.
 * So a galactic attachment is released by its absence only once a cache has
 * named its container in an earlier run: absent after having been seen is
 * evidence that it is gone; never seen is none, and nothing is released (its
 * DEL, the journal, the boot rule and the sweep still release it). The node's
 * record marks a galactic attachment ({@link galacticOf}); the reconcile
 * state remembers which of its claims a cache has named (`seen`, by uid).
 */
import type { Attachment } from "./claims.ts";
import { isGalactic } from "./galactic.ts";
import type { Holding } from "./lease.ts";
import type { State } from "./liveness.ts";

/** A recorded claim as these rules read it (lib/_reconcile_records.ts `Recorded`). */
interface Claimed {
  name: string;
  uid?: string;
  h: Pick<Holding, "galactic">;
}

/** The record's mark of a galactic attachment (none for any other). */
export function galacticOf(
  a: Pick<Attachment, "vpc" | "vpcattachment">,
): Pick<Holding, "galactic"> {
  return isGalactic(a) ? { galactic: { vpc: a.vpc, vpcattachment: a.vpcattachment } } : {};
}

/** Notes in `next` that a cache named the container of `c` this run. */
export function sawLive(next: State, c: Claimed): void {
  if (c.h.galactic) next.seen[c.name] = c.uid ?? "";
}

/**
 * Why `c`, absent from the caches now, is not judged by its absence: a
 * galactic attachment no cache named in an earlier run (carried forward in
 * `next` when one did). Undefined when it may be judged.
 */
export function withoutEvidence(previous: State, next: State, c: Claimed): string | undefined {
  if (!c.h.galactic) return undefined;
  if (previous.seen[c.name] === (c.uid ?? "")) {
    next.seen[c.name] = c.uid ?? "";
    return undefined;
  }
  return "galactic attachment no result cache has named yet: no evidence it is gone (a runtime " +
    "that keeps no libcni result cache under resultsDirs, such as a VM's); its DEL, the " +
    "journal or the sweep releases it";
}
