/**
 * `milo-ipam show --pools`: the utilisation Milo reports of each IPPool the
 * token may see (`status.capacity` and `status.utilizationPercent`, as Milo
 * computes them; `fixtures/ippool.json`). Milo serves a class from one pool at
 * a time (its `DiscoverPool`), so a class may be refused (507) while another
 * of its pools has room.
 */
import type { IPPool } from "./milo_objects.ts";
import { printable } from "./printable.ts";

/** One pool as `show --pools` reports it. */
export interface PoolRow {
  pool: string;
  cidr?: string;
  family?: string;
  classes: string[];
  phase?: string;
  /** Addresses (or blocks) in the pool, allocated and available: decimal strings, as Milo's. */
  total?: string;
  allocated?: string;
  available?: string;
  utilizationPercent?: number;
}

/** The pools of a LIST, by class, then name. */
export function poolRows(items: IPPool[]): PoolRow[] {
  return items.map((p) => ({
    pool: p.metadata.name,
    cidr: p.spec.cidr,
    family: p.spec.ipFamily ?? p.status.ipFamily,
    classes: p.spec.classNames ?? [],
    phase: p.status.phase,
    total: p.status.capacity?.total,
    allocated: p.status.capacity?.allocated,
    available: p.status.capacity?.available,
    utilizationPercent: p.status.utilizationPercent,
  })).sort((a, b) =>
    `${a.classes[0] ?? ""}\u0000${a.pool}` < `${b.classes[0] ?? ""}\u0000${b.pool}` ? -1 : 1
  );
}

/** The pools as a table, or what Milo did not say. */
export function renderPools(rows: PoolRow[]): string[] {
  if (!rows.length) {
    return [
      "Milo reports no IPPool to this token: the platform may keep its pools where a tenant " +
      "cannot read them (as it keeps its IPClasses); ask the platform for the pools' utilisation",
    ];
  }
  const table = [
    ["POOL", "CLASSES", "CIDR", "ALLOCATED", "TOTAL", "AVAILABLE", "USED"],
    ...rows.map((r) =>
      [
        r.pool,
        r.classes.join(",") || "-",
        r.cidr ?? "-",
        r.allocated ?? "?",
        r.total ?? "?",
        r.available ?? "?",
        r.utilizationPercent === undefined ? "?" : `${r.utilizationPercent.toFixed(1)}%`,
      ].map(printable)
    ),
  ];
  const widths = table[0].map((_, i) => Math.max(...table.map((t) => t[i].length)));
  return table.map((t) => t.map((c, i) => i < t.length - 1 ? c.padEnd(widths[i]) : c).join("  "));
}
