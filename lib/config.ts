/**
 * milo-ipam's configuration: one zod schema in two parts.
 *
 * The **node config** is root's file on the node: Milo endpoint and
 * credentials, cluster, node, log, state paths, agent and GC settings, and the
 * timeouts every network is held to. The **network config** (the master's
 * `ipam` block, written by namespace users through a NetworkAttachmentDefinition)
 * may choose only per-network things; the node config may give their defaults.
 * Reading the node config file is lib/config_file.ts; a network config is
 * read against the node config by lib/network_config.ts.
 */
import * as z from "zod/mini";
import { isPlainObject, MAX_VALUE_CHARS } from "./values.ts";
import { DEFAULT_TIMEOUTS, TIMEOUT_RANGE } from "./node_defaults.ts";
import { issuesOf, type KeyTree, keyTree, refuseUnknownKeys } from "./config_fields.ts";
import { clip, CniError } from "./errors.ts";
import { DEFAULT_AGENT_SOCKET } from "./paths.ts";
import { type Family, isLoopbackHost, parseIp } from "./ip.ts";
import { refuseGrantConflicts } from "./scope_grant.ts";

/** Default log file. */
export const DEFAULT_LOG_FILE = "/var/log/milo-ipam/milo-ipam.log";
/** Default result cache directory of the container runtime (libcni's default cache dir). */
export const DEFAULT_RESULTS_DIR = "/var/lib/cni/results";
/** Default result cache directory of Multus's delegates (its `cniDir`, `/var/lib/cni/multus`). */
export const MULTUS_RESULTS_DIR = "/var/lib/cni/multus/results";
/** The libcni result caches reconcile reads when the node config names none. */
export const DEFAULT_RESULTS_DIRS = [DEFAULT_RESULTS_DIR, MULTUS_RESULTS_DIR];
/** Where the host's identity is read (systemd's machine-id). */
export const DEFAULT_HOST_ID_FILE = "/etc/machine-id";
/**
 * Where the firmware names the machine (SMBIOS product UUID): the host's
 * identity where no machine-id is, kept by the machine whatever its disks hold.
 */
export const DEFAULT_HARDWARE_ID_FILE = "/sys/class/dmi/id/product_uuid";
/** Where the kernel names the current boot (a random UUID made at every boot). */
export const DEFAULT_BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id";
/** Default directory of milo-ipam's own node state (reconcile state, release journal). */
export const DEFAULT_STATE_DIR = "/var/lib/milo-ipam";

const nonEmpty = z.string().check(z.minLength(1, "must be a non-empty string"));
const bounded = nonEmpty.check(
  z.maxLength(MAX_VALUE_CHARS, `must be at most ${MAX_VALUE_CHARS} characters`),
);
const path = nonEmpty.check(z.refine((s) => s.startsWith("/"), "must be an absolute path"));
const int = (min: number, max: number) =>
  z.int().check(
    z.minimum(min, `must be at least ${min}`),
    z.maximum(max, `must be at most ${max}`),
  );
const withDefault = <T extends z.ZodMiniType>(schema: T, value: z.infer<T>) =>
  z._default(schema, value as never);

/** A Kubernetes label value, non-empty (a UID is one). */
const LABEL_VALUE_RE = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/;

/** A DNS-1123 label (namespace names). */
export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** A DNS-1123 subdomain (object names). */
export const DNS1123_SUBDOMAIN =
  /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function isMiloUrl(text: string): boolean {
  try {
    const u = new URL(text);
    return u.protocol === "https:" || (u.protocol === "http:" && isLoopbackHost(u.hostname));
  } catch {
    return false;
  }
}

function isProxyUrl(text: string): boolean {
  try {
    const u = new URL(text);
    return (u.protocol === "http:" || u.protocol === "https:") && !u.username && !u.password;
  } catch {
    return false;
  }
}

/**
 * Where the agent's metrics may listen: a loopback `HOST:PORT`, or every
 * address of the node (`0.0.0.0:PORT`, `[::]:PORT`) for a Prometheus in the
 * cluster to scrape.
 */
function isMetricsListen(text: string): boolean {
  const m = /^(.+):(\d{1,5})$/.exec(text);
  if (!m || Number(m[2]) > 65535) return false;
  return isLoopbackHost(m[1]) || m[1] === "0.0.0.0" || m[1] === "[::]";
}

/**
 * Refuses (code 7) metrics on the node's addresses without a scrape token:
 * under `hostNetwork` every pod reaches them. Checked by the installs and at
 * the agent's start, never per call, so a metrics setting never fails a pod's
 * network.
 */
