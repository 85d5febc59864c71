/**
 * The release-path defects of issue #37, each put back by a switch of the
 * simulator (`--defect NAME`) around today's lib/ (never inside it), as the
 * code before commit 0d58c4c (and cbfff48 for the sweep) behaved, so the
 * simulator's own tests can show it finds each:
 *
 * - `blind-delete`: a release whose DELETE goes unanswered sends it again
 *   blind (the client's retries), and a newer claim it removed in its place
 *   is made again without reading what Milo answers (lib/milo_release.ts
 *   before 0d58c4c);
 * - `believe-taken`: a newer claim a DELETE removed in its place is made
 *   again, and a 409 or 500 ("taken") answer is believed without reading the
 *   claim (a Conflict only checks that the name exists);
 * - `doubt-erased`: a failed ADD whose creates Milo all answered puts back
 *   an earlier `held` record and removes anything else, an earlier ADD's
 *   `adding` record (in doubt) too (lib/add.ts `settle` before 0d58c4c);
 * - `del-not-in-doubt`: a DEL that fails at Milo journals what it failed to
 *   release as an entry not in doubt, whatever ADD was in doubt before it
 *   (lib/del.ts before 0d58c4c);
 * - `sweep-ready`: the sweep keeps a claim whose pod is gone only while its
 *   node is not Ready: no node monitor grace between observations, no wait
 *   for the termination grace, no look at when the node became Ready
 *   (lib/sweep_rules.ts before cbfff48).
 */
import { isSharedName } from "../../lib/claims.ts";
import { CniError, isTransientStatus } from "../../lib/errors.ts";
import { miloHeaders } from "../../lib/http.ts";
import type { Reply } from "../../lib/invoke.ts";
import type { CreateEvents } from "../../lib/milo_calls.ts";
import {
  API_PATH,
  type ClientOptions,
  MiloClient,
  type Release,
  type ReleaseEvents,
} from "../../lib/milo.ts";
import {
  type IPClaim,
  IPClaimSchema,
  remakeBody,
  statusError,
  statusOf,
} from "../../lib/milo_objects.ts";
import type { SweepOptions } from "../../lib/sweep.ts";

export const DEFECTS = {
  "blind-delete": "a DELETE retried blind, and what it removed in place made again unread",
  "believe-taken": 'a newer claim removed in place made again, Milo\'s "taken" believed unread',
  "doubt-erased": "a failed ADD erases an earlier ADD's record in doubt",
  "del-not-in-doubt": "a DEL that fails at Milo journals an entry not in doubt",
  "sweep-ready": "the sweep releases a pod gone from a node shown Ready at once",
} as const;

export type Defect = keyof typeof DEFECTS;

/** The defect named `s`, or an error naming the known ones. */
export function defectOf(s: string): Defect {
  if (s in DEFECTS) return s as Defect;
  throw new Error(`unknown defect ${s}; known: ${Object.keys(DEFECTS).join(", ")}`);
}

type Counter = { n: number };

/** A Milo client whose releases are the old code's: DELETEs retried blind, remakes unread. */
class BlindReleases extends MiloClient {
  readonly #o: ClientOptions;
  readonly #counter: Counter;

  constructor(o: ClientOptions, counter: Counter = { n: 0 }) {
    super(o, counter);
    this.#o = o;
    this.#counter = counter;
  }

  protected override copy(o: ClientOptions, counter: Counter): MiloClient {
    return new BlindReleases(o, counter);
  }

