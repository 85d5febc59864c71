/**
 * The Milo client: one request per call on the happy path, deadlines,
 * bounded jittered retries, no redirects, Status-aware errors, and the
 * caller's abort. What Milo's answers are is in milo_objects.ts.
 */
import { isSharedName } from "./claims.ts";
import { DNS1123_SUBDOMAIN, type NodeConfig } from "./config.ts";
import { clip, CniError, errorText, isTransientStatus, QUOTE_CHARS } from "./errors.ts";
import {
  httpClientFor,
  miloFetchFailure,
  parseJson,
  readAnswer,
  readToken,
  retryAfterMs,
  streamSignal,
} from "./http.ts";
import {
  API_PATH,
  claimListTally,
  type IPAllocation,
  IPAllocationSchema,
  type IPClaim,
  IPClaimSchema,
  ListHeadSchema,
  MAX_BODY_BYTES,
  MAX_PAGES,
  type MiloStatus,
  namespaceRefused,
  nameTaken,
  PAGE_LIMIT,
  parse,
  remakeBody,
  statusError,
  statusOf,
} from "./milo_objects.ts";
import type { Slot } from "./limiter.ts";
import type { ClientOptions } from "./milo_options.ts";
import { keptSize } from "./list_bound.ts";
import { readList } from "./list_stream.ts";
import { after } from "./timers.ts";
import type * as z from "zod/mini";

export { API_PATH, MAX_LIST_BYTES, MAX_LIST_ITEMS } from "./milo_objects.ts";

export type { ClientOptions, RequestEvent } from "./milo_options.ts";

const MAX_ATTEMPTS = 8;
const BACKOFF_BASE_MS = 100;
const BACKOFF_CAP_MS = 1_000;
/** Less of the deadline than this left: no request is sent (it could not be answered). */
const MIN_SEND_MS = 50;

/** An accepted answer: its status, its JSON body (none when streamed) and its `Date`. */
type Answer = { status: number; body: unknown; date: number };

/** Reads a 200's body as a stream; `moved` is called as it arrives; `date` is the answer's. */
type StreamRead = (
  body: ReadableStream<Uint8Array>,
  moved: () => void,
  date: number,
) => Promise<void>;

/** A LIST's claims, and Milo's clock when it answered (its `Date` header; NaN without one). */
export interface ClaimList {
  items: IPClaim[];
  serverTime: number;
}

/** A list kind, and what errors call its items. */
type List = { kind: string; items: string };
const CLAIM_LIST: List = { kind: "IPClaimList", items: "claims" };
const ALLOCATION_LIST: List = { kind: "IPAllocationList", items: "allocations" };

/** Why a claim of a name other sandboxes make again is not deleted under reclaimPolicy Delete. */
const SHARED_DELETE = "name other sandboxes make again: Milo deletes by name, and an address " +
  "freed in place of a newer claim could not be given back; left alone";

/** What releasing a claim by name and uid found. */
export type Release = "released" | "absent" | "changed";

/** A thin Milo IPAM client: deadlines, bounded jittered retries, Status-aware errors. */
export class MiloClient {
  readonly #o: ClientOptions;
  readonly #counter: { n: number; unansweredCreates: number };
  readonly #fetch: typeof fetch;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #random: () => number;
  readonly #now: () => number;

