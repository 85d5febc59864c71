/** Exact IPv4/IPv6 address arithmetic on BigInt values. */

/** Address family as spelled on the wire. */
export type IPFamily = "IPv4" | "IPv6";

/** A parsed address: its family and its value as an unsigned integer. */
export interface IP {
  family: IPFamily;
  value: bigint;
}

/** A parsed CIDR: network base (aligned), prefix length and family. */
export interface CIDR {
  family: IPFamily;
  base: bigint;
  prefix: number;
}

/** Number of address bits of a family. */
export function familyBits(family: IPFamily): number {
  return family === "IPv4" ? 32 : 128;
}

/** Size of a block with the given prefix length, in addresses. */
export function blockSize(family: IPFamily, prefix: number): bigint {
  return 1n << BigInt(familyBits(family) - prefix);
}

function parseIPv4(s: string): bigint | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  let v = 0n;
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return undefined;
    const n = Number(p);
    if (n > 255) return undefined;
    v = (v << 8n) | BigInt(n);
  }
  return v;
}

function parseIPv6(s: string): bigint | undefined {
  if (s.length === 0 || s.length > 45) return undefined;
  let tail4: bigint | undefined;
  const lastColon = s.lastIndexOf(":");
  if (s.includes(".")) {
    tail4 = parseIPv4(s.slice(lastColon + 1));
    if (tail4 === undefined) return undefined;
    s = s.slice(0, lastColon + 1) + "0:0";
  }
  const halves = s.split("::");
  if (halves.length > 2) return undefined;
  const groups = (h: string) => h === "" ? [] : h.split(":");
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  const all = [...head, ...Array(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  let v = 0n;
  for (const g of all) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
    v = (v << 16n) | BigInt(parseInt(g, 16));
  }
  if (tail4 !== undefined) v = (v & ~0xffffffffn) | tail4;
  return v;
}

/** Parses an IPv4 or IPv6 address; undefined when it is not one. */
export function parseIP(s: string): IP | undefined {
  if (s.includes(":")) {
    const value = parseIPv6(s);
    return value === undefined ? undefined : { family: "IPv6", value };
  }
  const value = parseIPv4(s);
  return value === undefined ? undefined : { family: "IPv4", value };
}

/** Parses `addr/prefix`; undefined when malformed or when host bits are set. */
export function parseCIDR(s: string): CIDR | undefined {
  const slash = s.indexOf("/");
  if (slash < 0) return undefined;
  const ip = parseIP(s.slice(0, slash));
  const pl = s.slice(slash + 1);
  if (!ip || !/^(0|[1-9][0-9]{0,2})$/.test(pl)) return undefined;
  const prefix = Number(pl);
  if (prefix > familyBits(ip.family)) return undefined;
  if (ip.value % blockSize(ip.family, prefix) !== 0n) return undefined;
  return { family: ip.family, base: ip.value, prefix };
}

/** Formats an address: dotted quad, or RFC 5952 canonical IPv6. */
export function formatIP(family: IPFamily, v: bigint): string {
  if (family === "IPv4") {
    return [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 255n)).join(".");
  }
  const g: number[] = [];
  for (let i = 7; i >= 0; i--) g.push(Number((v >> BigInt(i * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (a: number[]) => a.map((x) => x.toString(16)).join(":");
  if (bestStart < 0) return hex(g);
  return `${hex(g.slice(0, bestStart))}::${hex(g.slice(bestStart + bestLen))}`;
}

/** Formats `addr/prefix`. */
export function formatCIDR(family: IPFamily, base: bigint, prefix: number): string {
  return `${formatIP(family, base)}/${prefix}`;
}

/** Fixed-width hex key of an address, so text order equals numeric order. */
export function ipKey(v: bigint): string {
  return v.toString(16).padStart(32, "0");
}

/** Inverse of {@link ipKey}. */
export function fromIpKey(k: string): bigint {
  return BigInt("0x" + k);
}

/** Ceiling division of non-negative BigInts. */
export function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/** `part / whole` as a percentage rounded half-up to 4 decimals. */
export function percent4(part: bigint, whole: bigint): number {
  if (whole === 0n) return 0;
  const scaled = (part * 2_000_000n + whole) / (2n * whole);
  return Number(scaled) / 10_000;
}
