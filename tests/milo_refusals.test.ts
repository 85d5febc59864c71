/**
 * Milo's refusals read once, where its answers are read (lib/milo_objects.ts
 * `refusalOf`, `statusError`): each Status Milo gives as the kind the handlers
 * act on and the CNI code the runtime sees. The bodies are the shared
 * fixtures' and milo-dev's, whose words cite Milo's source (milo's
 * `userFacingClaimError`; ipam's `internal/allocator/reclaim.go`,
 * `prefix.go`).
 */
import assert from "node:assert/strict";
import { MiloRefusal, refusalOf, statusError, statusOf } from "../lib/milo_objects.ts";
import { QUOTA_REFUSALS, type QuotaRefusal, quotaRefused } from "../milo-dev/quota.ts";
import { conflict } from "../milo-dev/status.ts";
import { fixture } from "../testing/milo_fixtures.ts";

const CLAIM = "pod-3f9a1c2b7d4e5f60a1b2-v4";
const POST = "POST /apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims";
const GET = `GET /apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims/${CLAIM}`;

/** One of Milo's answers: its status, its body, and what the plugin makes of it. */
interface Row {
  name: string;
  status: number;
  body: unknown;
  /** The kind (and quota reason) `refusalOf` reads, or undefined for no refusal. */
  refusal: string | undefined;
  /** The CNI code of a create answered so. */
  code: number;
}

const quota = (kind: QuotaRefusal) => quotaRefused(CLAIM, kind).status;
const conflictOf = (why: string) => conflict("ipclaims", CLAIM, why).status;

const QUOTA_CODES: Record<QuotaRefusal, [string, number]> = {
  denied: ["quota:denied", 100],
  timeout: ["quota:timeout", 11],
  conflict: ["quota:stale", 11],
  misconfigured: ["quota:misconfigured", 102],
  internal: ["quota:internal", 11],
};

const ROWS: Row[] = [
  {
    name: "quota denied, the shared fixture",
    status: 403,
    body: fixture("status-403-quota-denied.json"),
    refusal: "quota:denied",
    code: 100,
  },
  ...(Object.keys(QUOTA_REFUSALS) as QuotaRefusal[]).map((k): Row => ({
    name: `quota ${k}, in milo's words`,
    status: 403,
    body: quota(k),
    refusal: QUOTA_CODES[k][0],
    code: QUOTA_CODES[k][1],
  })),
  {
    name: "namespace missing",
    status: 403,
    body: fixture("status-403-namespace-missing.json"),
    refusal: "namespace:missing",
    code: 101,
  },
  {
    name: "namespace terminating",
    status: 403,
    body: fixture("status-403-namespace-terminating.json"),
    refusal: "namespace:terminating",
    code: 101,
  },
  {
    name: "class not visible to the tenant",
    status: 403,
    body: fixture("status-403-forbidden.json"),
    refusal: "class",
    code: 101,
  },
  {
    name: "any other 403",
    status: 403,
    body: { kind: "Status", reason: "Forbidden", message: "no", details: { kind: "ipclaims" } },
    refusal: "forbidden",
    code: 101,
  },
  {
    name: "the name exists",
    status: 409,
    body: fixture("status-409-already-exists.json"),
    refusal: "exists",
    code: 103,
  },
  {
    name: "the name's allocation bound to a live claim (mismatch words too: bound wins)",
    status: 409,
    body: conflictOf(
      "ipam: retained allocation does not match this claim: an allocation under this identity " +
        'is already bound to "db-0"',
    ),
    refusal: "bound",
    code: 103,
  },
  {
    name: "an older Milo does not re-bind",
    status: 409,
    body: conflictOf("this server does not re-bind a retained allocation"),
    refusal: "no-rebind",
    code: 103,
  },
  {
    name: "the retained allocation does not match",
    status: 409,
    body: conflictOf(
      "ipam: retained allocation does not match this claim: it was allocated under class " +
        '"a" and this claim names "b"',
    ),
    refusal: "retained-mismatch",
    code: 103,
  },
  {
    name: "a requested address held in the address space",
    status: 409,
    body: conflictOf("ipam: address already allocated: 10.0.0.7"),
    refusal: "address-taken",
    code: 103,
  },
  {
    name: "any other 409",
    status: 409,
    body: conflictOf("the object has been modified"),
    refusal: "conflict",
    code: 103,
  },
  {
    name: "a 500 is no refusal",
    status: 500,
    body: fixture("status-500-allocation-exists.json"),
    refusal: undefined,
    code: 11,
  },
  {
    name: "a 507 is the pool, no refusal",
    status: 507,
    body: fixture("status-507-exhausted.json"),
    refusal: undefined,
    code: 100,
  },
];

/** A refusal as one word, for the table. */
function word(status: number, body: unknown): string | undefined {
  const r = refusalOf(status, statusOf(body));
  if (!r) return undefined;
  if (r.kind === "quota") return `quota:${r.why}`;
  if (r.kind === "namespace") return `namespace:${r.terminating ? "terminating" : "missing"}`;
  return r.kind;
}

for (const row of ROWS) {
  Deno.test(`refusalOf and statusError: ${row.name}`, () => {
    assert.equal(word(row.status, row.body), row.refusal);
    const e = statusError(POST, row.status, statusOf(row.body), "", "default");
    assert.equal(e.code, row.code);
    assert.equal(e instanceof MiloRefusal, row.refusal !== undefined);
  });
}

Deno.test("statusError: the quota, a namespace and a class refuse only a create; any other verb's 403 is forbidden", () => {
  for (const body of [quota("denied"), fixture("status-403-namespace-missing.json")]) {
    const e = statusError(GET, 403, statusOf(body));
    assert.ok(e instanceof MiloRefusal);
    assert.equal(e.refusal.kind, "forbidden");
    assert.equal(e.code, 101);
  }
});

Deno.test("statusError: a 403 is never quoted (a server may echo the token); a 409 is", () => {
  const echo = {
    kind: "Status",
    reason: "Forbidden",
    message: "token secret-abc is forbidden",
    details: {},
  };
  const e = statusError(POST, 403, statusOf(echo));
  assert.doesNotMatch(`${e.message} ${e.details}`, /secret-abc/);
  const c = statusError(
    POST,
    409,
    statusOf(conflictOf("ipam: address already allocated: 10.0.0.7")),
  );
  assert.match(`${c.message} ${c.details}`, /10\.0\.0\.7/);
});
