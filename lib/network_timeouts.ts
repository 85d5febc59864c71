/**
 * A network config's timeouts, held between the node's limits (its
 * `timeouts`) and its floor (`timeouts.minRequestMs`, `.minTotalMs`).
 */
import { CniError } from "./errors.ts";
import type { NodeConfig } from "./config.ts";

/**
 * The floor of a network config's timeouts unless the node config sets one
 * (`timeouts.minRequestMs`, `.minTotalMs`), capped at the node's own values:
 * a network may fail faster than the node's limits, never faster than Milo
 * answers (a create given up on leaves its ADD in doubt, and a release owed).
 * Milo's own alerting calls a claim p95 above 0.5 s high latency.
 */
export const DEFAULT_TIMEOUT_FLOORS = { requestMs: 1_000, totalMs: 2_000 };

/** The least timeouts a network config may set: the node's `min*` keys, else the defaults. */
export function timeoutFloors(node: Pick<NodeConfig, "timeouts">): typeof DEFAULT_TIMEOUT_FLOORS {
  const t = node.timeouts;
  return {
    requestMs: t.minRequestMs ?? Math.min(DEFAULT_TIMEOUT_FLOORS.requestMs, t.requestMs),
    totalMs: t.minTotalMs ?? Math.min(DEFAULT_TIMEOUT_FLOORS.totalMs, t.totalMs),
  };
}

/**
 * The timeouts of a network config that sets `given`: the node's where it
 * sets none; above the node's limits refused (7); below its floor refused for
 * an ADD (7) and raised to it for any other verb (a release is never refused
 * for an attachment made before the floor was).
 */
export function networkTimeouts(
  given: { requestMs?: number; totalMs?: number } | undefined,
  node: Pick<NodeConfig, "timeouts" | "path">,
  verb: string,
): { requestMs: number; totalMs: number } {
  const limit = node.timeouts;
  const t = {
    requestMs: given?.requestMs ?? limit.requestMs,
    totalMs: given?.totalMs ?? limit.totalMs,
  };
  const floor = timeoutFloors(node);
  for (const k of ["requestMs", "totalMs"] as const) {
    if (t[k] > limit[k]) {
      throw new CniError(
        "config",
        `field ipam.timeouts.${k}: must be at most ${limit[k]}, the node's limit`,
        `node config ${node.path} sets timeouts.${k}`,
      );
    }
    if (t[k] < floor[k] && verb !== "ADD") t[k] = floor[k];
    else if (t[k] < floor[k]) {
      const key = k === "requestMs" ? "minRequestMs" : "minTotalMs";
      throw new CniError(
        "config",
        `field ipam.timeouts.${k}: must be at least ${floor[k]}, the node's floor`,
        `raise ipam.timeouts.${k} or leave it out (the node's ${limit[k]} applies); a network ` +
          `may not give up on Milo sooner than the node allows: root lowers the floor with ` +
          `timeouts.${key} in the node config ${node.path}`,
      );
    }
  }
  if (t.requestMs > t.totalMs) {
    throw new CniError("config", "field ipam.timeouts: requestMs must not exceed totalMs");
  }
  return t;
}
