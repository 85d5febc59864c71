/** Address family keys as used in the config (`classes.ipv4`, `classes.ipv6`). */
export type Family = "ipv4" | "ipv6";

/** Both families in result order. */
export const FAMILIES: readonly Family[] = ["ipv4", "ipv6"];

/** A parsed, canonical IP address. */
export interface Ip {
  family: Family;
  ip: string;
}

/** A parsed, canonical CIDR (address plus prefix length). */
export interface Cidr extends Ip {
  prefix: number;
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** Parses an IPv4 or IPv6 address into canonical text, or null. */
export function parseIp(text: string): Ip | null {
  if (IPV4.test(text)) return { family: "ipv4", ip: text };
  if (!text.includes(":") || !/^[0-9a-fA-F:.]+$/.test(text)) return null;
  try {
    const host = new URL(`http://[${text}]/`).hostname;
    return { family: "ipv6", ip: host.slice(1, -1) };
  } catch {
    return null;
  }
}

/** Parses `address/prefix` (prefix optional: full length) into canonical form, or null. */
export function parseCidr(text: string): Cidr | null {
  const slash = text.indexOf("/");
  const ip = parseIp(slash < 0 ? text : text.slice(0, slash));
  if (!ip) return null;
  const max = ip.family === "ipv4" ? 32 : 128;
  if (slash < 0) return { ...ip, prefix: max };
  const digits = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(digits)) return null;
  const prefix = Number(digits);
  return prefix <= max ? { ...ip, prefix } : null;
}

/** Formats a CIDR as `address/prefix`. */
export function formatCidr(c: Cidr): string {
  return `${c.ip}/${c.prefix}`;
}

/** Milo's spelling of a family (`IPv4`, `IPv6`). */
export function miloFamily(f: Family): "IPv4" | "IPv6" {
  return f === "ipv4" ? "IPv4" : "IPv6";
}

/** True when a URL host (as in `URL.hostname`) is a loopback address. */
export function isLoopbackHost(hostname: string): boolean {
  if (hostname === "localhost" || hostname === "[::1]") return true;
  return /^127\./.test(hostname) && parseIp(hostname) !== null;
}
