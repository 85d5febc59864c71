/**
 * Milo's wire objects as milo-ipam reads them: the IPClaim, the IPAllocation,
 * their lists and the Status object of every error (zod schemas checking
 * only the fields read), and what an answer turns into: a parsed object, a
 * protocol error for a malformed one, a CniError for a Status.
 */
import * as z from "zod/mini";
import { PREFIX } from "./keys.ts";
import { sha256Hex } from "./sha256.ts";
import { clip, CniError, type Outcome, outcomeOfHttpStatus, QUOTE_CHARS } from "./errors.ts";
import { isPlainObject } from "./values.ts";
import { type ListBound, ListTally } from "./list_bound.ts";

/** Path of Milo's IPAM API, appended to `milo.url`. */
export const API_PATH = "/apis/ipam.miloapis.com/v1alpha1";

/**
 * The claim name STATUS and the agent's readiness read: no claim milo-ipam
 * makes has it (theirs are `pod-`, `podid-`, `slot-`), so Milo answers 404.
 */
export const STATUS_PROBE = "milo-ipam-status";

/**
 * Largest Milo response body read (1 MiB), and the largest claim in a LIST
 * answer; a bigger one is a protocol error.
 */
export const MAX_BODY_BYTES = 1024 * 1024;
/**
 * Page size of LIST requests. Milo's Postgres store ignores `limit` and
 * `continue` (`GetList`, `internal/storage/postgres/store.go`): a LIST answers
 * every matching claim at once, read as a stream (lib/list_stream.ts).
 */
export const PAGE_LIMIT = 500;
/** Most pages one LIST follows. */
export const MAX_PAGES = 1_000;

/**
 * Most memory the claims one LIST keeps may take (64 MiB, as
 * lib/list_bound.ts's `keptSize` estimates it); more is a protocol error (105)
 * naming this bound. Only the fields read are kept of each claim
 * ({@link IPClaimSchema}): 1.3 KB of heap as milo-ipam writes them, estimated
 * at 1.8 KB, so some 37,000 claims and under 50 MB: a node's lists (GC,
 * reconcile: a few hundred claims at most) a hundred times over, well within
 * a node agent's 256 MiB. The cluster sweep keeps only its candidates of the
 * cluster's list (lib/sweep.ts).
 */
export const MAX_LIST_BYTES = 64 * 1024 * 1024;
/**
 * Most claims one LIST may keep (200,000); more is a protocol error (105)
 * naming this bound. Real claims reach {@link MAX_LIST_BYTES} first; this
 * bounds a list of tiny items, whose cost is their number.
 */
export const MAX_LIST_ITEMS = 200_000;

/**
 * What `what` keeps of a LIST of claims (or allocations), against
 * {@link MAX_LIST_BYTES} and {@link MAX_LIST_ITEMS}.
 */
export function claimListTally(what: string, bound?: ListBound): ListTally {
  return new ListTally(what, bound ?? { bytes: MAX_LIST_BYTES, items: MAX_LIST_ITEMS }, {
    bytes: "MAX_LIST_BYTES",
    items: "MAX_LIST_ITEMS",
  });
}

/**
 * A text of an answer that errors may quote (a Status message or reason, a
 * cause), clipped to {@link QUOTE_CHARS} as it is parsed. Comparisons with
 * short constants (`reason === "NotFound"`) are unchanged by the cut.
 */
export const quotedText = z.pipe(z.string(), z.transform((s: string) => clip(s, QUOTE_CHARS)));

/**
 * A Status `reason` as kept: one word (`NotFound`, `AlreadyExists`), else
 * `(unquoted)`; errors print it even where they quote no server text (401, 403).
 */
export const statusReason = z.pipe(
  z.string(),
  z.transform((s: string) => /^[A-Za-z]{1,64}$/.test(s) ? s : "(unquoted)"),
);

