/**
 * A read-only Kubernetes API client for `milo-ipam sweep`: list the pods of
 * all namespaces, list the nodes, get one pod. Plain `fetch`, TLS always
 * verified, every answer validated (only the fields the sweep reads), bounded
 * like the Milo client: a body cap, a page cap, a bound of what each list
 * keeps across its pages ({@link POD_LIST_BOUND}, {@link NODE_LIST_BOUND}),
 * request timeouts and a few jittered retries for 429/5xx and connection
 * errors. A list page is read as a stream, item by item (lib/list_stream.ts),
 * and of each item only what the sweep reads is kept ({@link KubePod}, a
 * node's name and readiness): one tenant's oversized objects (a pod may carry
 * 256 KiB of annotations) cost one item's read, never the page's.
 */
import * as z from "zod/mini";
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from "./config.ts";
import { clip, CniError, errorText, isTransientStatus, QUOTE_CHARS } from "./errors.ts";
import { isLoopbackHost } from "./ip.ts";
import {
  createHttpClient,
  fatalFetchError,
  isTimeout,
  parseJson,
  readAnswer,
  retryAfterMs,
  streamSignal,
} from "./http.ts";
import { keptSize, type ListBound, ListTally } from "./list_bound.ts";
import { readList } from "./list_stream.ts";
import { quotedText, statusReason } from "./milo_objects.ts";
import { after } from "./timers.ts";

/** The annotation of a mirror pod that carries the static pod's UID (the one the kubelet uses). */
export const MIRROR_ANNOTATION = "kubernetes.io/config.mirror";

/**
 * What one pod list may keep across its pages: 250,000 pods and 128 MiB of
 * them as kept ({@link KubePod}, about 270 bytes a pod by lib/list_bound.ts's
 * estimate); more is a protocol error (a brake of the sweep) naming it.
 * Kubernetes supports 150,000 pods per cluster, and 250,000 is all the pages
 * (1,000) of the default page size (250) hold.
 */
export const POD_LIST_BOUND: ListBound = { bytes: 128 * 1024 ** 2, items: 250_000 };
/** What the node list may keep: 25,000 nodes (Kubernetes supports 5,000), 16 MiB. */
export const NODE_LIST_BOUND: ListBound = { bytes: 16 * 1024 ** 2, items: 25_000 };
/**
 * Largest object in a list answer (8 MiB of JSON): the API server refuses a request body over
 * 3 MiB (`MaxRequestBodyBytes`, k8s.io/apiserver `pkg/server/config.go`), etcd a value over 1.5 MiB.
 */
export const MAX_OBJECT_BYTES = 8 * 1024 ** 2;

const str = z.string();
const opt = z.optional(z.string());
const PodSchema = z.object({
  metadata: z.object({
    name: str,
    namespace: str,
    uid: str,
    annotations: z.optional(z.nullable(z.record(str, str))),
    ownerReferences: z.optional(z.nullable(z.array(z.object({ kind: opt, name: opt })))),
  }),
  spec: z.optional(z.object({
    nodeName: opt,
    terminationGracePeriodSeconds: z.optional(z.nullable(z.number())),
  })),
  status: z.optional(z.object({ phase: opt })),
});
const NodeSchema = z.object({
  metadata: z.object({ name: str }),
  status: z.optional(z.object({
    conditions: z.optional(
      z.nullable(z.array(z.object({ type: str, status: str, lastTransitionTime: opt }))),
    ),
  })),
});
const NamespaceSchema = z.object({ metadata: z.object({ uid: str }) });
const ListHeadSchema = z.object({ metadata: z.optional(z.object({ continue: opt })) });
const StatusSchema = z.object({
  kind: z.literal("Status"),
  message: z.optional(quotedText),
  reason: z.optional(statusReason),
  details: z.optional(z.object({ name: opt, kind: opt })),
});
type KubeStatus = z.infer<typeof StatusSchema>;

/** A node as the sweep sees it: `ready` is false only when its `Ready` condition is not `True`. */
export interface KubeNode {
  name: string;
  ready: boolean;
  /** When its `Ready` condition last changed (`lastTransitionTime`, as the API wrote it). */
  readySince?: string;
}

/** A pod as the sweep sees it. */
export interface KubePod {
  namespace: string;
  name: string;
  uid: string;
  /**
   * The static pod's UID when this is a mirror pod its node made: the
   * annotation, on a pod bound to a node that owns it (the kubelet sets both;
   * any user may write the annotation on a pod of theirs).
   */
  mirrorUid?: string;
  nodeName?: string;
  phase?: string;
  /** Its `spec.terminationGracePeriodSeconds`: how long its kubelet lets it end. */
  graceS?: number;
}

