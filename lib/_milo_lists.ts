/**
 * Milo's LISTs: the pages of a label selector followed by `continue`, each
 * answer read as a stream (Milo answers a whole tenant at once), its items
 * checked as they arrive and the items kept bounded across the pages.
 */
import { CniError, errorText } from "./errors.ts";
import { JSON_BOUND } from "./json_bound.ts";
import { keptSize } from "./list_bound.ts";
import { readList } from "./list_stream.ts";
import {
  claimListTally,
  IPAllocationSchema,
  IPClaimSchema,
  IPPoolSchema,
  ListHeadSchema,
  MAX_BODY_BYTES,
  MAX_PAGES,
  PAGE_LIMIT,
  parse,
} from "./milo_objects.ts";
import type * as z from "zod/mini";

/** Reads a 200's body as a stream; `moved` is called as it arrives; `date` is the answer's. */
export type StreamRead = (
  body: ReadableStream<Uint8Array>,
  moved: () => void,
  date: number,
) => Promise<void>;

/** GETs `path` (with its query), its 200 read by `read`; answers Milo's clock of the answer. */
export type StreamGet = (path: string, read: StreamRead) => Promise<number>;

/** A list kind, what errors call its items, and the schema of an item. */
export type ListKind<T extends z.ZodMiniType> = { kind: string; items: string; schema: T };
export const CLAIM_LIST = { kind: "IPClaimList", items: "claims", schema: IPClaimSchema };
export const ALLOCATION_LIST = {
  kind: "IPAllocationList",
  items: "allocations",
  schema: IPAllocationSchema,
};

export const POOL_LIST = { kind: "IPPoolList", items: "pools", schema: IPPoolSchema };

/**
 * Every item of the LIST, kept within {@link claimListTally}'s bound, with
 * Milo's clock at its first page (its `Date` header; NaN without one).
 */
export async function collectList<T extends z.ZodMiniType>(
  get: StreamGet,
  list: ListKind<T>,
  path: string,
  selector: string,
): Promise<{ items: z.infer<T>[]; serverTime: number }> {
  const items: z.infer<T>[] = [], tally = claimListTally(`Milo's ${list.kind}`);
  const serverTime = await scanList(get, list, path, selector, (item) => {
    tally.keep(keptSize(item));
    items.push(item);
  });
  return { items, serverTime };
}

/**
 * Follows the LIST's pages: `visit` gets each item (as `list.schema` keeps it) as
 * it is read, with Milo's clock of the answer that carried it. Answers Milo's
 * clock at the first page. An answer that breaks off after some items were
 * visited fails (it is not asked again).
 */
export async function scanList<T extends z.ZodMiniType>(
  get: StreamGet,
  list: ListKind<T>,
  path: string,
  labelSelector: string,
  visit: (item: z.infer<T>, serverTime: number) => void,
): Promise<number> {
  let serverTime = NaN, token: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const q = `?labelSelector=${encodeURIComponent(labelSelector)}&limit=${PAGE_LIMIT}` +
      (token ? `&continue=${encodeURIComponent(token)}` : "");
    let head: unknown, n = 0;
    const read: StreamRead = async (body, moved, date) => {
      head = await readList(body, {
        what: `Milo's ${list.kind}`,
        maxItemBytes: MAX_BODY_BYTES,
        bound: JSON_BOUND,
        onChunk: moved,
        item: (item) => void (n++, visit(parse(list.schema, item, `${list.kind} item`), date)),
      }).catch((err) => {
        if (!n || err instanceof CniError) throw err;
        const why = `Milo's ${list.kind} broke off after ${n} ${list.items}`;
        throw new CniError("transient", why, errorText(err));
      });
    };
    const date = await get(path + q, read);
    if (page === 0) serverTime = date;
    token = parse(ListHeadSchema, head, list.kind).metadata?.continue;
    if (!token) return serverTime;
  }
  throw new CniError("protocol", `Milo's ${list.kind} did not end within ${MAX_PAGES} pages`);
}
