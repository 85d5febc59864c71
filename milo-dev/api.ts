/** The `ipam.miloapis.com/v1alpha1` REST surface: routing, auth, lists. */

import type { Ipam } from "./ipam.ts";
import { defaultLimits, type Limits } from "./limits.ts";
import {
  API_VERSION,
  type ApiObject,
  type IPAllocationObject,
  type IPClaimObject,
  type ObjectMeta,
} from "./objects.ts";
import { bucketName, QUOTA_RESOURCE_TYPE, type Usage } from "./quota.ts";
import { parseClaimRequest, parseDeleteOptions, parseJsonBody } from "./request.ts";
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
  /** What the request cost, for the counters. */
  meter?: Meter;
}

/** The cost of one request, as the real server would bear it. */
export interface Meter {
  /** A LIST: the kind and the rows read (every object under the key prefix, before selectors). */
  list?: { kind: string; rows: number };
  /** A claim create that committed an allocation (not a dry run). */
  allocated?: true;
}

const GROUP_PREFIX = "/apis/ipam.miloapis.com/v1alpha1";
/** Milo's quota API: the project's AllowanceBuckets live in its `milo-system` namespace. */
const BUCKETS =
  /^\/apis\/quota\.miloapis\.com\/v1alpha1\/namespaces\/([^/]+)\/allowancebuckets\/([^/]+)$/;
const PROJECT_PATH =
  /^\/apis\/resourcemanager\.miloapis\.com\/v1alpha1\/projects\/([^/]+)\/control-plane(\/.*)$/;
const RESOURCES = ["ipclasses", "ippools", "ipclaims", "ipallocations"];
const NAMESPACED = new Set(["ipclaims", "ipallocations"]);

/** The field selectors a kind supports: path to value. */
type FieldSet<T> = Record<string, (o: T) => string>;

const NAME_FIELDS = {
  "metadata.name": (o: ApiObject) => o.metadata.name,
  "metadata.namespace": (o: ApiObject) => o.metadata.namespace ?? "",
};
const CLAIM_FIELDS: FieldSet<IPClaimObject> = {
  ...NAME_FIELDS,
  "spec.className": (o) => o.spec.className ?? "",
  "status.poolRef.name": (o) => o.status.poolRef.name,
};
const ALLOC_FIELDS: FieldSet<IPAllocationObject> = {
  ...NAME_FIELDS,
  "spec.className": (o) => o.spec.className,
  "spec.poolRef.name": (o) => o.spec.poolRef.name,
};
const CLUSTER_FIELDS: FieldSet<ApiObject> = { "metadata.name": NAME_FIELDS["metadata.name"] };

/** A list answer. */
interface ObjectList<T> {
  apiVersion: string;
  kind: string;
  metadata: { resourceVersion: string; remainingItemCount?: number; continue?: string };
  items: T[];
}

