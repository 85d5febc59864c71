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

/** Longest text of an IP address: IPv6 with an IPv4 tail, every group written in full. */
const MAX_IP_CHARS = 45;

/** Parses an IPv4 or IPv6 address into canonical text, or null. */
export function parseIp(text: string): Ip | null {
  if (text.length > MAX_IP_CHARS) return null;
  if (IPV4.test(text)) return { family: "ipv4", ip: text };
  if (!text.includes(":") || !/^[0-9a-fA-F:.]+$/.test(text)) return null;
  try {
    // The WHATWG URL parser validates an IPv6 literal and prints it in RFC 5952
    // canonical form (lowercase, longest zero run compressed), which is the form
    // results and comparisons need; no IPv6 parser is built into Deno otherwise.
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

/** The address as a number (32 or 128 bits). */
export function ipValue(ip: Ip): bigint {
  if (ip.family === "ipv4") {
    return ip.ip.split(".").reduce((acc, o) => (acc << 8n) | BigInt(o), 0n);
  }
  const [head, tail] = ip.ip.includes("::") ? ip.ip.split("::") : [ip.ip, undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function bits(f: Family): bigint {
  return f === "ipv4" ? 32n : 128n;
}

/** True when `ip` lies inside `cidr`. */
export function cidrContains(cidr: Cidr, ip: Ip): boolean {
  if (cidr.family !== ip.family) return false;
  const host = bits(cidr.family) - BigInt(cidr.prefix);
  return ipValue(cidr) >> host === ipValue(ip) >> host;
}

/** The first address of the /`prefix` block holding `ip`, canonical. */
export function blockStart(ip: Ip, prefix: number): string {
  const host = bits(ip.family) - BigInt(prefix);
  const v = (ipValue(ip) >> host) << host;
  if (ip.family === "ipv4") return [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 255n)).join(".");
  const groups = [...Array(8).keys()].map((i) =>
    ((v >> BigInt(112 - 16 * i)) & 0xffffn).toString(16)
  );
  return parseIp(groups.join(":"))!.ip;
}

/** True when `cidr` has no host bits set (it is its own network address). */
export function isNetworkAddress(cidr: Cidr): boolean {
  const host = bits(cidr.family) - BigInt(cidr.prefix);
  return (ipValue(cidr) & ((1n << host) - 1n)) === 0n;
}

const SPECIAL: { family: Family; cidr: string; what: string }[] = [
  { family: "ipv4", cidr: "0.0.0.0/8", what: "unspecified" },
  { family: "ipv4", cidr: "127.0.0.0/8", what: "loopback" },
  { family: "ipv4", cidr: "169.254.0.0/16", what: "link-local" },
  { family: "ipv4", cidr: "224.0.0.0/4", what: "multicast" },
  { family: "ipv4", cidr: "240.0.0.0/4", what: "reserved or broadcast" },
  { family: "ipv6", cidr: "::/128", what: "unspecified" },
  { family: "ipv6", cidr: "::1/128", what: "loopback" },
  { family: "ipv6", cidr: "::ffff:0:0/96", what: "IPv4-mapped" },
  { family: "ipv6", cidr: "fe80::/10", what: "link-local" },
  { family: "ipv6", cidr: "ff00::/8", what: "multicast" },
];

/**
 * What makes an address unusable as a pod address (unspecified, loopback,
 * link-local, multicast, reserved), or undefined for an ordinary address.
 */
export function specialUse(ip: Ip): string | undefined {
  return SPECIAL.find((s) => s.family === ip.family && cidrContains(parseCidr(s.cidr)!, ip))?.what;
}