/**
 * Labels or annotations (every value a string, as Kubernetes' metadata maps
 * are) as kept: only the `milo-ipam.io/` keys, the only ones read; the others
 * (Milo's, a controller's) are dropped once checked, in one loop (a record
 * schema costs some microseconds an entry).
 */
const ownMap = z.optional(
  z.pipe(
    z.custom<Record<string, unknown>>(
      (m) => isPlainObject(m) && Object.keys(m).every((k) => typeof m[k] === "string"),
      "must map names to strings",
    ),
    z.transform((m: Record<string, unknown>) => {
      const own: Record<string, string> = {};
      for (const k of Object.keys(m)) if (k.startsWith(PREFIX)) own[k] = m[k] as string;
      return own;
    }),
  ),
);

/**
 * A list of at most `n` items, its length checked before any item is (a
 * schema's cost is its items): Milo sends a few conditions and causes.
 */
const listOf = <T extends z.ZodMiniType>(item: T, n = 16) =>
  z.pipe(
    z.custom<unknown[]>((v) => Array.isArray(v) && v.length <= n, `must be a list of at most ${n}`),
    z.array(item),
  );

/**
 * An IPClaim as milo-ipam keeps it: only the fields it reads (metadata name,
 * uid, creationTimestamp and the `milo-ipam.io/` labels and annotations;
 * spec className, ipFamily, scope, address and reclaimPolicy; status phase,
 * address, allocatedCIDR and poolRef name) are checked and kept, everything else Milo sends is
 * dropped as it is parsed, so a list of claims holds no more than that.
 */
export const IPClaimSchema = z.object({
  metadata: z.object({
    name: z.string(),
    uid: z.optional(z.string()),
    labels: ownMap,
    annotations: ownMap,
    creationTimestamp: z.optional(z.string()),
  }),
  spec: z._default(
    z.object({
      className: z.optional(z.string()),
      ipFamily: z.optional(z.string()),
      scope: z.optional(z.unknown()),
      address: z.optional(z.string()),
      reclaimPolicy: z.optional(z.string()),
    }),
    {},
  ),
  status: z._default(
    z.object({
      phase: z.optional(z.string()),
      address: z.optional(z.string()),
      allocatedCIDR: z.optional(z.string()),
      poolRef: z.optional(z.object({ name: z.string() })),
    }),
    {},
  ),
});

/** A validated IPClaim. */
export type IPClaim = z.infer<typeof IPClaimSchema>;

/**
 * A condition of an IPAllocation as kept: only `Bound` (False `Retained` once
 * its claim was deleted under Retain: `unbindAllocation`,
 * `internal/registry/ipam/ipclaim/storage.go`) and `Expiring` (True once its
 * retention lease elapsed, its message naming the release time:
 * `markExpiring`, `internal/allocator/sweep.go`) are read.
 */
const AllocationConditionSchema = z.object({
  type: z.string(),
  status: z.string(),
  message: z.optional(quotedText),
  lastTransitionTime: z.optional(z.string()),
});

/**
 * An IPAllocation as milo-ipam keeps it (`pkg/apis/ipam/v1alpha1/types.go`):
 * metadata name, uid and creationTimestamp (Milo gives it no labels or
 * annotations: `AllocatingREST.Create`); spec ipFamily, poolRef, className,
 * purpose, claimRef (absent while retained) and the scope's names; status
 * phase, allocatedCIDR, address and its `Bound` and `Expiring` conditions.
 */
export const IPAllocationSchema = z.object({
  metadata: z.object({
    name: z.string(),
    uid: z.optional(z.string()),
    creationTimestamp: z.optional(z.string()),
  }),
  spec: z._default(
    z.object({
      ipFamily: z.optional(z.string()),
      poolRef: z.optional(z.object({ name: z.string() })),
      className: z.optional(z.string()),
      purpose: z.optional(z.string()),
      claimRef: z.optional(z.nullable(z.object({ name: z.string() }))),
      scope: z.optional(z.record(z.string(), z.object({ name: z.optional(z.string()) }))),
      reclaimPolicy: z.optional(z.string()),
    }),
    {},
  ),
  status: z._default(
    z.object({
      phase: z.optional(z.string()),
      allocatedCIDR: z.optional(z.string()),
      address: z.optional(z.string()),
      conditions: z.optional(
        z.pipe(
          listOf(AllocationConditionSchema),
          z.transform((cs) => cs.filter((c) => c.type === "Bound" || c.type === "Expiring")),
        ),
      ),
    }),
    {},
  ),
});

