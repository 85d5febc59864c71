import { type Attachment, attachmentOf, canName, claimName } from "./claims.ts";
import { isHeldBy, madeBy, notHeldHere, sameNode } from "./holder.ts";
import type { CniEnv } from "./cni.ts";
import type { NodeConfig } from "./config.ts";
import { attemptAll, CniError, combineErrors, errorText, withNote } from "./errors.ts";
import { hostId } from "./host.ts";
import { claimNamesOf, familiesOf, type Handler, type Invocation } from "./invocation.ts";
import { Holdings } from "./holdings.ts";
import { IN_DOUBT, Journal } from "./journal.ts";
import { lateDuplicates } from "./late_deletes.ts";
import { type Holding, type JournalClaim, type Owed, owedAfterRelease } from "./lease.ts";
import type { NetConf } from "./netconf.ts";
import { withAttachmentLock } from "./lockfile.ts";
import { ReleaseTally } from "./milo_release.ts";
import type { IPClaim } from "./milo_objects.ts";

/**
 * DEL: release the attachment's claims in Milo: those the node recorded for
 * it, whatever the network config says now, and those the config names. A
 * claim already gone counts as released. Under every identity a claim is
 * released only while a fresh GET finds it this attachment's (cluster,
 * container, interface) on this host and node (or, recording no host, this
 * node): the late DEL of an old sandbox leaves the next holder's claim alone,
 * and a cloned machine's DEL of a sandbox it inherited leaves the original's,
 * whether the clone kept the machine-id or not, as long as its node name is
 * its own (the original's reconcile, or the sweep, judges it). Any other
 * failure fails the DEL so the runtime retries it, and records the claims in the release
 * journal, so that `milo-ipam reconcile` finishes the release if the runtime
 * gives up; the record keeps what is neither released nor journaled. After an
 * ADD left in doubt (lib/lease.ts: killed, or a create unanswered) the DEL
 * journals the doubt whatever happened to it, released or not: that create
 * may still land. A claim a DELETE removed in place of the one judged (Milo
 * ignores its uid precondition) is made again, or journaled to be, and a
 * duplicate it finds is reported. Holds the attachment's lock (see lib/lockfile.ts)
 * throughout. The agent's undo releases nothing unless the ADD it undoes is
 * still the attachment's last, and then only the claims that ADD made
 * ({@link undo}).
 */
export const del: Handler = async (inv) => {
  return await withAttachmentLock(inv.node.stateDir, inv.attachment, async () => {
    if (inv.undoOf !== undefined) {
      const h = inv.holdings.read(inv.attachment);
      if (h?.addId !== inv.undoOf) {
        const why = h ? "a later ADD of this attachment is recorded" : "the ADD left no lease";
        return { claims: [], skipped: `undo of ADD ${inv.undoOf}: ${why}; nothing released` };
      }
      return await undo(inv, h);
    }
    return await release(inv);
  });
};

/**
 * The agent's undo of the ADD `h` records: each claim is released only while
 * Milo's claim records that ADD as its maker (`milo-ipam.io/add-id`); one it
 * found is an earlier ADD's lease (the plugin's own, when it took the call
 * over), which its runtime may hold. After an ADD in doubt the names it made
 * or may still make are journaled in doubt, as a DEL's are.
 */
async function undo(inv: Invocation, h: Holding) {
  const names = h.claims.map((c) => c.name);
  const found: string[] = [];
  const events = new ReleaseTally();
  const r = await attemptAll(
    names,
    async (name) => {
      const mine = (c: IPClaim) => madeBy(c) === inv.undoOf;
      const done = await inv.milo.releaseIf(name, mine, events.of());
      if (done === "changed") found.push(name);
    },
    (name) => `undo: release of claim ${name} failed`,
  );
  // A failed undo leaves the record as it is: the runtime's DEL of the attachment judges it.
  if (r.failures.length) throw combineErrors(r.failures);
  const gone = names.filter((n) => !found.includes(n));
  // After an ADD in doubt, the names it made or may still make are journaled in doubt.
  const doubt = owedAfterRelease(h, [], inv.now(), graceOf(inv))?.doubt;
  const inDoubt = doubt?.names.filter((n) => gone.includes(n)) ?? [];
  const owed = doubt && inDoubt.length
    ? { claims: [], doubt: { ...doubt, names: inDoubt } }
    : undefined;
  await settleOwed(inv, owed, events, true, IN_DOUBT);
  if (found.length) inv.holdings.forget(inv.attachment, gone);
  else inv.holdings.remove(inv.attachment);
  return {
    claims: gone,
    ...events.result(),
    ...(found.length
      ? {
        skipped: `undo of ADD ${inv.undoOf}: ${
          found.join(", ")
        } made by an earlier ADD: left alone`,
      }
      : {}),
  };
}

