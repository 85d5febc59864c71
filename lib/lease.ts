/**
 * The lease states of one attachment on its node, and every transition
 * between them, in one place. The node's record (lib/holdings.ts stores it)
 * and the release journal (lib/journal.ts) hold them; ADD, DEL, the agent's
 * undo, GC and reconcile move between them only through these functions.
 *
 * | state    | recorded as                                   | means                                        |
 * | -------- | --------------------------------------------- | -------------------------------------------- |
 * | none     | no record, no journal entry                   | nothing held, nothing owed                   |
 * | adding   | record `adding`, before its `until`           | an ADD is leasing (it holds the lock)        |
 * | in doubt | record `adding` past `until`, or `doubt`      | creates sent without an answer may land yet  |
 * | held     | record `held`, claims with uids and addresses | the runtime was told of these leases         |
 * | owed     | journal entry: claims (uids when known)       | a DEL or rollback could not release them     |
 * | owed in doubt | journal entry `inDoubt`, `doubtSince`    | released, but a create may land until then   |
 *
 * Doubt is never forgotten by a transition: an ADD that fails after every
 * create was answered puts back the record it found, in doubt or not; one
 * with a create unanswered keeps its `adding` record, which carries the
 * earlier doubt and the claims recorded before it; one that succeeded after
 * a create went unanswered is held and in doubt (that create may land after
 * a DEL has released the claim), and keeps the doubt of the journal entry it
 * drops (an earlier ADD's creates); a DEL after doubt
 * journals it in doubt whatever happened to the DEL, and the journal's
 * window counts from when the doubt began (the ADD's end), not from an
 * older entry's creation. A claim the record held (or an ADD made) that its
 * own release finds gone is in doubt too: another's DELETE removed it in
 * place, and that release makes it again, maybe after this one.
 */

/** One claim a release is owed for (a journal entry's). */
export interface JournalClaim {
  name: string;
  /** The claim's uid when the failed call knew it. */
  uid?: string;
}

/** One claim of a record. */
export interface HeldClaim {
  name: string;
  uid?: string;
  /** The address it leases, as the ADD answered it. */
  address?: string;
  /**
   * The claim as posted, its address pinned: what makes it again for its
   * live sandbox when Milo has lost it (lib/_reconcile_verify.ts).
   */
  body?: Record<string, unknown>;
}

/** Creates that may still land: their claim names, and since when (ms, the node's clock). */
export interface Doubt {
  /** When the doubt began: the end of the ADD that sent them, its watchdog's grace included. */
  since: number;
  names: string[];
}

/** What the node records of one attachment. */
export interface Holding {
  state: "adding" | "held";
  /** The call id of the ADD that wrote it. */
  addId: string;
  /** When it was written (ms since epoch, the node's clock). */
  at: number;
  /** `adding`: when the ADD ends at the latest, its watchdog's included (the node's clock). */
  until?: number;
  cluster: string;
  /** The host that wrote it (lib/host.ts): a record copied to another machine is not its own. */
  host?: string;
  /**
   * The node it was written under: a record copied to a machine that kept
   * this one's machine-id under its own node name is not that machine's.
   */
  node?: string;
  /**
   * The boot its ADD ran in (lib/host.ts `bootId`): the sandbox that holds the
   * claims of a record from an earlier boot died with that boot.
   */
  boot?: string;
  network: string;
  /** The pod (`namespace/name`), from CNI_ARGS; what `show --pod` finds without Milo. */
  pod?: string;
  /** A galactic attachment's identifiers: reconcile needs evidence to judge it (lib/evidence.ts). */
  galactic?: { vpc: string; vpcattachment: string };
  containerId: string;
  ifname: string;
  claims: HeldClaim[];
  /** Creates of an earlier ADD of the attachment that may still land. */
  doubt?: Doubt;
  /**
   * `held`: when reconcile reads its claims again, once no DELETE sent before
   * the ADD can still run at Milo (lib/late_deletes.ts; the node's clock).
   */
  recheckAt?: number;
}

/**
 * The doubt a record carries: its own creates when it is `adding` (an ADD
 * that never settled: killed, or a create unanswered; the lock keeps a live
 * ADD's record from being read this way by a DEL), and any earlier doubt.
 */
