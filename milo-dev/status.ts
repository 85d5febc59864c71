/** Kubernetes `Status` error objects, in the shapes Milo answers. */

/** A Kubernetes Status body. */
export interface Status {
  kind: "Status";
  apiVersion: "v1";
  metadata: Record<string, never>;
  status: "Failure";
  message: string;
  reason: string;
  details: Record<string, unknown>;
  code: number;
}

/** An API failure carrying the Status to answer with. */
export class ApiError extends Error {
  readonly status: Status;
  readonly headers: Record<string, string>;
  constructor(
    code: number,
    reason: string,
    message: string,
    details: Record<string, unknown> = {},
    headers: Record<string, string> = {},
  ) {
    super(message);
    this.status = {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message,
      reason,
      details,
      code,
    };
    this.headers = headers;
  }
}

const GROUP = "ipam.miloapis.com";

/** 400 BadRequest with empty details. */
export function badRequest(message: string): ApiError {
  return new ApiError(400, "BadRequest", message);
}

/** 401 Unauthorized. */
export function unauthorized(): ApiError {
  return new ApiError(401, "Unauthorized", "Unauthorized");
}

/** 403 Forbidden on a named resource. */
export function forbidden(
  kind: string,
  name: string,
  why: string,
  group = GROUP,
): ApiError {
  return new ApiError(
    403,
    "Forbidden",
    `${kind}.${group} "${name}" is forbidden: ${why}`,
    { name, group, kind },
  );
}

/** 404 NotFound on a named resource (`kind` is the plural resource). */
export function notFound(kind: string, name: string): ApiError {
  return new ApiError(404, "NotFound", `${kind}.${GROUP} "${name}" not found`, {
    name,
    group: GROUP,
    kind,
  });
}

/** 404 for a path that names no resource. */
export function noRoute(): ApiError {
  return new ApiError(
    404,
    "NotFound",
    "the server could not find the requested resource",
  );
}

/** 405 for a method the resource does not support. */
export function methodNotAllowed(): ApiError {
  return new ApiError(
    405,
    "MethodNotAllowed",
    "the server does not allow this method on the requested resource",
  );
}

/** 409 AlreadyExists. */
export function alreadyExists(kind: string, name: string): ApiError {
  return new ApiError(
    409,
    "AlreadyExists",
    `${kind}.${GROUP} "${name}" already exists`,
    { name, group: GROUP, kind },
  );
}

/**
 * 409 Conflict, apimachinery's `NewConflict`: a failed precondition, a
 * pinned address that is taken (name empty, as Milo passes it, so details
 * carry none), a retained allocation that will not re-bind.
 */
export function conflict(kind: string, name: string, why: string): ApiError {
  return new ApiError(
    409,
    "Conflict",
    `Operation cannot be fulfilled on ${kind}.${GROUP} "${name}": ${why}`,
    { ...(name ? { name } : {}), group: GROUP, kind },
  );
}

/** One validation failure for a 422. */
export interface FieldCause {
  field: string;
  value?: string;
  detail?: string;
  type?: "Invalid" | "Required" | "Unsupported" | "Forbidden";
}

/** 422 Invalid for an object of `kind` (e.g. `IPClaim`). */
export function invalid(
  kind: string,
  name: string,
  causes: FieldCause[],
): ApiError {
  const text = (c: FieldCause) => {
    if (c.type === "Required") return `Required value${c.detail ? `: ${c.detail}` : ""}`;
    if (c.type === "Forbidden") return `Forbidden: ${c.detail ?? ""}`;
    const label = c.type === "Unsupported" ? "Unsupported value" : "Invalid value";
    return `${label}: ${JSON.stringify(c.value ?? "")}${c.detail ? `: ${c.detail}` : ""}`;
  };
  const reasonOf = (c: FieldCause) =>
    c.type === "Required"
      ? "FieldValueRequired"
      : c.type === "Forbidden"
      ? "FieldValueForbidden"
      : c.type === "Unsupported"
      ? "FieldValueNotSupported"
      : "FieldValueInvalid";
  const parts = causes.map((c) => `${c.field}: ${text(c)}`);
  const summary = parts.length === 1 ? parts[0] : `[${parts.join(", ")}]`;
  return new ApiError(
    422,
    "Invalid",
    `${kind}.${GROUP} "${name}" is invalid: ${summary}`,
    {
      name,
      group: GROUP,
      kind,
      causes: causes.map((c) => ({
        reason: reasonOf(c),
        message: c.type === "Required"
          ? "Required value"
          : c.type === "Forbidden"
          ? text(c)
          : `${c.type === "Unsupported" ? "Unsupported value" : "Invalid value"}: ${
            JSON.stringify(c.value ?? "")
          }`,
        field: c.field,
      })),
    },
  );
}

