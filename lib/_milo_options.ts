/**
 * What a {@link MiloClient} is given: where Milo is, how long it may try,
 * the node's limiter, and who hears of each attempt.
 */
import type { DeleteHooks } from "./late_deletes.ts";
import type { Purpose, RequestLimiter } from "./limiter.ts";

/** One HTTP exchange as the client saw it, for metrics. */
export interface RequestEvent {
  method: string;
  /** HTTP status, or `error` when no answer came. */
  status: number | "error";
  /** 1 for the first attempt of a request, then 2, 3, ... for retries. */
  attempt: number;
}

/** How the client reaches Milo and how long it may try. */
export interface ClientOptions {
  baseUrl: string;
  namespace: string;
  token: string;
  requestMs: number;
  /** Absolute deadline (ms since epoch) of the whole invocation. */
  deadline: number;
  client?: Deno.HttpClient;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
  /** The clock of deadlines (ms since epoch); default `Date.now`. */
  now?: () => number;
  /**
   * The node's limiter (the agent's, shared by every call): each attempt
   * waits for a slot, one that gets none before the deadline is not sent, and
   * each answer is reported to it. A 429 or 503 then waits on the limiter's
   * pause of the request's flow instead of this request's own. Without one
   * (the exec'd plugin), a `Retry-After` is waited with full jitter.
   */
  limiter?: RequestLimiter;
  /** What the requests are for (the limiter's flow): `lease` unless said. */
  purpose?: Purpose;
  /** Called after every attempt. */
  onRequest?: (e: RequestEvent) => void;
  /** Hears of each DELETE before it is sent, and whether all were answered (lib/late_deletes.ts). */
  deletes?: DeleteHooks;
  /**
   * Aborted when whoever asked is gone (the agent's caller closed its
   * connection): no request starts after it. The one in flight is not
   * cancelled: its answer says whether Milo made the claim, so it can be undone.
   */
  signal?: AbortSignal;
}
