/**
 * The node's record of the attachments whose leases it holds or is making:
 * one small JSON file per attachment under `<stateDir>/holdings/`, named by
 * the hash its claims are named by. Written under the attachment's lock:
 *
 * - before an ADD sends its creates: `adding`, with the ADD's call id;
 * - once the ADD succeeded: `held`, with the claims' uids;
 * - removed when a DEL released the claims (or journaled them); put back as
 *   it was when an ADD failed and Milo answered every create it sent.
 *
 * Each names the host, the node and the boot its ADD ran in (lib/host.ts;
 * the boot is read when an ADD writes its record): a record copied to another
 * machine is not that machine's (another host, or the same machine-id under
 * another node name), and the sandbox of a record from an earlier boot died
 * with it.
 *
 * An `adding` record left behind (the plugin was killed, or a create went
 * unanswered) tells the DEL after it that a claim may still appear: it
 * records an in-doubt journal entry (lib/journal.ts). The call id of the last
 * successful ADD tells the agent's undo whether a later ADD of the attachment
 * succeeded since (the runtime was told about that one: it is never undone).
 *
 * Files are written synchronously (temporary file, rename), without fsync: a
 * record matters while the processes that use it live, and a machine that
 * crashes takes its pods with it.
 */
import { writeAtomicSync } from "./atomic_write.ts";
import type { Attachment } from "./claims.ts";
import { attachmentHash } from "./claims.ts";
import type { NodeConfig } from "./config.ts";
import { CniError, errorText } from "./errors.ts";
import { galacticOf } from "./evidence.ts";
import { bootId } from "./host.ts";
import {
  afterAdd,
  beginAdd,
  type Doubt,
  type HeldClaim,
  type Holding,
  mergeDoubt,
} from "./lease.ts";
import { WATCHDOG_GRACE_MS } from "./timers.ts";

type Key = Pick<Attachment, "cluster" | "containerId" | "ifname">;

/** The records of one node. */
export class Holdings {
  readonly dir: string;
  readonly #node: Pick<NodeConfig, "bootIdFile"> | undefined;

  /**
   * The records under `stateDir`; `node` names the boot an ADD's record is
   * written in (its `bootIdFile`, read by {@link adding} and {@link held}),
   * without it none is named.
   */
  constructor(stateDir: string, node?: Pick<NodeConfig, "bootIdFile">) {
    this.dir = `${stateDir}/holdings`;
    this.#node = node;
  }

  /** The record file of an attachment. */
  pathOf(a: Key): string {
    return `${this.dir}/pod-${attachmentHash(a)}.json`;
  }

  /** The record of `a`, if any (an unreadable one counts as an ADD in doubt). */
  read(a: Key): Holding | undefined {
    let text: string;
    try {
      text = Deno.readTextFileSync(this.pathOf(a));
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw new CniError("io", `cannot read ${this.pathOf(a)}`, errorText(err));
    }
    try {
      const v = JSON.parse(text) as Holding;
      if ((v.state === "adding" || v.state === "held") && typeof v.addId === "string") return v;
    } catch {
      // Torn or foreign: treated as in doubt below.
    }
    return { ...fields(a as Attachment, []), state: "adding", addId: "", at: 0 };
  }

  /**
   * Records that the ADD `addId` of `a`, which ends by `deadline` (its
   * watchdog's grace added here), is about to create `names`, keeping what
   * the record it replaces carried (lib/lease.ts `beginAdd`). Answers the
   * record written.
   */
  adding(a: Attachment, addId: string, names: string[], now: number, deadline: number): Holding {
    const h = beginAdd(this.read(a), {
      ...fields(a, names.map((name) => ({ name }))),
      ...this.#boot(),
      state: "adding",
      addId,
      at: now,
      until: deadline + WATCHDOG_GRACE_MS,
    });
    this.#write(a, h);
    return h;
  }

