import { clip, CniError } from "./errors.ts";
import { type Cidr, FAMILIES, type Family, formatCidr } from "./ip.ts";
import { hasUnprintable, printable } from "./printable.ts";
import { MAX_VALUE_CHARS } from "./values.ts";

/** CNI spec versions this plugin speaks, oldest first. */
export const SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] as const;

/** The newest supported CNI version. */
export const LATEST_VERSION = "1.1.0";

/** CNI verbs and the version that introduced each. */
export const VERBS = {
  ADD: "0.3.0",
  DEL: "0.3.0",
  CHECK: "0.4.0",
  STATUS: "1.1.0",
  GC: "1.1.0",
  VERSION: "0.3.0",
} as const;

/** A CNI verb (`CNI_COMMAND`). */
export type Verb = keyof typeof VERBS;

/** The CNI environment of one invocation. */
export interface CniEnv {
  command: Verb;
  containerId: string;
  netns: string;
  ifname: string;
  args: Record<string, string>;
}

/** One leased address as it appears in a result. */
export interface Lease {
  family: Family;
  cidr: Cidr;
}

/** Compares dotted versions numerically. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number), pb = b.split(".").map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] || 0) - (pb[i] || 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** Throws code 1 unless `version` is supported and new enough for `verb`. */
export function requireVersion(version: string, verb: Verb): void {
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(version)) {
    throw new CniError(
      "version",
      `cniVersion ${version} is not supported`,
      `supported: ${SUPPORTED_VERSIONS.join(", ")}`,
    );
  }
  if (compareVersions(version, VERBS[verb]) < 0) {
    throw new CniError(
      "version",
      `${verb} requires cniVersion ${VERBS[verb]} or later`,
      `got ${version}`,
    );
  }
}

/**
 * Longest `CNI_ARGS` read: a runtime's (`IgnoreUnknown`, the pod's namespace,
 * name, UID and sandbox ID, a requested `IP`) is under 1,000 characters.
 */
export const MAX_CNI_ARGS_CHARS = 4096;

/** Parses `CNI_ARGS` (`K=V;K=V`); a text over {@link MAX_CNI_ARGS_CHARS} is refused unread. */
export function parseCniArgs(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if ((text?.length ?? 0) > MAX_CNI_ARGS_CHARS) {
    throw new CniError(
      "env",
      `CNI_ARGS is ${text!.length} characters; at most ${MAX_CNI_ARGS_CHARS} (MAX_CNI_ARGS_CHARS)`,
      "the runtime's arguments (the pod's namespace, name and UID) take a few hundred",
    );
  }
  for (const part of (text ?? "").split(";")) {
    if (!part) continue;
    const eq = part.indexOf("=");
    if (eq <= 0) {
      throw new CniError(
        "env",
        "CNI_ARGS is malformed",
        `entry ${JSON.stringify(clip(part, 80))} is not KEY=VALUE`,
      );
    }
    out[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return out;
}

/** CNI_ARGS keys copied into a claim's labels and annotations. */
const RECORDED_ARGS = ["K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_UID"];

const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.\-]*$/;

/** Validates `CNI_COMMAND`. */
export function parseVerb(command: string | undefined): Verb {
  if (!command || !Object.hasOwn(VERBS, command)) {
    throw new CniError(
      "env",
      command ? `CNI_COMMAND ${command} is not supported` : "CNI_COMMAND is not set",
      `expected one of ${Object.keys(VERBS).join(", ")}`,
    );
  }
  return command as Verb;
}

/** Reads and validates the CNI environment for a verb. */
export function readCniEnv(get: (name: string) => string | undefined): CniEnv {
  const verb = parseVerb(get("CNI_COMMAND"));
  const perAttachment = verb === "ADD" || verb === "DEL" || verb === "CHECK";
  const need = (name: string, required: boolean): string => {
    const v = get(name) ?? "";
    if (required && !v) throw new CniError("env", `${name} is not set`, `required for ${verb}`);
    return v;
  };
  const containerId = need("CNI_CONTAINERID", perAttachment);
  if (containerId && (containerId.length > MAX_VALUE_CHARS || !CONTAINER_ID.test(containerId))) {
    throw new CniError(
      "env",
      "CNI_CONTAINERID is invalid",
      `must be alphanumeric plus _ . -, at most ${MAX_VALUE_CHARS} characters`,
    );
  }
  const ifname = need("CNI_IFNAME", perAttachment);
  if (
    ifname && (ifname.length > 15 || /[\s/:]/.test(ifname) || ifname === "." || ifname === "..")
  ) {
    throw new CniError(
      "env",
      "CNI_IFNAME is invalid",
      "at most 15 characters, no whitespace, / or :",
    );
  }
  if (verb === "ADD" && hasUnprintable(ifname)) {
    // libcni (pkg/utils ValidateInterfaceName), Multus and the kernel refuse only `/`, `:` and
    // whitespace: an escape character passes them, and would reach every report that names
    // the interface. DEL and CHECK still take it: a lease made before is released.
    throw new CniError(
      "env",
      "CNI_IFNAME is invalid",
      `${printable(JSON.stringify(ifname))} has a control or format character`,
    );
  }
  const args = parseCniArgs(get("CNI_ARGS"));
  for (const k of RECORDED_ARGS) {
    if ((args[k]?.length ?? 0) > MAX_VALUE_CHARS) {
      throw new CniError(
        "env",
        `CNI_ARGS ${k} is too long`,
        `at most ${MAX_VALUE_CHARS} characters`,
      );
    }
  }
  return {
    command: verb,
    containerId,
    netns: need("CNI_NETNS", verb === "ADD" || verb === "CHECK"),
    ifname,
    args,
  };
}

/** Encodes an IPAM result in the requested CNI version. */
export function encodeResult(
  version: string,
  leases: Lease[],
  gateways: Partial<Record<Family, string>>,
): Record<string, unknown> {
  const legacy = compareVersions(version, "1.0.0") < 0;
  const sorted = FAMILIES.flatMap((f) => leases.filter((l) => l.family === f));
  return {
    cniVersion: version,
    ips: sorted.map((l) => ({
      ...(legacy ? { version: l.family === "ipv4" ? "4" : "6" } : {}),
      address: formatCidr(l.cidr),
      ...(gateways[l.family] ? { gateway: gateways[l.family] } : {}),
    })),
    routes: sorted.map((l) => ({ dst: l.family === "ipv4" ? "0.0.0.0/0" : "::/0" })),
    dns: {},
  };
}

/** Encodes a CNI error result. */
export function encodeError(version: string, err: CniError): Record<string, unknown> {
  return { cniVersion: version, code: err.code, msg: err.message, details: err.details };
}

/** The VERSION verb's answer. */
export function versionResult(requested: string | undefined): Record<string, unknown> {
  const known = (SUPPORTED_VERSIONS as readonly string[]).includes(requested ?? "");
  return {
    cniVersion: known ? requested : LATEST_VERSION,
    supportedVersions: [...SUPPORTED_VERSIONS],
  };
}
