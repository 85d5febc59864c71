/** The shapes testing/stub_milo.ts stores and answers. */

/** A JSON object. */
export type Json = Record<string, unknown>;

/** An IPClaim as the stub stores and answers it. */
export interface WireClaim {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace: string;
    uid?: string;
    resourceVersion?: string;
    creationTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: {
    className?: string;
    ipFamily?: string;
    scope?: unknown;
    reclaimPolicy?: string;
    address?: string;
    ownerRef?: unknown;
  };
  status: {
    phase?: string;
    allocatedCIDR?: string;
    address?: string;
    poolRef?: { name: string };
    boundAllocationRef?: { name: string };
  };
}

/** One request the stub received. */
export interface StubRequest {
  method: string;
  /** The path below the base URL, e.g. `/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims`. */
  path: string;
  /** Query parameters. */
  query: Record<string, string>;
  headers: Headers;
  /** The JSON body, or undefined when there was none. */
  body: unknown;
}

/** What a class hands out. */
export interface StubClass {
  family: "IPv4" | "IPv6";
  pool: string;
}
