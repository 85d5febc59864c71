/**
 * What `milo-ipam show` answers (`--output json` prints it; _show_render.ts
 * writes its text): the query, the claims with what the holder's node knows
 * of each, and the retained allocations.
 */
import type { State } from "./liveness.ts";
import type { QuotaUsage } from "./milo_quota.ts";
import type { PoolRow } from "./_show_pools.ts";
import type { Grant, RetainedRow } from "./show_retained.ts";

/** A node's findings, as its reconcile state keeps them. */
export type Findings = NonNullable<State["findings"]>;

/** What a show asks for. */
export type ShowQuery =
  | { by: "address"; address: string }
  | { by: "pod"; namespace: string; name: string }
  | { by: "node"; node: string }
  | { by: "retained" }
  | { by: "pools" };

/** What the holder's node knows of a claim (only on that node). */
export interface LocalView {
  /** The result cache directories that name the claim's container (none: absent from all). */
  cachesNaming: string[];
  /** The node's record of the attachment: `held`, `adding`, or absent. */
  record: "held" | "adding" | "none";
  /** Whether the release journal owes a release of the attachment. */
  journaled: boolean;
}

/** One claim as `show` reports it. */
export interface ShowRow {
  claim: string;
  uid?: string;
  address?: string;
  family?: string;
  phase?: string;
  pool?: string;
  cluster?: string;
  node?: string;
  host?: string;
  network?: string;
  pod?: string;
  podUid?: string;
  containerId?: string;
  ifname?: string;
  createdAt?: string;
  /** Age on Milo's clock, in seconds. */
  ageS?: number;
  /** Set on the holder's node (its name and host are this node config's and host's). */
  local?: LocalView;
  /** Why `local` is absent. */
  localWhy?: string;
}

/** What `milo-ipam show --output json` prints. */
export interface ShowReport {
  kind: "ShowReport";
  version: 1;
  query: ShowQuery;
  namespace: string;
  /** The label selector of the one LIST made ("" for every claim of the namespace). */
  labelSelector: string;
  /** The cluster the pod and node queries select (the node config's). */
  cluster: string;
  claims: ShowRow[];
  /**
   * The retained allocations (of `--retained`; of an address no claim holds),
   * by address; absent when no IPAllocation LIST was made.
   */
  retained?: RetainedRow[];
  /**
   * A pod with no claim: the node config's grants of a stable identity to
   * its namespace (empty: none; its pods' addresses are released with them).
   */
  grants?: Grant[];
  /**
   * What this node's last verification of its live claims found wrong that
   * the query names (lib/_reconcile_verify.ts): addresses two sandboxes use,
   * live attachments without their claim. Absent off the node or when none.
   */
  findings?: Findings;
  /** The project's IPClaim quota as Milo counts it (one GET), or why it is not known. */
  quota?: QuotaUsage;
  /** `--pools`: each IPPool Milo shows the token, with the utilisation it reports. */
  pools?: PoolRow[];
  /**
   * When Milo could not be asked: what this node itself holds for the query
   * (its records, journal and caches; lib/_show_local.ts) and what was not asked.
   */
  node?: NodeView;
  requests: number;
  error: { message: string; details: string } | null;
}

/** One record of the node: an attachment it holds (`held`) or is adding. */
export interface LocalRecord {
  containerId: string;
  ifname: string;
  network: string;
  /** The pod (`namespace/name`) the ADD named; absent in records of releases before 0.2.0. */
  pod?: string;
  state: "held" | "adding";
  claims: string[];
  addresses: string[];
  /** When the record was written (the node's clock). */
  at: string;
  /** The result cache directories that name the container (none: absent from all). */
  cachesNaming: string[];
  journaled: boolean;
}

/** One release the node's journal owes. */
export interface LocalOwed {
  containerId: string;
  ifname: string;
  network: string;
  podNamespace?: string;
  pod?: string;
  claims: string[];
  attempts: number;
  lastError?: string;
  /** When the release first failed (the node's clock). */
  since: string;
}

/** What the node itself holds for a query, and what could not be asked. */
export interface NodeView {
  node: string;
  /** What the query could not ask, each with why. */
  unasked: string[];
  records: LocalRecord[];
  journal: LocalOwed[];
}