  /**
   * Records that the ADD `addId` of `a` holds `claims`, keeping what its
   * `adding` record carried (lib/lease.ts `afterAdd`); `unanswered`: a create
   * of the ADD went unanswered, and its creates stay in doubt; `owed`: the
   * doubt of the attachment's journal entry the ADD takes over; `recheckAt`:
   * when reconcile reads the claims again (lib/late_deletes.ts).
   */
  held(
    a: Attachment,
    addId: string,
    claims: HeldClaim[],
    now: number,
    o: { unanswered?: boolean; owed?: Doubt; recheckAt?: number } = {},
  ): void {
    const held: Holding = {
      ...fields(a, claims),
      ...this.#boot(),
      state: "held",
      addId,
      at: now,
      ...(o.recheckAt ? { recheckAt: o.recheckAt } : {}),
    };
    const { unanswered = false, owed } = o;
    const adding = this.read(a);
    this.#write(
      a,
      adding?.state === "adding" && adding.addId === addId
        ? afterAdd(adding, held, unanswered, owed)
        : held,
    );
  }

  /** Writes `h` back as the record of `a` (what a failed ADD found before it began). */
  put(a: Key, h: Holding): void {
    this.#write(a, h);
  }

  /** Removes the record of `a` (none is fine). */
  remove(a: Key): void {
    try {
      Deno.removeSync(this.pathOf(a));
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        throw new CniError("io", `cannot remove ${this.pathOf(a)}`, errorText(err));
      }
    }
  }

  /** Every record, with its file; an unreadable one is left out (its DEL finds it in doubt). */
  all(): { path: string; h: Holding }[] {
    let names: string[];
    try {
      names = [...Deno.readDirSync(this.dir)].filter((e) => e.isFile && e.name.endsWith(".json"))
        .map((e) => e.name);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return [];
      throw new CniError("io", `cannot list ${this.dir}`, errorText(err));
    }
    const out: { path: string; h: Holding }[] = [];
    for (const name of names) {
      const path = `${this.dir}/${name}`;
      try {
        const h = JSON.parse(Deno.readTextFileSync(path)) as Holding;
        if (Array.isArray(h?.claims) && typeof h.containerId === "string") out.push({ path, h });
      } catch {
        // Torn, or removed meanwhile.
      }
    }
    return out;
  }

  /** When the node's claims were last listed from Milo into the record, if ever. */
  listedAt(): number | undefined {
    try {
      return Deno.statSync(`${this.dir}/${LISTED}`).mtime?.getTime() ?? 0;
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw new CniError("io", `cannot read ${this.dir}/${LISTED}`, errorText(err));
    }
  }

  /** Marks that the record now holds every claim of this host that Milo has. */
  markListed(): void {
    try {
      Deno.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      Deno.writeTextFileSync(`${this.dir}/${LISTED}`, new Date().toISOString() + "\n", {
        mode: 0o600,
      });
    } catch (err) {
      throw new CniError("io", `cannot write ${this.dir}/${LISTED}`, errorText(err));
    }
  }

  /**
   * Adds a claim found in Milo (the LIST of a node without a record) to the
   * record of its attachment, as held; one the record has already with its
   * uid is kept (one without gets the uid found), unless `newUid`: the same
   * lease made again under a new uid.
   */
  adopt(a: Attachment, claim: HeldClaim, now: number, newUid = false): void {
    const h = this.read(a);
    const had = h?.claims.find((c) => c.name === claim.name);
    if (had?.uid && !newUid) return;
    const claims = [...(h?.claims ?? []).filter((c) => c !== had), { ...had, ...claim }];
    if (h) return this.#write(a, { ...h, claims });
    this.#write(a, { ...fields(a, claims), state: "held", addId: "listed", at: now });
  }

  /**
   * Adds `names` to the doubt of the record of `a` (creates sent for it that
   * may land yet, since `since`); the caller holds its lock.
   */
  doubt(a: Key, names: string[], since: number): void {
    const h = this.read(a);
    if (!h) return;
    const doubt = mergeDoubt(h.doubt, { since, names });
    this.#write(a, { ...h, ...(doubt ? { doubt } : {}) });
  }

  /** Drops `names` from the record of `a` (removing it when none is left); the caller holds its lock. */
  forget(a: Key, names: string[]): void {
    const h = this.read(a);
    if (!h) return;
    const claims = h.claims.filter((c) => !names.includes(c.name));
    if (claims.length) this.#write(a, { ...h, claims });
    else this.remove(a);
  }

  /** The boot an ADD's record names (none when it cannot be read). */
  #boot(): { boot?: string } {
    const boot = this.#node && bootId(this.#node);
    return boot ? { boot } : {};
  }

  #write(a: Key, h: Holding): void {
    const path = this.pathOf(a);
    const text = JSON.stringify(h);
    try {
      try {
        writeAtomicSync(path, text, 0o600);
      } catch (err) {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
        Deno.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
        writeAtomicSync(path, text, 0o600);
      }
    } catch (err) {
      throw new CniError("io", `cannot write ${path}`, errorText(err));
    }
  }
}

function fields(a: Attachment, claims: HeldClaim[]) {
  const { cluster, host, node, network, containerId, ifname, podNamespace, podName } = a;
  return {
    cluster,
    ...(host ? { host } : {}),
    ...(node ? { node } : {}),
    network,
    ...(podNamespace && podName ? { pod: `${podNamespace}/${podName}` } : {}),
    ...galacticOf(a),
    containerId,
    ifname,
    claims,
  };
}

/** The file marking that the node's claims were listed from Milo into the record. */
const LISTED = "listed";
