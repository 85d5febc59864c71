/**
 * Test helpers for milo-dev: the child-process launcher (from
 * `milo-dev/spawn.ts`) plus small API helpers for tests.
 */

import type { MiloDev } from "../../milo-dev/spawn.ts";
export { DEV_SEED, type MiloDev, startMiloDev } from "../../milo-dev/spawn.ts";

/** The answer of {@link miloApi}. */
export interface ApiResult {
  status: number;
  headers: Headers;
  // deno-lint-ignore no-explicit-any
  body: any;
}

/**
 * Calls the IPAM API. `path` is relative to `/apis/ipam.miloapis.com/v1alpha1`
 * (e.g. `/namespaces/default/ipclaims`); `project` selects the project path
 * form; `token: null` sends no Authorization header.
 */
export async function miloApi(
  dev: MiloDev,
  method: string,
  path: string,
  opts: { body?: unknown; token?: string | null; project?: string } = {},
): Promise<ApiResult> {
  const prefix = opts.project === undefined
    ? ""
    : `/apis/resourcemanager.miloapis.com/v1alpha1/projects/${opts.project}/control-plane`;
  const token = opts.token === undefined ? dev.token : opts.token;
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (opts.body !== undefined) headers["content-type"] = "application/json";
  const res = await dev.fetch(`${dev.url}${prefix}/apis/ipam.miloapis.com/v1alpha1${path}`, {
    method,
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

/** An IPClaim create body for the default seed's classes. */
export function claimBody(
  name: string,
  opts: {
    className?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    address?: string;
    ipFamily?: string;
    scope?: Record<string, unknown> | null;
  } = {},
): Record<string, unknown> {
  const spec: Record<string, unknown> = {
    className: opts.className ?? "vpc-pods-ipv4",
    reclaimPolicy: "Delete",
  };
  if (opts.ipFamily) spec.ipFamily = opts.ipFamily;
  if (opts.address) spec.address = opts.address;
  if (opts.scope !== null) {
    spec.scope = opts.scope ?? {
      network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" },
    };
  }
  const metadata: Record<string, unknown> = { name, namespace: "default" };
  if (opts.labels) metadata.labels = opts.labels;
  if (opts.annotations) metadata.annotations = opts.annotations;
  return { apiVersion: "ipam.miloapis.com/v1alpha1", kind: "IPClaim", metadata, spec };
}
