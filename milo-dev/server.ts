/**
 * milo-dev server: the HTTP(S) API listener, the admin listener and their
 * wiring. A development and test tool, never a production backend.
 */

import { serveAdmin } from "./admin.ts";
import { ApfQueue } from "./apf.ts";
import { FaultState } from "./faults.ts";
import { Ipam } from "./ipam.ts";
import {
  AllocationCeiling,
  checkAllocationsPerSecond,
  defaultLimits,
  type Limits,
} from "./limits.ts";
import { ApiListener } from "./listener.ts";
import { Quota } from "./quota.ts";
import { SweepTimer } from "./retention.ts";
import { loadSeedFile, type Seed, validateSeed } from "./seed.ts";
import { newStats } from "./stats.ts";
import { Store } from "./store.ts";

/** Options of {@link startServer}. */
export interface ServerOptions {
  /** Seed document (validated), or use `seedPath`. */
  seed?: unknown;
  /** Seed file (JSON, or YAML by extension). */
  seedPath?: string;
  /** SQLite database file (created when missing). */
  dbPath: string;
  /** API address `HOST:PORT`; default `127.0.0.1:8443`; `:0` picks a free port. */
  listen?: string;
  /** PEM certificate file; with `keyFile` the API is served over HTTPS. */
  certFile?: string;
  /** PEM private key file. */
  keyFile?: string;
  /** Admin address `HOST:PORT` (loopback only); default `127.0.0.1:0`. */
  admin?: string;
  /** Claim creates admitted per sliding second; default 370 (Milo's ceiling); 0: unlimited. */
  allocationsPerSecond?: number;
  /** Log lines (default: stderr). */
  log?: (line: string) => void;
}

/** A running milo-dev. */
export interface MiloDevServer {
  url: string;
  adminUrl: string;
  ipam: Ipam;
  faults: FaultState;
  /** The allocation ceiling (admin `/limits`). */
  ceiling: AllocationCeiling;
  /** Stops both listeners and closes the database. */
  close(): Promise<void>;
}

/** Splits `HOST:PORT` (`[v6]:PORT`, `:PORT`). */
export function parseHostPort(s: string): { host: string; port: number } {
  const m = s.match(/^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/);
  if (!m || Number(m[3]) > 65535) {
    throw new Error(`bad address ${JSON.stringify(s)}: want HOST:PORT`);
  }
  return { host: m[1] ?? (m[2] || "127.0.0.1"), port: Number(m[3]) };
}

/** Whether a listen host is on loopback. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function urlHost(host: string): string {
  if (host === "0.0.0.0" || host === "") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}

/** Starts milo-dev: opens the store, applies the seed, binds both listeners. */
export async function startServer(opts: ServerOptions): Promise<MiloDevServer> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const seed: Seed = opts.seedPath ? await loadSeedFile(opts.seedPath) : validateSeed(opts.seed);
  const startLimits: Limits = {
    ...defaultLimits(),
    ...(opts.allocationsPerSecond === undefined
      ? {}
      : { allocationsPerSecond: checkAllocationsPerSecond(opts.allocationsPerSecond) }),
  };
  const { host, port, tls, admin } = await resolveListeners(opts);
  const store = new Store(opts.dbPath);
  let ipam: Ipam;
  try {
    ipam = new Ipam(store, seed);
  } catch (err) {
    store.close();
    throw err;
  }
  const sweeper = new SweepTimer(() => {
    try {
      const r = ipam.retained.sweep();
      if (r.marked || r.released) {
        log(`milo-dev: lease sweep: ${r.marked} marked Expiring, ${r.released} released`);
      }
    } catch (err) {
      log(`milo-dev: lease sweep failed: ${err instanceof Error ? err.message : err}`);
    }
  });
  const faults = new FaultState();
  const ceiling = new AllocationCeiling(startLimits);
  const queue = new ApfQueue(ceiling);
  const quota = new Quota(
    ipam.quotas(),
    (p) => ipam.countClaims(p),
    (p, ns, name) => ipam.hasClaim(p, ns, name),
  );
  let stats = newStats(tls !== undefined);
  const api = new ApiListener({
    host,
    port,
    tls,
    ipam,
    faults,
    ceiling,
    queue,
    quota,
    stats: () => stats,
    log,
  });
  try {
    await api.listen();
  } catch (err) {
    store.close();
    throw err;
  }
  sweeper.start(ipam.retained.settings());
  const adminServer = serveAdmin(admin.host, admin.port, {
    faults: () => faults.get(),
    async setFaults(next) {
      const wasDown = faults.get().down;
      faults.set(next);
      if (next.down && !wasDown) {
        await api.close();
        log("milo-dev: API listener is down (fault)");
      } else if (!next.down && wasDown) {
        await api.listen();
        log("milo-dev: API listener is up again");
      }
    },
    limits: () => ceiling.get(),
    startLimits: () => ({ ...startLimits }),
    setLimits(next) {
      ceiling.set(next);
      queue.kick();
    },
    stats: () => ({ ...stats, retained: ipam.retained.count() }),
    resetStats: () => stats = newStats(tls !== undefined),
    retention: () => ipam.retained.settings(),
    seedRetention: () => ipam.retained.seedSettings(),
    setRetention(next) {
      ipam.retained.set(next);
      sweeper.start(next);
    },
    sweep: (advanceMs) => ipam.retained.sweep(Date.now() + advanceMs),
    quota: () => quota.settings(),
    setQuota: (next) => quota.set(next),
  });
  let closed: Promise<void> | undefined;
  return {
    url: `${tls ? "https" : "http"}://${urlHost(host)}:${api.port}`,
    adminUrl: `http://${urlHost(admin.host)}:${adminServer.port}`,
    ipam,
    faults,
    ceiling,
    close() {
      closed ??= (async () => {
        sweeper.stop();
        queue.close();
        await Promise.all([adminServer.close(), api.close()]);
        store.close();
      })();
      return closed;
    },
  };
}

/** Checks the addresses (plain HTTP on loopback only; admin on loopback) and reads cert and key. */
async function resolveListeners(opts: ServerOptions) {
  const { host, port } = parseHostPort(opts.listen ?? "127.0.0.1:8443");
  const wantTls = Boolean(opts.certFile || opts.keyFile);
  if (wantTls && !(opts.certFile && opts.keyFile)) throw new Error("--cert and --key go together");
  if (!wantTls && !isLoopback(host)) {
    throw new Error(`refusing plain HTTP on non-loopback address ${host}: pass --cert and --key`);
  }
  const admin = parseHostPort(opts.admin ?? "127.0.0.1:0");
  if (!isLoopback(admin.host)) {
    throw new Error(`the admin listener must be on loopback, not ${admin.host}`);
  }
  const tls = wantTls
    ? { cert: await Deno.readTextFile(opts.certFile!), key: await Deno.readTextFile(opts.keyFile!) }
    : undefined;
  return { host, port, tls, admin };
}
