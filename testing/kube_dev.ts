/**
 * A small Kubernetes API stand-in for the sweep's tests, the bench and the
 * e2e: the three read-only `v1` calls the sweep makes, in the API server's
 * shapes, with bearer-token auth, `limit`/`continue` pagination, a request
 * log, fault switches and a store the caller changes at will
 * (testing/kube_store.ts). Never a real API server: no watch, no writes over
 * HTTP, no consistent list snapshots.
 *
 * Paging is the API server's (k8s.io/apiserver `pkg/storage/etcd3/store.go`,
 * `GetList`): a LIST with `limit` answers at most that many items in key
 * order, and `metadata.continue` when more remain (with `remainingItemCount`,
 * which the real server sets only for a list without selectors); the
 * `continue` token sent back starts the next page after the last key. A server
 * page cap (`maxPage`) stands for a server that answers fewer than asked.
 *
 * `KubeDevApi.handle` answers a `Request` in-process (a `fetch` stub for unit
 * tests); `startKubeDev` serves it on 127.0.0.1, optionally over TLS. Run as
 * a program it serves the pods, nodes and faults of a state file, re-read when
 * the file changes (the e2e runs it in a network namespace and writes the pods
 * its runtime created):
 *
 *   deno run -A testing/kube_dev.ts --listen HOST:PORT --state FILE
 *       [--cert FILE --key FILE] [--token TOKEN]
 */
import { parseArgs } from "node:util";
import { type KubeObject, KubeStore, type PodInput } from "./kube_store.ts";
import { makeTestCA } from "./testca.ts";

/** Fault switches, changed at run time. */
export interface KubeDevFaults {
  /** Pod and node lists answer 503 ServiceUnavailable. */
  failLists: boolean;
  /** Pod and node lists answer no items. */
  emptyLists: boolean;
  /** Every request answers 403 Forbidden. */
  forbidden: boolean;
}

/** One request the stand-in answered. */
export interface KubeDevRequest {
  method: string;
  path: string;
  search: string;
  status: number;
}

function status(code: number, reason: string, message: string, details?: object): Response {
  const body = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    ...(details ? { details } : {}),
    code,
  };
  return Response.json(body, { status: code });
}

const keyOf = (o: KubeObject) =>
  o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : String(o.metadata.name);

/** The index of the first of `sorted` whose key comes after `key`. */
function firstAfter(sorted: readonly KubeObject[], key: string): number {
  let lo = 0, hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (keyOf(sorted[mid]) > key) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** The stand-in's request handling, without a listener. */
export class KubeDevApi {
  /** The objects served. */
  readonly store = new KubeStore();
  /** Fault switches. */
  readonly faults: KubeDevFaults = { failLists: false, emptyLists: false, forbidden: false };
  /** Every request answered, in order. */
  readonly log: KubeDevRequest[] = [];
  /** The bearer token accepted. */
  readonly token: string;
  /** Largest page served whatever `limit` asks (lists are paginated by the server too). */
  maxPage: number;

  constructor(o: { token?: string; maxPage?: number } = {}) {
    this.token = o.token ?? "kube-dev-token";
    this.maxPage = o.maxPage ?? Infinity;
  }

  /** Requests answered so far for a path (all of them when omitted); `search` not counted. */
  count(path?: string): number {
    return path === undefined ? this.log.length : this.log.filter((r) => r.path === path).length;
  }

  /** A `fetch` that answers in-process. */
  readonly fetch = (input: RequestInfo | URL, init?: RequestInit): Promise<Response> =>
    Promise.resolve(this.handle(new Request(input, init)));

  /** Answers one request. */
  handle(req: Request): Response {
    const url = new URL(req.url);
    const res = this.#answer(req, url);
    this.log.push({
      method: req.method,
      path: url.pathname,
      search: url.search,
      status: res.status,
    });
    return res;
  }

  #answer(req: Request, url: URL): Response {
    if (req.headers.get("authorization") !== `Bearer ${this.token}`) {
      return status(401, "Unauthorized", "Unauthorized");
    }
    const path = url.pathname;
    const ns = /^\/api\/v1\/namespaces\/([^/]+)$/.exec(path);
    if (ns && req.method === "GET") return this.#namespace(ns[1]);
    const one = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/.exec(path);
    const resource = path === "/api/v1/pods" ? "pods" : path === "/api/v1/nodes" ? "nodes" : null;
    if (!one && !resource) {
      return status(404, "NotFound", "the server could not find the requested resource");
    }
    if (req.method !== "GET") {
      return status(405, "MethodNotAllowed", "the server does not allow this method");
    }
    if (this.faults.forbidden) {
      const what = one ? `get resource "pods" in the namespace "${one[1]}"` : `list resource ` +
        `"${resource}" in API group "" at the cluster scope`;
      return status(
        403,
        "Forbidden",
        `${resource ?? "pods"} is forbidden: User "system:serviceaccount:kube-system:` +
          `milo-ipam-sweep" cannot ${what}`,
        { kind: resource ?? "pods" },
      );
    }
    if (one) {
      const pod = this.store.pod(one[1], one[2]);
      if (!pod) {
        return status(404, "NotFound", `pods "${one[2]}" not found`, {
          name: one[2],
          kind: "pods",
        });
      }
      return Response.json({ kind: "Pod", apiVersion: "v1", ...pod });
    }
    if (this.faults.failLists) {
      return status(
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request",
      );
    }
    return this.#list(resource!, url.searchParams);
  }

  /**
   * A namespace as the API answers it: `kube-system` (its UID names the
   * cluster: lib/cluster_uid.ts); forbidden without the grant the sweep's
   * ClusterRole gives (`get` on namespaces, `resourceNames: [kube-system]`).
   */
  #namespace(name: string): Response {
    if (this.faults.forbidden || name !== "kube-system") {
      return status(
        403,
        "Forbidden",
        `namespaces "${name}" is forbidden: User "system:serviceaccount:kube-system:` +
          `milo-ipam-sweep" cannot get resource "namespaces" in API group "" in the namespace ` +
          `"${name}"`,
        { name, kind: "namespaces" },
      );
    }
    return Response.json({
      kind: "Namespace",
      apiVersion: "v1",
      metadata: {
        name,
        uid: this.store.clusterUid,
        resourceVersion: "4",
        creationTimestamp: "2026-01-05T09:12:44Z",
        labels: { "kubernetes.io/metadata.name": name },
      },
      spec: { finalizers: ["kubernetes"] },
      status: { phase: "Active" },
    });
  }

  #list(resource: "pods" | "nodes", q: URLSearchParams): Response {
    const kind = resource === "pods" ? "PodList" : "NodeList";
    let items = this.faults.emptyLists
      ? []
      : resource === "pods"
      ? this.store.pods()
      : this.store.nodes();
    const cont = q.get("continue");
    let rv = this.store.resourceVersion;
    if (cont) {
      let at: { rv: string; start: string };
      try {
        at = JSON.parse(atob(cont));
        if (typeof at.rv !== "string" || typeof at.start !== "string") throw new Error();
      } catch {
        return status(400, "BadRequest", "continue key is not valid: malformed token");
      }
      rv = at.rv;
      items = items.slice(firstAfter(items, at.start));
    }
    const limit = Number(q.get("limit") ?? "0");
    const size = Math.min(Number.isInteger(limit) && limit > 0 ? limit : Infinity, this.maxPage);
    const metadata: Record<string, unknown> = { resourceVersion: rv };
    if (items.length > size) {
      metadata.remainingItemCount = items.length - size;
      items = items.slice(0, size);
      metadata.continue = btoa(JSON.stringify({ rv, start: keyOf(items[items.length - 1]) }));
    }
    return Response.json({ kind, apiVersion: "v1", metadata, items });
  }
}

