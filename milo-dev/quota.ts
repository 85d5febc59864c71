/**
 * Milo's quota admission of IPClaim creates. Milo's IPAM server enforces
 * quota by default (`cmd/ipam/serve.go` `EnableQuota: true`, and
 * `cmd/ipam/admission.go` `registerQuotaAdmission`) with milo's
 * `ResourceQuotaEnforcement` plugin (milo-os/milo at 79689376, the version
 * milo-os/ipam a41cd6f1 builds with: `pkg/quota/admission/plugin.go`,
 * `errors.go`). Each create that is not a dry run (`Validate`) is admitted
 * after its body validated and before its class is resolved
 * (`AllocatingREST.Create` calls `createValidation` first): a ResourceClaim
 * `ipclaim-NAME` asks the project's `ipclaims-per-project` allowance for one
 * (`config/overlays/milo-integration/quota/claim-creation-policy.yaml`), and
 * the create waits for the quota controllers to grant or deny it, at most
 * `ClaimWaitTimeout` (30 s). Every refusal is a 403 Forbidden on the claim
 * (`NewForbidden`), its message telling the kind apart
 * (`userFacingClaimError`): denied, timed out, a denied claim of the name
 * not yet cleaned up, a misconfigured policy, anything else.
 *
 * What the project holds is what the AllowanceBucket counts
 * (`internal/quota/controllers/core/bucket.go`): the granted ResourceClaims,
 * one per IPClaim (garbage-collected with it), and a granted one whose
 * create then failed until the ownership controller deletes it
 * (`RESOURCECLAIM_MAX_ORPHAN_AGE`, 30 s, `lifecycle/ownership.go`). A name
 * whose ResourceClaim is granted passes again without a second unit
 * (`errAlreadyGranted`); a pending one is deleted and made afresh, and the
 * create that waited on it is refused (its waiter sees the deletion).
 */

import { createHash } from "node:crypto";
import { type ApiError, forbidden } from "./status.ts";

/** The quota limit of IPClaims (`serviceconfiguration.yaml`). */
export const QUOTA_LIMIT = "ipclaims-per-project";
/** The resource type a ResourceClaim of an IPClaim asks for. */
export const QUOTA_RESOURCE_TYPE = "ipam.miloapis.com/ipclaims";

/** The Granted condition's message of a denied ResourceClaim (`core/claim.go`). */
const DENIAL = "Insufficient quota resources. Contact your account administrator to review " +
  "quota limits and usage.";

/** `userFacingClaimError`'s words for each kind of failure. */
export const QUOTA_REFUSALS = {
  denied: `You've reached your quota for this resource type (${DENIAL}). Delete unused ` +
    "resources to free up capacity, or contact support to request a higher limit.",
  timeout: "Your request took too long to be checked against your quota. Please try again in " +
    "a moment — if this keeps happening, contact support.",
  conflict:
    `We're still cleaning up from a previous attempt to create this resource (${DENIAL}). ` +
    "Please try again in a few seconds.",
  misconfigured: "Quota enforcement for this resource type is misconfigured and can't be " +
    "applied. This needs a fix from the service provider — please contact support.",
  internal: "Something went wrong while checking your quota for this request. Please try " +
    "again — if this keeps happening, contact support.",
} as const;

/** A kind of quota refusal. */
export type QuotaRefusal = keyof typeof QUOTA_REFUSALS;

/** Milo's 403 of a quota refusal of claim `name`. */
export function quotaRefused(name: string, kind: QuotaRefusal): ApiError {
  return forbidden("ipclaims", name, QUOTA_REFUSALS[kind]);
}