export function requireScrapeToken(agent: { metrics?: string; metricsTokenFile?: string }): void {
  const m = agent.metrics;
  if (!m || agent.metricsTokenFile || isLoopbackHost(m.slice(0, m.lastIndexOf(":")))) return;
  throw new CniError(
    "config",
    `field agent.metrics: ${m} listens on every address of the node without ` +
      "agent.metricsTokenFile: any pod reaching the node would read the agent's metrics",
    "set agent.metricsTokenFile to a file holding the token the scraper sends " +
      "(deploy/base: the Secret milo-ipam-metrics), or listen on a loopback address",
  );
}

/**
 * An object whose unknown keys are refused: inside a list the config's key
 * check (lib/config_fields.ts) does not reach, a mistyped key would otherwise
 * be dropped, and a grant silently widened or a scope's uid lost.
 */
function strict<S extends Record<string, z.ZodMiniType>>(shape: S) {
  const known = Object.keys(shape);
  const unknown = (v: unknown) => Object.keys(v as object).filter((k) => !known.includes(k));
  // A refinement rather than a strict object: its issue lets a union (allowRequestedAddresses)
  // report the item's own field, not only that no form matched.
  return z.looseObject(shape).check(
    z.refine((v) => !unknown(v).length, {
      error: (iss) =>
        `unknown key ${unknown(iss.input).join(", ")}; known keys: ${known.join(", ")}`,
    }),
  );
}

const label = nonEmpty.check(z.regex(DNS1123_LABEL, "must be a DNS-1123 label"));

/** A scope role's reference (Milo's `ScopeRef`; its uid is part of the address space). */
const scopeRefShape = { apiGroup: bounded, kind: bounded, name: bounded, uid: z.optional(bounded) };

const timeoutsShape = {
  requestMs: int(TIMEOUT_RANGE.requestMs.min, TIMEOUT_RANGE.requestMs.max),
  totalMs: int(TIMEOUT_RANGE.totalMs.min, TIMEOUT_RANGE.totalMs.max),
};

/** Node-only settings: credentials, endpoints, identity, paths. */
const nodeShape = {
  milo: z.object({
    url: nonEmpty.check(z.refine(isMiloUrl, "must be an https:// URL (http:// only for loopback)")),
    namespace: withDefault(
      nonEmpty.check(z.regex(DNS1123_LABEL, "must be a DNS-1123 label")),
      "default",
    ),
    tokenFile: path,
    caFile: z.optional(path),
    certFile: z.optional(path),
    keyFile: z.optional(path),
    proxy: z.optional(
      nonEmpty.check(z.refine(isProxyUrl, "must be an http:// or https:// URL without userinfo")),
    ),
  }).check(z.refine(
    (m) => !m.certFile === !m.keyFile,
    "certFile and keyFile must be given together",
  )),
  cluster: bounded,
  /**
   * The UID of the cluster's `kube-system` namespace: the fact that tells two
   * clusters given one `cluster` name apart (recorded on every claim; the
   * sweep brakes on another's, lib/cluster_uid.ts). The node install sets it.
   */
  clusterUid: z.optional(
    nonEmpty.check(z.regex(LABEL_VALUE_RE, "must be a label value (the namespace's UID)")),
  ),
  node: z.optional(bounded),
  log: withDefault(
    z.object({
      file: withDefault(path, DEFAULT_LOG_FILE),
      level: withDefault(z.enum(["debug", "info", "warn", "error", "off"]), "info"),
    }),
    { file: DEFAULT_LOG_FILE, level: "info" },
  ),
  resultsDir: z.optional(path),
  resultsDirs: z.optional(
    z.array(path).check(z.minLength(1, "must name at least one directory"), z.maxLength(16)),
  ),
  hostIdFile: withDefault(path, DEFAULT_HOST_ID_FILE),
  hardwareIdFile: withDefault(path, DEFAULT_HARDWARE_ID_FILE),
  bootIdFile: withDefault(path, DEFAULT_BOOT_ID_FILE),
  stateDir: withDefault(path, DEFAULT_STATE_DIR),
  agent: withDefault(
    z.object({
      socket: withDefault(path, DEFAULT_AGENT_SOCKET),
      metrics: z.optional(
        nonEmpty.check(
          z.refine(isMetricsListen, "must be a loopback HOST:PORT, 0.0.0.0:PORT or [::]:PORT"),
        ),
      ),
      metricsTokenFile: z.optional(path),
      reconcileIntervalS: withDefault(int(10, 86_400), 300),
    }),
    { socket: DEFAULT_AGENT_SOCKET, reconcileIntervalS: 300 },
  ),
  allowRequestedAddresses: withDefault(
    z.union([
      z.boolean(),
      z.array(
        strict({ namespace: z.optional(label), network: z.optional(bounded) }).check(
          z.refine((g) => !!(g.namespace || g.network), "must name a namespace or a network"),
        ),
      ).check(z.maxLength(1024)),
    ], { error: "must be true, false or a list of {namespace, network} grants" }),
    false,
  ),
  allowIdentities: withDefault(
    z.array(
      strict({
        namespace: z.optional(label),
        network: z.optional(bounded),
        identity: z.optional(z.enum(["pod", "network"])),
      }).check(
        z.refine(
          (g) => !!(g.namespace || g.network || g.identity),
          "must name a namespace, a network or an identity",
        ),
      ),
    ).check(z.maxLength(1024)),
    [],
  ),
  allowScopes: withDefault(
    z.array(
      strict({
        namespace: z.optional(label),
        network: z.optional(bounded),
        scope: z.record(bounded, strict(scopeRefShape)),
        classes: z.optional(
          z.array(bounded).check(z.minLength(1, "must name at least one class"), z.maxLength(16)),
        ),
      }),
    ).check(z.maxLength(1024)),
    [],
  ),
  gc: withDefault(z.object({ minAgeS: withDefault(int(0, 86_400), 60) }), { minAgeS: 60 }),
  reconcile: withDefault(
    z.object({
      graceS: withDefault(int(0, 86_400), 300),
      verifyIntervalS: withDefault(int(0, 86_400), 1_800),
      recheckAfterS: withDefault(int(0, 3_600), 90),
    }),
    { graceS: 300, verifyIntervalS: 1_800, recheckAfterS: 90 },
  ),
  timeouts: withDefault(
    z.object({
      requestMs: withDefault(timeoutsShape.requestMs, DEFAULT_TIMEOUTS.requestMs),
      totalMs: withDefault(timeoutsShape.totalMs, DEFAULT_TIMEOUTS.totalMs),
      minRequestMs: z.optional(timeoutsShape.requestMs),
      minTotalMs: z.optional(timeoutsShape.totalMs),
    }).check(
      z.refine((t) => t.requestMs <= t.totalMs, "requestMs must not exceed totalMs"),
      z.refine(
        (t) => (t.minRequestMs ?? 0) <= t.requestMs && (t.minTotalMs ?? 0) <= t.totalMs,
        "minRequestMs and minTotalMs must not exceed requestMs and totalMs",
      ),
    ),
    { ...DEFAULT_TIMEOUTS },
  ),
};

