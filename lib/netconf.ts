/**
 * The master plugin's network config on stdin, for one verb: the version
 * first (code 1), the fields milo-ipam reads (code 7, naming the field), the
 * ipam block against the node config (a galactic config's ADD needs its
 * gateways, lib/galactic.ts), `prevResult` for CHECK and the attachment list
 * for GC.
 */
import { requireVersion, type Verb } from "./cni.ts";
import { isPlainObject, MAX_VALUE_CHARS } from "./values.ts";
import type { NetworkConfig, NodeConfig } from "./config.ts";
import { CniError } from "./errors.ts";
import { requireGateways } from "./galactic.ts";
import { type Cidr, type Family, parseCidr } from "./ip.ts";
import { JSON_BOUND, parseBounded } from "./json_bound.ts";
import { parseNetwork } from "./network_config.ts";
import { hasUnprintable, printable } from "./printable.ts";

/** The parts of the master plugin's network config that milo-ipam reads. */
export interface NetConf {
  cniVersion: string;
  name: string;
  vpc?: string;
  vpcattachment?: string;
  /** `prevResult`'s addresses by family (CHECK only; undefined when absent). */
  prevResult?: Map<Family, Cidr[]>;
  /** `runtimeConfig.ips` (Multus's `ips` capability), as given; see lib/requested.ts. */
  runtimeIps?: string[];
  /** `cni.dev/valid-attachments` as attachment keys (GC only; undefined when absent). */
  validAttachments?: Set<string>;
  network: NetworkConfig;
}

/**
 * The network config on stdin (text) as JSON: refused (6) over
 * {@link JSON_BOUND} before it is parsed, or when it is not JSON.
 */
export function stdinJson(stdin: string): unknown {
  const r = parseBounded(stdin);
  if (r.ok) return r.value;
  if (r.over) {
    throw new CniError(
      "decode",
      `network config on stdin has ${r.why}`,
      `a network config is held to ${JSON_BOUND.entries} objects, lists and commas, ` +
        `${JSON_BOUND.depth} levels and ${JSON_BOUND.escapes} escapes before it is parsed ` +
        "(docs/limits.md)",
    );
  }
  throw new CniError("decode", "network config on stdin is not valid JSON", r.why);
}

/**
 * Parses the master's network config (stdin text) for `verb` against the node
 * config: see {@link netConfOf}.
 */
export function parseNetConf(stdin: string, node: NodeConfig, verb: Verb): NetConf {
  return netConfOf(stdinJson(stdin), node, verb);
}

/**
 * The master's network config (stdin, parsed by {@link stdinJson}) for
 * `verb` against the node config: the version first (code 1), then the
 * fields (code 7, naming the field); `prevResult` for CHECK and the
 * attachment list for GC.
 */
export function netConfOf(raw: unknown, node: NodeConfig, verb: Verb): NetConf {
  if (!isPlainObject(raw)) {
    throw new CniError("decode", "network config on stdin must be a JSON object");
  }
  const cniVersion = stringField(raw, "cniVersion");
  requireVersion(cniVersion, verb);
  const name = stringField(raw, "name");
  if (verb === "ADD" && hasUnprintable(name)) {
    // A NAD's author chooses it; it is on every claim and in every report. A DEL still takes it.
    throw new CniError(
      "config",
      "field name: has a control or format character",
      printable(JSON.stringify(name)),
    );
  }
  if (!isPlainObject(raw.ipam)) {
    throw new CniError("config", "field ipam: must be an object with type milo-ipam");
  }
  if (raw.ipam.type !== "milo-ipam") {
    throw new CniError("config", "field ipam.type: must be milo-ipam");
  }
  const ids = {
    vpc: optionalString(raw, "vpc"),
    vpcattachment: optionalString(raw, "vpcattachment"),
  };
  const network = parseNetwork(raw.ipam, node, verb);
  if (verb === "ADD") requireGateways(ids, network);
  return {
    cniVersion,
    name,
    ...ids,
    prevResult: verb === "CHECK" ? parsePrevResult(raw.prevResult) : undefined,
    runtimeIps: verb === "ADD" ? parseRuntimeIps(raw.runtimeConfig) : undefined,
    validAttachments: verb === "GC" ? parseValidAttachments(raw) : undefined,
    network,
  };
}

