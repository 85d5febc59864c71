/** The `ipam.miloapis.com/v1alpha1` REST surface: routing, auth, lists. */

import { API_VERSION, type Ipam } from "./ipam.ts";
import {
  matchFields,
  matchLabels,
  parseFieldSelector,
  parseLabelSelector,
  SelectorError,
} from "./selectors.ts";
import {
  ApiError,
  badRequest,
  forbidden,
  methodNotAllowed,
  noRoute,
  notFound,
  unauthorized,
} from "./status.ts";

// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

/** A parsed API path. */
export interface Route {
  project?: string;
  resource: string;
  namespace?: string;
  name?: string;
}

/** An API answer before it is written. */
export interface Reply {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

const GROUP_PREFIX = "/apis/ipam.miloapis.com/v1alpha1";
const PROJECT_PATH =
  /^\/apis\/resourcemanager\.miloapis\.com\/v1alpha1\/projects\/([^/]+)\/control-plane(\/.*)$/;
const RESOURCES = ["ipclasses", "ippools", "ipclaims", "ipallocations"];
const NAMESPACED = new Set(["ipclaims", "ipallocations"]);

const CLAIM_FIELDS = [
  "metadata.name",
  "metadata.namespace",
  "spec.className",
  "status.poolRef.name",
] as const;
const ALLOC_FIELDS = [
  "metadata.name",
  "metadata.namespace",
  "spec.className",
  "spec.poolRef.name",
] as const;
const CLUSTER_FIELDS = ["metadata.name"] as const;

/** Parses an API path; undefined when it is not one of ours. */
export function parseRoute(pathname: string): Route | undefined {
  let project: string | undefined;
  let path = pathname;
  const m = path.match(PROJECT_PATH);
  if (m) {
    project = decodeURIComponent(m[1]);
    path = m[2];
  }
  if (path !== GROUP_PREFIX && !path.startsWith(GROUP_PREFIX + "/")) return undefined;
  const parts = path.slice(GROUP_PREFIX.length).split("/").filter((x) => x !== "").map(
    decodeURIComponent,
  );
  if (parts.length === 0) return { project, resource: "discovery" };
  let namespace: string | undefined;
  if (parts[0] === "namespaces") {
    if (parts.length < 3) return undefined;
    namespace = parts[1];
    parts.splice(0, 2);
  }
  const [resource, name, ...rest] = parts;
  if (!RESOURCES.includes(resource) || rest.length) return undefined;
  if (namespace !== undefined && !NAMESPACED.has(resource)) return undefined;
  if (name !== undefined && NAMESPACED.has(resource) && namespace === undefined) return undefined;
  return { project, resource, namespace, name };
}

function fieldsOf(o: Obj): Record<string, string> {
  return {
    "metadata.name": o.metadata?.name ?? "",
    "metadata.namespace": o.metadata?.namespace ?? "",
    "spec.className": o.spec?.className ?? "",
    "status.poolRef.name": o.status?.poolRef?.name ?? "",
    "spec.poolRef.name": o.spec?.poolRef?.name ?? "",
  };
}

function list(
  kind: string,
  items: Obj[],
  q: URLSearchParams,
  fields: readonly string[],
  rv: number,
): Obj {
  let out = items;
  try {
    const ls = q.get("labelSelector");
    if (ls) {
      const reqs = parseLabelSelector(ls);
      out = out.filter((o) => matchLabels(reqs, o.metadata?.labels ?? {}));
    }
    const fs = q.get("fieldSelector");
    if (fs) {
      const reqs = parseFieldSelector(fs, fields);
      out = out.filter((o) => matchFields(reqs, fieldsOf(o)));
    }
  } catch (err) {
    if (err instanceof SelectorError) throw badRequest(err.message);
    throw err;
  }
  const metadata: Obj = { resourceVersion: String(rv) };
  const cont = q.get("continue");
  if (cont) {
    let after: string;
    try {
      after = JSON.parse(atob(cont)).after;
    } catch {
      throw new ApiError(410, "Expired", "The provided continue parameter is too old or malformed");
    }
    out = out.filter((o) => keyOf(o) > after);
  }
  const limit = Number(q.get("limit") ?? "0");
  if (Number.isInteger(limit) && limit > 0 && out.length > limit) {
    metadata.remainingItemCount = out.length - limit;
    out = out.slice(0, limit);
    metadata.continue = btoa(JSON.stringify({ after: keyOf(out[out.length - 1]) }));
  }
  return { apiVersion: API_VERSION, kind, metadata, items: out };
}

function keyOf(o: Obj): string {
  return `${o.metadata?.namespace ?? ""}\0${o.metadata?.name ?? ""}`;
}

const DISCOVERY = {
  kind: "APIResourceList",
  apiVersion: "v1",
  groupVersion: API_VERSION,
  resources: [
    {
      name: "ipclasses",
      singularName: "ipclass",
      namespaced: false,
      kind: "IPClass",
      verbs: ["get", "list"],
    },
    {
      name: "ippools",
      singularName: "ippool",
      namespaced: false,
      kind: "IPPool",
      verbs: ["get", "list"],
    },
    {
      name: "ipclaims",
      singularName: "ipclaim",
      namespaced: true,
      kind: "IPClaim",
      verbs: ["create", "delete", "get", "list"],
    },
    {
      name: "ipallocations",
      singularName: "ipallocation",
      namespaced: true,
      kind: "IPAllocation",
      verbs: ["get", "list"],
    },
  ],
};

/** Request context the handler needs. */
export interface ApiRequest {
  method: string;
  url: URL;
  route: Route;
  authorization: string | null;
  body: string;
  failRelease?: boolean;
}

/** Resolves the caller's project from the bearer token and the path. */
export function authenticate(ipam: Ipam, req: ApiRequest): string {
  const m = req.authorization?.match(/^Bearer\s+(\S+)\s*$/i);
  const project = m ? ipam.projectForToken(m[1]) : undefined;
  if (!project) throw unauthorized();
  if (req.route.project !== undefined && req.route.project !== project) {
    throw forbidden(
      "projects",
      req.route.project,
      "the bearer token does not grant access to this project",
      "resourcemanager.miloapis.com",
    );
  }
  return project;
}

/** Handles one API request and returns the answer (errors as Status). */
export function handleApi(ipam: Ipam, req: ApiRequest): Reply {
  try {
    return route(ipam, req);
  } catch (err) {
    if (err instanceof ApiError) {
      return { status: err.status.code, body: err.status, headers: err.headers };
    }
    throw err;
  }
}

function route(ipam: Ipam, req: ApiRequest): Reply {
  const project = authenticate(ipam, req);
  const { resource, namespace: ns, name } = req.route;
  const q = req.url.searchParams;
  const m = req.method;
  const rv = () => ipam.store.currentRV();
  const dryRun = q.getAll("dryRun");
  if (dryRun.some((d) => d !== "All")) throw badRequest(`dryRun must be "All"`);
  const isDry = dryRun.length > 0;
  if (resource === "discovery") {
    if (m !== "GET") throw methodNotAllowed();
    return { status: 200, body: DISCOVERY };
  }
  if (resource === "ipclasses" || resource === "ippools") {
    if (m !== "GET") throw methodNotAllowed();
    const classes = resource === "ipclasses";
    if (name !== undefined) {
      const o = classes ? ipam.getClass(project, name) : ipam.getPool(project, name);
      if (!o) throw notFound(resource, name);
      return { status: 200, body: o };
    }
    const items = classes ? ipam.listClasses(project) : ipam.listPools(project);
    return {
      status: 200,
      body: list(classes ? "IPClassList" : "IPPoolList", items, q, CLUSTER_FIELDS, rv()),
    };
  }
  if (resource === "ipclaims") {
    if (name === undefined) {
      if (m === "GET") {
        return {
          status: 200,
          body: list("IPClaimList", ipam.listClaims(project, ns), q, CLAIM_FIELDS, rv()),
        };
      }
      if (m === "POST" && ns !== undefined) {
        let body: unknown;
        try {
          body = JSON.parse(req.body);
        } catch (err) {
          throw badRequest(
            `the request body is not valid JSON: ${err instanceof Error ? err.message : err}`,
          );
        }
        return { status: 201, body: ipam.createClaim(project, ns, body, isDry) };
      }
      throw methodNotAllowed();
    }
    if (m === "GET") return { status: 200, body: ipam.getClaim(project, ns!, name) };
    if (m === "DELETE") {
      return {
        status: 200,
        body: ipam.deleteClaim(project, ns!, name, { dryRun: isDry, failRelease: req.failRelease }),
      };
    }
    throw methodNotAllowed();
  }
  if (m !== "GET") throw methodNotAllowed();
  if (name === undefined) {
    return {
      status: 200,
      body: list("IPAllocationList", ipam.listAllocations(project, ns), q, ALLOC_FIELDS, rv()),
    };
  }
  return { status: 200, body: ipam.getAllocation(project, ns!, name) };
}

/** Any path that is not an API route: a 404 Status. */
export function notARoute(): Reply {
  const e = noRoute();
  return { status: 404, body: e.status };
}