/** Keys of the node config that a network config may not set (unless equal to the node's). */
export const NODE_ONLY_KEYS = Object.keys(nodeShape).filter((k) => k !== "timeouts");

const gateway = (family: Family) =>
  z.optional(
    nonEmpty.check(z.refine((s) => parseIp(s)?.family === family, `must be an ${family} address`)),
  );
const scopeRef = z.object(scopeRefShape);

/**
 * What a network's claims are named after (lib/claims.ts): the attachment
 * (container and interface: a new sandbox gets a new address), the pod
 * (namespace and name: a re-created pod gets its address back) or the
 * network (one slot: whichever pod fills it gets the slot's address).
 */
export const IDENTITIES = ["attachment", "pod", "network"] as const;
/** A network's claim identity. */
export type Identity = typeof IDENTITIES[number];

/** Per-network settings: what a network config may choose. */
const networkShape = {
  classes: z.object({ ipv4: z.optional(bounded), ipv6: z.optional(bounded) }).check(
    z.refine((c) => !!(c.ipv4 || c.ipv6), "at least one of ipv4 and ipv6 is required"),
  ),
  scope: z.optional(z.record(bounded, scopeRef)),
  gateways: withDefault(z.object({ ipv4: gateway("ipv4"), ipv6: gateway("ipv6") }), {}),
  prefixLengths: withDefault(
    z.object({ ipv4: z.optional(int(32, 32)), ipv6: z.optional(int(64, 128)) }),
    {},
  ),
  timeouts: z.optional(
    z.object({
      requestMs: z.optional(timeoutsShape.requestMs),
      totalMs: z.optional(timeoutsShape.totalMs),
    }),
  ),
  reclaimPolicy: withDefault(z.enum(["Delete", "Retain"]), "Delete"),
  identity: withDefault(z.enum(IDENTITIES), "attachment"),
};

/** Keys a network config may set. */
export const NETWORK_KEYS = Object.keys(networkShape);

/** The one schema: node settings plus the node's defaults for per-network settings. */
export const NodeConfigSchema = z.object({
  ...nodeShape,
  classes: z.optional(z.record(z.string(), z.unknown())),
  scope: z.optional(z.unknown()),
  gateways: z.optional(z.record(z.string(), z.unknown())),
  prefixLengths: z.optional(z.record(z.string(), z.unknown())),
  reclaimPolicy: z.optional(z.unknown()),
  identity: z.optional(z.unknown()),
});