/** How milo-dev's quota controllers behave (admin `/quota`). */
export interface QuotaSettings {
  /**
   * How long the quota controllers take to grant or deny a claim (ms). Milo
   * decides in a watch round trip, which its source does not bound: 0, at
   * once, unless a test says otherwise.
   */
  grantDelayMs: number;
  /** `ClaimWaitTimeout`: a claim not decided by then is the timeout 403 (ms). */
  waitTimeoutMs: number;
  /**
   * How long a denied ResourceClaim stays before `DeniedAutoClaimCleanupController`
   * deletes it (ms): a create of its name meanwhile is the "still cleaning up" 403.
   * Milo deletes it as soon as it sees the denial (`lifecycle/cleanup.go`), in a
   * reconcile whose latency its source does not state.
   */
  deniedCleanupMs: number;
  /** How long a granted claim whose create failed holds its unit (ms). */
  orphanMaxAgeMs: number;
  /** The ClaimCreationPolicy cannot be enforced: every create is that 403. */
  misconfigured: boolean;
  /** Limits by project, over the seed's. */
  limits: Record<string, number>;
}

/** The settings when the admin says none. */
export function defaultQuota(): QuotaSettings {
  return {
    grantDelayMs: 0,
    waitTimeoutMs: 30_000,
    deniedCleanupMs: 1_000,
    orphanMaxAgeMs: 30_000,
    misconfigured: false,
    limits: {},
  };
}

/** Thrown for settings that do not validate. */
export class QuotaError extends Error {}

/** Merges a JSON patch into `base`, validating every field. */
export function mergeQuota(base: QuotaSettings, patch: unknown): QuotaSettings {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) {
    throw new QuotaError("body must be a JSON object");
  }
  const out: QuotaSettings = { ...base, limits: { ...base.limits } };
  const ms = (v: unknown, k: string) => {
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 600_000) {
      throw new QuotaError(`${k} must be an integer in 0..600000 (ms)`);
    }
    return v;
  };
  for (const [k, v] of Object.entries(patch)) {
    if (k === "grantDelayMs" || k === "waitTimeoutMs" || k === "deniedCleanupMs") out[k] = ms(v, k);
    else if (k === "orphanMaxAgeMs") out[k] = ms(v, k);
    else if (k === "misconfigured") {
      if (typeof v !== "boolean") throw new QuotaError("misconfigured must be true or false");
      out.misconfigured = v;
    } else if (k === "limits") {
      if (typeof v !== "object" || v === null || Array.isArray(v)) {
        throw new QuotaError("limits must map projects to IPClaims");
      }
      for (const [p, n] of Object.entries(v)) {
        if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
          throw new QuotaError(`limits.${p} must be a non-negative integer`);
        }
        out.limits[p] = n;
      }
    } else throw new QuotaError(`quota has no setting ${JSON.stringify(k)}`);
  }
  return out;
}

/** An AllowanceBucket's figures (`AllowanceBucketStatus`). */
export interface Usage {
  limit: number;
  allocated: number;
  available: number;
  claimCount: number;
}

/** An admitted create: `settle` says whether its IPClaim was stored. */
export interface Admitted {
  settle(created: boolean): void;
}

/** The AllowanceBucket name of `project`'s IPClaims (`generateAllowanceBucketName`). */
export function bucketName(project: string): string {
  const digest = createHash("sha256").update(`${QUOTA_RESOURCE_TYPE}Project${project}`);
  return `bucket-${digest.digest("hex")}`;
}

interface ProjectQuota {
  /** Granted claims whose IPClaim is not stored: since when its create failed (undefined: in flight). */
  granted: Map<string, number | undefined>;
  /** Denied claims not yet cleaned up: until when. */
  denied: Map<string, number>;
  /** Claims waiting for their decision: how to end the wait. */
  waiting: Map<string, (why: "deleted") => void>;
}

/** Every project's quota admission. */
export class Quota {
  readonly #seedLimits: Map<string, number>;
  /** IPClaims a project holds now. */
  readonly #held: (project: string) => number;
  /** Whether IPClaim `name` of `ns` exists in `project`. */
  readonly #exists: (project: string, ns: string, name: string) => boolean;
  readonly #now: () => number;
  #settings = defaultQuota();
  #projects = new Map<string, ProjectQuota>();

