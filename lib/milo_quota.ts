/**
 * What Milo says of the project's IPClaim quota. Milo's IPAM server admits
 * every create against the project's `ipclaims-per-project` allowance
 * (milo's `ResourceQuotaEnforcement`, see `refusalOf`), and its quota
 * controllers keep the count in an AllowanceBucket of the project's control
 * plane (`internal/quota/controllers/core/bucket.go` in milo-os/milo): in
 * namespace `milo-system`, named `bucket-` and the SHA-256 of the resource
 * type, `Project` and the project (`generateAllowanceBucketName`), its status
 * the limit, what granted claims hold and what is left. Reading it needs
 * `get` on `allowancebuckets` of `quota.miloapis.com` (milo's `quota-viewer`
 * role); the IPAM API itself says nothing of quota.
 */
import * as z from "zod/mini";
import { sha256Hex } from "./sha256.ts";

/** The resource type of an IPClaim's ResourceClaim (milo-os/ipam's ClaimCreationPolicy). */
const RESOURCE_TYPE = "ipam.miloapis.com/ipclaims";

/** The project's IPClaim quota as Milo counts it, or why it is not known. */
export type QuotaUsage =
  | { limit: number; allocated: number; available: number }
  | { unknown: string };

/** The AllowanceBucket's status as read: only the three figures. */
export const AllowanceBucketSchema = z.object({
  status: z.object({
    limit: z.number(),
    allocated: z.number(),
    available: z.optional(z.number()),
  }),
});

/** The project of a `milo.url` of Milo's front door (`.../projects/P/control-plane`). */
export function projectOf(baseUrl: string): string | undefined {
  const m = /\/projects\/([^/]+)\/control-plane\/?$/.exec(new URL(baseUrl).pathname);
  return m ? decodeURIComponent(m[1]) : undefined;
}

/** The name of `project`'s AllowanceBucket of IPClaims. */
export function bucketName(project: string): string {
  return `bucket-${sha256Hex(`${RESOURCE_TYPE}Project${project}`)}`;
}

/** The path (after `milo.url`) of `project`'s AllowanceBucket of IPClaims. */
export function bucketPath(project: string): string {
  return `/apis/quota.miloapis.com/v1alpha1/namespaces/milo-system/allowancebuckets/${
    bucketName(project)
  }`;
}

/** Why Milo's answer of `status` tells nothing of the quota. */
export function unknownQuota(status: 403 | 404, project: string): QuotaUsage {
  return {
    unknown: status === 403
      ? "Milo forbids this token to read the project's quota: grant it get on allowancebuckets " +
        "(quota.miloapis.com; Milo's quota-viewer role)"
      : `Milo holds no IPClaim quota bucket for project ${project} (quota not enforced, or no ` +
        "claim made yet)",
  };
}

/** One line of text: how close the project is to its quota. */
export function quotaText(q: QuotaUsage | undefined): string {
  if (!q) return "quota: not read";
  if ("unknown" in q) return `quota: unknown (${q.unknown})`;
  const pct = q.limit > 0 ? ` (${Math.round(q.allocated * 100 / q.limit)}%)` : "";
  return `quota: ${q.allocated} of ${q.limit} IPClaims the project's ipclaims-per-project ` +
    `allows are held${pct}, ${q.available} left`;
}