/** A validated IPAllocation. */
export type IPAllocation = z.infer<typeof IPAllocationSchema>;

/**
 * An IPPool as `show --pools` reads it (`fixtures/ippool.json`): its name,
 * CIDR, family and classes, phase, and its capacity (decimal strings: IPv6
 * counts exceed 64 bits) and utilisation as Milo reports them.
 */
export const IPPoolSchema = z.object({
  metadata: z.object({ name: z.string() }),
  spec: z._default(
    z.object({
      cidr: z.optional(z.string()),
      ipFamily: z.optional(z.string()),
      classNames: z.optional(listOf(z.string())),
    }),
    {},
  ),
  status: z._default(
    z.object({
      phase: z.optional(z.string()),
      ipFamily: z.optional(z.string()),
      capacity: z.optional(z.object({
        total: z.optional(z.string()),
        allocated: z.optional(z.string()),
        available: z.optional(z.string()),
      })),
      utilizationPercent: z.optional(z.number()),
    }),
    {},
  ),
});

/** A validated IPPool. */
export type IPPool = z.infer<typeof IPPoolSchema>;

/**
 * The IPAllocation Milo makes for claim `name` of `namespace`: `alloc-` and
 * the first 16 hex digits of SHA-256 of `NAMESPACE/NAME` (`allocationNameFor`,
 * `internal/registry/ipam/ipclaim/storage.go`). A retained one keeps it, so a
 * claim of the same name finds it again.
 */
export function allocationName(namespace: string, name: string): string {
  return `alloc-${sha256Hex(`${namespace}/${name}`).slice(0, 16)}`;
}

/** What a list answer (IPClaimList, IPAllocationList) holds besides its items: its `continue`. */
export const ListHeadSchema = z.object({
  metadata: z.optional(z.object({ continue: z.optional(z.string()) })),
});
const StatusSchema = z.looseObject({
  kind: z.literal("Status"),
  message: z.optional(quotedText),
  reason: z.optional(statusReason),
  details: z.optional(z.looseObject({
    name: z.optional(z.string()),
    causes: z.optional(listOf(z.looseObject({
      type: z.optional(z.string()),
      field: z.optional(z.string()),
      message: z.optional(quotedText),
    }))),
  })),
});

/** The Status object Milo sends with every error, its texts clipped ({@link quotedText}). */
export type MiloStatus = z.infer<typeof StatusSchema>;

/** The Status object in an error body, if it is one. */
export function statusOf(json: unknown): MiloStatus | undefined {
  const r = StatusSchema.safeParse(json);
  return r.success ? r.data : undefined;
}

/** The body as `schema`, or a protocol error naming the first bad field. */
export function parse<T extends z.ZodMiniType>(schema: T, body: unknown, kind: string): z.infer<T> {
  const r = schema.safeParse(body);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new CniError(
      "protocol",
      `Milo answered a malformed ${kind}`,
      clip(`${i.path.join(".")}: ${i.message}`, QUOTE_CHARS),
    );
  }
  return r.data;
}

function causes(st: MiloStatus | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of st?.details?.causes ?? []) {
    if (c.field && c.message) out[c.field] = c.message;
  }
  return out;
}

/** Why Milo's quota admission refused a create. */
export type QuotaWhy = "denied" | "timeout" | "stale" | "misconfigured" | "internal";