/**
 * True when `pod` is the pod whose UID the kubelet passed as `uid`: itself,
 * or the mirror pod of that static pod on the node `node` names (the claim's;
 * a mirror UID vouches for its own static pod alone, lib/sweep.ts).
 */
export function podHasUid(pod: KubePod, uid: string, node?: string): boolean {
  if (pod.uid === uid) return true;
  return pod.mirrorUid === uid && node !== undefined && pod.nodeName !== undefined &&
    pod.nodeName.toLowerCase() === node.trim().toLowerCase();
}

/** How to reach one API server, and how hard to try. */
export interface KubeOptions {
  /** `https://host:port` (`http://` only for loopback). */
  server: string;
  token?: string;
  client?: Deno.HttpClient;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
  /** Timeout of one HTTP request; default 10 s. */
  requestMs?: number;
  /** Budget of one operation (a whole paginated list, retries included); default 120 s. */
  operationMs?: number;
  /** `limit` of list requests; default 250. */
  pageLimit?: number;
  /** Most pages one list follows; default 1000. */
  maxPages?: number;
  /** Largest body read (a pod, an error); default 32 MiB. */
  maxBodyBytes?: number;
  /** Largest item of a list answer, read as a stream; default {@link MAX_OBJECT_BYTES}. */
  maxItemBytes?: number;
  /** Bound of the pod list across its pages; default {@link POD_LIST_BOUND}. */
  podListBound?: ListBound;
  /** Bound of the node list across its pages; default {@link NODE_LIST_BOUND}. */
  nodeListBound?: ListBound;
}

const MAX_ATTEMPTS = 5;
const BACKOFF_BASE_MS = 200;
const BACKOFF_CAP_MS = 3_000;
const RETRY_AFTER_CAP_MS = 10_000;

/** The read-only client; {@link requests} counts every HTTP attempt. */
export class KubeClient {
  readonly #o: Required<Omit<KubeOptions, "token" | "client">> & KubeOptions;
  #requests = 0;