  constructor(options: ClientOptions, counter = { n: 0, unansweredCreates: 0 }) {
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

  /**
   * POSTs sent without an answer from Milo (timed out, connection lost):
   * each may still create its claim later. Shared like {@link requests}.
   */
  get unansweredCreates(): number {
    return this.#counter.unansweredCreates;
  }

  /** The same client with another deadline (the request counts are shared). */
  withDeadline(deadline: number): MiloClient {
    return new MiloClient({ ...this.#o, deadline }, this.#counter);
  }

  /** The same client that goes on when the caller is gone (to undo what was half done). */
  unabortable(): MiloClient {
    return new MiloClient({ ...this.#o, signal: undefined }, this.#counter);
  }

  /** The same client whose requests release (a rollback's): the limiter's release flow. */
  releasing(): MiloClient {
    return new MiloClient({ ...this.#o, purpose: "release" }, this.#counter);
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
   * of the name ({@link nameTaken}), which is not retried. A 403 refusing the
   * namespace is an error naming it ({@link namespaceRefused}).
   */
  async createClaim(body: Record<string, unknown>): Promise<IPClaim | null> {
    const ns = this.#o.namespace;
    const name = String((body.metadata as { name?: unknown } | undefined)?.name ?? "");
    const also = (status: number, st: MiloStatus | undefined) =>
      (status === 500 && nameTaken(st, ns, name)) ||
      (status === 403 && namespaceRefused(st, ns) !== undefined);
    const path = this.#claimsPath();
    const a = await this.#call("POST", path, body, [201, 409], undefined, undefined, also);
    if (a.status === 201) return parse(IPClaimSchema, a.body, "IPClaim");
    const st = statusOf(a.body);
    if (a.status === 403) throw namespaceRefused(st, ns)!;
    if (a.status === 500 || st?.reason === "AlreadyExists") return null;
    throw statusError(`POST ${path}`, 409, st);
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
    const a = await this.#call("GET", this.#claimsPath(name), undefined, [200, 404], name);
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
    const a = await this.#call("DELETE", this.#claimsPath(name), undefined, [200, 202, 404], name);
    return a.status === 404 ? "absent" : "released";
  }

  /**
   * Releases the claim `name` only while it is the object with `uid`: a fresh
   * GET compares the uid, and the DELETE carries it as a precondition (see
   * {@link releaseIf}: Milo ignores it; `note` hears what was done instead).
   */
  async releaseClaim(
    name: string,
    uid: string,
    note?: (why: string) => void,
  ): Promise<Release> {
    return await this.releaseIf(name, (c) => c.metadata.uid === uid, note);
  }

  /**
   * Releases the claim `name` only when a fresh GET finds it `mine` (given
   * Milo's clock of the answer; else `changed`), its uid the DELETE's
   * precondition, which Milo ignores (`AllocatingREST.Delete` reads by name).
   * A name other sandboxes make again is deleted only under Retain: one made
   * again before the DELETE and deleted in its place is made again at once,
   * re-bound to its address (`changed`); under Delete it is left (`note`). An
   * attachment's name is made again only under its lock, which callers hold;
   * made again all the same, it is remade pinned, or an error names both uids.
   */
  async releaseIf(
    name: string,
    mine: (claim: IPClaim, serverTime: number) => boolean,
    note: (why: string) => void = () => {},
  ): Promise<Release> {
    const { claim: now, serverTime } = await this.getClaimAt(name);
    if (!now) return "absent";
    const uid = now.metadata.uid;
    if (!uid || !mine(now, serverTime)) return "changed";
    if (isSharedName(name) && now.spec.reclaimPolicy !== "Retain") {
      note(`reclaimPolicy ${now.spec.reclaimPolicy ?? "(the class's)"} under a ${SHARED_DELETE}`);
      return "changed";
    }
    const options = { kind: "DeleteOptions", apiVersion: "v1", preconditions: { uid } };
    const path = this.#claimsPath(name);
    const a = await this.#call("DELETE", path, options, [200, 202, 404, 409], name);
    if (a.status === 404) return "absent";
    if (a.status === 409) {
      const st = statusOf(a.body);
      if (st?.reason === "Conflict") return "changed";
      throw statusError(`DELETE ${path}`, 409, st);
    }
    const gone = IPClaimSchema.safeParse(a.body).data;
    if (!gone?.metadata.uid || gone.metadata.uid === uid) return "released";
    await this.#remake(gone, uid);
    note(`the DELETE removed a newer claim of that name (uid ${gone.metadata.uid}): made again`);
    return "changed";
  }

  /** Makes `gone` (deleted in place of `uid`) again, or fails naming it. */
  async #remake(gone: IPClaim, uid: string): Promise<void> {
    const name = gone.metadata.name;
    try {
      await this.createClaim(remakeBody(this.#o.namespace, gone));
    } catch (err) {
      // Made again already (its holder's retry): Milo refuses the name as taken.
      if (err instanceof CniError && err.outcome === "conflict" && await this.getClaim(name)) {
        return;
      }
      throw new CniError(
        "transient",
        `the DELETE of claim ${name} (uid ${uid}) removed a newer claim of that name ` +
          `(uid ${gone.metadata.uid}), and making it again failed`,
        `${errorText(err)}; Milo does not check a DELETE's uid precondition`,
      );
    }
  }

  /** LISTs claims matching a label selector, following `continue` pages. */
  async listClaims(labelSelector: string): Promise<IPClaim[]> {
    return (await this.listClaimsAt(labelSelector)).items;
  }

  /**
   * {@link listClaims}, with Milo's clock at its first page; the claims kept
   * are bounded across the pages ({@link claimListTally}).
   */
  async listClaimsAt(labelSelector: string): Promise<ClaimList> {
    return await this.#listAt(CLAIM_LIST, this.#claimsPath(), IPClaimSchema, labelSelector);
  }

  /**
   * LISTs every IPAllocation of the namespace (a retained one has no
   * `spec.claimRef`), bounded as {@link listClaimsAt} is, with Milo's clock.
   */
  async listAllocationsAt(): Promise<{ items: IPAllocation[]; serverTime: number }> {
    const path = `${API_PATH}/namespaces/${this.#o.namespace}/ipallocations`;
    return await this.#listAt(ALLOCATION_LIST, path, IPAllocationSchema, "");
  }

  async #listAt<T extends z.ZodMiniType>(list: List, path: string, schema: T, selector: string) {
    const items: z.infer<T>[] = [], tally = claimListTally(`Milo's ${list.kind}`);
    const serverTime = await this.#scan(list, path, schema, selector, (item) => {
      tally.keep(keptSize(item));
      items.push(item);
    });
    return { items, serverTime };
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
    return await this.#scan(CLAIM_LIST, this.#claimsPath(), IPClaimSchema, labelSelector, visit);
  }

  async #scan<T extends z.ZodMiniType>(
    list: List,
    path: string,
    schema: T,
    labelSelector: string,
    visit: (item: z.infer<T>, serverTime: number) => void,
  ): Promise<number> {
    let serverTime = NaN, token: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const q = `?labelSelector=${encodeURIComponent(labelSelector)}&limit=${PAGE_LIMIT}` +
        (token ? `&continue=${encodeURIComponent(token)}` : "");
      let head: unknown, n = 0;
      const read: StreamRead = async (body, moved, date) => {
        head = await readList(body, {
          what: `Milo's ${list.kind}`,
          maxItemBytes: MAX_BODY_BYTES,
          onChunk: moved,
          item: (item) => void (n++, visit(parse(schema, item, `${list.kind} item`), date)),
        }).catch((err) => {
          if (!n || err instanceof CniError) throw err;
          const why = `Milo's ${list.kind} broke off after ${n} ${list.items}`;
          throw new CniError("transient", why, errorText(err));
        });
      };
      const a = await this.#call("GET", path + q, undefined, [200], undefined, read);
      if (page === 0) serverTime = a.date;
      token = parse(ListHeadSchema, head, list.kind).metadata?.continue;
      if (!token) return serverTime;
    }
    throw new CniError("protocol", `Milo's ${list.kind} did not end within ${MAX_PAGES} pages`);
  }

  #headers(hasBody: boolean): Headers {
    try {
      return new Headers({
        authorization: `Bearer ${this.#o.token}`,
        accept: "application/json",
        ...(hasBody ? { "content-type": "application/json" } : {}),
      });
    } catch {
      throw new CniError(
        "config",
        "the Milo token cannot be sent as an HTTP header",
        "milo.tokenFile must hold one line of visible ASCII",
      );
    }
  }

  /**
   * One request with retries; a 404 is accepted only as Milo's NotFound for
   * `name`; `also` accepts an error answer its Status singles out.
   */
  async #call(
    method: string,
    path: string,
    body: unknown,
    accept: number[],
    name?: string,
    stream?: StreamRead,
    also?: (status: number, st: MiloStatus | undefined) => boolean,
  ): Promise<Answer> {
    const o = this.#o;
    const url = o.baseUrl + path;
    const what = `${method} ${path}`;
    const headers = this.#headers(body !== undefined);
    let last = "no attempt made";
    let answered = "";
    let attempts = 0;
    const gone = () => new CniError("transient", `${what}: stopped, the caller is gone`, last);
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      if (o.signal?.aborted) throw gone();
      if (o.deadline - this.#now() < MIN_SEND_MS) break;
      let slot: Slot | undefined;
      if (o.limiter) {
        const got = await o.limiter.acquire(o.deadline - MIN_SEND_MS, o.signal, o.purpose);
        if (got === "aborted") throw gone();
        if (got === "deadline") {
          last = `${
            attempts ? `${last}; then ` : ""
          }no request slot of the node before the deadline`;
          break;
        }
        slot = got;
      }
      const remaining = o.deadline - this.#now();
      if (remaining < MIN_SEND_MS) {
        slot?.done({ status: "error" });
        break;
      }
      let wait = this.#backoff(attempt);
      this.#counter.n++;
      attempts++;
      let status: number | "error" = "error";
      let hinted: number | undefined;
      // Milo answers a LIST whole (a tenant's scan): it may take until the deadline to start,
      // and then must keep coming.
      const watch = stream ? streamSignal(o.requestMs, remaining, remaining) : undefined;
      const timeoutMs = Math.min(o.requestMs, remaining);
      const sentAt = this.#now();
      try {
        const res = await this.#fetch(url, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          redirect: "manual",
          signal: watch?.signal ?? AbortSignal.timeout(timeoutMs),
          ...(o.client ? { client: o.client } : {}),
        });
        status = res.status;
        hinted = retryAfterMs(res.headers.get("retry-after"));
        const date = Date.parse(res.headers.get("date") ?? "");
        if (stream && res.status === 200 && res.body) {
          watch!.moved();
          await stream(res.body, watch!.moved, date);
          return { status: 200, body: undefined, date };
        }
        const text = await readAnswer(res, MAX_BODY_BYTES, what, "Milo");
        const json = parseJson(text);
        const st = res.ok ? undefined : statusOf(json);
        if (accept.includes(res.status) || also?.(res.status, st)) {
          if (res.status === 404 && (st?.reason !== "NotFound" || st.details?.name !== name)) {
            throw new CniError(
              "protocol",
              `${what}: HTTP 404 that is not Milo's NotFound for ${name}`,
              `is milo.url the Milo API base? ${st?.message ?? clip(text, QUOTE_CHARS)}`,
            );
          }
          return { status: res.status, body: json, date };
        }
        if (!isTransientStatus(res.status)) throw statusError(what, res.status, st, text);
        last = answered = `Milo answered ${res.status}${st?.message ? `: ${st.message}` : ""}`;
        if (slot && (status === 429 || status === 503)) {
          wait = 0; // The limiter's pause and pacing of its flow stand for this request's own.
        } else if (hinted !== undefined) {
          // Full jitter: callers refused together do not come back together.
          wait = Math.max(wait, Math.round(this.#random() * hinted));
        }
      } catch (err) {
        const failure = miloFetchFailure(err, method, url, timeoutMs);
        last = answered ? `${answered}; then ${failure}` : failure;
      } finally {
        watch?.stop();
        // Over half its timeout, or none: Milo queued it (its priority and fairness) or is slow.
        const late = !watch && this.#now() - sentAt > timeoutMs / 2;
        slot?.done({ status, retryAfterMs: hinted, late });
        if (status === "error" && method === "POST") this.#counter.unansweredCreates++;
        o.onRequest?.({ method, status, attempt });
      }
      if (attempt === MAX_ATTEMPTS || this.#now() + wait >= o.deadline) break;
      if (wait > 0) await this.#pause(wait);
    }
    throw new CniError(
      "transient",
      `Milo unreachable or overloaded: ${what}`,
      `${last}; gave up within the deadline after ${attempts} attempt(s)`,
    );
  }

  /** Sleeps `ms`, or less when the caller goes away meanwhile. */
  async #pause(ms: number): Promise<void> {
    const signal = this.#o.signal;
    if (!signal) return await this.#sleep(ms);
    let done = () => {};
    const gone = new Promise<void>((r) => done = r);
    signal.addEventListener("abort", done, { once: true });
    try {
      await Promise.race([this.#sleep(ms), gone]);
    } finally {
      signal.removeEventListener("abort", done);
    }
  }

  #backoff(attempt: number): number {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (attempt - 1));
    return Math.round(ceiling / 2 + this.#random() * ceiling / 2);
  }
}
