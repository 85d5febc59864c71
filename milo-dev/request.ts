/**
 * Request validation: an IPClaim create body (Kubernetes' 400 and 422
 * answers, in their words), the class it asks for, and a DELETE's
 * DeleteOptions preconditions.
 */

import type { IPFamily } from "./ipmath.ts";
import { labelValueError, qualifiedNameError, subdomainError } from "./names.ts";
import { API_VERSION, type ScopeRef } from "./objects.ts";
import type { ClassSpec } from "./seed.ts";
import { badRequest, type FieldCause, forbidden, invalid } from "./status.ts";

type Json = Record<string, unknown>;

function isObj(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The `spec` fields a create may set, validated. */
export interface RequestedSpec {
  className?: string;
  ipFamily?: IPFamily;
  address?: string;
  prefixLength?: number;
  scope?: Record<string, ScopeRef>;
  reclaimPolicy?: "Delete" | "Retain";
  /** `spec.ownerRef.uid`: the only part of the client's ownerRef Milo keeps. */
  ownerUid?: string;
}

/** A validated IPClaim create body. */
export interface ClaimRequest {
  name: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  spec: RequestedSpec;
}

/** Parses a JSON request body; 400 when it is not JSON. */
export function parseJsonBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw badRequest(
      `the request body is not valid JSON: ${err instanceof Error ? err.message : err}`,
    );
  }
}

/** Validates a create body for namespace `ns`: 400 for the envelope, 422 listing every cause. */
export function parseClaimRequest(ns: string, body: unknown): ClaimRequest {
  if (!isObj(body)) throw badRequest("the request body must be a JSON object");
  if (body.apiVersion !== undefined && body.apiVersion !== API_VERSION) {
    throw badRequest(
      `the API version in the data (${body.apiVersion}) does not match the expected API version (${API_VERSION})`,
    );
  }
  if (body.kind !== undefined && body.kind !== "IPClaim") {
    throw badRequest(
      `the kind in the data (${body.kind}) does not match the expected kind (IPClaim)`,
    );
  }
  const meta: Json = isObj(body.metadata) ? body.metadata : {};
  if (meta.namespace !== undefined && meta.namespace !== "" && meta.namespace !== ns) {
    throw badRequest(
      "the namespace of the provided object does not match the namespace sent on the request",
    );
  }
  const name = typeof meta.name === "string" ? meta.name : "";
  const causes = [...nameCauses(name), ...mapCauses(meta), ...specCauses(body.spec)];
  if (causes.length) throw invalid("IPClaim", name, causes);
  const spec = body.spec as Json;
  const ownerRef = spec.ownerRef;
  return {
    name,
    labels: (meta.labels ?? {}) as Record<string, string>,
    annotations: (meta.annotations ?? {}) as Record<string, string>,
    spec: {
      className: spec.className as string | undefined,
      ipFamily: spec.ipFamily as IPFamily | undefined,
      address: spec.address as string | undefined,
      prefixLength: spec.prefixLength as number | undefined,
      scope: spec.scope as Record<string, ScopeRef> | undefined,
      reclaimPolicy: spec.reclaimPolicy as "Delete" | "Retain" | undefined,
      ownerUid: isObj(ownerRef) && typeof ownerRef.uid === "string" ? ownerRef.uid : undefined,
    },
  };
}

function nameCauses(name: string): FieldCause[] {
  if (name === "") {
    return [{
      field: "metadata.name",
      type: "Required",
      detail: "name is required (metadata.generateName is not supported)",
    }];
  }
  const err = subdomainError(name);
  return err ? [{ field: "metadata.name", value: name, detail: err }] : [];
}

