/** The admin listener (loopback, no auth): faults, limits and counters. */

import { defaultFaults, FaultError, type Faults, mergeFaults } from "./faults.ts";
import { type Limits, LimitsError, mergeLimits } from "./limits.ts";
import { defaultQuota, mergeQuota, QuotaError, type QuotaSettings } from "./quota.ts";
import {
  mergeRetention,
  parseDuration,
  RetentionError,
  type RetentionSettings,
  type SweepResult,
} from "./retention.ts";
import type { Stats } from "./stats.ts";

/** What the admin endpoints act on. */
export interface AdminContext {
  faults(): Faults;
  /** Puts new fault settings in force (opening or closing the API listener for `down`). */
  setFaults(next: Faults): Promise<void>;
  limits(): Limits;
  /** The limits milo-dev started with (its flags): the base of PUT and DELETE. */
  startLimits(): Limits;
  setLimits(next: Limits): void;
  stats(): Stats;
  resetStats(): Stats;
  retention(): RetentionSettings;
  /** The seed's retention settings: the base of PUT and DELETE. */
  seedRetention(): RetentionSettings;
  /** Puts new retention settings in force (restarting the sweep timer). */
  setRetention(next: RetentionSettings): void;
  /** One sweep pass now, or at now plus `advanceMs` (a lease aged without waiting). */
  sweep(advanceMs: number): SweepResult;
  quota(): QuotaSettings;
  /** Puts new quota settings in force (limits by project, the controllers' timing, the policy). */
  setQuota(next: QuotaSettings): void;
}

/** A running admin listener. */
export interface AdminServer {
  port: number;
  close(): Promise<void>;
}

const HELP = "milo-dev admin\n  GET|PUT|POST|DELETE /faults\n  GET|PUT|POST|DELETE /limits\n" +
  "  GET|PUT|POST|DELETE /retention   POST /retention/sweep\n  GET|PUT|POST|DELETE /quota\n" +
  "  GET /stats   POST /stats/reset\n  GET /healthz\n";

function json(v: unknown, status = 200): Response {
  return new Response(JSON.stringify(v, null, 2) + "\n", {
    status,
    headers: { "content-type": "application/json" },
  });
}

/** One settings object: get, start-up value, set, merge a patch, the error of a bad one. */
type SettingsEndpoints<T> = [
  get: () => T,
  start: () => T,
  set: (next: T) => void,
  merge: (base: T, patch: unknown) => T,
  error: new (message: string) => Error,
];

/** GET, PUT (over the start-up value), POST/PATCH (merged), DELETE (back to start-up). */
async function settingsRoute<T>(req: Request, s: SettingsEndpoints<T>): Promise<Response | null> {
  const [get, start, set, merge, error] = s;
  const m = req.method;
  if (m === "GET") return json(get());
  if (m === "DELETE") {
    set(start());
    return json(get());
  }
  if (m !== "PUT" && m !== "POST" && m !== "PATCH") return null;
  const patch = await req.json().catch(() => {
    throw new error("body must be JSON");
  });
  set(merge(m === "PUT" ? start() : get(), patch));
  return json(get());
}

async function handle(req: Request, ctx: AdminContext): Promise<Response> {
  const { pathname } = new URL(req.url);
  const m = req.method;
  if (pathname === "/faults") {
    if (m === "GET") return json(ctx.faults());
    if (m === "DELETE") {
      await ctx.setFaults(defaultFaults());
      return json(ctx.faults());
    }
    if (m === "PUT" || m === "POST" || m === "PATCH") {
      const patch = await req.json().catch(() => {
        throw new FaultError("body must be JSON");
      });
      const base = m === "PUT" ? defaultFaults() : ctx.faults();
      await ctx.setFaults(mergeFaults(base, patch));
      return json(ctx.faults());
    }
  }
  const settings = pathname === "/limits"
    ? settingsRoute(req, [ctx.limits, ctx.startLimits, ctx.setLimits, mergeLimits, LimitsError])
    : pathname === "/quota"
    ? settingsRoute(req, [ctx.quota, defaultQuota, ctx.setQuota, mergeQuota, QuotaError])
    : pathname === "/retention"
    ? settingsRoute(req, [
      ctx.retention,
      ctx.seedRetention,
      ctx.setRetention,
      mergeRetention,
      RetentionError,
    ])
    : null;
  const answered = await settings;
  if (answered) return answered;
  if (pathname === "/retention/sweep" && m === "POST") {
    const text = await req.text();
    const body = text.trim() ? JSON.parse(text) : {};
    const advance = body?.advance === undefined ? 0 : parseDuration(body.advance);
    if (advance === undefined) {
      throw new RetentionError('advance must be a duration such as "25h"');
    }
    return json(ctx.sweep(advance));
  }
  if (pathname === "/stats" && m === "GET") return json(ctx.stats());
  if ((pathname === "/stats/reset" && m === "POST") || (pathname === "/stats" && m === "DELETE")) {
    return json(ctx.resetStats());
  }
  if (pathname === "/healthz") return new Response("ok\n");
  if (pathname === "/") return new Response(HELP);
  return json({ error: "not found" }, 404);
}

/** Serves the admin endpoints on `host:port` (0 picks a free port). */
export function serveAdmin(host: string, port: number, ctx: AdminContext): AdminServer {
  const abort = new AbortController();
  let bound = 0;
  const server = Deno.serve({
    hostname: host,
    port,
    signal: abort.signal,
    onListen: (a) => bound = a.port,
  }, async (req) => {
    try {
      return await handle(req, ctx);
    } catch (err) {
      if (
        err instanceof FaultError || err instanceof LimitsError || err instanceof RetentionError ||
        err instanceof QuotaError || err instanceof SyntaxError
      ) {
        return json({ error: err.message }, 400);
      }
      return json({ error: String(err) }, 500);
    }
  });
  return {
    port: bound || server.addr.port,
    async close() {
      abort.abort();
      await server.finished;
    },
  };
}