export function doubtOf(h: Holding | undefined): Doubt | undefined {
  if (!h) return undefined;
  const own = h.state === "adding"
    ? { since: h.until ?? h.at, names: h.claims.map((c) => c.name) }
    : undefined;
  return mergeDoubt(h.doubt, own);
}

/** Two doubts as one: every name, since the later beginning (its window ends last). */
export function mergeDoubt(a: Doubt | undefined, b: Doubt | undefined): Doubt | undefined {
  if (!a || !b) return a ?? b;
  return { since: Math.max(a.since, b.since), names: [...new Set([...a.names, ...b.names])] };
}

/**
 * The `adding` record an ADD writes before its first create: its names, and
 * every claim and doubt the record it found carried (a failed ADD must not
 * forget a claim an earlier one holds, nor its creates in doubt).
 */
export function beginAdd(previous: Holding | undefined, adding: Holding): Holding {
  const claims = mergeClaims(previous?.claims ?? [], adding.claims);
  const doubt = doubtOf(previous);
  return { ...adding, claims, ...(doubt ? { doubt } : {}) };
}

/**
 * The `held` record of an ADD that succeeded with `claims`: what the ADD
 * found recorded before it stays (a claim of a class since dropped is still
 * this attachment's to release), and so does any doubt. `unanswered`: a
 * create of this ADD went unanswered before a later attempt made its claim;
 * that create may land yet (after a DEL released the claim), so its own
 * creates are in doubt too, from the ADD's end. `owed`: the doubt of the
 * attachment's journal entry, which the ADD drops (an earlier ADD's creates
 * that may land yet: the record carries them to the next DEL).
 */
export function afterAdd(
  adding: Holding,
  held: Holding,
  unanswered = false,
  owed?: Doubt,
): Holding {
  const claims = mergeClaims(adding.claims, held.claims);
  const own = unanswered ? { since: held.at, names: held.claims.map((c) => c.name) } : undefined;
  const doubt = mergeDoubt(mergeDoubt(adding.doubt, own), owed);
  return { ...held, claims, ...(doubt ? { doubt } : {}) };
}

/**
 * The record after a failed ADD: the one it found (in doubt or not, or none),
 * when Milo answered every create it sent; else its own `adding` record, in
 * doubt, which carries everything the one it found did.
 */
export function afterFailedAdd(
  previous: Holding | undefined,
  adding: Holding,
  unanswered: boolean,
): Holding | undefined {
  return unanswered ? adding : previous;
}

/** What a release leaves owed to the journal; `doubt` set when creates may still land. */
export interface Owed {
  claims: JournalClaim[];
  doubt?: Doubt;
}

/**
 * What a DEL (or the agent's undo) of the attachment recorded as `record`
 * owes once it failed to release `failed` (each with the uid it knew): the
 * failed claims, and the record's doubt whatever happened to the DEL (a
 * create in flight lands after a success as after a failure) unless its
 * window (`graceMs` from its beginning) is over by `now`. `vanished`: claims
 * the record held that the release found gone, in doubt from `now` (another's
 * DELETE removed them in place, and that release makes them again, maybe
 * after this one: lib/milo_release.ts). Nothing when neither is left.
 */
export function owedAfterRelease(
  record: Holding | undefined,
  failed: JournalClaim[],
  now: number,
  graceMs: number,
  vanished: string[] = [],
): Owed | undefined {
  const d = doubtOf(record);
  const earlier = d && d.since + graceMs > now ? d : undefined;
  const gone = vanished.length ? { since: now, names: vanished } : undefined;
  const doubt = mergeDoubt(earlier, gone);
  if (!failed.length && !doubt) return undefined;
  return { claims: failed, ...(doubt ? { doubt } : {}) };
}

/** `a` with `b`'s claims over it by name (a uid or address known stays known). */
function mergeClaims(a: HeldClaim[], b: HeldClaim[]): HeldClaim[] {
  const byName = new Map(a.map((c) => [c.name, c]));
  for (const c of b) byName.set(c.name, { ...byName.get(c.name), ...stripUndefined(c) });
  return [...byName.values()];
}

function stripUndefined(c: HeldClaim): HeldClaim {
  return Object.fromEntries(Object.entries(c).filter(([, v]) => v !== undefined)) as HeldClaim;
}
