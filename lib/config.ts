import * as z from "zod/mini";
import { CniError } from "./errors.ts";
import { type Family, isLoopbackHost, parseIp } from "./ip.ts";

/** Default path of the node-level config file; `MILO_IPAM_CONFIG` overrides it. */
export const DEFAULT_NODE_CONFIG = "/etc/cni/net.d/milo-ipam.conf";
/** Default log file. */
export const DEFAULT_LOG_FILE = "/var/log/milo-ipam.log";
/** Default result cache directory of the container runtime (libcni layout). */
export const DEFAULT_RESULTS_DIR = "/var/lib/cni/results";
/** Largest network config accepted on stdin. */
export const MAX_STDIN_BYTES = 1024 * 1024;

const nonEmpty = z.string().check(z.minLength(1, "must be a non-empty string"));
const ms = (min: number, max: number, dflt: number) =>
  z._default(
    z.int().check(
      z.minimum(min, `must be at least ${min}`),
      z.maximum(max, `must be at most ${max}`),
    ),
    dflt,
  );
const gateway = (family: Family) =>
  z.optional(
    nonEmpty.check(
      z.refine((s) => parseIp(s)?.family === family, `must be an ${family} address`),
    ),
  );
const scopeRef = z.object({
  apiGroup: nonEmpty,
  kind: nonEmpty,
  name: nonEmpty,
  uid: z.optional(nonEmpty),
});

/** The one schema of milo-ipam's configuration (the merged `ipam` block). */
export const IpamConfigSchema = z.object({
  type: z.literal("milo-ipam"),
  milo: z.object({
    url: nonEmpty.check(
      z.refine(isAllowedUrl, "must be an https:// URL (http:// only for loopback)"),
    ),
    namespace: z._default(nonEmpty, "default"),
    tokenFile: nonEmpty,
    caFile: z.optional(nonEmpty),
    certFile: z.optional(nonEmpty),
    keyFile: z.optional(nonEmpty),
  }).check(z.refine(
    (m) => !m.certFile === !m.keyFile,
    "certFile and keyFile must be given together",
  )),
  cluster: nonEmpty,
  node: z.optional(nonEmpty),
  classes: z.object({ ipv4: z.optional(nonEmpty), ipv6: z.optional(nonEmpty) }).check(
    z.refine((c) => !!(c.ipv4 || c.ipv6), "at least one of ipv4 and ipv6 is required"),
  ),
  scope: z.optional(z.record(nonEmpty, scopeRef)),
  gateways: z._default(z.object({ ipv4: gateway("ipv4"), ipv6: gateway("ipv6") }), {}),
  timeouts: z._default(
    z.object({ requestMs: ms(50, 60_000, 2_000), totalMs: ms(100, 300_000, 10_000) }).check(
      z.refine((t) => t.requestMs <= t.totalMs, "requestMs must not exceed totalMs"),
    ),
    { requestMs: 2_000, totalMs: 10_000 },
  ),
  reclaimPolicy: z._default(z.enum(["Delete", "Retain"]), "Delete"),
  log: z._default(
    z.object({
      file: z._default(nonEmpty, DEFAULT_LOG_FILE),
      level: z._default(z.enum(["debug", "info", "warn", "error", "off"]), "info"),
    }),
    { file: DEFAULT_LOG_FILE, level: "info" },
  ),
});

/** Validated milo-ipam configuration. */
export type IpamConfig = z.infer<typeof IpamConfigSchema>;

/** The parts of the master plugin's network config that milo-ipam reads. */
export interface NetConf {
  cniVersion: string;
  name: string;
  vpc?: string;
  vpcattachment?: string;
  prevResult?: unknown;
  validAttachments?: unknown;
  ipam: IpamConfig;
}

function isAllowedUrl(text: string): boolean {
  try {
    const u = new URL(text);
    return u.protocol === "https:" || (u.protocol === "http:" && isLoopbackHost(u.hostname));
  } catch {
    return false;
  }
}

const MERGED_OBJECTS = ["milo", "classes", "gateways", "timeouts", "log"] as const;

/** Merges node defaults under the `ipam` block: the block wins, key by key. */
export function mergeConfig(
  node: Record<string, unknown>,
  ipam: Record<string, unknown>,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...node, ...ipam };
  for (const key of MERGED_OBJECTS) {
    const a = node[key], b = ipam[key];
    if (isPlainObject(a) && isPlainObject(b)) out[key] = { ...a, ...b };
  }
  return out;
}

/** True for a non-null, non-array object. */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Parses the master's network config (stdin text) and merges node defaults.
 * Throws a CniError naming the offending field.
 */
export function parseNetConf(stdin: string, nodeConfig: NodeConfigFile): NetConf {
  let raw: unknown;
  try {
    raw = JSON.parse(stdin);
  } catch (err) {
    throw new CniError(
      "decode",
      "network config on stdin is not valid JSON",
      err instanceof Error ? err.message : "",
    );
  }
  if (!isPlainObject(raw)) {
    throw new CniError("decode", "network config on stdin must be a JSON object");
  }
  const cniVersion = stringField(raw, "cniVersion");
  const name = stringField(raw, "name");
  if (!isPlainObject(raw.ipam)) {
    throw new CniError("config", "field ipam: must be an object with type milo-ipam");
  }
  const merged = mergeConfig(nodeConfig.values, raw.ipam);
  const parsed = IpamConfigSchema.safeParse(merged);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) =>
      `field ipam.${i.path.map(String).join(".")}: ${i.message}`
    );
    const from = nodeConfig.path ? ` (ipam block merged over node config ${nodeConfig.path})` : "";
    throw new CniError("config", issues[0], issues.join("; ") + from);
  }
  return {
    cniVersion,
    name,
    vpc: optionalString(raw, "vpc"),
    vpcattachment: optionalString(raw, "vpcattachment"),
    prevResult: raw.prevResult,
    validAttachments: raw["cni.dev/valid-attachments"],
    ipam: parsed.data,
  };
}

function stringField(raw: Record<string, unknown>, key: string): string {
  const v = raw[key];
  if (typeof v !== "string" || v === "") {
    throw new CniError("config", `field ${key}: must be a non-empty string`);
  }
  return v;
}

function optionalString(raw: Record<string, unknown>, key: string): string | undefined {
  const v = raw[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new CniError("config", `field ${key}: must be a string`);
  return v || undefined;
}

/** The node config file as read: its path (if one was read) and its values. */
export interface NodeConfigFile {
  path?: string;
  values: Record<string, unknown>;
}

/**
 * Reads the node-level config file. The default path may be absent; a path
 * named by `MILO_IPAM_CONFIG` must exist.
 */
export async function readNodeConfig(envPath: string | undefined): Promise<NodeConfigFile> {
  const path = envPath || DEFAULT_NODE_CONFIG;
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    if (!envPath && err instanceof Deno.errors.NotFound) return { values: {} };
    const what = envPath ? `MILO_IPAM_CONFIG=${path}` : `node config ${path}`;
    throw new CniError(
      envPath ? "env" : "config",
      `cannot read ${what}`,
      err instanceof Error ? err.message : String(err),
    );
  }
  let values: unknown;
  try {
    values = JSON.parse(text);
  } catch (err) {
    throw new CniError(
      "config",
      `node config ${path} is not valid JSON`,
      err instanceof Error ? err.message : "",
    );
  }
  if (!isPlainObject(values)) {
    throw new CniError("config", `node config ${path} must be a JSON object`);
  }
  const { type: _type, ...rest } = values;
  return { path, values: rest };
}