/**
 * Why Milo refused a request, read from its 403 or 409 Status; the handlers
 * act on the kind, never on Milo's words.
 *
 * - `quota`: Milo's quota admission (milo's `ResourceQuotaEnforcement`,
 *   `pkg/quota/admission/plugin.go` and `errors.go` in milo-os/milo at
 *   79689376, the version milo-os/ipam a41cd6f1 builds with), which Milo's
 *   IPAM server runs on every create (`cmd/ipam/serve.go` `EnableQuota`):
 *   every failure is a 403 on the claim, told apart only by its message
 *   (`userFacingClaimError`): the project at its `ipclaims-per-project`
 *   limit (`denied`), no decision within `ClaimWaitTimeout` (30 s,
 *   `timeout`), a denied ResourceClaim of the name not yet cleaned up
 *   (`stale`), a ClaimCreationPolicy that cannot be enforced
 *   (`misconfigured`), anything else (`internal`).
 * - `namespace`: a create into a namespace missing or being deleted in the
 *   project (`RefuseNamespace`, `internal/access/namespace.go`).
 * - `class`: the token may not claim addresses of the class
 *   (`AuthorizeClassConsumption`, `internal/access/class.go`).
 * - `forbidden`: any other 403 (the token's project or verbs).
 * - `exists`: 409 AlreadyExists; `bound`: the reclaim probe found the name's
 *   allocation bound to a live claim; `no-rebind`: an older Milo refuses to
 *   re-bind a retained allocation; `retained-mismatch`: the retained
 *   allocation does not match the claim (`ReclaimRetained`,
 *   `internal/allocator/reclaim.go`); `address-taken`: a requested address
 *   held in the claim's address space (`selectBlock`,
 *   `internal/allocator/prefix.go`); `conflict`: any other 409.
 */
export type Refusal =
  | { kind: "quota"; why: QuotaWhy }
  | { kind: "namespace"; terminating: boolean }
  | { kind: "class" }
  | { kind: "forbidden" }
  | { kind: "exists" | "bound" | "no-rebind" | "retained-mismatch" | "address-taken" | "conflict" };

/** Milo's words for each quota failure (`userFacingClaimError`), as the kind they mean. */
const QUOTA_WORDS: [QuotaWhy, string][] = [
  ["denied", "You've reached your quota for this resource type"],
  ["timeout", "Your request took too long to be checked against your quota"],
  ["stale", "We're still cleaning up from a previous attempt to create this resource"],
  ["misconfigured", "Quota enforcement for this resource type is misconfigured"],
  ["internal", "Something went wrong while checking your quota"],
];

/** Milo's words for each 409 of a create, as the kind they mean. */
const CONFLICT_WORDS: [Refusal["kind"], string][] = [
  ["bound", "already bound to"],
  ["no-rebind", "does not re-bind"],
  ["retained-mismatch", "retained allocation does not match this claim"],
  ["address-taken", "address already allocated"],
];

/** Why Milo answered 403 or 409 (undefined for any other status), from its Status. */
export function refusalOf(status: number, st: MiloStatus | undefined): Refusal | undefined {
  const m = st?.message ?? "";
  if (status === 409) {
    if (st?.reason === "AlreadyExists") return { kind: "exists" };
    return { kind: CONFLICT_WORDS.find(([, w]) => m.includes(w))?.[0] ?? "conflict" } as Refusal;
  }
  if (status !== 403) return undefined;
  const kind = st?.details?.kind;
  if (kind === "ipclaims") {
    const quota = QUOTA_WORDS.find(([, w]) => m.includes(w));
    if (quota) return { kind: "quota", why: quota[0] };
    if (/\bnamespace \S+ does not exist\b/.test(m)) {
      return { kind: "namespace", terminating: false };
    }
    if (/\bin namespace \S+ because it is being terminated\b/.test(m)) {
      return { kind: "namespace", terminating: true };
    }
  }
  if (kind === "ipclasses" && m.includes("caller may not claim addresses of this class")) {
    return { kind: "class" };
  }
  return { kind: "forbidden" };
}