/** 507 InsufficientStorage: no free unit in the pool serving a class. */
export function exhausted(
  pool: string,
  className: string,
  prefix: number,
  utilization: number,
): ApiError {
  return new ApiError(
    507,
    "InsufficientStorage",
    `IPPool "${pool}" (class "${className}") has no free /${prefix}: utilization ${utilization}%`,
    {
      name: pool,
      group: GROUP,
      kind: "IPPool",
      causes: [
        { type: "Exhausted", field: "className", message: className },
        { type: "Exhausted", field: "poolName", message: pool },
        { type: "Exhausted", field: "requestedPrefixLength", message: String(prefix) },
        { type: "Exhausted", field: "utilizationPercent", message: String(utilization) },
      ],
    },
  );
}

/**
 * 403 for a claim create into a namespace that cannot collect it, as Milo's
 * `RefuseNamespace` (`internal/access/namespace.go`) words it through
 * apimachinery's `NewForbidden` with no name.
 */
export function namespaceRefused(ns: string, terminating: boolean): ApiError {
  const why = terminating
    ? `unable to create new content in namespace ${ns} because it is being terminated: an ` +
      "address bound into a terminating namespace would outlive everything that could release it"
    : `namespace ${ns} does not exist: an address bound into it would have nothing to collect it`;
  return new ApiError(403, "Forbidden", `ipclaims.${GROUP} is forbidden: ${why}`, {
    group: GROUP,
    kind: "ipclaims",
  });
}

/**
 * 500 for a create whose allocation row exists already under its key: the
 * loser of two overlapping creates of one name, or a dry run over a name
 * Milo holds (it skips the reclaim probe). `ErrAllocationExists` from
 * `insertAllocationRow` (`internal/allocator/prefix.go`), through
 * `mapAllocationError`'s default, apimachinery's `NewInternalError`.
 */
export function allocationExists(project: string, ns: string, alloc: string, pool: string) {
  const err = `ipam: allocation already exists: an allocation already exists for ` +
    `"project/${project}/${GROUP}/ipallocations/${ns}/${alloc}" in pool ` +
    `"project/${project}/${GROUP}/ippools/${pool}"`;
  return new ApiError(500, "InternalError", `Internal error occurred: ${err}`, {
    causes: [{ message: err }],
  });
}

/** A Status for an injected failure answer (5xx; the listener writes an injected 429). */
export function injected(code: number, retryAfterSeconds: number): ApiError {
  const retry = { "retry-after": String(retryAfterSeconds) };
  switch (code) {
    case 503:
      return new ApiError(
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request",
        { retryAfterSeconds },
        retry,
      );
    case 504:
      return new ApiError(
        504,
        "Timeout",
        "Timeout: request did not complete within the allotted timeout",
        {},
      );
    default:
      return new ApiError(
        code,
        "InternalError",
        "Internal error occurred: injected fault",
        { causes: [{ message: "injected fault" }] },
      );
  }
}

/** 500 for a release that did not complete (the injected `releaseFailRate` fault). */
export function releaseFailed(name: string): ApiError {
  return new ApiError(
    500,
    "InternalError",
    `Internal error occurred: release of ipclaims.ipam.miloapis.com "${name}" did not complete; retry the delete`,
    {
      name,
      group: "ipam.miloapis.com",
      kind: "ipclaims",
      causes: [{ message: "injected release failure" }],
    },
  );
}
