/**
 * Timers of the CNI path. Deno's `setTimeout` costs the first caller in a
 * process about 7 ms of CPU (a third of a bare `deno run`, measured with the
 * install's flags), `AbortSignal.timeout` a fraction of that; every call
 * deadline and wait is built on the latter here.
 */

/**
 * Extra time past a call's deadline (`timeouts.totalMs` from the plugin's
 * start) before the watchdog ends it, and the thin client stops waiting.
 */
export const WATCHDOG_GRACE_MS = 500;

/** A pending timer: it keeps the process alive until it fires or is cancelled. */
export interface Timer {
  /** Resolves when the time has passed; never, once cancelled. */
  readonly done: Promise<void>;
  cancel(): void;
}

/** Starts a timer of `ms` (0 or less: the next turn of the event loop). */
export function timer(ms: number): Timer {
  const signal = AbortSignal.timeout(Math.max(0, ms));
  let fire = () => {};
  const done = new Promise<void>((resolve) => fire = resolve);
  const onAbort = () => fire();
  signal.addEventListener("abort", onAbort, { once: true });
  return { done, cancel: () => signal.removeEventListener("abort", onAbort) };
}

/** Resolves after `ms`. */
export function after(ms: number): Promise<void> {
  return timer(ms).done;
}

/** Sleeps `ms` with `sleep`, or less when `signal` aborts meanwhile. */
export async function pause(
  ms: number,
  sleep: (ms: number) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  if (!signal) return await sleep(ms);
  let done = () => {};
  const gone = new Promise<void>((r) => done = r);
  signal.addEventListener("abort", done, { once: true });
  try {
    await Promise.race([sleep(ms), gone]);
  } finally {
    signal.removeEventListener("abort", done);
  }
}

/** Resolves with the promise's value, or with `onTimeout()` when `ms` passes first. */
export async function within<T>(p: Promise<T>, ms: number, onTimeout: () => T): Promise<T> {
  const t = timer(ms);
  try {
    return await Promise.race([p, t.done.then(onTimeout)]);
  } finally {
    t.cancel();
  }
}