/** Parses an API path; undefined when it is not one of ours. */
export function parseRoute(pathname: string): Route | undefined {
  let project: string | undefined;
  let path = pathname;
  const m = path.match(PROJECT_PATH);
  if (m) {
    project = decodeURIComponent(m[1]);
    path = m[2];
  }
  const bucket = path.match(BUCKETS);
  if (bucket) {
    const [namespace, name] = bucket.slice(1).map(decodeURIComponent);
    return { project, resource: "allowancebuckets", namespace, name };
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

function list<T extends ApiObject>(
  kind: string,
  items: T[],
  q: URLSearchParams,
  fields: FieldSet<T>,
  rv: number,
  paged = true,
): ObjectList<T> {
  let out = items;
  try {
    const ls = q.get("labelSelector");
    if (ls) {
      const reqs = parseLabelSelector(ls);
      out = out.filter((o) => matchLabels(reqs, o.metadata.labels ?? {}));
    }
    const fs = q.get("fieldSelector");
    if (fs) {
      const reqs = parseFieldSelector(fs, Object.keys(fields));
      out = out.filter((o) =>
        matchFields(reqs, Object.fromEntries(reqs.map((r) => [r.field, fields[r.field](o)])))
      );
    }
  } catch (err) {
    if (err instanceof SelectorError) throw badRequest(err.message);
    throw err;
  }
  const metadata: ObjectList<T>["metadata"] = { resourceVersion: String(rv) };
  if (!paged) return { apiVersion: API_VERSION, kind, metadata, items: out };
  const cont = q.get("continue");
  if (cont) {
    let after: string;
    try {
      after = JSON.parse(atob(cont)).after;
    } catch {
      throw new ApiError(410, "Expired", "The provided continue parameter is too old or malformed");
    }
    out = out.filter((o) => keyOf(o.metadata) > after);
  }
  const limit = Number(q.get("limit") ?? "0");
  if (Number.isInteger(limit) && limit > 0 && out.length > limit) {
    metadata.remainingItemCount = out.length - limit;
    out = out.slice(0, limit);
    metadata.continue = btoa(JSON.stringify({ after: keyOf(out[out.length - 1].metadata) }));
  }
  return { apiVersion: API_VERSION, kind, metadata, items: out };
}

function keyOf(m: ObjectMeta): string {
  return `${m.namespace ?? ""}\0${m.name}`;
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
      verbs: ["delete", "get", "list"],
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
  /** The limits and switches in force (default: Milo's). */
  limits?: Limits;
  /**
   * When a claim create started (`performance.now()`, after APF and quota
   * admitted it): a create of the same name committed since then overlapped it.
   */
  startedAt?: number;
  /** A project's quota bucket now (quota.ts); none: no AllowanceBucket is served. */
  usage?: (project: string) => Usage;
}

/**
 * The name a claim create's body gives, when the body is one Milo validates
 * (its quota admission runs after validation); undefined otherwise.
 */
export function claimCreateName(ns: string, body: string): string | undefined {
  try {
    return parseClaimRequest(ns, parseJsonBody(body)).name;
  } catch {
    return undefined;
  }
}

/** True for a claim create (`POST namespaces/{ns}/ipclaims`): what APF queues. */
export function isClaimCreate(method: string, r: Route): boolean {
  return method === "POST" && r.resource === "ipclaims" && r.namespace !== undefined &&
    r.name === undefined;
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
  const limits = req.limits ?? defaultLimits();
  const paged = limits.pagedLists;
  const rv = () => ipam.resourceVersion();
  const dryRun = q.getAll("dryRun");
  if (dryRun.some((d) => d !== "All")) throw badRequest(`dryRun must be "All"`);
  const isDry = dryRun.length > 0;
  if (resource === "allowancebuckets") return bucket(project, req);
  if (resource === "discovery") {
    if (m !== "GET") throw methodNotAllowed();
    return { status: 200, body: DISCOVERY };
  }
  if (resource === "ipclasses" || resource === "ippools") {
    if (m !== "GET") throw methodNotAllowed();
    const classes = resource === "ipclasses";
    // Milo keeps the class catalog in the platform project: a tenant's own key space has none.
    const visible = !classes || limits.tenantClasses;
    if (name !== undefined) {
      const o = !visible
        ? undefined
        : classes
        ? ipam.getClass(project, name)
        : ipam.getPool(project, name);
      if (!o) throw notFound(resource, name);
      return { status: 200, body: o };
    }
    const items = !visible ? [] : classes ? ipam.listClasses(project) : ipam.listPools(project);
    return {
      status: 200,
      body: list(classes ? "IPClassList" : "IPPoolList", items, q, CLUSTER_FIELDS, rv(), paged),
      meter: { list: { kind: resource, rows: items.length } },
    };
  }
  if (resource === "ipclaims") {
    if (name === undefined) {
      if (m === "GET") {
        const items = ipam.listClaims(project, ns);
        return {
          status: 200,
          body: list("IPClaimList", items, q, CLAIM_FIELDS, rv(), paged),
          meter: { list: { kind: resource, rows: items.length } },
        };
      }
      if (m === "POST" && ns !== undefined) {
        const body = parseJsonBody(req.body);
        const claim = ipam.createClaim(project, ns, body, {
          dryRun: isDry,
          startedAt: req.startedAt,
          raceConflict: limits.sameNameRaceConflict,
        });
        return { status: 201, body: claim, meter: isDry ? {} : { allocated: true } };
      }
      throw methodNotAllowed();
    }
    if (m === "GET") return { status: 200, body: ipam.getClaim(project, ns!, name) };
    if (m === "DELETE") {
      const preconditions = parseDeleteOptions(req.body);
      const checked = limits.checkedPreconditions;
      return {
        status: 200,
        body: ipam.deleteClaim(project, ns!, name, {
          dryRun: isDry,
          failRelease: req.failRelease,
          preconditions: checked ? preconditions : undefined,
        }),
      };
    }
    throw methodNotAllowed();
  }
  if (m === "DELETE" && name !== undefined) {
    return { status: 200, body: ipam.deleteAllocation(project, ns!, name, isDry) };
  }
  if (m !== "GET") throw methodNotAllowed();
  if (name === undefined) {
    const items = ipam.listAllocations(project, ns);
    return {
      status: 200,
      body: list("IPAllocationList", items, q, ALLOC_FIELDS, rv(), paged),
      meter: { list: { kind: resource, rows: items.length } },
    };
  }
  return { status: 200, body: ipam.getAllocation(project, ns!, name) };
}

/**
 * GET of the project's AllowanceBucket of IPClaims (`milo-system`, named by
 * `generateAllowanceBucketName`): its limit and what is allocated.
 */
function bucket(project: string, req: ApiRequest): Reply {
  if (req.method !== "GET") throw methodNotAllowed();
  const name = bucketName(project);
  const { namespace, name: asked } = req.route;
  if (namespace !== "milo-system" || asked !== name || !req.usage) {
    throw new ApiError(
      404,
      "NotFound",
      `allowancebuckets.quota.miloapis.com "${asked}" not found`,
      { name: asked, group: "quota.miloapis.com", kind: "allowancebuckets" },
    );
  }
  return {
    status: 200,
    body: {
      apiVersion: "quota.miloapis.com/v1alpha1",
      kind: "AllowanceBucket",
      metadata: { name, namespace: "milo-system" },
      spec: {
        consumerRef: { apiGroup: "resourcemanager.miloapis.com", kind: "Project", name: project },
        resourceType: QUOTA_RESOURCE_TYPE,
      },
      status: { ...req.usage(project), grantCount: 1 },
    },
  };
}

/** Any path that is not an API route: a 404 Status. */
export function notARoute(): Reply {
  const e = noRoute();
  return { status: 404, body: e.status };
}
