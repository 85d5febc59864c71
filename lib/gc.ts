import { holderOf, nodeSelector } from "./claims.ts";
import { attachmentKey } from "./netconf.ts";
import { attemptAll, CniError, combineErrors } from "./errors.ts";
import type { Handler } from "./invocation.ts";
import type { IPClaim } from "./milo_objects.ts";

const DELETE_CONCURRENCY = 8;

/**
 * GC: release this node's claims (this cluster, this network) whose attachment
 * is not in `cni.dev/valid-attachments` and which are older than `gc.minAgeS`
 * (so an ADD in flight is never undone). A claim without a readable creation
 * time is kept. Keeps going past errors and reports them all; prints nothing
 * on success.
 */
export const gc: Handler = async (inv) => {
  const valid = inv.conf.validAttachments;
  if (!valid) throw new CniError("config", "field cni.dev/valid-attachments: missing");
  const a = inv.attachment;
  const minAgeMs = inv.node.gc.minAgeS * 1000;
  const listed = await inv.milo.listClaims(nodeSelector(a.cluster, a.node, a.network));
  const stale = listed.filter((c) => {
    const h = holderOf(c);
    if (h.containerId === undefined || h.ifname === undefined) return false;
    if (valid.has(attachmentKey(h.containerId, h.ifname))) return false;
    const created = Date.parse(c.metadata.creationTimestamp ?? "");
    return !Number.isNaN(created) && inv.now() - created >= minAgeMs;
  });
  const claims: string[] = [];
  const failures: CniError[] = [];
  for (let i = 0; i < stale.length; i += DELETE_CONCURRENCY) {
    const r = await attemptAll(
      stale.slice(i, i + DELETE_CONCURRENCY),
      (c: IPClaim) =>
        c.metadata.uid
          ? inv.milo.releaseClaim(c.metadata.name, c.metadata.uid)
          : inv.milo.deleteClaim(c.metadata.name),
      (c) => `release of ${c.metadata.name} failed`,
    );
    claims.push(...r.done.map((c) => c.metadata.name));
    failures.push(...r.failures);
  }
  if (failures.length) throw combineErrors(failures);
  return { claims };
};
