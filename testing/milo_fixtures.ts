/**
 * Milo's answers from the shared fixtures (`tests/fixtures/milo/`, the bodies
 * Milo's API gives): a fixture body, a JSON response, and a Status response of
 * a code with the object it names; for the in-memory Milo
 * (testing/stub_milo.ts) and the scriptable one on a port (testing/fake_milo.ts).
 */

import { webSha256Hex } from "./web_digest.ts";
import { type QuotaRefusal, quotaRefused } from "../milo-dev/quota.ts";

const FIXTURES = new URL("../tests/fixtures/milo/", import.meta.url);

/** A JSON object. */
type JsonObject = Record<string, unknown>;

/** A fixture body from `tests/fixtures/milo/` (a fresh copy each call). */
export function fixture<T = JsonObject>(name: string): NoInfer<T> {
  return JSON.parse(Deno.readTextFileSync(new URL(name, FIXTURES)));
}

/** A JSON response. */
export function reply(status: number, body: unknown, headers: Record<string, string> = {}) {
  return new Response(body === undefined ? null : JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

const STATUS_FIXTURES: Record<number, string> = {
  400: "status-400-bad-request.json",
  401: "status-401-unauthorized.json",
  403: "status-403-forbidden.json",
  404: "status-404-not-found.json",
  409: "status-409-already-exists.json",
  422: "status-422-invalid.json",
  503: "status-503-unavailable.json",
  507: "status-507-exhausted.json",
};

/**
 * A Status object from the fixture of `code` (a bare one for codes without a
 * fixture); `name` replaces the object named in message and details.
 */
export function statusBody(
  code: number,
  o: { name?: string; reason?: string; message?: string } = {},
): JsonObject {
  const file = STATUS_FIXTURES[code];
  const base: JsonObject = file ? fixture(file) : {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message: `HTTP ${code}`,
    reason: "InternalError",
    details: {},
    code,
  };
  const details = { ...(base.details as JsonObject) };
  let message = base.message as string;
  if (o.name !== undefined) {
    const was = details.name as string | undefined;
    if (was) message = message.replaceAll(was, o.name);
    details.name = o.name;
  }
  return {
    ...base,
    message: o.message ?? message,
    ...(o.reason ? { reason: o.reason } : {}),
    details,
  };
}

/** A Status answer of `code` (see {@link statusBody}). */
export function statusReply(
  code: number,
  o: { name?: string; reason?: string; message?: string; headers?: Record<string, string> } = {},
): Response {
  return reply(code, statusBody(code, o), o.headers);
}

/** The namespace and claim Milo's namespace and race fixtures name. */
const FIXTURE_NS = { refused: "shop", race: "default" };
const FIXTURE_CLAIM = "pod-3f9a1c2b7d4e5f60a1b2-v4";

/** `alloc-` and 16 hex of SHA-256 of `ns/name`: the IPAllocation name Milo derives for a claim. */
export async function allocationNameFor(ns: string, name: string): Promise<string> {
  return `alloc-${(await webSha256Hex(`${ns}/${name}`)).slice(0, 16)}`;
}

/**
 * Milo's 403 to a claim create into namespace `ns` that does not exist or is
 * being deleted (`status-403-namespace-missing.json`,
 * `status-403-namespace-terminating.json`).
 */
export function namespaceReply(ns: string, terminating = false): Response {
  const body = fixture<JsonObject>(
    `status-403-namespace-${terminating ? "terminating" : "missing"}.json`,
  );
  body.message = (body.message as string).replace(
    ` ${FIXTURE_NS.refused} `,
    ` ${ns} `,
  );
  return reply(403, body);
}

/**
 * Milo's 403 to a create of claim `name` its quota admission refuses for
 * `why`: the words of `status-403-quota-denied.json` for a denial, milo's
 * `userFacingClaimError` (as milo-dev answers them) for the other kinds.
 */
export function quotaReply(name: string, why: QuotaRefusal): Response {
  if (why !== "denied") return reply(403, quotaRefused(name, why).status);
  const body = fixture<JsonObject>("status-403-quota-denied.json");
  body.message = (body.message as string).replace(`"${FIXTURE_CLAIM}"`, `"${name}"`);
  body.details = { ...(body.details as JsonObject), name };
  return reply(403, body);
}

/**
 * Milo's 500 to the later of two overlapping creates of claim `name` in `ns`
 * (`status-500-allocation-exists.json`): its allocation insert found the
 * allocation the other create made under the name.
 */
export async function nameRaceReply(ns: string, name: string): Promise<Response> {
  const fixed = await allocationNameFor(FIXTURE_NS.race, FIXTURE_CLAIM);
  const from = `/ipallocations/${FIXTURE_NS.race}/${fixed}"`;
  const to = `/ipallocations/${ns}/${await allocationNameFor(ns, name)}"`;
  const body = fixture<JsonObject>("status-500-allocation-exists.json");
  const details = body.details as { causes: { message: string }[] };
  body.message = (body.message as string).replace(from, to);
  details.causes = details.causes.map((c) => ({ message: c.message.replace(from, to) }));
  return reply(500, body);
}

/** A claim as the in-memory Milo keeps it: the fields an IPAllocation copies. */
type ClaimLike = {
  metadata: { name: string; namespace: string; uid?: string; creationTimestamp?: string };
  spec: { className?: string; ipFamily?: string; scope?: unknown; reclaimPolicy?: string };
  status: { allocatedCIDR?: string; address?: string; poolRef?: { name: string } };
};

/**
 * The IPAllocation Milo keeps for `claim` (`ipallocation-list.json`'s shapes):
 * bound to it, or, `retainedAt` (ms) given, retained after its deletion under
 * Retain (no `claimRef`, `Bound` False `Retained` at that time). It carries
 * none of the claim's labels, as Milo's `AllocatingREST.Create` makes it.
 */
export function allocationItem(claim: ClaimLike, name: string, retainedAt?: number): JsonObject {
  const items = fixture<{ items: JsonObject[] }>("ipallocation-list.json").items;
  const bound = items.find((i) => (i.spec as JsonObject).claimRef)!;
  const retained = items.find((i) => !(i.spec as JsonObject).claimRef)!;
  const { metadata: m, spec, status } = claim;
  const boundCondition = ((retained.status as JsonObject).conditions as JsonObject[])
    .find((c) => c.type === "Bound")!;
  return {
    ...bound,
    metadata: {
      name,
      namespace: m.namespace,
      uid: `${m.uid ?? "0"}-allocation`,
      resourceVersion: (bound.metadata as JsonObject).resourceVersion,
      creationTimestamp: m.creationTimestamp,
    },
    spec: {
      ...(bound.spec as JsonObject),
      ipFamily: spec.ipFamily,
      poolRef: status.poolRef,
      className: spec.className,
      claimRef: retainedAt === undefined ? { name: m.name } : undefined,
      scope: spec.scope,
      reclaimPolicy: spec.reclaimPolicy ?? "Delete",
    },
    status: {
      ...(bound.status as JsonObject),
      allocatedCIDR: status.allocatedCIDR,
      address: status.address,
      ...(retainedAt === undefined ? {} : {
        conditions: [{
          ...boundCondition,
          lastTransitionTime: new Date(retainedAt).toISOString().replace(/\.\d{3}Z$/, "Z"),
        }],
      }),
    },
  };
}
