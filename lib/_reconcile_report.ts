/**
 * What one `milo-ipam reconcile` run is given and what it reports (its JSON
 * on stdout), and its exit status: shared by the run (lib/reconcile.ts) and
 * its parts (lib/_reconcile_journal.ts, lib/_reconcile_verify.ts).
 */
import type { NodeConfig } from "./config.ts";
import type { Brake, LiveSet } from "./liveness.ts";
import type { MiloClient } from "./milo.ts";
import type { Verified } from "./_reconcile_verify.ts";
import type { Duplicate } from "./restore.ts";

/** A journal entry the run could not finish. */
export interface JournalReport {
  entry: string;
  containerId?: string;
  ifname?: string;
  claims: string[];
  attempts?: number;
  lastError: string;
}

/** What one reconcile run decided for each claim. */
export interface ReconcileReport {
  dryRun: boolean;
  /** Set when the run was told to release past its brakes. */
  force: boolean;
  cluster: string;
  node: string;
  host: string;
  /** Set when this run listed Milo (the node had no record of its claims yet). */
  listed: boolean;
  /** Containers the result caches name. */
  live: number;
  /** Entries read per result cache directory. */
  caches: LiveSet["dirs"];
  /** Set when orphans were due but a brake kept them all. */
  brake: Brake | null;
  /** Claims under this node name made by other hosts, when this run listed Milo (never judged). */
  otherHosts: { host: string; claims: number }[];
  /** The boot id records were judged against; null: no boot rule this run (see `warnings`). */
  boot: string | null;
  /** What an operator should look at that failed nothing (a boot id changing between reads). */
  warnings: string[];
  released: {
    claim: string;
    /** The journal, the liveness rule, or a record from an earlier boot. */
    via: "journal" | "orphan" | "boot";
    /** The pod (`namespace/name`) Milo's claim recorded, when it did. */
    pod?: string;
    network?: string;
    containerId?: string;
    ifname?: string;
    address?: string;
  }[];
  kept: { claim: string; reason: string }[];
  journal: JournalReport[];
  /** Claims made again for the sandbox that holds their address (the journal, or verified). */
  remade: { claim: string; via: "journal" | "verify"; outcome: "made" | "present" }[];
  /** Addresses two sandboxes use: a live one here without its claim, and Milo's holder now. */
  duplicates: Duplicate[];
  /** Live claims read from Milo to verify them this run. */
  verified: number;
  /** Live attachments whose claim is missing and could not be made again this run. */
  missing: Verified["missing"];
  errors: { claim: string; error: string }[];
}

/** Options of one reconcile run. */
export interface ReconcileOptions {
  node: NodeConfig;
  milo: MiloClient;
  graceMs: number;
  dryRun: boolean;
  /** Releases past the brakes (an operator's run by hand). */
  force?: boolean;
  /** Lists Milo into the record even when the node has one. */
  list?: boolean;
  now?: () => number;
}

/**
 * Exit status of a run: 0 done, 1 errors, journal entries left, a duplicate
 * or a live attachment left without its claim, 2 a brake held.
 */
export function exitOf(r: ReconcileReport): number {
  if (r.errors.length || r.duplicates.length || r.missing.length) return 1;
  if (!r.dryRun && r.journal.length) return 1;
  return r.brake ? 2 : 0;
}