  constructor(o: KubeOptions) {
    if (!isApiServerUrl(o.server)) {
      throw new CniError(
        "config",
        `Kubernetes API server ${JSON.stringify(clip(o.server, 120))} is not https://`,
        "http:// is accepted only for loopback addresses",
      );
    }
    this.#o = {
      fetch,
      sleep: after,
      random: Math.random,
      requestMs: 10_000,
      operationMs: 120_000,
      pageLimit: 250,
      maxPages: 1_000,
      maxBodyBytes: 32 * 1024 * 1024,
      maxItemBytes: MAX_OBJECT_BYTES,
      podListBound: POD_LIST_BOUND,
      nodeListBound: NODE_LIST_BOUND,
      ...o,
      server: o.server.replace(/\/+$/, ""),
    };
  }

  /** HTTP requests sent so far (retries included). */
  get requests(): number {
    return this.#requests;
  }

  /** A client for the credentials in `access` (TLS material loaded into an HTTP client). */
  static open(access: KubeAccess, o: Partial<KubeOptions> = {}): KubeClient {
    let client: Deno.HttpClient | undefined;
    try {
      client = createHttpClient(
        { ca: access.ca, cert: access.cert, key: access.key },
        `the Kubernetes credentials (${access.source})`,
      );
    } catch (err) {
      throw err instanceof CniError ? err : new CniError("config", errorText(err));
    }
    return new KubeClient({ ...o, server: access.server, token: access.token, client });
  }

  /** Releases the HTTP client. */
  close(): void {
    this.#o.client?.close();
  }

  /** Every pod of every namespace, following `continue` pages (bounded: {@link POD_LIST_BOUND}). */
  listPods(): Promise<KubePod[]> {
    const bound = this.#o.podListBound;
    return this.#list("pods", PodSchema, "PodList", bound, "POD_LIST_BOUND", podOf);
  }

  /** Every node, following `continue` pages (bounded: {@link NODE_LIST_BOUND}). */
  listNodes(): Promise<KubeNode[]> {
    const bound = this.#o.nodeListBound;
    return this.#list("nodes", NodeSchema, "NodeList", bound, "NODE_LIST_BOUND", nodeOf);
  }

  /** The pod `namespace/name`, or null on the API server's own 404 NotFound for it. */
  async getPod(namespace: string, name: string): Promise<KubePod | null> {
    if (!DNS1123_LABEL.test(namespace) || !DNS1123_SUBDOMAIN.test(name)) {
      throw new CniError(
        "protocol",
        "a pod namespace/name is not DNS-1123; refusing to put it in a URL",
        JSON.stringify(clip(`${namespace}/${name}`, 120)),
      );
    }
    const path = `/api/v1/namespaces/${namespace}/pods/${name}`;
    const got = await this.#get(path, Date.now() + this.#o.operationMs, name);
    return got === null ? null : podOf(parseAs(PodSchema, got, "Pod"));
  }

  /**
   * The UID of the `kube-system` namespace: the cluster's identity for as long
   * as it lives (lib/cluster_uid.ts). Needs `get` on that namespace.
   */
  async clusterUid(): Promise<string> {
    const path = "/api/v1/namespaces/kube-system";
    const got = await this.#get(path, Date.now() + this.#o.operationMs, "kube-system");
    if (got === null) {
      throw new CniError("protocol", "the API server has no kube-system namespace", path);
    }
    return parseAs(NamespaceSchema, got, "Namespace").metadata.uid;
  }

  /**
   * A list over all its pages (the API server answers at most `limit` items
   * and a `continue` token: k8s.io/apiserver `pkg/storage/etcd3/store.go`,
   * `GetList`), each read as a stream and bounded across them by `bound`
   * (named `boundName` in errors); of each item only `keep` of it is kept. A
   * page's items are added once it is read whole: a failed page is asked again.
   */
  async #list<I, T>(
    resource: string,
    schema: z.ZodMiniType<I>,
    kind: string,
    bound: ListBound,
    boundName: string,
    keep: (item: I) => T,
  ): Promise<T[]> {
    const out: T[] = [];
    const tally = new ListTally(`the Kubernetes ${kind}`, bound, {
      bytes: `${boundName}.bytes`,
      items: `${boundName}.items`,
    });
    const deadline = Date.now() + this.#o.operationMs;
    let token: string | undefined;
    for (let page = 0; page < this.#o.maxPages; page++) {
      const q = `?limit=${this.#o.pageLimit}` +
        (token ? `&continue=${encodeURIComponent(token)}` : "");
      let items: T[] = [], head: unknown;
      await this.#get(`/api/v1/${resource}${q}`, deadline, undefined, async (body, moved) => {
        items = [];
        head = await readList(body, {
          what: `the Kubernetes ${kind}`,
          maxItemBytes: this.#o.maxItemBytes,
          onChunk: moved,
          item: (item) => {
            const kept = keep(parseAs(schema, item, `${kind} item`));
            tally.keep(keptSize(kept));
            items.push(kept);
          },
        });
      });
      for (const item of items) out.push(item);
      token = parseAs(ListHeadSchema, head, kind).metadata?.continue || undefined;
      if (!token) return out;
    }
    throw new CniError("protocol", `the ${kind} did not end within ${this.#o.maxPages} pages`);
  }

  /**
   * One GET with retries: the 200's JSON body (or, with `stream`, the 200's
   * body read by it: a list page); `notFound` names the object whose
   * NotFound answers null.
   */
  async #get(
    path: string,
    deadline: number,
    notFound?: string,
    stream?: (body: ReadableStream<Uint8Array>, moved: () => void) => Promise<void>,
  ): Promise<unknown | null> {
    const o = this.#o;
    const what = `GET ${path.replace(/\?.*$/, "")}`;
    let last = "no attempt made";
    let attempts = 0;
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (attempt - 1));
      let wait = Math.round(ceiling / 2 + o.random() * ceiling / 2);
      this.#requests++;
      attempts++;
      const watch = stream ? streamSignal(o.requestMs, remaining) : undefined;
      try {
        const res = await o.fetch(o.server + path, {
          headers: this.#headers(),
          redirect: "manual",
          signal: watch?.signal ?? AbortSignal.timeout(Math.min(o.requestMs, remaining)),
          ...(o.client ? { client: o.client } : {}),
        });
        if (stream && res.status === 200 && res.body) {
          watch!.moved();
          await stream(res.body, watch!.moved);
          return null;
        }
        const text = await readAnswer(res, o.maxBodyBytes, what, "the Kubernetes API");
        const body = parseJson(text);
        if (res.status === 200) return body;
        const st = StatusSchema.safeParse(body).data;
        const isNotFound = st?.reason === "NotFound" && st.details?.name === notFound;
        if (res.status === 404 && notFound !== undefined && isNotFound) return null;
        if (!isTransientStatus(res.status)) throw kubeStatusError(what, res.status, st, text);
        last = `HTTP ${res.status}${st?.message ? `: ${st.message}` : ""}`;
        const hinted = retryAfterMs(res.headers.get("retry-after"));
        if (hinted !== undefined) wait = Math.max(wait, Math.min(hinted, RETRY_AFTER_CAP_MS));
      } catch (err) {
        if (err instanceof CniError) throw err;
        const host = new URL(o.server).host;
        const fatal = fatalFetchError(err, {
          refused: `connecting to ${host}`,
          tls: `the Kubernetes API ${host} failed`,
        });
        if (fatal) throw fatal;
        last = isTimeout(err)
          ? `request timed out after ${Math.round(Math.min(o.requestMs, remaining))} ms`
          : errorText(err);
      } finally {
        watch?.stop();
      }
      if (attempt === MAX_ATTEMPTS || Date.now() + wait >= deadline) break;
      await o.sleep(wait);
    }
    throw new CniError(
      "transient",
      `Kubernetes API unreachable or overloaded: ${what}`,
      `${last}; gave up after ${attempts} attempt(s)`,
    );
  }

  #headers(): Headers {
    const h = new Headers({ accept: "application/json" });
    if (this.#o.token) h.set("authorization", `Bearer ${this.#o.token}`);
    return h;
  }
}