  constructor(
    seedLimits: Map<string, number>,
    held: (project: string) => number,
    exists: (project: string, ns: string, name: string) => boolean,
    now: () => number = Date.now,
  ) {
    this.#seedLimits = seedLimits;
    this.#held = held;
    this.#exists = exists;
    this.#now = now;
  }

  /** The settings in force. */
  settings(): QuotaSettings {
    return { ...this.#settings, limits: { ...this.#settings.limits } };
  }

  /** Puts new settings in force. */
  set(next: QuotaSettings): void {
    this.#settings = { ...next, limits: { ...next.limits } };
  }

  /** `project`'s bucket now. */
  usage(project: string): Usage {
    const limit = this.#settings.limits[project] ?? this.#seedLimits.get(project) ?? 0;
    const allocated = this.#held(project) + this.#state(project).granted.size;
    return { limit, allocated, available: Math.max(0, limit - allocated), claimCount: allocated };
  }

  /**
   * Admits a create of claim `name` in `ns` of `project` (not a dry run),
   * after its body validated: the grant, or the kind of Milo's 403
   * ({@link quotaRefused}); `gone` when the caller hung up while it waited.
   */
  async admit(
    project: string,
    ns: string,
    name: string,
    gone: AbortSignal,
  ): Promise<Admitted | QuotaRefusal | "gone"> {
    const s = this.#settings;
    if (s.misconfigured) return "misconfigured";
    const p = this.#state(project);
    const key = `${ns}\0${name}`;
    if (this.#exists(project, ns, name) || p.granted.has(key)) return { settle: () => {} };
    if (p.denied.has(key)) return "conflict";
    p.waiting.get(key)?.("deleted");
    if (s.grantDelayMs > 0 || s.waitTimeoutMs === 0) {
      const ended = await this.#wait(p, key, s, gone);
      if (ended !== "decided") return ended;
      if (this.#exists(project, ns, name) || p.granted.has(key)) return { settle: () => {} };
    }
    const u = this.usage(project);
    if (u.allocated + 1 > u.limit) {
      p.denied.set(key, this.#now() + s.deniedCleanupMs);
      return "denied";
    }
    p.granted.set(key, undefined);
    return {
      settle: (created) => {
        if (created) p.granted.delete(key);
        else p.granted.set(key, this.#now());
      },
    };
  }

  /** Waits for the decision: `decided`, or why the wait ended without one. */
  #wait(
    p: ProjectQuota,
    key: string,
    s: QuotaSettings,
    gone: AbortSignal,
  ): Promise<"decided" | "timeout" | "internal" | "gone"> {
    const timedOut = s.grantDelayMs >= s.waitTimeoutMs;
    return new Promise((resolve) => {
      const end = (why: "decided" | "timeout" | "internal" | "gone") => {
        clearTimeout(timer);
        gone.removeEventListener("abort", onGone);
        if (p.waiting.get(key) === stop) p.waiting.delete(key);
        resolve(why);
      };
      const onGone = () => end("gone");
      const stop = () => end("internal");
      const timer = setTimeout(
        () => end(timedOut ? "timeout" : "decided"),
        timedOut ? s.waitTimeoutMs : s.grantDelayMs,
      );
      p.waiting.set(key, stop);
      gone.addEventListener("abort", onGone, { once: true });
      if (gone.aborted) onGone();
    });
  }

  /** A project's state, the expired entries dropped. */
  #state(project: string): ProjectQuota {
    let p = this.#projects.get(project);
    if (!p) {
      p = { granted: new Map(), denied: new Map(), waiting: new Map() };
      this.#projects.set(project, p);
    }
    const now = this.#now();
    const orphanAge = this.#settings.orphanMaxAgeMs;
    for (const [k, at] of p.granted) {
      if (at !== undefined && at + orphanAge <= now) p.granted.delete(k);
    }
    for (const [k, until] of p.denied) if (until <= now) p.denied.delete(k);
    return p;
  }
}
