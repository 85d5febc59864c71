/**
 * SQLite persistence (node:sqlite): the schema, transactions, the global
 * resourceVersion, and every statement behind a named method.
 */

import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import { fromIpKey, ipKey } from "./ipmath.ts";
import {
  ALLOCATION_COLUMNS,
  type AllocationRow,
  CLAIM_COLUMNS,
  type ClaimRow,
  insertSql,
  type ObjectRow,
  type SeededTable,
} from "./rows.ts";

export type { AllocationRow, ClaimRow, ObjectRow, SeededTable } from "./rows.ts";

/**
 * The schema's version: 2 made an address unique per address space (the
 * scope, with its uid and the project) rather than per pool.
 */
const SCHEMA_VERSION = 2;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('rv', 1000);
CREATE TABLE IF NOT EXISTS classes (
  project TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, rv INTEGER NOT NULL,
  created TEXT NOT NULL, spec TEXT NOT NULL, ord INTEGER NOT NULL,
  PRIMARY KEY (project, name));
CREATE TABLE IF NOT EXISTS pools (
  project TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, rv INTEGER NOT NULL,
  created TEXT NOT NULL, spec TEXT NOT NULL, ord INTEGER NOT NULL,
  PRIMARY KEY (project, name));
CREATE TABLE IF NOT EXISTS claims (
  project TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  uid TEXT NOT NULL, rv INTEGER NOT NULL, created TEXT NOT NULL,
  labels TEXT NOT NULL, annotations TEXT NOT NULL, spec TEXT NOT NULL,
  class_name TEXT NOT NULL, pool TEXT NOT NULL, cidr TEXT NOT NULL,
  address TEXT NOT NULL, alloc_name TEXT NOT NULL, phase TEXT NOT NULL,
  PRIMARY KEY (project, namespace, name));
