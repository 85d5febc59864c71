/** The milo-dev seeds of tests, bench and demo (the JSON files in `seeds/`), with their tokens. */

import bench from "./seeds/bench.json" with { type: "json" };
import demo from "./seeds/demo.json" with { type: "json" };
import e2e from "./seeds/e2e.json" with { type: "json" };
import example from "./seeds/example.json" with { type: "json" };
import plugin from "./seeds/plugin.json" with { type: "json" };

/** The seed's first token of its first project. */
function firstToken(seed: { projects: { tokens: string[] }[] }): string {
  return seed.projects[0].tokens[0];
}

/**
 * milo-dev's example and default seed: tenant-a (`dev-token-a`, a quota of
 * 300 claims: a /24 of IPv4 /32s, a /64 of IPv6 /96s) and tenant-b
 * (`dev-token-b`, 100: a /26).
 */
export const DEV_SEED = example;

/**
 * The process tests' seed: tenant-a (its quota Milo's `maxLimit`, 10,000 claims: tests make
 * over 1,000) with a tiny /127 and a class it may not use; empty tenant-b.
 */
export const PLUGIN_SEED = plugin;
/** Bearer token of {@link PLUGIN_SEED}'s tenant-a. */
export const PLUGIN_TOKEN = firstToken(plugin);

/** The demo's seed: one tenant (Milo's default quota, 100 claims), a /27 of IPv4 and a /64 of IPv6 /96s. */
export const DEMO_SEED = demo;
/** Bearer token of {@link DEMO_SEED}. */
export const DEMO_TOKEN = firstToken(demo);

/** The end-to-end seed: its IPv4 /24 keeps 1 leading and 55 trailing units, 200 usable. */
export const E2E_SEED = e2e;
/** Bearer token of {@link E2E_SEED}. */
export const E2E_TOKEN = firstToken(e2e);

/** The benchmark's seed: pools big enough for every sweep (a /16 of IPv4, a /64 of IPv6 /96s). */
export const BENCH_SEED = bench;
/** Bearer token of {@link BENCH_SEED}. */
export const BENCH_TOKEN = firstToken(bench);
/** IPClass names the benchmark's installs ask for. */
export const BENCH_CLASSES = {
  ipv4: bench.projects[0].ipClasses[0].metadata.name,
  ipv6: bench.projects[0].ipClasses[1].metadata.name,
} as const;

/**
 * The milo-dev seed of a runtime's e2e (podman, containerd): one tenant
 * `tenant-<id>` (a quota of 500 claims) with one IPv4 class `<prefix>-pods-ipv4`
 * of /32s from one /24 pool (FirstFit, the first and last units reserved), and
 * its token and class.
 */
export function runtimeSeed(prefix: string, id: string, cidr: string) {
  const className = `${prefix}-pods-ipv4`;
  const seed = {
    projects: [{
      name: `tenant-${id}`,
      tokens: [`${prefix}-token-tenant-${id}`],
      quota: 500,
      ipClasses: [{
        metadata: { name: className },
        spec: {
          ipFamily: "IPv4",
          visibility: "consumer",
          consumers: [`tenant-${id}`],
          prefixLength: 32,
          requiredScopeRoles: ["network"],
          allocationStrategy: "FirstFit",
        },
      }],
      ipPools: [{
        metadata: { name: `${prefix}-pods-v4` },
        spec: {
          cidr,
          ipFamily: "IPv4",
          classNames: [className],
          reservations: { leading: 1, trailing: 1, unitPrefixLength: 32 },
        },
      }],
    }],
  };
  return { seed, project: `tenant-${id}`, token: seed.projects[0].tokens[0], className };
}

/**
 * {@link DEV_SEED} for stable-address tests: tenant-a's classes carry
 * `retentionLease` (when given), a second IPv4 class `vpc-pods-ipv4-b` shares
 * the /24 (a class mismatch), and the seed's `retention` block is `retention`
 * (`recreate`: `Rebind` or `Conflict`; `sweepInterval`, `leaseGrace`).
 */
export function retainSeed(
  opts: { retentionLease?: string; retention?: Record<string, string> } = {},
) {
  const seed = structuredClone(example) as typeof example & { retention?: object };
  const tenant = seed.projects[0];
  const classes = tenant.ipClasses as {
    metadata: { name: string };
    spec: Record<string, unknown>;
  }[];
  if (opts.retentionLease) {
    for (const c of classes) c.spec.retentionLease = opts.retentionLease;
  }
  const b = structuredClone(classes[0]);
  b.metadata.name = "vpc-pods-ipv4-b";
  b.spec.default = false;
  classes.push(b);
  tenant.ipPools[0].spec.classNames.push(b.metadata.name);
  if (opts.retention) seed.retention = opts.retention;
  return seed;
}