function mapCauses(meta: Json): FieldCause[] {
  const causes: FieldCause[] = [];
  for (const field of ["labels", "annotations"] as const) {
    const m = meta[field];
    if (m === undefined || m === null) continue;
    if (!isObj(m)) {
      causes.push({
        field: `metadata.${field}`,
        value: String(m),
        detail: "must be a map of strings",
      });
      continue;
    }
    for (const [k, v] of Object.entries(m)) {
      const kerr = qualifiedNameError(k);
      if (kerr) causes.push({ field: `metadata.${field}`, value: k, detail: kerr });
      if (typeof v !== "string") {
        causes.push({ field: `metadata.${field}`, value: String(v), detail: "must be a string" });
        continue;
      }
      const verr = field === "labels" ? labelValueError(v) : undefined;
      if (verr) causes.push({ field: "metadata.labels", value: v, detail: verr });
    }
  }
  return causes;
}

function specCauses(spec: unknown): FieldCause[] {
  if (!isObj(spec)) return [{ field: "spec", type: "Required" }];
  const causes: FieldCause[] = [];
  const rp = spec.reclaimPolicy;
  if (rp !== undefined && rp !== "Delete" && rp !== "Retain") {
    causes.push({
      field: "spec.reclaimPolicy",
      type: "Unsupported",
      value: String(rp),
      detail: 'supported values: "Delete", "Retain"',
    });
  }
  for (const k of ["className", "ipFamily", "address"]) {
    if (spec[k] !== undefined && typeof spec[k] !== "string") {
      causes.push({ field: `spec.${k}`, value: String(spec[k]), detail: "must be a string" });
    }
  }
  if (spec.ipFamily !== undefined && spec.ipFamily !== "IPv4" && spec.ipFamily !== "IPv6") {
    causes.push({
      field: "spec.ipFamily",
      type: "Unsupported",
      value: String(spec.ipFamily),
      detail: 'supported values: "IPv4", "IPv6"',
    });
  }
  if (spec.prefixLength !== undefined) {
    const max = spec.ipFamily === "IPv4" ? 32 : 128;
    const n = spec.prefixLength;
    if (typeof n !== "number" || !Number.isInteger(n) || n <= 0 || n > max) {
      causes.push({
        field: "spec.prefixLength",
        value: String(n),
        detail: `must be in [1, ${max}]`,
      });
    }
  }
  if (!spec.className && !spec.ipFamily) {
    causes.push({
      field: "spec.className",
      type: "Required",
      detail: "one of spec.className or spec.ipFamily is required",
    });
  }
  if (spec.scope === undefined) return causes;
  if (!isObj(spec.scope)) {
    causes.push({ field: "spec.scope", value: String(spec.scope), detail: "must be a map" });
    return causes;
  }
  const why = scopeError(spec.scope);
  if (why) causes.push({ field: "spec.scope", value: JSON.stringify(spec.scope), detail: why });
  return causes;
}

/**
 * The first structural problem of a scope, in Milo's words (`Validate` in
 * `internal/scope/scope.go`, roles in sorted order): an empty role name, a
 * ref without `kind`, a ref without `name`.
 */
function scopeError(scope: Json): string | undefined {
  for (const role of Object.keys(scope).sort()) {
    const ref = isObj(scope[role]) ? scope[role] as Json : {};
    if (role === "") return "scope has an entry with an empty role name";
    if (typeof ref.kind !== "string" || ref.kind === "") return `scope role "${role}" has no kind`;
    if (typeof ref.name !== "string" || ref.name === "") return `scope role "${role}" has no name`;
  }
  return undefined;
}

/**
 * The class a create asks for (its family's default when `className` is
 * empty): 400 when there is none, 403 when the project may not use it
 * (`ResolveClass` and `AuthorizeClassConsumption`, `internal/access/class.go`,
 * the first steps of `AllocatingREST.Create`): a container class (`poolPer`)
 * is nobody's, a class whose `visibility` is neither `consumer` nor `shared`
 * (unset included: fail closed) is no tenant's, and the token needs `use` on
 * the class (`consumers` stands for Milo's SAR). Each is the same 403.
 */