function stringField(raw: Record<string, unknown>, key: string): string {
  const v = raw[key];
  if (typeof v !== "string" || v === "") {
    throw new CniError("config", `field ${key}: must be a non-empty string`);
  }
  if (v.length > MAX_VALUE_CHARS) {
    throw new CniError("config", `field ${key}: must be at most ${MAX_VALUE_CHARS} characters`);
  }
  return v;
}

function optionalString(raw: Record<string, unknown>, key: string): string | undefined {
  const v = raw[key];
  if (v === undefined || v === null || v === "") return undefined;
  return stringField(raw, key);
}

/** `runtimeConfig.ips`: a list of at most 2 strings, or undefined when absent or empty. */
function parseRuntimeIps(rc: unknown): string[] | undefined {
  if (!isPlainObject(rc) || rc.ips === undefined || rc.ips === null) return undefined;
  const ips = rc.ips;
  if (!Array.isArray(ips) || ips.length > 2 || ips.some((v) => typeof v !== "string")) {
    throw new CniError(
      "config",
      "field runtimeConfig.ips: must be a list of at most 2 addresses (one per family)",
    );
  }
  return ips.length ? ips as string[] : undefined;
}

/** A set key for one attachment (container, interface). */
export function attachmentKey(containerId?: string, ifname?: string): string {
  return `${containerId}\u0000${ifname}`;
}

/**
 * `cni.dev/valid-attachments` (or its older name `cni.dev/attachments`) as a
 * set of attachment keys. A missing or null list is a config error: GC never
 * releases on missing input.
 */
export function parseValidAttachments(raw: Record<string, unknown>): Set<string> {
  const key = raw["cni.dev/valid-attachments"] !== undefined
    ? "cni.dev/valid-attachments"
    : "cni.dev/attachments";
  const list = raw[key];
  if (!Array.isArray(list)) {
    throw new CniError(
      "config",
      list === undefined || list === null
        ? "field cni.dev/valid-attachments: missing; GC releases nothing without it"
        : `field ${key}: must be a list`,
    );
  }
  return new Set(list.map((v, i) => {
    if (!isPlainObject(v) || typeof v.containerID !== "string" || typeof v.ifname !== "string") {
      throw new CniError("config", `field ${key}.${i}: must have string containerID and ifname`);
    }
    return attachmentKey(v.containerID, v.ifname);
  }));
}

/**
 * Most addresses `prevResult` may list (CHECK): an attachment's result has
 * one per family of each interface, milo-ipam's two among them.
 */
export const MAX_PREV_IPS = 64;

/**
 * The addresses of `prevResult` by family, or undefined when there is no
 * prevResult; a list over {@link MAX_PREV_IPS} is refused before any of it
 * is read.
 */
export function parsePrevResult(prev: unknown): Map<Family, Cidr[]> | undefined {
  if (prev === undefined || prev === null) return undefined;
  if (!isPlainObject(prev) || (prev.ips !== undefined && !Array.isArray(prev.ips))) {
    throw new CniError("config", "field prevResult: must be an object with an ips list");
  }
  const ips = (prev.ips ?? []) as unknown[];
  if (ips.length > MAX_PREV_IPS) {
    throw new CniError(
      "config",
      `field prevResult.ips: ${ips.length} addresses; at most ${MAX_PREV_IPS} (MAX_PREV_IPS)`,
      "an attachment's result lists an address per family of each interface",
    );
  }
  const out = new Map<Family, Cidr[]>();
  for (let i = 0; i < ips.length; i++) {
    const ip = ips[i];
    const cidr = isPlainObject(ip) && typeof ip.address === "string" ? parseCidr(ip.address) : null;
    if (!cidr) {
      throw new CniError(
        "config",
        `field prevResult.ips.${i}.address: must be an IP address in CIDR form`,
      );
    }
    const family = out.get(cidr.family);
    if (family) family.push(cidr);
    else out.set(cidr.family, [cidr]);
  }
  return out;
}
