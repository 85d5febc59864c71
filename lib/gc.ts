import { holderOf, nodeSelector } from "./claims.ts";
import { isPlainObject } from "./config.ts";
import { CniError, combineErrors, toCniError } from "./errors.ts";
import type { Handler } from "./invocation.ts";

const DELETE_CONCURRENCY = 8;

/**
 * GC: release this node's claims (this cluster, this network) whose attachment
 * is not in `cni.dev/valid-attachments`. Keeps going past errors and reports
 * them all; prints nothing on success.
 */
export const gc: Handler = async (inv) => {
  const valid = validAttachments(inv.conf.validAttachments);
  const a = inv.attachment;
  const claims = await inv.milo.listClaims(await nodeSelector(a.cluster, a.node, a.network));
  const stale = claims.filter((c) => {
    const h = holderOf(c);
    return h.containerId !== undefined && h.ifname !== undefined &&
      !valid.has(key(h.containerId, h.ifname));
  });
  const failures: CniError[] = [];
  for (let i = 0; i < stale.length; i += DELETE_CONCURRENCY) {
    const batch = stale.slice(i, i + DELETE_CONCURRENCY);
    const results = await Promise.allSettled(
      batch.map((c) => inv.milo.deleteClaim(c.metadata.name)),
    );
    results.forEach((r, j) => {
      const name = batch[j].metadata.name;
      if (r.status === "fulfilled") inv.touched.push(name);
      else {
        const e = toCniError(r.reason);
        failures.push(
          new CniError(e.outcome, `release of ${name} failed: ${e.message}`, e.details),
        );
      }
    });
  }
  if (failures.length) throw combineErrors(failures);
  return null;
};

function key(containerId: string, ifname: string): string {
  return `${containerId}\u0000${ifname}`;
}

/** Parses `cni.dev/valid-attachments` into a set; missing or null is the empty list. */
export function validAttachments(raw: unknown): Set<string> {
  if (raw === undefined || raw === null) return new Set();
  if (!Array.isArray(raw)) {
    throw new CniError("config", "field cni.dev/valid-attachments: must be a list");
  }
  return new Set(raw.map((v, i) => {
    if (!isPlainObject(v) || typeof v.containerID !== "string" || typeof v.ifname !== "string") {
      throw new CniError(
        "config",
        `field cni.dev/valid-attachments.${i}: must have string containerID and ifname`,
      );
    }
    return key(v.containerID, v.ifname);
  }));
}