async function release(inv: Invocation) {
  const a = inv.attachment;
  const record = ownRecord(inv.holdings, a);
  const claims = namesOf(inv, record);
  const left = new Map<string, string>();
  const seen = new Map<string, string>();
  /** Each claim's address, as Milo's claim or the node's record names it. */
  const addresses = new Map(
    (record?.claims ?? []).flatMap((c) => c.address ? [[c.name, c.address] as const] : []),
  );
  const events = new ReleaseTally();
  /** Claims the record held that were gone: another's DELETE may make them again. */
  const vanished: string[] = [];
  /** Claims of the attachment's names that record another holder (the last read), by name. */
  const others = new Map<string, IPClaim>();
  const r = await attemptAll(
    claims,
    async (name) => {
      const why: string[] = [];
      const mine = (c: IPClaim) => {
        const not = notHeldHere(c, a);
        if (not) why.push(not);
        else if (c.metadata.uid) seen.set(name, c.metadata.uid);
        if (!isHeldBy(c, a)) others.set(name, c);
        const address = c.status.allocatedCIDR ?? c.status.address;
        if (!not && address) addresses.set(name, address);
        return !not;
      };
      const done = await inv.milo.releaseIf(name, mine, events.of((w) => why.push(w)));
      if (done === "changed") left.set(name, why.join("; ") || "another claim now");
      if (done === "absent" && uidOf(record, name)) vanished.push(name);
      return done;
    },
    (name) => `release of claim ${name} failed`,
  );
  events.duplicates.push(
    ...await lateDuplicates(inv.node, record, [...others.values()], inv.now()),
  );
  const skipped = left.size
    ? { skipped: leftAlone(left) }
    : claims.length
    ? {}
    : { skipped: "pod identity without the pod's name, and no record of this attachment" };
  const failed = claims.filter((name) => !r.done.includes(name));
  const owedClaims = await Promise.all(
    failed.map((name) => journalClaim(inv, name, seen.get(name) ?? uidOf(record, name))),
  );
  const owed = owedAfterRelease(record, owedClaims, inv.now(), graceOf(inv), vanished);
  if (!r.failures.length) {
    await settleOwed(inv, owed, events, true, IN_DOUBT).catch((err) => {
      throw new CniError(
        "io",
        "claims released, but what the release still owes could not be journaled",
        errorText(err),
      );
    });
    inv.holdings.remove(a);
    const released = claims.filter((c) => !left.has(c));
    return {
      claims: released,
      addresses: released.flatMap((c) => addresses.get(c) ?? []),
      ...skipped,
      ...events.result(),
    };
  }
  const e = combineErrors(r.failures);
  let note: string;
  try {
    const path = await settleOwed(inv, owed, events, false, e.message);
    note = `journaled for release by milo-ipam reconcile (${path})`;
    // What is released or journaled leaves the record; the rest stays for reconcile to judge.
    if (record) inv.holdings.forget(a, r.done);
  } catch (err) {
    note = `could not be journaled: ${errorText(err)}`;
  }
  throw withNote(e, note);
}

/**
 * Journals what a release owes: the claims it could not release and its
 * doubt (lib/lease.ts), and each claim it must make again; drops the entry of
 * a release that owes nothing (`done`: every claim was released). Answers
 * the entry's path.
 */
async function settleOwed(
  inv: Invocation,
  owed: Owed | undefined,
  events: ReleaseTally,
  done: boolean,
  error: string,
): Promise<string> {
  const a = inv.attachment;
  for (const remake of events.owed) await inv.journal.recordRemake(a, remake, inv.now());
  if (owed) return await inv.journal.owe(a, owed, error, { now: inv.now(), replace: done });
  if (done) await inv.journal.drop(a).catch(() => false);
  return inv.journal.pathOf(a);
}