function nodeOf(n: z.infer<typeof NodeSchema>): KubeNode {
  const ready = n.status?.conditions?.find((c) => c.type === "Ready");
  return {
    name: n.metadata.name,
    ready: !ready || ready.status === "True",
    ...(ready?.lastTransitionTime ? { readySince: ready.lastTransitionTime } : {}),
  };
}

/** A mirror pod's static UID, when its node made it: bound to that node, which owns it. */
function mirrorOf(p: z.infer<typeof PodSchema>): string | undefined {
  const uid = p.metadata.annotations?.[MIRROR_ANNOTATION];
  const node = p.spec?.nodeName;
  if (!uid || !node) return undefined;
  const owned = p.metadata.ownerReferences?.some((r) => r.kind === "Node" && r.name === node);
  return owned ? uid : undefined;
}

function podOf(p: z.infer<typeof PodSchema>): KubePod {
  const m = p.metadata;
  return {
    namespace: m.namespace,
    name: m.name,
    uid: m.uid,
    mirrorUid: mirrorOf(p),
    nodeName: p.spec?.nodeName || undefined,
    phase: p.status?.phase,
    ...(typeof p.spec?.terminationGracePeriodSeconds === "number"
      ? { graceS: p.spec.terminationGracePeriodSeconds }
      : {}),
  };
}

function isApiServerUrl(text: string): boolean {
  try {
    const u = new URL(text);
    return u.protocol === "https:" || (u.protocol === "http:" && isLoopbackHost(u.hostname));
  } catch {
    return false;
  }
}

/** The body as text, refusing more than `max` bytes; a redirect is refused unread. */
function parseAs<T extends z.ZodMiniType>(schema: T, body: unknown, kind: string): z.infer<T> {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const i = r.error.issues[0];
  throw new CniError(
    "protocol",
    `the Kubernetes API answered a malformed ${kind}`,
    clip(`${i.path.join(".")}: ${i.message}`, QUOTE_CHARS),
  );
}

function kubeStatusError(what: string, status: number, st: KubeStatus | undefined, text: string) {
  const reason = `${what}: HTTP ${status}${st?.reason ? ` ${st.reason}` : ""}`;
  // A refusal of the credentials is not quoted: a server may echo what it was sent.
  const detail = status === 401 || status === 403
    ? reason
    : `${reason}: ${st?.message ?? clip(text, QUOTE_CHARS)}`;
  if (status === 401) {
    return new CniError("auth", "the Kubernetes API rejected the credentials (401)", detail);
  }
  if (status === 403) {
    return new CniError(
      "auth",
      "the Kubernetes API forbids this (403): the sweep needs get and list on pods and nodes",
      detail,
    );
  }
  return new CniError("protocol", `the Kubernetes API answered HTTP ${status}`, detail);
}

/** Credentials and endpoint of one API server, as loaded from a pod or a kubeconfig. */
export interface KubeAccess {
  server: string;
  token?: string;
  ca?: string;
  cert?: string;
  key?: string;
  /** Where it came from: `in-cluster` or the kubeconfig path. */
  source: string;
}
