/**
 * The Milo client: one request per call on the happy path, deadlines,
 * bounded jittered retries, no redirects, Status-aware errors, and the
 * caller's abort. What Milo's answers are is in milo_objects.ts.
 */
import { DNS1123_SUBDOMAIN, type NodeConfig } from "./config.ts";
import { markingDeletes } from "./late_deletes.ts";
import {
  clip,
  CniError,
  isTransientStatus,
  QUOTE_CHARS,
  toCniError,
  Unanswered,
} from "./errors.ts";
import {
  httpClientFor,
  miloFetchFailure,
  miloHeaders,
  neverSent,
  readAnswer,
  readToken,
  retryAfterMs,
  streamSignal,
} from "./http.ts";
import {
  ALLOCATION_LIST,
  CLAIM_LIST,
  collectList,
  POOL_LIST,
  scanList,
  type StreamGet,
  type StreamRead,
} from "./_milo_lists.ts";
import {
  API_PATH,
  type IPAllocation,
  type IPClaim,
  IPClaimSchema,
  type IPPool,
  MAX_BODY_BYTES,
  type MiloRefusal,
  type MiloStatus,
  nameTaken,
  parse,
  quotaPasses,
  refusalOf,
  statusError,
  statusOf,
} from "./milo_objects.ts";
import { answerJson } from "./json_bound.ts";
import {
  AllowanceBucketSchema,
  bucketName,
  bucketPath,
  projectOf,
  type QuotaUsage,
  unknownQuota,
} from "./milo_quota.ts";
import { type Release, type ReleaseEvents, releaseIf } from "./milo_release.ts";
import type { Slot } from "./limiter.ts";
import type { ClaimList, CreateEvents, MiloCalls } from "./milo_calls.ts";
import type { ClientOptions } from "./_milo_options.ts";
import { after, pause } from "./timers.ts";

export { API_PATH } from "./milo_objects.ts";
export type { OwedRemake, Release, ReleaseEvents } from "./milo_release.ts";
export type { ClientOptions } from "./_milo_options.ts";

const MAX_ATTEMPTS = 8;
const BACKOFF_BASE_MS = 100;
const BACKOFF_CAP_MS = 1_000;
/** Less of the deadline than this left: no request is sent (it could not be answered). */
const MIN_SEND_MS = 50;

/** An accepted answer: its status, its JSON body (none when streamed) and its `Date`. */
type Answer = { status: number; body: unknown; date: number };

/** How one request is sent and which answers it accepts (see `MiloClient.#call`). */
interface CallOptions {
  body?: unknown;
  accept: number[];
  /** The claim a 404 must be Milo's NotFound of. */
  name?: string;
  stream?: StreamRead;
  also?: (status: number, st: MiloStatus | undefined) => boolean;
  /** Sent again only when Milo certainly did not act on it; else {@link Unanswered}. */
  unsentOnly?: boolean;
  /** Hears of each attempt that went out without its answer read. */
  unanswered?: () => void;
}

/** A thin Milo IPAM client: deadlines, bounded jittered retries, Status-aware errors. */
export class MiloClient implements MiloCalls {
  readonly #o: ClientOptions;
  readonly #counter: { n: number };
  readonly #fetch: typeof fetch;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #random: () => number;
  readonly #now: () => number;

  constructor(options: ClientOptions, counter = { n: 0 }) {
    this.#o = options;
    this.#counter = counter;
    this.#fetch = options.fetch ?? fetch;
    this.#sleep = options.sleep ?? after;
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? Date.now;
  }

  /** HTTP requests sent so far by this client and its {@link withDeadline} copies. */
  get requests(): number {
    return this.#counter.n;
  }