/** How long a doubt may last: the reconcile's grace, after which a late create is an orphan. */
const graceOf = (inv: Pick<Invocation, "node">) => inv.node.reconcile.graceS * 1000;

/**
 * This machine's record of the attachment: one another host wrote, or this
 * host's machine-id under another node (a state directory copied to a clone),
 * is not. A record naming no node is judged by its claims' node in Milo.
 */
function ownRecord(holdings: Holdings, a: Attachment): Holding | undefined {
  const h = holdings.read(a);
  if (!h || (h.host !== undefined && h.host !== a.host)) return undefined;
  return h.node === undefined || sameNode(h.node, a.node) ? h : undefined;
}

/**
 * The claims a DEL releases: those the node recorded for the attachment,
 * whatever the network config says now (a class dropped, the identity
 * switched), and those the config names (no record: an ADD before records,
 * or a lost `stateDir`).
 */
function namesOf(inv: Invocation, record: Holding | undefined): string[] {
  const named = canName(inv.attachment) ? claimNamesOf(inv) : [];
  return [...new Set([...named, ...(record?.claims ?? []).map((c) => c.name)])];
}

/** The report of the claims a DEL left alone, by why. */
function leftAlone(left: Map<string, string>): string {
  return [...left].map(([name, why]) =>
    why.startsWith("records another holder")
      ? `held by another sandbox, left alone: ${name} (${why})`
      : `left alone: ${name} (${why})`
  ).join("; ");
}

/** The uid the node recorded for the claim `name` of a successful ADD. */
function uidOf(record: Holding | undefined, name: string): string | undefined {
  return record?.state === "held" ? record.claims.find((c) => c.name === name)?.uid : undefined;
}

/**
 * The journal's record of a claim this DEL could not release: with its uid
 * when this DEL's read found it this attachment's on this host, or the node
 * recorded it, or a read within the rollback slice still finds it so, so
 * reconcile releases exactly that object.
 */
async function journalClaim(
  inv: Invocation,
  name: string,
  uid: string | undefined,
): Promise<JournalClaim> {
  if (uid) return { name, uid };
  try {
    const claim = await inv.rollback.getClaim(name);
    const found = claim && !notHeldHere(claim, inv.attachment) ? claim.metadata.uid : undefined;
    return found ? { name, uid: found } : { name };
  } catch {
    return { name };
  }
}

/**
 * A DEL that failed before it could ask Milo (its token, CA or client
 * certificate unreadable, a refused network config, a Milo client that could
 * not start): the claims the node recorded for the attachment and those the
 * network config names, when it parsed, are journaled under the attachment's
 * lock, so `milo-ipam reconcile` releases them once Milo can be reached (a
 * runtime such as galactic's masters never repeats a failed DEL). Answers a
 * note for the error, or undefined when no claim of it can be named.
 */
export async function journalUnreached(
  node: NodeConfig,
  env: CniEnv,
  conf: NetConf | undefined,
  error: string,
  now: number,
): Promise<string | undefined> {
  let a: Attachment;
  try {
    a = conf ? attachmentOf(node, conf, env) : {
      cluster: node.cluster,
      node: node.node,
      host: hostId(node),
      network: "",
      containerId: env.containerId,
      ifname: env.ifname,
      podNamespace: env.args.K8S_POD_NAMESPACE || undefined,
    };
  } catch {
    return undefined;
  }
  return await withAttachmentLock(node.stateDir, a, async () => {
    try {
      const record = ownRecord(new Holdings(node.stateDir), a);
      if (!conf) a.network = record?.network ?? "";
      const named = conf && canName(a) ? familiesOf(conf.network).map((f) => claimName(a, f)) : [];
      const claims = [...new Set([...named, ...(record?.claims ?? []).map((c) => c.name)])]
        .map((name) => {
          const uid = uidOf(record, name);
          return uid ? { name, uid } : { name };
        });
      if (!claims.length) return undefined;
      const journal = new Journal(node.stateDir);
      // After an ADD in doubt its creates may land later: the entry waits for them too.
      const owed = owedAfterRelease(record, claims, now, node.reconcile.graceS * 1000)!;
      const path = await journal.owe(a, owed, error, { now });
      return `journaled for release by milo-ipam reconcile (${path})`;
    } catch (err) {
      return `could not be journaled: ${errorText(err)}`;
    }
  });
}
