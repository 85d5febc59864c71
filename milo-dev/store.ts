/** SQLite persistence (node:sqlite): schema, transactions, resourceVersion. */

import { DatabaseSync, type StatementSync } from "node:sqlite";

/** A claim row as stored. */
export interface ClaimRow {
  project: string;
  namespace: string;
  name: string;
  uid: string;
  rv: number;
  created: string;
  labels: string;
  annotations: string;
  spec: string;
  class_name: string;
  pool: string;
  cidr: string;
  address: string;
  alloc_name: string;
  phase: string;
}

/** An allocation row as stored. */
export interface AllocationRow {
  project: string;
  namespace: string;
  name: string;
  uid: string;
  rv: number;
  created: string;
  pool: string;
  start: string;
  prefix: number;
  family: string;
  cidr: string;
  class_name: string;
  claim_name: string | null;
  claim_uid: string | null;
  labels: string;
  phase: string;
}

/** A seeded class or pool row. */
export interface ObjectRow {
  project: string;
  name: string;
  uid: string;
  rv: number;
  created: string;
  spec: string;
  ord: number;
}

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
  PRIMARY KEY (project, namespace, name),
  UNIQUE (project, pool, start));
`;

/** The database: one file, WAL, synchronous=FULL. */
export class Store {
  readonly db: DatabaseSync;
  #stmts = new Map<string, StatementSync>();

  constructor(path: string) {
    this.db = new DatabaseSync(path);
    this.db.exec("PRAGMA journal_mode=WAL");
    this.db.exec("PRAGMA synchronous=FULL");
    this.db.exec("PRAGMA busy_timeout=5000");
    this.db.exec(SCHEMA);
  }

  /** A cached prepared statement. */
  sql(text: string): StatementSync {
    let s = this.#stmts.get(text);
    if (!s) {
      s = this.db.prepare(text);
      this.#stmts.set(text, s);
    }
    return s;
  }

  /**
   * Runs `fn` inside `BEGIN IMMEDIATE`; commits, or rolls back when `fn`
   * throws or when `rollback` is set (dry runs).
   */
  tx<T>(fn: () => T, rollback = false): T {
    this.db.exec("BEGIN IMMEDIATE");
    let result: T;
    try {
      result = fn();
    } catch (err) {
      this.db.exec("ROLLBACK");
      throw err;
    }
    this.db.exec(rollback ? "ROLLBACK" : "COMMIT");
    return result;
  }

  /** Increments and returns the global resourceVersion (inside a tx). */
  nextRV(): number {
    const row = this.sql(
      "UPDATE meta SET value = value + 1 WHERE key = 'rv' RETURNING value",
    ).get() as { value: number };
    return Number(row.value);
  }

  /** The current global resourceVersion. */
  currentRV(): number {
    const row = this.sql("SELECT value FROM meta WHERE key = 'rv'").get() as {
      value: number;
    };
    return Number(row.value);
  }

  /** Closes the database. */
  close(): void {
    this.#stmts.clear();
    this.db.close();
  }
}