/** A served stand-in. */
export interface KubeDev {
  /** `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`. */
  url: string;
  token: string;
  /** The CA that verifies the server, when it serves TLS. */
  caFile?: string;
  api: KubeDevApi;
  store: KubeStore;
  close(): Promise<void>;
}

/** Options of {@link startKubeDev}. */
export interface KubeDevOptions {
  token?: string;
  maxPage?: number;
  /** HTTPS: `true` makes a throwaway test CA (removed on close), or the server's own cert and key. */
  tls?: true | { certFile: string; keyFile: string; caFile?: string };
}

/** Serves a {@link KubeDevApi} on 127.0.0.1 (a free port). */
export async function startKubeDev(o: KubeDevOptions = {}): Promise<KubeDev> {
  const api = new KubeDevApi(o);
  let dir: string | undefined;
  let tls = o.tls === true ? undefined : o.tls;
  if (o.tls === true) {
    dir = await Deno.makeTempDir({ prefix: "kube-dev-" });
    tls = await makeTestCA(dir);
  }
  const pem = tls
    ? { cert: await Deno.readTextFile(tls.certFile), key: await Deno.readTextFile(tls.keyFile) }
    : {};
  const { promise, resolve } = Promise.withResolvers<number>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: (a) => resolve(a.port), ...pem },
    (req) => api.handle(req),
  );
  const port = await promise;
  return {
    url: `${tls ? "https" : "http"}://127.0.0.1:${port}`,
    token: api.token,
    caFile: tls?.caFile,
    api,
    store: api.store,
    close: async () => {
      await server.shutdown();
      if (dir) await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

/** What a state file holds: the pods and nodes served, and the faults switched on. */
export interface KubeDevState {
  pods: PodInput[];
  nodes: string[];
  faults?: Partial<KubeDevFaults>;
}

/** Replaces everything the stand-in serves with `state`. */
export function loadState(api: KubeDevApi, state: KubeDevState): void {
  api.store.clear();
  for (const p of state.pods) api.store.addPod(p);
  for (const n of state.nodes) api.store.addNode(n);
  Object.assign(
    api.faults,
    { failLists: false, emptyLists: false, forbidden: false },
    state.faults,
  );
}

/** Writes a state file atomically (beside it, then rename), so the server never reads half. */
export async function writeState(path: string, state: KubeDevState): Promise<void> {
  const tmp = `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;
  await Deno.writeTextFile(tmp, JSON.stringify(state));
  await Deno.rename(tmp, path);
}

function serveStateFile(args: string[]): void {
  const { values } = parseArgs({
    args,
    options: {
      listen: { type: "string", default: "127.0.0.1:0" },
      state: { type: "string" },
      cert: { type: "string" },
      key: { type: "string" },
      token: { type: "string" },
    },
  });
  if (!values.state) throw new Error("--state FILE is required");
  const statePath = values.state;
  const api = new KubeDevApi({ token: values.token });
  let seen = "";
  const refresh = () => {
    const text = Deno.readTextFileSync(statePath);
    if (text !== seen) {
      loadState(api, JSON.parse(text));
      seen = text;
    }
  };
  refresh();
  const at = values.listen.lastIndexOf(":");
  const pem = values.cert && values.key
    ? { cert: Deno.readTextFileSync(values.cert), key: Deno.readTextFileSync(values.key) }
    : {};
  Deno.serve({
    hostname: values.listen.slice(0, at),
    port: Number(values.listen.slice(at + 1)),
    onListen: (a) => console.log(`kube-dev listening on ${a.hostname}:${a.port}`),
    ...pem,
  }, (req) => {
    refresh();
    return api.handle(req);
  });
}

if (import.meta.main) serveStateFile(Deno.args);