/** The per-network part of the schema, applied to node defaults merged with the ipam block. */
export const NetworkConfigSchema = z.object(networkShape);

/** The node config's keys: the network keys it may give defaults for, and its own (`timeouts`). */
const NODE_KEYS: KeyTree = {
  type: null,
  ...keyTree(NetworkConfigSchema),
  ...keyTree(z.object(nodeShape)),
};

/** Validated node settings, with the node name resolved and the file it came from. */
export type NodeConfig = Omit<z.infer<typeof NodeConfigSchema>, "node" | "resultsDirs"> & {
  node: string;
  /**
   * The libcni result caches of the node's runtimes and meta-plugins:
   * `resultsDirs`, else `resultsDir` (the runtime's) beside Multus's, else both defaults.
   */
  resultsDirs: string[];
  /** The file read. */
  path: string;
  /** Set when the file read lies in the runtimes' network directory (the legacy path). */
  warning?: string;
  /** The raw network defaults of the node config. */
  defaults: Record<string, unknown>;
};

/** Validated per-network settings, timeouts resolved against the node's. */
export type NetworkConfig = Omit<z.infer<typeof NetworkConfigSchema>, "timeouts"> & {
  timeouts: { requestMs: number; totalMs: number };
};

/** A node config as validated, before the node name falls back to the environment. */
export type ValidatedNodeConfig = Omit<NodeConfig, "node" | "warning"> & { node?: string };

/** Validates the node config file's values; `env` resolves the node name fallback. */
export function parseNodeConfig(
  values: unknown,
  path: string,
  env: (name: string) => string | undefined = () => undefined,
): NodeConfig {
  return withNodeName(validateNodeConfig(values, path), env);
}

/**
 * The validated node config with its node name as the API knows the node:
 * the file's `node`, else `NODE_NAME` (the DaemonSet's `spec.nodeName`),
 * both as given; else the hostname as the kubelet registers it without
 * `--hostname-override` (k8s.io/component-helpers node/util/hostname.go
 * `GetHostname`, formerly pkg/util/node: trimmed, lowercased).
 */
export function withNodeName(
  v: ValidatedNodeConfig,
  env: (name: string) => string | undefined,
  hostname: () => string = Deno.hostname,
): NodeConfig {
  return { ...v, node: v.node || env("NODE_NAME") || kubeletHostname(hostname()) };
}

/** A hostname as the kubelet names its node after it: whitespace trimmed, lowercased. */
export function kubeletHostname(hostname: string): string {
  const name = hostname.trim().toLowerCase();
  if (!name) {
    throw new CniError(
      "config",
      "the hostname is empty: the node name cannot be derived from it",
      "set node in the node config, or NODE_NAME, to the node's name in the API",
    );
  }
  return name;
}

/** Validates the node config file's values, the node name left unresolved. */
export function validateNodeConfig(values: unknown, path: string): ValidatedNodeConfig {
  if (!isPlainObject(values)) {
    throw new CniError("config", `node config ${path} must be a JSON object`);
  }
  const { type: _type, ...rest } = values;
  refuseUnknownKeys(rest, NODE_KEYS, "", `node config ${path}: `);
  const parsed = NodeConfigSchema.safeParse(rest);
  if (!parsed.success) {
    const issues = issuesOf(parsed.error, "");
    throw new CniError("config", `node config ${path}: ${issues[0]}`, issues.join("; "));
  }
  if (rest.scope !== undefined) {
    throw new CniError(
      "config",
      `node config ${path}: field scope: a default scope is no longer read; address spaces are ` +
        "granted per network (allowScopes)",
      `move it into allowScopes: ${
        clip(JSON.stringify([{ scope: rest.scope }]), 300)
      } grants it to every namespace's networks; see docs/upgrade.md before the first node runs ` +
        "this release",
    );
  }
  refuseGrantConflicts(parsed.data.allowScopes, path);
  const { resultsDir, resultsDirs } = parsed.data;
  if (resultsDir !== undefined && resultsDirs !== undefined) {
    throw new CniError(
      "config",
      `node config ${path}: field resultsDir: set resultsDirs or resultsDir, not both`,
    );
  }
  const defaults: Record<string, unknown> = {};
  for (const k of NETWORK_KEYS) {
    if (k !== "timeouts" && rest[k] !== undefined) defaults[k] = rest[k];
  }
  return {
    ...parsed.data,
    resultsDirs: resultsDirs ??
      (resultsDir ? [...new Set([resultsDir, MULTUS_RESULTS_DIR])] : DEFAULT_RESULTS_DIRS),
    path,
    defaults,
  };
}
