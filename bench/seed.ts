/**
 * The benchmark's milo-dev seed: one tenant with a dual-stack class pair and
 * pools big enough for every sweep (a /16 of IPv4 /32s, a /64 of IPv6 /96s).
 */

/** Bearer token of the benchmark tenant. */
export const BENCH_TOKEN = "bench-token-a";

/** IPClass names the benchmark plugin installs ask for. */
export const BENCH_CLASSES = { ipv4: "bench-pods-ipv4", ipv6: "bench-pods-ipv6" } as const;

/** The seed document handed to `startMiloDev({ seed })`. */
export const BENCH_SEED = {
  projects: [
    {
      name: "bench",
      tokens: [BENCH_TOKEN],
      ipClasses: [
        {
          metadata: { name: BENCH_CLASSES.ipv4 },
          spec: {
            ipFamily: "IPv4",
            prefixLength: 32,
            requiredScopeRoles: ["network"],
            allocationStrategy: "FirstFit",
          },
        },
        {
          metadata: { name: BENCH_CLASSES.ipv6 },
          spec: {
            ipFamily: "IPv6",
            prefixLength: 96,
            requiredScopeRoles: ["network"],
            allocationStrategy: "FirstFit",
          },
        },
      ],
      ipPools: [
        {
          metadata: { name: "bench-pods-v4" },
          spec: {
            cidr: "10.60.0.0/16",
            ipFamily: "IPv4",
            classNames: [BENCH_CLASSES.ipv4],
            reservations: { leading: 1, trailing: 1, unitPrefixLength: 32 },
          },
        },
        {
          metadata: { name: "bench-pods-v6" },
          spec: {
            cidr: "fd60:0:0:1::/64",
            ipFamily: "IPv6",
            classNames: [BENCH_CLASSES.ipv6],
            reservations: { leading: 1, trailing: 0, unitPrefixLength: 96 },
          },
        },
      ],
    },
  ],
};