CREATE TABLE IF NOT EXISTS allocations (
  project TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  uid TEXT NOT NULL, rv INTEGER NOT NULL, created TEXT NOT NULL,
  pool TEXT NOT NULL, start TEXT NOT NULL, prefix INTEGER NOT NULL,
  family TEXT NOT NULL, cidr TEXT NOT NULL, class_name TEXT NOT NULL,
  claim_name TEXT, claim_uid TEXT, labels TEXT NOT NULL, phase TEXT NOT NULL,
  reclaim_policy TEXT NOT NULL DEFAULT 'Delete', scope_key TEXT NOT NULL DEFAULT '',
  retained_at INTEGER, expiring_at INTEGER, release_at INTEGER,
  PRIMARY KEY (project, namespace, name),
  UNIQUE (project, pool, scope_key, start));
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ${SCHEMA_VERSION});
`;

/** Columns added after the first schema, for databases made before them. */
const ADDED_ALLOCATION_COLUMNS = [
  "reclaim_policy TEXT NOT NULL DEFAULT 'Delete'",
  "scope_key TEXT NOT NULL DEFAULT ''",
  "retained_at INTEGER",
  "expiring_at INTEGER",
  "release_at INTEGER",
];

const KEY3 = "project = ? AND namespace = ? AND name = ?";

/** The database: one file, WAL, synchronous=FULL. */
export class Store {
  readonly #db: DatabaseSync;
  #stmts = new Map<string, StatementSync>();

  constructor(path: string) {
    this.#db = new DatabaseSync(path);
    this.#db.exec("PRAGMA journal_mode=WAL");
    this.#db.exec("PRAGMA synchronous=FULL");
    this.#db.exec("PRAGMA busy_timeout=5000");
    this.#upgrade(path);
    this.#db.exec(SCHEMA);
    const have = new Set(
      this.#all<{ name: string }>("PRAGMA table_info(allocations)").map((c) => c.name),
    );
    for (const col of ADDED_ALLOCATION_COLUMNS) {
      if (!have.has(col.split(" ")[0])) this.#db.exec(`ALTER TABLE allocations ADD COLUMN ${col}`);
    }
  }

  /**
   * A database of an earlier schema: without claims or allocations its two
   * tables are made again; with them it is refused (their address spaces
   * cannot be told apart).
   */
  #upgrade(path: string): void {
    const tables = new Set(
      this.#all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table'").map((t) =>
        t.name
      ),
    );
    if (!tables.has("allocations")) return;
    const v = tables.has("meta")
      ? this.#get<{ value: number }>("SELECT value FROM meta WHERE key = 'schema'")?.value
      : undefined;
    if (v !== undefined && Number(v) >= SCHEMA_VERSION) return;
    const rows = this.#get<{ n: number }>(
      "SELECT (SELECT count(*) FROM allocations) + (SELECT count(*) FROM claims) AS n",
    )!.n;
    if (rows > 0) {
      throw new Error(
        `${path} was made by an earlier milo-dev (one address per pool, not per address ` +
          "space) and holds claims: remove it, or use another --db",
      );
    }
    this.#db.exec("DROP TABLE allocations; DROP TABLE claims");
  }

  #sql(text: string): StatementSync {
    let s = this.#stmts.get(text);
    if (!s) {
      s = this.#db.prepare(text);
      this.#stmts.set(text, s);
    }
    return s;
  }

  #get<T>(text: string, ...params: SQLInputValue[]): T | undefined {
    return this.#sql(text).get(...params) as T | undefined;
  }

  #all<T>(text: string, ...params: SQLInputValue[]): T[] {
    return this.#sql(text).all(...params) as unknown as T[];
  }

  #run(text: string, ...params: SQLInputValue[]): void {
    this.#sql(text).run(...params);
  }

  #namespaced<T>(table: "claims" | "allocations", project: string, ns?: string): T[] {
    return ns === undefined
      ? this.#all(`SELECT * FROM ${table} WHERE project = ? ORDER BY namespace, name`, project)
      : this.#all(
        `SELECT * FROM ${table} WHERE project = ? AND namespace = ? ORDER BY name`,
        project,
        ns,
      );
  }

  /**
   * Runs `fn` inside `BEGIN IMMEDIATE`; commits, or rolls back when `fn`
   * throws or when `rollback` is set (dry runs).
   */
  tx<T>(fn: () => T, rollback = false): T {
    this.#db.exec("BEGIN IMMEDIATE");
    let result: T;
    try {
      result = fn();
    } catch (err) {
      this.#db.exec("ROLLBACK");
      throw err;
    }
    this.#db.exec(rollback ? "ROLLBACK" : "COMMIT");
    return result;
  }

  /** Increments and returns the global resourceVersion (inside a tx). */
  nextRV(): number {
    const row = this.#get<{ value: number }>(
      "UPDATE meta SET value = value + 1 WHERE key = 'rv' RETURNING value",
    );
    return Number(row!.value);
  }

  /** The current global resourceVersion. */
  currentRV(): number {
    return Number(this.#get<{ value: number }>("SELECT value FROM meta WHERE key = 'rv'")!.value);
  }

  // ---- seeded classes and pools -----------------------------------------

  /** Writes a seeded object; a new resourceVersion only when its spec changed. */
  syncObject(table: SeededTable, r: Omit<ObjectRow, "uid" | "rv">): void {
    const old = this.#get<{ spec: string }>(
      `SELECT spec FROM ${table} WHERE project = ? AND name = ?`,
      r.project,
      r.name,
    );
    if (!old) {
      this.#run(
        insertSql(table, ["project", "name", "uid", "rv", "created", "spec", "ord"]),
        r.project,
        r.name,
        crypto.randomUUID(),
        this.nextRV(),
        r.created,
        r.spec,
        r.ord,
      );
    } else if (old.spec !== r.spec) {
      this.#run(
        `UPDATE ${table} SET spec = ?, rv = ?, ord = ? WHERE project = ? AND name = ?`,
        r.spec,
        this.nextRV(),
        r.ord,
        r.project,
        r.name,
      );
    } else {
      this.#run(
        `UPDATE ${table} SET ord = ? WHERE project = ? AND name = ?`,
        r.ord,
        r.project,
        r.name,
      );
    }
  }

  /** Deletes the seeded objects for which `keep(project, name)` is false. */
  pruneObjects(table: SeededTable, keep: (project: string, name: string) => boolean): void {
    const rows = this.#all<{ project: string; name: string }>(`SELECT project, name FROM ${table}`);
    for (const r of rows) {
      if (!keep(r.project, r.name)) {
        this.#run(`DELETE FROM ${table} WHERE project = ? AND name = ?`, r.project, r.name);
      }
    }
  }

  /** One seeded object. */
  getObject(table: SeededTable, project: string, name: string): ObjectRow | undefined {
    return this.#get(`SELECT * FROM ${table} WHERE project = ? AND name = ?`, project, name);
  }

  /** A project's seeded objects by name. */
  listObjects(table: SeededTable, project: string): ObjectRow[] {
    return this.#all(`SELECT * FROM ${table} WHERE project = ? ORDER BY name`, project);
  }

  /** Gives a pool a new resourceVersion (its status changed). */
  touchPool(project: string, pool: string, rv: number): void {
    this.#run("UPDATE pools SET rv = ? WHERE project = ? AND name = ?", rv, project, pool);
  }

  // ---- claims -----------------------------------------------------------

  /** One claim. */
  getClaim(project: string, ns: string, name: string): ClaimRow | undefined {
    return this.#get(`SELECT * FROM claims WHERE ${KEY3}`, project, ns, name);
  }

  /** Claims of a project (one namespace, or all) by namespace and name. */
  listClaims(project: string, ns?: string): ClaimRow[] {
    return this.#namespaced("claims", project, ns);
  }

  /** How many claims a project holds. */
  countClaims(project: string): number {
    return this.#get<{ n: number }>("SELECT count(*) AS n FROM claims WHERE project = ?", project)!
      .n;
  }

  /** Stores a new claim. */
  insertClaim(r: ClaimRow): void {
    this.#run(insertSql("claims", CLAIM_COLUMNS), ...CLAIM_COLUMNS.map((c) => r[c]));
  }

  /** Leaves a claim in phase Releasing (a release that did not complete). */
  markClaimReleasing(project: string, ns: string, name: string, rv: number): void {
    this.#run(`UPDATE claims SET phase = 'Releasing', rv = ? WHERE ${KEY3}`, rv, project, ns, name);
  }

  /** Removes a claim. */
  deleteClaim(project: string, ns: string, name: string): void {
    this.#run(`DELETE FROM claims WHERE ${KEY3}`, project, ns, name);
  }

  // ---- allocations ------------------------------------------------------

  /** One allocation. */
  getAllocation(project: string, ns: string, name: string): AllocationRow | undefined {
    return this.#get(`SELECT * FROM allocations WHERE ${KEY3}`, project, ns, name);
  }

  /** Allocations of a project (one namespace, or all) by namespace and name. */
  listAllocations(project: string, ns?: string): AllocationRow[] {
    return this.#namespaced("allocations", project, ns);
  }

  /** Stores a new allocation. */
  insertAllocation(r: AllocationRow): void {
    this.#run(insertSql("allocations", ALLOCATION_COLUMNS), ...ALLOCATION_COLUMNS.map((c) => r[c]));
  }

  /** Removes an allocation (its unit is free). */
  deleteAllocation(project: string, ns: string, name: string): void {
    this.#run(`DELETE FROM allocations WHERE ${KEY3}`, project, ns, name);
  }

  /** Sets columns of an allocation (retain, re-bind, mark Expiring). */
  updateAllocation(
    project: string,
    ns: string,
    name: string,
    set: Partial<Omit<AllocationRow, "project" | "namespace" | "name">>,
  ): void {
    const cols = Object.keys(set) as (keyof typeof set)[];
    this.#run(
      `UPDATE allocations SET ${cols.map((c) => `${c} = ?`).join(", ")} WHERE ${KEY3}`,
      ...cols.map((c) => set[c] as SQLInputValue),
      project,
      ns,
      name,
    );
  }

  /** Retained allocations (with a retention time) of every project, oldest first. */
  listRetained(): AllocationRow[] {
    return this.#all(
      "SELECT * FROM allocations WHERE retained_at IS NOT NULL ORDER BY retained_at",
    );
  }

  /** How many allocations are retained (claim gone), in a project or everywhere. */
  countRetained(project?: string): number {
    const where = "phase != 'Allocated'" + (project === undefined ? "" : " AND project = ?");
    const params = project === undefined ? [] : [project];
    return this.#get<{ n: number }>(
      `SELECT count(*) AS n FROM allocations WHERE ${where}`,
      ...params,
    )!.n;
  }

  /** How many units of a pool are allocated in any address space (a unit counts once). */
  countAllocations(project: string, pool: string): number {
    return this.#get<{ n: number }>(
      "SELECT count(DISTINCT start) AS n FROM allocations WHERE project = ? AND pool = ?",
      project,
      pool,
    )!.n;
  }

  /**
   * Starts of a pool's allocations in one address space at or above `from`,
   * ascending, at most `limit`.
   */
  allocationsFrom(
    project: string,
    pool: string,
    space: string,
    from: bigint,
    limit: number,
  ): bigint[] {
    return this.#all<{ start: string }>(
      "SELECT start FROM allocations WHERE project = ? AND pool = ? AND scope_key = ? " +
        "AND start >= ? ORDER BY start LIMIT ?",
      project,
      pool,
      space,
      ipKey(from),
      limit,
    ).map((r) => fromIpKey(r.start));
  }

  /** Whether the unit starting at `start` is allocated in the address space `space`. */
  isAllocated(project: string, pool: string, space: string, start: bigint): boolean {
    return this.#get(
      "SELECT 1 FROM allocations WHERE project = ? AND pool = ? AND scope_key = ? AND start = ?",
      project,
      pool,
      space,
      ipKey(start),
    ) !== undefined;
  }

  /** Closes the database. */
  close(): void {
    this.#stmts.clear();
    this.#db.close();
  }
}