  /** lib/milo_release.ts `releaseIf` before 0d58c4c. */
  override async releaseIf(
    name: string,
    mine: (claim: IPClaim, serverTime: number) => boolean,
    events: ReleaseEvents = {},
  ): Promise<Release> {
    const { claim: now, serverTime } = await this.getClaimAt(name);
    if (!now) return "absent";
    const uid = now.metadata.uid;
    if (!uid || !mine(now, serverTime)) return "changed";
    if (isSharedName(name) && now.spec.reclaimPolicy !== "Retain") return "changed";
    const a = await this.#delete(name, {
      kind: "DeleteOptions",
      apiVersion: "v1",
      preconditions: { uid },
    });
    if (a.status === 404) return "absent";
    if (a.status === 409) {
      if (statusOf(a.body)?.reason === "Conflict") return "changed";
      throw statusError(`DELETE ${name}`, 409, statusOf(a.body));
    }
    const gone = IPClaimSchema.safeParse(a.body).data;
    if (!gone?.metadata.uid || gone.metadata.uid === uid) return "released";
    await this.#remake(gone, uid);
    events.note?.(`the DELETE removed a newer claim of that name (uid ${gone.metadata.uid})`);
    return "changed";
  }

  /** The old remake: an answer of "taken" is believed (null, or a Conflict while the name exists). */
  async #remake(gone: IPClaim, uid: string): Promise<void> {
    const name = gone.metadata.name;
    try {
      await this.createClaim(remakeBody(this.#o.namespace, gone));
    } catch (err) {
      if (err instanceof CniError && err.outcome === "conflict" && await this.getClaim(name)) {
        return;
      }
      throw new CniError(
        "transient",
        `the DELETE of claim ${name} (uid ${uid}) removed a newer claim of that name ` +
          `(uid ${gone.metadata.uid}), and making it again failed`,
        err instanceof Error ? err.message : String(err),
      );
    }
  }

  /** A DELETE with the client's retries, on every failure (blind), as the old client sent it. */
  async #delete(
    name: string,
    options: Record<string, unknown>,
  ): Promise<{ status: number; body: unknown }> {
    const o = this.#o;
    const what = `DELETE ${API_PATH}/namespaces/${o.namespace}/ipclaims/${name}`;
    const now = o.now ?? Date.now;
    const f = o.fetch ?? fetch;
    const sleep = o.sleep ?? (() => Promise.resolve());
    const random = o.random ?? Math.random;
    let last = "no attempt made";
    for (let attempt = 1; attempt <= 8; attempt++) {
      const remaining = o.deadline - now();
      if (remaining < 50) break;
      this.#counter.n++;
      try {
        const res = await f(`${o.baseUrl}${API_PATH}/namespaces/${o.namespace}/ipclaims/${name}`, {
          method: "DELETE",
          headers: miloHeaders(o.token, true),
          body: JSON.stringify(options),
          signal: AbortSignal.timeout(Math.min(o.requestMs, remaining)),
        });
        const text = await res.text();
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        if ([200, 202, 404, 409].includes(res.status)) return { status: res.status, body };
        if (!isTransientStatus(res.status)) {
          throw statusError(what, res.status, statusOf(body), text);
        }
        last = `Milo answered ${res.status}`;
      } catch (err) {
        if (err instanceof CniError) throw err;
        last = err instanceof Error ? err.message : String(err);
      }
      const ceiling = Math.min(1_000, 100 * 2 ** (attempt - 1));
      await sleep(Math.round(ceiling / 2 + random() * ceiling / 2));
    }
    throw new CniError("transient", `Milo unreachable or overloaded: ${what}`, last);
  }
}

/**
 * Today's releases, whose remake of a claim a DELETE removed in place
 * believes Milo's "taken" (a 409 AlreadyExists or a 500 name taken: null; a
 * Conflict while the name exists) without reading whose claim it is: the
 * create is answered as if it made the claim posted.
 */
class BelievingReleases extends MiloClient {
  /** Releases running on this client: a create among them is a remake. */
  #releasing = 0;

  protected override copy(o: ClientOptions, counter: Counter): MiloClient {
    return new BelievingReleases(o, counter);
  }

  override async releaseIf(
    name: string,
    mine: (claim: IPClaim, serverTime: number) => boolean,
    events: ReleaseEvents = {},
  ): Promise<Release> {
    this.#releasing++;
    try {
      return await super.releaseIf(name, mine, events);
    } finally {
      this.#releasing--;
    }
  }

