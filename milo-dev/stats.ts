/** Request and connection counters, served at admin `/stats`. */

/** The counters since start or the last reset. */
export interface Stats {
  /** API requests (`/apis/...` and unknown paths). */
  total: number;
  byMethod: Record<string, number>;
  byKind: Record<string, number>;
  byStatus: Record<string, number>;
  faults: Record<"latency" | "error" | "reset" | "hang" | "releaseFail", number>;
  page: { html: number; feed: number };
  /** TCP connections accepted by the API listener. */
  connections: number;
  /** TLS handshakes completed on them (HTTPS only); a failed handshake counts as a connection only. */
  tlsHandshakes?: number;
  /** LISTs answered (collection GETs of every kind; a 400 or 410 before the read is not one). */
  lists: number;
  /**
   * Rows those LISTs read: every object of the kind in the project (and the
   * namespace when the path has one), before label and field selectors, as
   * Milo's `GetList` reads the whole key prefix and filters in Go.
   */
  listRowsScanned: number;
  /** `lists` and `listRowsScanned` per resource (`ipclaims`, `ipallocations`, `ippools`, `ipclasses`). */
  listsByKind: Record<string, { lists: number; rowsScanned: number }>;
  /**
   * Requests APF rejected, 429 (their flow's queue full, or their wait past
   * the limit), of every verb; injected 429s count in `faults.error`.
   */
  throttled: number;
  /** Requests that waited in APF's queue before they were served. */
  queued: number;
  /** Claim creates Milo's quota admission refused, 403, by kind (`denied`, `timeout`, ...). */
  quotaRefused: Record<string, number>;
  /** Claim creates that committed an allocation (201, not a dry run). */
  allocations: number;
  /**
   * IPAllocations retained now (their claim deleted under reclaimPolicy
   * Retain, not yet re-bound, released or swept): a gauge read at GET, not
   * reset. Admin `/stats` only.
   */
  retained?: number;
  since: string;
}

/** Zeroed counters; `tlsHandshakes` only when the API serves TLS. */
export function newStats(tls: boolean): Stats {
  return {
    total: 0,
    byMethod: {},
    byKind: {},
    byStatus: {},
    faults: { latency: 0, error: 0, reset: 0, hang: 0, releaseFail: 0 },
    page: { html: 0, feed: 0 },
    connections: 0,
    ...(tls ? { tlsHandshakes: 0 } : {}),
    lists: 0,
    listRowsScanned: 0,
    listsByKind: {},
    throttled: 0,
    queued: 0,
    quotaRefused: {},
    allocations: 0,
    since: new Date().toISOString(),
  };
}

/** Adds one to `m[k]`. */
export function bump(m: Record<string, number>, k: string): void {
  m[k] = (m[k] ?? 0) + 1;
}
