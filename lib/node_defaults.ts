/**
 * The node config's defaults and limits that both of its readers need: the
 * schema (lib/config.ts) and the exec'd plugin's light read before the agent
 * answers (lib/thin.ts, which loads no schema library). One place for each
 * number; a leaf: imports nothing.
 */

/** `timeouts` when the node config sets none. */
export const DEFAULT_TIMEOUTS = { requestMs: 2_000, totalMs: 10_000 } as const;

/** The range each of `timeouts` may take. */
export const TIMEOUT_RANGE = {
  requestMs: { min: 50, max: 60_000 },
  totalMs: { min: 100, max: 300_000 },
} as const;