/** True for a quota refusal worth sending the create again within the deadline. */
export function quotaPasses(why: QuotaWhy): boolean {
  return why === "timeout" || why === "stale" || why === "internal";
}

/** A Milo refusal as an error, with its kind for the handlers ({@link refusalOf}). */
export class MiloRefusal extends CniError {
  readonly refusal: Refusal;

  constructor(refusal: Refusal, outcome: Outcome, msg: string, details: string) {
    super(outcome, msg, details);
    this.refusal = refusal;
  }
}

/** What an operator reads of each quota refusal, and what it is. */
const QUOTA_ERRORS: Record<QuotaWhy, [Outcome, string, string]> = {
  denied: [
    "exhausted",
    "Milo's quota refused the claim: the project holds all the IPClaims its " +
    "ipclaims-per-project quota allows",
    "raise the project's ipclaims-per-project quota in Milo above the claims its clusters hold " +
    "(one per pod and family, and those not yet released: docs/quota.md), or delete claims " +
    "it no longer needs",
  ],
  timeout: [
    "transient",
    "Milo's quota admission did not decide within its 30 s wait",
    "the runtime retries the ADD; if it keeps happening, Milo's quota controllers are behind: " +
    "tell Milo's operator",
  ],
  stale: [
    "transient",
    "Milo is still cleaning up a refused quota claim of this name",
    "wait a few seconds (the runtime retries); if it keeps happening, the project is at its " +
    "ipclaims-per-project quota",
  ],
  misconfigured: [
    "rejected",
    "Milo's quota enforcement of IPClaims is misconfigured: no claim can be made",
    "Milo's ClaimCreationPolicy for IPClaim cannot be enforced: tell Milo's operator",
  ],
  internal: [
    "transient",
    "Milo could not check the claim against its quota",
    "the runtime retries the ADD; if it keeps happening, tell Milo's operator",
  ],
};

/**
 * Maps a Milo answer that is not retried to a CniError, using the Status
 * object for detail; a 403 or 409 is a {@link MiloRefusal} of its kind.
 * `namespace` is the one the client sent (a namespace refusal names it,
 * never the server's text: a 403 is not quoted).
 */
export function statusError(
  what: string,
  status: number,
  st: MiloStatus | undefined,
  text = "",
  namespace = "",
): CniError {
  const outcome: Outcome = outcomeOfHttpStatus(status);
  // A refusal of the credentials is not quoted: a server may echo what it was sent.
  const quoted = status !== 401 && status !== 403;
  const said = quoted ? st?.message ?? (text ? clip(text, QUOTE_CHARS) : "") : "";
  const detail = `${what}: HTTP ${status}${st?.reason ? ` ${st.reason}` : ""}${
    said ? `: ${said}` : ""
  }`;
  // Only a create meets the quota, the namespace or the class (`AllocatingREST.Create`).
  const asked = refusalOf(status, st);
  const createOnly = asked?.kind === "quota" || asked?.kind === "namespace" ||
    asked?.kind === "class";
  const refusal: Refusal | undefined = createOnly && !what.startsWith("POST ")
    ? { kind: "forbidden" }
    : asked;
  if (refusal?.kind === "quota") {
    const [o, msg, todo] = QUOTA_ERRORS[refusal.why];
    return new MiloRefusal(refusal, o, msg, `${detail} (quota: ${refusal.why}); ${todo}`);
  }
  if (refusal?.kind === "namespace") {
    const t = refusal.terminating;
    return new MiloRefusal(
      refusal,
      "auth",
      `Milo refuses claims in namespace ${namespace}: it ${
        t ? "is being deleted" : "does not exist"
      } in the token's project`,
      `HTTP 403 Forbidden; ${
        t ? "wait until it is gone and create it again, or set" : "create it, or set"
      } milo.namespace in the node config to a live namespace of the project`,
    );
  }
  if (refusal?.kind === "class") {
    return new MiloRefusal(
      refusal,
      "auth",
      "Milo forbids the token to claim addresses of the class (403): check the token's project " +
        "and the class",
      `${detail}; the class must be visible to tenants (visibility consumer or shared), not a ` +
        "container class, and the token's identity needs use on it",
    );
  }
  if (refusal) {
    const msg = status === 403
      ? "Milo forbids this request (403): check the token's project and the class"
      : st?.message
      ? `Milo: ${st.message}`
      : `Milo answered HTTP ${status}`;
    return new MiloRefusal(refusal, outcome, msg, detail);
  }
  switch (outcome) {
    case "exhausted": {
      const c = causes(st);
      const pool = c.poolName ?? "(unnamed)", cls = c.className ?? "(unnamed)";
      return new CniError(outcome, `Milo pool ${pool} serving class ${cls} is exhausted`, detail);
    }
    case "auth":
      return new CniError(outcome, "Milo rejected the token (401): check milo.tokenFile", detail);
    default:
      return new CniError(
        outcome,
        st?.message ? `Milo: ${st.message}` : `Milo answered HTTP ${status}`,
        detail,
      );
  }
}

