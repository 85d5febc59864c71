import { nodeSelector } from "./claims.ts";
import { holderOf, notHeldHere, podNamespaceOf } from "./holder.ts";
import type { NetworkConfig, NodeConfig } from "./config.ts";
import { attachmentKey } from "./netconf.ts";
import { attemptAll, CniError, combineErrors } from "./errors.ts";
import { FAMILIES, miloFamily } from "./ip.ts";
import type { Handler, Invocation } from "./invocation.ts";
import { isLive, readLive } from "./liveness.ts";
import { withAttachmentLock } from "./lockfile.ts";
import type { Release } from "./milo.ts";
import { ReleaseTally } from "./milo_release.ts";
import { ageOnMilo, type IPClaim } from "./milo_objects.ts";
import { grantOf, namesScope } from "./scope_grant.ts";
import { WATCHDOG_GRACE_MS } from "./timers.ts";

const DELETE_CONCURRENCY = 8;

/**
 * GC: release the claims of this node and host, made for this network (its
 * name, the class it configures and its scope, {@link madeFor}), whose
 * attachment is not in `cni.dev/valid-attachments` and whose container no
 * libcni result cache of the node names (another runtime, or Multus, may
 * hold it: the liveness of lib/liveness.ts), which no ADD on this node may
 * still be making, and which
 * are at least `gc.minAgeS` old on Milo's own clock (the LIST's `Date`
 * against `creationTimestamp`; the node's clock plays no part). A claim
 * without a readable creation time or a uid is kept. Each is released under
 * its attachment's lock (see {@link releaseStale}). Keeps going past errors
 * and reports them all; prints nothing on success.
 */
export const gc: Handler = async (inv) => {
  const valid = inv.conf.validAttachments;
  if (!valid) throw new CniError("config", "field cni.dev/valid-attachments: missing");
  const a = inv.attachment;
  const minAgeMs = inv.node.gc.minAgeS * 1000;
  const listed = await inv.milo.listClaimsAt(nodeSelector(a.cluster, a.node, a.network));
  const miloNow = listed.serverTime;
  if (Number.isNaN(miloNow)) {
    throw new CniError(
      "protocol",
      "Milo's claim list carries no Date header: GC cannot age claims on Milo's clock",
      "nothing released",
    );
  }
  const live = await readLive(inv.node.resultsDirs);
  const stale = listed.items.filter((c) => {
    const h = holderOf(c);
    if (h.host !== a.host || h.network !== a.network) return false;
    if (!madeFor(c, inv.conf.network, a.network, inv.node)) return false;
    if (h.containerId === undefined || h.ifname === undefined) return false;
    if (valid.has(attachmentKey(h.containerId, h.ifname)) || isLive(live, h.containerId)) {
      return false;
    }
    if (isBeingAdded(inv, h.containerId, h.ifname)) return false;
    // Released by its uid only: a claim without one is left.
    if (!c.metadata.uid) return false;
    return ageOnMilo(c, miloNow) >= minAgeMs; // an unknown age (NaN) is kept
  }).map((c) => ({ c, record: recordOf(inv, c) }));
  const claims: string[] = [];
  const failures: CniError[] = [];
  const tally = new ReleaseTally();
  for (let i = 0; i < stale.length; i += DELETE_CONCURRENCY) {
    const r = await attemptAll(
      stale.slice(i, i + DELETE_CONCURRENCY),
      (s) => releaseStale(inv, s.c, s.record, tally),
      (s) => `release of ${s.c.metadata.name} failed`,
    );
    claims.push(...r.done.map((s) => s.c.metadata.name));
    failures.push(...r.failures);
  }
  for (const remake of tally.owed) await inv.journal.recordRemake(a, remake, inv.now());
  if (failures.length) throw combineErrors(failures);
  return { claims, ...tally.result() };
};

/** The attachment key of a claim's holder on this node. */
function keyOf(inv: Invocation, c: IPClaim) {
  const h = holderOf(c);
  return { cluster: inv.attachment.cluster, containerId: h.containerId!, ifname: h.ifname! };
}

/** What the node's record says of a claim's attachment (its last ADD), when GC judged it. */
function recordOf(inv: Invocation, c: IPClaim): string {
  const h = inv.holdings.read(keyOf(inv, c));
  return h ? `${h.state} ${h.addId}` : "none";
}

/**
 * Releases a stale claim under its attachment's lock, only while no ADD of
 * the attachment was recorded since GC judged it (`record`) and Milo's claim
 * is still the object listed, this host's; then drops it from the node's
 * record. No ADD or DEL of the attachment runs meanwhile, so the name is not
 * made again between the GET and the DELETE (see MiloClient.releaseIf).
 */
async function releaseStale(
  inv: Invocation,
  c: IPClaim,
  record: string,
  tally: ReleaseTally,
): Promise<Release> {
  const key = keyOf(inv, c);
  return await withAttachmentLock(inv.node.stateDir, key, async () => {
    if (recordOf(inv, c) !== record) return "changed";
    const a = { ...inv.attachment, ...key };
    const r = await inv.milo.releaseIf(
      c.metadata.name,
      (x) => x.metadata.uid === c.metadata.uid && !notHeldHere(x, a),
      tally.of(),
    );
    if (r !== "changed") inv.holdings.forget(key, [c.metadata.name]);
    return r;
  });
}

/**
 * True when an ADD of the attachment on this node may still run: its record
 * says `adding` and its deadline (the watchdog's included; without one, the
 * node's `totalMs` from when it was written) has not passed by this node's
 * clock. Past it, the ADD was killed, or gave up.
 */
function isBeingAdded(inv: Invocation, containerId: string, ifname: string): boolean {
  const h = inv.holdings.read({ cluster: inv.attachment.cluster, containerId, ifname });
  if (h?.state !== "adding") return false;
  return inv.now() < (h.until ?? h.at + inv.node.timeouts.totalMs + WATCHDOG_GRACE_MS);
}

/**
 * True when a claim was made for `net`, the network `network`: the class it
 * configures for the claim's family, and the scope it names, or where it
 * names none, the scope the node config grants the namespace of the claim's
 * pod for the network (lib/scope_grant.ts); a uid on one side only is the
 * same object (a claim made before root pinned it). A narrowing of what GC
 * releases, never a liveness judgement: a claim it matches is still released
 * only when its attachment is neither valid nor live.
 */
export function madeFor(
  claim: IPClaim,
  net: NetworkConfig,
  network: string,
  node: Pick<NodeConfig, "allowScopes">,
): boolean {
  const family = FAMILIES.find((f) => miloFamily(f) === claim.spec.ipFamily);
  if (!family || claim.spec.className !== net.classes[family]) return false;
  const want = net.scope ??
    grantOf(node, podNamespaceOf(holderOf(claim)), network)?.grant.scope ?? {};
  return namesScope(claim.spec.scope, want, "either");
}
