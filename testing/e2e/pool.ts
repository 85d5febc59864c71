/** Concurrency helpers of the e2e: a bounded parallel map and a sleep. */

/** Concurrency-limited map over items (at most `limit` in flight). */
export async function pool<T>(
  items: T[],
  limit: number,
  fn: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) await fn(items[i], i);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** Sleeps `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise<void>((r) => setTimeout(r, ms));
