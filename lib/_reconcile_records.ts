/**
 * Which of the node's records (lib/holdings.ts) reconcile judges, and the
 * boot it judges them against. A record is this machine's when this host
 * (its machine-id) wrote it under this node's name: a machine made from
 * another's disk image inherits its state directory, and one that kept the
 * machine-id is told apart by its own node name alone. Another host's records
 * are skipped; this host's under another node are kept, reported as that
 * node's. A record that names no node (written before records named one) is
 * judged by its claims' node in Milo before any release ({@link notOwn}).
 */
import type { NodeConfig } from "./config.ts";
import { holderOf, sameNode } from "./holder.ts";
import type { Holdings } from "./holdings.ts";
import type { Holding } from "./lease.ts";
import { bootId } from "./host.ts";
import type { IPClaim } from "./milo_objects.ts";

/** One claim of the record, as reconcile judges it. */
export interface Recorded {
  name: string;
  uid?: string;
  address?: string;
  h: Holding;
  /** Recorded by an ADD of an earlier boot: its sandbox died with that boot. */
  earlierBoot: boolean;
}

/** The boot the boot rule judges records against, and why there is none. */
export interface Boot {
  /** The boot id, read twice alike; undefined: no boot rule this run. */
  id?: string;
  /** Set when the file answered two values: it names no boot (the rule is off). */
  warning?: string;
}

/**
 * The kernel's boot id, read twice: a file that answers another value each
 * read (`/proc/sys/kernel/random/uuid`) names no boot, and with it every
 * record would look like an earlier boot's. Then no boot rule applies, and a
 * warning says why.
 */
export function stableBoot(node: Pick<NodeConfig, "bootIdFile">): Boot {
  const first = bootId(node);
  const second = bootId(node);
  if (first === second) return first ? { id: first } : {};
  return {
    warning: `bootIdFile ${node.bootIdFile} answered two values in two reads: it names no boot, ` +
      "so no claim is released as an earlier boot's (the liveness rule and its brakes still " +
      "apply); point bootIdFile at /proc/sys/kernel/random/boot_id",
  };
}

/**
 * The claims of the records this machine wrote: held, or added by an ADD
 * whose deadline has passed (its claims may exist; an ADD still running is
 * left to itself), each marked when its ADD ran in another boot than `boot`.
 * A record this host wrote under another node's name is kept (`keep`), with
 * whose it is.
 */
export function recorded(
  holdings: Holdings,
  here: { host: string; node: string },
  boot: string | undefined,
  now: number,
  keep: (claim: string, reason: string, h: Holding) => void,
): Recorded[] {
  const out: Recorded[] = [];
  for (const { h } of holdings.all()) {
    if (h.host !== undefined && h.host !== here.host) continue;
    if (h.node !== undefined && !sameNode(h.node, here.node)) {
      for (const c of h.claims) {
        keep(
          c.name,
          `recorded by node ${h.node} under this host's machine-id (a copied state directory, ` +
            `or a node name changed): not judged here; left to node ${h.node}'s reconcile or ` +
            "the sweep",
          h,
        );
      }
      continue;
    }
    const earlierBoot = !!boot && !!h.boot && h.boot !== boot;
    if (h.state === "adding" && now < (h.until ?? 0) && !earlierBoot) continue;
    for (const c of h.claims) {
      out.push({ name: c.name, uid: c.uid, address: c.address, h, earlierBoot });
    }
  }
  return out;
}

/**
 * Why Milo's `claim` is not this machine's claim of the recorded `c` (this
 * host's, of this node, of the same attachment, and the recorded uid when
 * there is one), or undefined when it is. A claim that records no host is
 * never reconcile's.
 */
export function notOwn(
  claim: IPClaim,
  c: Recorded,
  here: { host: string; node: string },
): string | undefined {
  const h = holderOf(claim);
  if (h.containerId !== c.h.containerId || h.ifname !== c.h.ifname) {
    return "another attachment's claim now";
  }
  if (c.uid && c.uid !== claim.metadata.uid) return "another claim now";
  if (h.host !== here.host) return `recorded for host ${h.host ?? "(none)"}, not this one`;
  if (!sameNode(h.node, here.node)) {
    return `recorded for node ${h.node ?? "(none)"} under this host's machine-id: left to ` +
      `node ${h.node ?? "(none)"}'s reconcile or the sweep`;
  }
  return undefined;
}