  /** The same client with another deadline (the request counts are shared). */
  withDeadline(deadline: number): MiloClient {
    return this.copy({ ...this.#o, deadline }, this.#counter);
  }

  /** The same client with a deadline `ms` from now, on its own clock. */
  withBudget(ms: number): MiloClient {
    return this.withDeadline(this.#now() + ms);
  }

  /** The same client that goes on when the caller is gone (to undo what was half done). */
  unabortable(): MiloClient {
    return this.copy({ ...this.#o, signal: undefined }, this.#counter);
  }

  /** The same client whose requests release (a rollback's): the limiter's release flow. */
  releasing(): MiloClient {
    return this.copy({ ...this.#o, purpose: "release" }, this.#counter);
  }

  /** A client of this kind with `options`, sharing `counter` (what each copy above makes). */
  protected copy(options: ClientOptions, counter: { n: number }): MiloClient {
    return new MiloClient(options, counter);
  }

  /** Builds a client from the node config: reads and checks the token and TLS files. */
  static async open(
    node: NodeConfig,
    requestMs: number,
    deadline: number,
  ): Promise<MiloClient> {
    const [token, client] = await Promise.all([readToken(node), httpClientFor(node)]);
    return new MiloClient({
      baseUrl: node.milo.url.replace(/\/+$/, ""),
      namespace: node.milo.namespace,
      token,
      requestMs,
      deadline,
      client,
      deletes: markingDeletes(node),
    });
  }

  /** Releases the HTTP client. */
  close(): void {
    this.#o.client?.close();
  }

  #claimsPath(name?: string): string {
    if (name !== undefined && !DNS1123_SUBDOMAIN.test(name)) {
      throw new CniError(
        "protocol",
        "a claim name is not a DNS-1123 subdomain; refusing to put it in a URL",
        JSON.stringify(clip(name, 80)),
      );
    }
    return `${API_PATH}/namespaces/${this.#o.namespace}/ipclaims${name ? `/${name}` : ""}`;
  }

  /**
   * POSTs a claim: the bound claim on 201, or `null` when the name is taken:
   * 409 AlreadyExists, or Milo's 500 to the later of two overlapping creates
   * of the name ({@link nameTaken}), which is not retried. Any other refusal
   * is a {@link MiloRefusal} of its kind; one of Milo's quota admission that
   * passes (timed out, a stale claim, its internal error) is sent again
   * within the deadline ({@link quotaPasses}).
   */
  async createClaim(body: Record<string, unknown>, heard?: CreateEvents): Promise<IPClaim | null> {
    const ns = this.#o.namespace;
    const name = String((body.metadata as { name?: unknown } | undefined)?.name ?? "");
    const also = (status: number, st: MiloStatus | undefined) =>
      status === 500 && nameTaken(st, ns, name);
    const path = this.#claimsPath();
    const a = await this.#call("POST", path, {
      body,
      accept: [201, 409],
      also,
      unanswered: heard?.unanswered,
    });
    if (a.status === 201) return parse(IPClaimSchema, a.body, "IPClaim");
    const st = statusOf(a.body);
    if (a.status === 500 || st?.reason === "AlreadyExists") return null;
    throw statusError(`POST ${path}`, 409, st, "", ns);
  }

  /** GETs a claim, or `null` when Milo has none of that name. */
  async getClaim(name: string): Promise<IPClaim | null> {
    return (await this.getClaimAt(name)).claim;
  }

  /**
   * {@link getClaim}, with Milo's clock when it answered (its `Date` header;
   * NaN without one): a claim's age on Milo's own clock.
   */
  async getClaimAt(name: string): Promise<{ claim: IPClaim | null; serverTime: number }> {
    const a = await this.#call("GET", this.#claimsPath(name), { accept: [200, 404], name });
    if (a.status === 404) return { claim: null, serverTime: a.date };
    const claim = parse(IPClaimSchema, a.body, "IPClaim");
    if (claim.metadata.name !== name) {
      // Every decision on a claim (adopt, release by uid, keep) is about the one asked for.
      throw new CniError(
        "protocol",
        `GET of claim ${name} answered another claim`,
        `metadata.name=${JSON.stringify(clip(claim.metadata.name, 80))}`,
      );
    }
    return { claim, serverTime: a.date };
  }

  /** DELETEs a claim: `released` on 200/202, `absent` on 404. */
  async deleteClaim(name: string): Promise<"released" | "absent"> {
    const path = this.#claimsPath(name);
    let lost = false;
    this.#o.deletes?.sending(name, this.#o.deadline);
    const a = await this.#call("DELETE", path, {
      accept: [200, 202, 404],
      name,
      unanswered: () => void (lost = true),
    });
    if (!lost) this.#o.deletes?.answered(name);
    return a.status === 404 ? "absent" : "released";
  }

  /**
   * Releases the claim `name` only while it is the object with `uid`: a fresh
   * GET compares the uid, and the DELETE carries it as a precondition (see
   * {@link releaseIf}: Milo ignores it; `events` hear what was done instead).
   */
  async releaseClaim(name: string, uid: string, events?: ReleaseEvents): Promise<Release> {
    return await this.releaseIf(name, (c) => c.metadata.uid === uid, events);
  }

  /**
   * Releases the claim `name` only when a fresh GET finds it `mine` (given
   * Milo's clock of the answer; else `changed`), its uid the DELETE's
   * precondition, which Milo ignores (`AllocatingREST.Delete` reads by name):
   * so a DELETE is sent again only after a GET finds the same object still
   * there. A name other sandboxes make again is deleted only under Retain: one
   * made again before the DELETE and deleted in its place is made again at
   * once, its address pinned, and verified (`changed`; `events.owed` when it
   * cannot be now, `events.duplicate` when its address is another's); under
   * Delete it is left (`events.note`). An attachment's name is made again only
   * under its lock, which callers hold.
   */
  async releaseIf(
    name: string,
    mine: (claim: IPClaim, serverTime: number) => boolean,
    events: ReleaseEvents = {},
  ): Promise<Release> {
    /** Set once a DELETE of this release went unanswered: it may run later. */
    let lost = false;
    let sent = false;
    const hooks = this.#o.deletes;
    const r = await releaseIf(
      {
        namespace: this.#o.namespace,
        getClaimAt: (n) => this.getClaimAt(n),
        getClaim: (n) => this.getClaim(n),
        createClaim: (body) => this.createClaim(body),
        deleteOnce: async (n, options) => {
          const path = this.#claimsPath(n);
          hooks?.sending(n, this.#o.deadline);
          sent = true;
          const accept = [200, 202, 404, 409];
          const a = await this.#call("DELETE", path, {
            body: options,
            accept,
            name: n,
            unsentOnly: true,
            unanswered: () => void (lost = true),
          });
          return { ...a, what: `DELETE ${path}` };
        },
        backOff: async (round) => {
          const wait = this.#backoff(round);
          if (this.#now() + wait + MIN_SEND_MS >= this.#o.deadline) return false;
          await pause(wait, this.#sleep, this.#o.signal);
          return true;
        },
      },
      name,
      mine,
      events,
    );
    if (sent && !lost) hooks?.answered(name);
    return r;
  }

  /** LISTs claims matching a label selector, following `continue` pages. */
  async listClaims(labelSelector: string): Promise<IPClaim[]> {
    return (await this.listClaimsAt(labelSelector)).items;
  }

  /**
   * {@link listClaims}, with Milo's clock at its first page; the claims kept
   * are bounded across the pages (see _milo_lists.ts).
   */
  async listClaimsAt(labelSelector: string): Promise<ClaimList> {
    return await collectList(this.#get, CLAIM_LIST, this.#claimsPath(), labelSelector);
  }

  /**
   * LISTs every IPAllocation of the namespace (a retained one has no
   * `spec.claimRef`), bounded as {@link listClaimsAt} is, with Milo's clock.
   */
  async listAllocationsAt(): Promise<{ items: IPAllocation[]; serverTime: number }> {
    const path = `${API_PATH}/namespaces/${this.#o.namespace}/ipallocations`;
    return await collectList(this.#get, ALLOCATION_LIST, path, "");
  }

  /**
   * LISTs the IPPools Milo shows this token (cluster-scoped: every pool the
   * project may see, with its capacity), bounded as {@link listClaimsAt} is.
   */
  async listPoolsAt(): Promise<{ items: IPPool[]; serverTime: number }> {
    return await collectList(this.#get, POOL_LIST, `${API_PATH}/ippools`, "");
  }

  /**
   * LISTs claims matching a label selector, following `continue` pages, each
   * answer read as a stream (Milo answers a whole tenant at once): `visit`
   * gets each claim (as {@link IPClaimSchema} keeps it) as it is read, with
   * Milo's clock of the answer that carried it (its `Date`; NaN without one).
   * Answers Milo's clock at the first page. An answer that breaks off after
   * some claims were visited fails (it is not asked again).
   */
  async scanClaims(
    labelSelector: string,
    visit: (claim: IPClaim, serverTime: number) => void,
  ): Promise<number> {
    return await scanList(this.#get, CLAIM_LIST, this.#claimsPath(), labelSelector, visit);
  }

  /**
   * The project's IPClaim quota as Milo's AllowanceBucket says it (one GET,
   * see milo_quota.ts), or why it is not known; never throws.
   */
  async quotaUsage(): Promise<QuotaUsage> {
    const project = projectOf(this.#o.baseUrl);
    if (!project) return { unknown: "milo.url names no project (…/projects/P/control-plane)" };
    try {
      const name = bucketName(project);
      const a = await this.#call("GET", bucketPath(project), { accept: [200, 403, 404], name });
      if (a.status !== 200) return unknownQuota(a.status as 403 | 404, project);
      const { status } = parse(AllowanceBucketSchema, a.body, "AllowanceBucket");
      const available = status.available ?? Math.max(0, status.limit - status.allocated);
      return { limit: status.limit, allocated: status.allocated, available };
    } catch (err) {
      const e = toCniError(err);
      const none = e.outcome === "protocol" && /: HTTP 404 /.test(e.message);
      return { unknown: none ? "Milo serves no quota API (quota.miloapis.com) here" : e.message };
    }
  }

  /** A GET of a LIST's page, read by `read` as a stream: Milo's clock of the answer. */
  readonly #get: StreamGet = async (path, read) =>
    (await this.#call("GET", path, { accept: [200], stream: read })).date;

  /**
   * One request with retries; a 404 is accepted only as Milo's NotFound for
   * `o.name`; `o.also` accepts an error answer its Status singles out. With
   * `o.unsentOnly` a request is sent again only when Milo certainly did not
   * act on it (a 429 of its priority and fairness, which refuses before the
   * request runs; a connection never made): any other failure may have been
   * executed without an answer, and is answered as {@link Unanswered}.
   */
  async #call(method: string, path: string, o: CallOptions): Promise<Answer> {
    /** Set once an attempt may have run without its answer read: a create of it may land. */
    let sentUnanswered = false;
    try {
      return await this.#attempts(method, path, o, () => {
        sentUnanswered = true;
        o.unanswered?.();
      });
    } catch (err) {
      if (err instanceof CniError && method === "POST" && sentUnanswered) err.inDoubt = true;
      throw err;
    }
  }

  /** {@link #call}'s attempts; `unanswered` hears of each that may have run unanswered. */
  async #attempts(
    method: string,
    path: string,
    o: CallOptions,
    unansweredSent: () => void,
  ): Promise<Answer> {
    const opt = this.#o;
    const url = opt.baseUrl + path;
    const what = `${method} ${path}`;
    const headers = miloHeaders(opt.token, o.body !== undefined);
    let last = "no attempt made";
    let answered = "";
    /** The last answer when it was a quota refusal that passes: what giving up reports. */
    let refused: MiloRefusal | undefined;
    let attempts = 0;
    const gone = () => new CniError("transient", `${what}: stopped, the caller is gone`, last);
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      if (opt.signal?.aborted) throw gone();
      if (opt.deadline - this.#now() < MIN_SEND_MS) break;
      let slot: Slot | undefined;
      if (opt.limiter) {
        const got = await opt.limiter.acquire(opt.deadline - MIN_SEND_MS, opt.signal, opt.purpose);
        if (got === "aborted") throw gone();
        if (got === "deadline") {
          last = `${
            attempts ? `${last}; then ` : ""
          }no request slot of the node before the deadline`;
          break;
        }
        slot = got;
      }
      const remaining = opt.deadline - this.#now();
      if (remaining < MIN_SEND_MS) {
        slot?.done({ status: "error" });
        break;
      }
      let wait = this.#backoff(attempt);
      this.#counter.n++;
      attempts++;
      let status: number | "error" = "error";
      let hinted: number | undefined;
      /** Set when this attempt may have been executed by Milo without an answer read. */
      let unanswered: string | undefined;
      // Milo answers a LIST whole (a tenant's scan): it may take until the deadline to start,
      // and then must keep coming.
      const watch = o.stream ? streamSignal(opt.requestMs, remaining, remaining) : undefined;
      const timeoutMs = Math.min(opt.requestMs, remaining);
      const sentAt = this.#now();
      try {
        const res = await this.#fetch(url, {
          method,
          headers,
          body: o.body === undefined ? undefined : JSON.stringify(o.body),
          redirect: "manual",
          signal: watch?.signal ?? AbortSignal.timeout(timeoutMs),
          ...(opt.client ? { client: opt.client } : {}),
        });
        status = res.status;
        hinted = retryAfterMs(res.headers.get("retry-after"));
        const date = Date.parse(res.headers.get("date") ?? "");
        if (o.stream && res.status === 200 && res.body) {
          watch!.moved();
          await o.stream(res.body, watch!.moved, date);
          return { status: 200, body: undefined, date };
        }
        const text = await readAnswer(res, MAX_BODY_BYTES, what, "Milo");
        const json = answerJson(text, what, "Milo");
        const st = res.ok ? undefined : statusOf(json);
        if (o.accept.includes(res.status) || o.also?.(res.status, st)) {
          if (res.status === 404 && (st?.reason !== "NotFound" || st.details?.name !== o.name)) {
            throw new CniError(
              "protocol",
              `${what}: HTTP 404 that is not Milo's NotFound for ${o.name}`,
              `is milo.url the Milo API base? ${st?.message ?? clip(text, QUOTE_CHARS)}`,
            );
          }
          return { status: res.status, body: json, date };
        }
        const refusal = method === "POST" ? refusalOf(res.status, st) : undefined;
        if (refusal?.kind === "quota" && quotaPasses(refusal.why)) {
          // Milo's quota admission may decide differently when asked again.
          refused = statusError(what, res.status, st, text, opt.namespace) as MiloRefusal;
          last = answered = `Milo answered 403 (quota: ${refusal.why})`;
        } else if (!isTransientStatus(res.status)) {
          throw statusError(what, res.status, st, text, opt.namespace);
        } else {
          refused = undefined;
          last = answered = `Milo answered ${res.status}${st?.message ? `: ${st.message}` : ""}`;
          if (res.status !== 429) unanswered = last;
        }
        if (slot && (status === 429 || status === 503)) {
          wait = 0; // The limiter's pause and pacing of its flow stand for this request's own.
        } else if (hinted !== undefined) {
          // Full jitter: callers refused together do not come back together.
          wait = Math.max(wait, Math.round(this.#random() * hinted));
        }
      } catch (err) {
        const failure = miloFetchFailure(err, method, url, timeoutMs);
        last = answered ? `${answered}; then ${failure}` : failure;
        if (!neverSent(err)) unanswered = failure;
        refused = undefined;
      } finally {
        watch?.stop();
        // Over half its timeout, or none: Milo queued it (its priority and fairness) or is slow.
        const late = !watch && this.#now() - sentAt > timeoutMs / 2;
        slot?.done({ status, retryAfterMs: hinted, late });
        if (unanswered !== undefined) unansweredSent();
        opt.onRequest?.({ method, status, attempt });
      }
      if (o.unsentOnly && unanswered !== undefined) throw new Unanswered(what, unanswered);
      if (attempt === MAX_ATTEMPTS || this.#now() + wait >= opt.deadline) break;
      if (wait > 0) await pause(wait, this.#sleep, opt.signal);
    }
    const tried = `gave up on ${new URL(opt.baseUrl).host} within the deadline after ${attempts} ` +
      "attempt(s)";
    if (refused) {
      throw new CniError(refused.outcome, refused.message, `${refused.details}; ${tried}`);
    }
    // Milo's quota admission holds a create up to 30 s, and one sent again waits from the start.
    const admission = method === "POST" && /timed out after \d+ ms$/.test(last)
      ? "; a create may wait in Milo's quota admission before it is answered: " +
        "timeouts.requestMs must exceed that wait (docs/quota.md)"
      : "";
    throw new CniError(
      "transient",
      `Milo unreachable or overloaded: ${what}`,
      `${last}; ${tried}${admission}`,
    );
  }

  #backoff(attempt: number): number {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (attempt - 1));
    return Math.round(ceiling / 2 + this.#random() * ceiling / 2);
  }
}
