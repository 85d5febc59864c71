/**
 * DELETEs Milo may run after their sender gave up on them.
 *
 * Milo's API server may run a request after its sender stopped waiting (held
 * in priority and fairness's queue, behind a proxy) until its request
 * timeout, and Milo's DELETE removes whatever claim the name has then
 * (`AllocatingREST.Delete`). A DELETE whose answer was lost may so remove the
 * claim a later ADD made under the same name. Two defences:
 *
 * - **A name of one attachment** (identity `attachment`): only the same
 *   container makes it again (a runtime that starts a container again under
 *   its id). The node marks each DELETE of such a name before sending it
 *   (`<stateDir>/deletes/NAME`: until when it may still run), drops the mark
 *   once every DELETE of the release was answered, and keeps it when one
 *   was not (or the process died meanwhile). An ADD of a marked name is
 *   refused (code 11, retried by the runtime) until the mark is past: a claim
 *   made under it could be removed, and under reclaimPolicy Delete its
 *   address given to another pod, before anything on the node saw it.
 * - **A name other sandboxes share** (identity `pod` or `network`): another
 *   node's DELETE may be in flight, which no mark here can tell. Its claims
 *   are read again by reconcile once no DELETE sent before the ADD can still
 *   run (`reconcile.recheckAfterS`; lib/_reconcile_verify.ts) and made again
 *   if gone: under Retain, which every such name has, Milo keeps the address
 *   for the name meanwhile. A DEL that comes before that read reads them
 *   (or the journal's release after it): a claim another holder made on the
 *   sandbox's address meanwhile is reported as the duplicate it was
 *   ({@link lateDuplicates}).
 */
import { writeAtomicSync } from "./atomic_write.ts";
import { isSharedName } from "./claims.ts";
import type { NodeConfig } from "./config.ts";
import { CniError } from "./errors.ts";
import { describeHolder, describeRecord } from "./holder.ts";
import type { Holding } from "./lease.ts";
import { readState, stateFileOf, verifiedKey } from "./liveness.ts";
import type { IPClaim } from "./milo_objects.ts";
import { type Duplicate, leased, leases } from "./restore.ts";

type Node = Pick<NodeConfig, "stateDir" | "reconcile">;

/** What the Milo client tells of its DELETEs (lib/_milo_options.ts). */
export interface DeleteHooks {
  /** A DELETE of `name` is about to be sent; none of its attempts goes after `lastSend`. */
  sending(name: string, lastSend: number): void;
  /** Every DELETE of `name` this release sent was answered: none is left in flight. */
  answered(name: string): void;
}

/** The hooks of a node's Milo client: marks of its attachments' names' DELETEs. */
export function markingDeletes(node: Node): DeleteHooks {
  const marks = new DeleteMarks(node.stateDir);
  const lateMs = node.reconcile.recheckAfterS * 1000;
  return {
    sending: (name, lastSend) => {
      if (lateMs && !isSharedName(name)) marks.mark(name, lastSend + lateMs);
    },
    answered: (name) => {
      if (!isSharedName(name)) marks.drop(name);
    },
  };
}

/**
 * Refuses an ADD of `names` while a DELETE this node sent of one of them may
 * still run at Milo (code 11: the runtime retries).
 */
export function refuseWhileDeleting(node: Node, names: string[], now: number): void {
  const marks = new DeleteMarks(node.stateDir);
  // A shared name is never marked (markingDeletes): no file to read on the ADD's path.
  for (const name of names.filter((n) => !isSharedName(n))) {
    const until = marks.pending(name, now);
    if (until === undefined) continue;
    throw new CniError(
      "transient",
      `claim ${name} was being released, and Milo may still run that DELETE until ` +
        new Date(until).toISOString(),
      "a DELETE of this attachment's claim went unanswered; a claim made again now could be " +
        "removed by it: retry after that time (reconcile.recheckAfterS)",
    );
  }
}

/**
 * When reconcile reads again the claims an ADD made at `now`: under a name
 * other sandboxes share, once no DELETE sent before can still run; none
 * otherwise (or when `recheckAfterS` is 0).
 */