  override async createClaim(
    body: Record<string, unknown>,
    heard?: CreateEvents,
  ): Promise<IPClaim | null> {
    if (!this.#releasing) return await super.createClaim(body, heard);
    const name = String((body.metadata as { name?: unknown }).name);
    try {
      return await super.createClaim(body) ?? asPosted(body);
    } catch (err) {
      if (err instanceof CniError && err.outcome === "conflict" && await this.getClaim(name)) {
        return asPosted(body);
      }
      throw err;
    }
  }
}

/** The claim `body` posts, as if Milo had made it (what the old remake believed). */
function asPosted(body: Record<string, unknown>): IPClaim {
  const meta = body.metadata as IPClaim["metadata"];
  const spec = body.spec as IPClaim["spec"] & { address?: string };
  const v6 = (spec.address ?? "").includes(":");
  return {
    metadata: { ...meta, uid: "believed" },
    spec,
    status: {
      phase: "Bound",
      ...(v6 ? {} : { address: spec.address }),
      allocatedCIDR: `${spec.address}/${v6 ? 96 : 32}`,
    },
  };
}

/**
 * A client that counts the creates it sent that went unanswered (what the old
 * settle read off a counter the client's copies shared).
 */
class HearingClient extends MiloClient {
  readonly unanswered = { n: 0 };

  override async createClaim(
    body: Record<string, unknown>,
    heard?: CreateEvents,
  ): Promise<IPClaim | null> {
    return await super.createClaim(body, {
      unanswered: () => {
        this.unanswered.n++;
        heard?.unanswered();
      },
    });
  }
}

/** A Milo client with `defect`'s releases, or today's. */
export function clientWith(defect: Defect | undefined, o: ClientOptions): MiloClient {
  if (defect === "blind-delete") return new BlindReleases(o);
  if (defect === "believe-taken") return new BelievingReleases(o);
  if (defect === "doubt-erased") return new HearingClient(o);
  return new MiloClient(o);
}

/** What a record file holds, as far as the old settle read it. */
interface RecordFile {
  state?: string;
  doubt?: unknown;
}

/**
 * Runs one invocation through `run` (today's), then puts back what the
 * defect's old code left instead: the ADD's settle, the DEL's journal entry.
 * `files` names the attachment's record and journal entry files.
 */
export async function invokeWith(
  defect: Defect | undefined,
  verb: string,
  undo: boolean,
  files: { record: string; entry: string },
  opened: () => MiloClient | undefined,
  run: () => Promise<Reply>,
): Promise<Reply> {
  if (defect === "del-not-in-doubt" && verb === "DEL" && !undo) {
    const before = readJson<{ inDoubt?: boolean }>(files.entry);
    const r = await run();
    const after = readJson<{ inDoubt?: boolean; doubtSince?: number }>(files.entry);
    // Reached Milo (a client was opened) and failed there: the old DEL journaled no doubt.
    if (r.exitCode !== 0 && opened() && after?.inDoubt && !before?.inDoubt) {
      delete after.inDoubt;
      delete after.doubtSince;
      Deno.writeTextFileSync(files.entry, JSON.stringify(after));
    }
    return r;
  }
  if (defect === "doubt-erased" && verb === "ADD") {
    const r = await run();
    const client = opened();
    if (r.exitCode !== 0 && client instanceof HearingClient && client.unanswered.n === 0) {
      const h = readJson<RecordFile>(files.record);
      if (h && h.state !== "held") Deno.removeSync(files.record);
      else if (h?.doubt) {
        delete h.doubt;
        Deno.writeTextFileSync(files.record, JSON.stringify(h));
      }
    }
    return r;
  }
  return await run();
}

function readJson<T>(path: string): T | undefined {
  try {
    return JSON.parse(Deno.readTextFileSync(path)) as T;
  } catch {
    return undefined;
  }
}

/** The sweep's options and API view under `defect` (the old rules: `sweep-ready`). */
export function sweepWith(
  defect: Defect | undefined,
): { options: Partial<SweepOptions>; blind: boolean } {
  if (defect !== "sweep-ready") return { options: {}, blind: false };
  return { options: { nodeMonitorGraceMs: 0, terminationGraceMs: 0 }, blind: true };
}
