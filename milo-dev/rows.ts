/** The row shapes of milo-dev's SQLite tables and their column lists. */

/** The identity and version every stored object has. */
interface Row {
  project: string;
  name: string;
  uid: string;
  rv: number;
  created: string;
}

/** A claim row as stored (`labels`, `annotations`, `spec` are JSON text). */
export interface ClaimRow extends Row {
  namespace: string;
  labels: string;
  annotations: string;
  spec: string;
  class_name: string;
  pool: string;
  cidr: string;
  /** The single address of a /32 or /128 claim; empty for blocks. */
  address: string;
  alloc_name: string;
  phase: string;
}

/** An allocation row as stored (`start` in `ipKey` form (ipmath.ts), `labels` JSON text). */
export interface AllocationRow extends Row {
  namespace: string;
  pool: string;
  start: string;
  prefix: number;
  family: string;
  cidr: string;
  class_name: string;
  claim_name: string | null;
  claim_uid: string | null;
  labels: string;
  /** `Allocated`, `Retained` (claim gone, reclaimPolicy Retain) or `Expiring` (lease elapsed). */
  phase: string;
  /** The effective policy at bind time: what a delete of the claim does. */
  reclaim_policy: string;
  /** The claim's scope projected onto the class's required roles (reclaim compares it). */
  scope_key: string;
  /** When the allocation was retained (epoch ms); null while bound. */
  retained_at: number | null;
  /** When the sweeper marked it Expiring (epoch ms). */
  expiring_at: number | null;
  /** When the sweeper releases it (epoch ms), set when it marks it Expiring. */
  release_at: number | null;
}

/** A seeded class or pool row (`spec` JSON text, `ord` its place in the seed). */
export interface ObjectRow extends Row {
  spec: string;
  ord: number;
}

/** The two tables the seed fills. */
export type SeededTable = "classes" | "pools";

/** The columns every namespaced row starts with. */
const NAMESPACED_COLUMNS = ["project", "namespace", "name", "uid", "rv", "created"] as const;

export const CLAIM_COLUMNS = [
  ...NAMESPACED_COLUMNS,
  "labels",
  "annotations",
  "spec",
  "class_name",
  "pool",
  "cidr",
  "address",
  "alloc_name",
  "phase",
] as const satisfies readonly (keyof ClaimRow)[];

export const ALLOCATION_COLUMNS = [
  ...NAMESPACED_COLUMNS,
  "pool",
  "start",
  "prefix",
  "family",
  "cidr",
  "class_name",
  "claim_name",
  "claim_uid",
  "labels",
  "phase",
  "reclaim_policy",
  "scope_key",
  "retained_at",
  "expiring_at",
  "release_at",
] as const satisfies readonly (keyof AllocationRow)[];

export function insertSql(table: string, columns: readonly string[]): string {
  return `INSERT INTO ${table} (${columns.join(", ")}) VALUES (${
    columns.map(() => "?").join(", ")
  })`;
}
