/**
 * Milo's wire objects as milo-ipam reads them: the IPClaim, the IPAllocation,
 * their lists and the Status object of every error (zod schemas checking
 * only the fields read), and what an answer turns into: a parsed object, a
 * protocol error for a malformed one, a CniError for a Status.
 */
import * as z from "zod/mini";
import { PREFIX } from "./claims.ts";
import { sha256Hex } from "./sha256.ts";
import { clip, CniError, type Outcome, outcomeOfHttpStatus, QUOTE_CHARS } from "./errors.ts";
import { isPlainObject } from "./cni.ts";
import { type ListBound, ListTally } from "./list_bound.ts";
import { quotaRefusal } from "./milo_quota.ts";

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

/** Maps a non-retryable Milo answer to a CniError, using the Status object for detail. */
export function statusError(
  what: string,
  status: number,
  st: MiloStatus | undefined,
  text = "",
): CniError {
  const quota = status === 403 ? quotaRefusal(st) : undefined;
  if (quota) return quota;
  const outcome: Outcome = outcomeOfHttpStatus(status);
  // A refusal of the credentials is not quoted: a server may echo what it was sent.
  const quoted = status !== 401 && status !== 403;
  const said = quoted ? st?.message ?? (text ? clip(text, QUOTE_CHARS) : "") : "";
  const detail = `${what}: HTTP ${status}${st?.reason ? ` ${st.reason}` : ""}${
    said ? `: ${said}` : ""
  }`;
  switch (outcome) {
    case "exhausted": {
      const c = causes(st);
      const pool = c.poolName ?? "(unnamed)", cls = c.className ?? "(unnamed)";
      return new CniError(outcome, `Milo pool ${pool} serving class ${cls} is exhausted`, detail);
    }
    case "auth":
      return new CniError(
        outcome,
        status === 401
          ? "Milo rejected the token (401): check milo.tokenFile"
          : "Milo forbids this request (403): check the token's project and the class",
        detail,
      );
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
 * Milo's 403 to a create into `namespace` because it does not exist or is
 * being deleted in the project's control plane (`RefuseNamespace`,
 * `internal/access/namespace.go`), as an error naming it and what to do;
 * undefined for any other answer. Only the namespace this client sent is
 * named, never the server's text (a 403 is not quoted).
 */
export function namespaceRefused(
  st: MiloStatus | undefined,
  namespace: string,
): CniError | undefined {
  const m = st?.message ?? "";
  const missing = m.includes(`namespace ${namespace} does not exist`);
  const terminating = m.includes(`namespace ${namespace} because it is being terminated`);
  if (!missing && !terminating) return undefined;
  return new CniError(
    "auth",
    `Milo refuses claims in namespace ${namespace}: it ${
      terminating ? "is being deleted" : "does not exist"
    } in the token's project`,
    `HTTP 403 Forbidden; ${
      terminating ? "wait until it is gone and create it again, or set" : "create it, or set"
    } milo.namespace in the node config to a live namespace of the project`,
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