export function resolveClass(
  project: string,
  classes: Map<string, ClassSpec>,
  spec: RequestedSpec,
): [string, ClassSpec] {
  let className = spec.className || undefined;
  if (!className) {
    const defaults = [...classes].filter(([, c]) =>
      c.default && (spec.ipFamily === undefined || spec.ipFamily === c.ipFamily)
    );
    if (defaults.length !== 1) {
      throw badRequest(
        `spec.className is empty and there is no default IPClass${
          spec.ipFamily ? ` for ${spec.ipFamily}` : ""
        }`,
      );
    }
    className = defaults[0][0];
  }
  const cls = classes.get(className);
  if (!cls) throw badRequest(`IPClass "${className}" not found`);
  const visible = cls.visibility === "consumer" || cls.visibility === "shared";
  if (cls.poolPer?.length || !visible || !cls.consumers?.includes(project)) {
    throw forbidden("ipclasses", className, "caller may not claim addresses of this class");
  }
  return [className, cls];
}

/**
 * Checks a claim against its class, in Milo's words (`checkAgainstClass` in
 * `internal/registry/ipam/ipclaim/storage.go`): the family, the prefix length
 * (milo-dev's class allows one), and every `uniqueWithin` role (milo-dev's
 * `requiredScopeRoles`) present with a name (`ProjectFor`, `internal/scope`).
 */
export function checkAgainstClass(className: string, cls: ClassSpec, spec: RequestedSpec): void {
  if (spec.ipFamily !== undefined && spec.ipFamily !== cls.ipFamily) {
    throw badRequest(
      `spec.ipFamily is ${spec.ipFamily} but class "${className}" hands out ${cls.ipFamily}`,
    );
  }
  const p = cls.prefixLength;
  if (spec.prefixLength !== undefined && spec.prefixLength !== p) {
    throw badRequest(
      `prefixLength ${spec.prefixLength} is outside class "${className}" allowedPrefixLengths [${p}, ${p}]`,
    );
  }
  const missing = [...new Set(cls.requiredScopeRoles ?? [])].filter((role) => {
    const ref = isObj(spec.scope) ? spec.scope[role] : undefined;
    return !isObj(ref) || typeof ref.name !== "string" || ref.name === "";
  });
  if (missing.length) {
    const roles = missing.map((r) => JSON.stringify(r)).join(", ");
    throw badRequest(
      `scope is missing ${
        missing.length === 1 ? "role" : "roles"
      } ${roles} required by uniqueWithin (class "${className}")`,
    );
  }
}

/** `preconditions` of a Kubernetes DeleteOptions body. */
export interface Preconditions {
  uid?: string;
  resourceVersion?: string;
}

/** Reads a DELETE body: none, or DeleteOptions whose `preconditions` are kept; 400 otherwise. */
export function parseDeleteOptions(body: string): Preconditions {
  if (body.trim() === "") return {};
  const doc = parseJsonBody(body);
  if (!isObj(doc)) throw badRequest("the request body must be a JSON object");
  const p = doc.preconditions;
  if (p === undefined || p === null) return {};
  if (!isObj(p)) throw badRequest("DeleteOptions.preconditions must be an object");
  const out: Preconditions = {};
  for (const k of ["uid", "resourceVersion"] as const) {
    const v = p[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string") {
      throw badRequest(`DeleteOptions.preconditions.${k} must be a string`);
    }
    out[k] = v;
  }
  return out;
}

/** Kubernetes' words for the first precondition the object fails; undefined when it meets them. */
export function unmetPrecondition(
  p: Preconditions,
  object: { uid: string; resourceVersion: string },
): string | undefined {
  if (p.uid !== undefined && p.uid !== object.uid) {
    return `Precondition failed: UID in precondition: ${p.uid}, UID in object meta: ${object.uid}`;
  }
  if (p.resourceVersion !== undefined && p.resourceVersion !== object.resourceVersion) {
    return `Precondition failed: ResourceVersion in precondition: ${p.resourceVersion}, ResourceVersion in object meta: ${object.resourceVersion}`;
  }
  return undefined;
}