export function recheckAt(node: Node, names: string[], now: number): number | undefined {
  const lateMs = node.reconcile.recheckAfterS * 1000;
  return lateMs && names.some(isSharedName) ? now + lateMs : undefined;
}

/**
 * The duplicates a DELETE that ran late left an attachment whose release
 * (its DEL, or the journal's after it) found `others`, claims of its names
 * that record another holder: {@link lateDuplicate} of each, against when
 * reconcile last found it as recorded (its state file, read only then).
 */
export async function lateDuplicates(
  node: NodeConfig,
  record: Holding | undefined,
  others: IPClaim[],
  now: number,
): Promise<Duplicate[]> {
  if (!others.length || record?.recheckAt === undefined) return [];
  const verified = await readState(stateFileOf(node), now)
    .then((s) => s.verified ?? {}, () => ({} as Record<string, number>));
  return others.flatMap((c) =>
    lateDuplicate(record, c, verified[verifiedKey(c.metadata.name, record.containerId)]) ?? []
  );
}

/**
 * What a release of the attachment `record` holds finds when Milo's claim of its
 * shared name `claim.metadata.name` records another holder: a duplicate when
 * the claim was never read again since its ADD (its `recheckAt` not yet
 * verified: `verifiedAt`, lib/liveness.ts) and the other holder leases the
 * recorded address. A DELETE sent before the ADD ran late, removed this
 * sandbox's claim, and the other made the name while this one still ran on
 * the address.
 */
function lateDuplicate(
  record: Holding | undefined,
  claim: IPClaim,
  verifiedAt: number | undefined,
): Duplicate | undefined {
  if (record?.state !== "held" || record.recheckAt === undefined) return undefined;
  if (verifiedAt !== undefined && verifiedAt >= record.recheckAt) return undefined;
  const name = claim.metadata.name;
  const c = record.claims.find((x) => x.name === name);
  if (!c?.address || !leases(claim, c.address)) return undefined;
  return {
    claim: name,
    address: c.address,
    holder: `${describeRecord(record, c)} (until its DEL)`,
    now: `claim ${name} now records ${describeHolder(claim)} on ${leased(claim)}`,
  };
}

/** The marks of one node, one file per claim name under `<stateDir>/deletes/`. */
export class DeleteMarks {
  readonly dir: string;

  constructor(stateDir: string) {
    this.dir = `${stateDir}/deletes`;
  }

  /**
   * Marks `name` until `until` (a later mark wins). Best effort: without a
   * writable state directory (the sweep's Job) there is no ADD here to warn.
   */
  mark(name: string, until: number): void {
    const at = Math.max(until, this.#until(name) ?? 0);
    try {
      Deno.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      writeAtomicSync(this.#path(name), JSON.stringify({ until: at }), 0o600);
    } catch {
      // Nothing to mark on.
    }
  }

  /** Until when `name` is marked, if after `now`; a mark past is dropped. */
  pending(name: string, now: number): number | undefined {
    const until = this.#until(name);
    if (until === undefined) return undefined;
    if (until > now) return until;
    this.drop(name);
    return undefined;
  }

  /** Drops the mark of `name` (none is fine). */
  drop(name: string): void {
    try {
      Deno.removeSync(this.#path(name));
    } catch {
      // Gone already.
    }
  }

  /** Drops every mark past at `now` (reconcile's housekeeping). */
  prune(now: number): void {
    let names: string[];
    try {
      names = [...Deno.readDirSync(this.dir)].filter((e) => e.isFile).map((e) => e.name);
    } catch {
      return;
    }
    for (const name of names) if (!name.endsWith(".tmp")) this.pending(name, now);
  }

  /** Until when the mark of `name` lasts; one that cannot be read (written whole, by rename) is past. */
  #until(name: string): number | undefined {
    try {
      const v = JSON.parse(Deno.readTextFileSync(this.#path(name))) as { until?: unknown };
      return typeof v?.until === "number" ? v.until : 0;
    } catch (err) {
      return err instanceof Deno.errors.NotFound ? undefined : 0;
    }
  }

  #path(name: string): string {
    return `${this.dir}/${name}`;
  }
}
