import { attachmentKey, holderOf, nodeSelector } from "./claims.ts";
import { isPlainObject } from "./config.ts";
import { attemptAll, CniError, combineErrors } from "./errors.ts";
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
      !valid.has(attachmentKey(h.containerId, h.ifname));
  });
  const failures: CniError[] = [];
  for (let i = 0; i < stale.length; i += DELETE_CONCURRENCY) {
    const batch = stale.slice(i, i + DELETE_CONCURRENCY);
    const r = await attemptAll(
      batch,
      (c) => inv.milo.deleteClaim(c.metadata.name),
      (c) => `release of ${c.metadata.name} failed`,
    );
    inv.touched.push(...r.done.map((c) => c.metadata.name));
    failures.push(...r.failures);
  }
  if (failures.length) throw combineErrors(failures);
  return null;
};

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
    return attachmentKey(v.containerID, v.ifname);
  }));
}