/**
 * True when Milo's 500 to a create of claim `name` in `namespace` is the
 * later of two overlapping creates of the name: both passed Milo's reclaim
 * probe, and this one's allocation insert found the name's allocation
 * (`ErrAllocationExists`, `insertAllocationRow` in
 * `internal/allocator/prefix.go`, through `NewInternalError`), which names
 * the key `…/ipallocations/NAMESPACE/` and the claim's {@link allocationName}. The
 * name is taken: the caller reads it, as on a 409.
 */
export function nameTaken(st: MiloStatus | undefined, namespace: string, name: string): boolean {
  const alloc = allocationName(namespace, name);
  const said = [st?.message ?? "", ...(st?.details?.causes ?? []).map((c) => c.message ?? "")];
  return said.some((m) =>
    m.includes("ipam: allocation already exists") &&
    m.includes(`/ipallocations/${namespace}/${alloc}"`)
  );
}

/**
 * A claim's creation on Milo's clock: its `creationTimestamp`, which
 * Kubernetes stamps in whole seconds, cut to the second (NaN without one).
 */
export function createdOnMilo(claim: IPClaim): number {
  return Math.floor(Date.parse(claim.metadata.creationTimestamp ?? "") / 1000) * 1000;
}

/**
 * A claim's age on Milo's clock alone: `serverTime`, the `Date` of the answer
 * that carried it (whole seconds too; see MiloClient), less
 * {@link createdOnMilo}. NaN when either is missing: an unknown age.
 */
export function ageOnMilo(claim: IPClaim, serverTime: number): number {
  return serverTime - createdOnMilo(claim);
}

/**
 * The create that makes `claim` (an answer: the fields kept) again, as it
 * was: name, the `milo-ipam.io/` labels and annotations, class, family,
 * scope, reclaim policy, and the address it held pinned (under Retain Milo's
 * reclaim probe re-binds the retained allocation of the name before it looks
 * at a pinned address: the same address either way).
 */
export function remakeBody(namespace: string, claim: IPClaim): Record<string, unknown> {
  const { metadata: m, spec: s, status } = claim;
  const pinned = s.address ?? status.address ?? status.allocatedCIDR?.split("/")[0];
  return {
    apiVersion: "ipam.miloapis.com/v1alpha1",
    kind: "IPClaim",
    metadata: { name: m.name, namespace, labels: m.labels ?? {}, annotations: m.annotations ?? {} },
    spec: {
      className: s.className,
      ipFamily: s.ipFamily,
      ...(s.scope ? { scope: s.scope } : {}),
      ...(pinned ? { address: pinned } : {}),
      ...(s.reclaimPolicy ? { reclaimPolicy: s.reclaimPolicy } : {}),
    },
  };
}
