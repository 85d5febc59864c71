/**
 * What `milo-ipam show` answers from the node alone when Milo cannot be
 * asked (unreachable, the token refused): this node's records of the
 * attachments it holds or is adding (`<stateDir>/holdings/`), the releases its
 * journal owes, and which result caches name each container; by pod, by
 * address (a record's addresses) or for this node. Another node's are not
 * here: each node keeps its own.
 */
import type { NodeConfig } from "./config.ts";
import { errorText } from "./errors.ts";
import { Holdings } from "./holdings.ts";
import { type Ip, parseIp } from "./ip.ts";
import { Journal } from "./journal.ts";
import { isLive, readLive } from "./liveness.ts";
import type { NodeView, ShowQuery } from "./_show_report.ts";
import { holds } from "./show_retained.ts";

/** The node's own view of `query`; `unasked` says what Milo could not be asked. */
export async function nodeView(
  query: ShowQuery,
  node: NodeConfig,
  unasked: string[],
): Promise<NodeView> {
  const view: NodeView = { node: node.node, unasked: [...unasked], records: [], journal: [] };
  if (query.by === "retained") return view;
  if (query.by === "node" && query.node !== node.node) {
    view.unasked.push(
      `node ${query.node} is not this node (${node.node}): its records are on it; run show there`,
    );
    return view;
  }
  const ip = query.by === "address" ? parseIp(query.address) : undefined;
  const wanted = (pod: string | undefined, addresses: string[]) =>
    query.by === "node" ||
    (query.by === "pod" && pod === `${query.namespace}/${query.name}`) ||
    (query.by === "address" && addresses.some((a) => holdsAddress(a, ip)));
  const journal = new Journal(node.stateDir);
  const owed = await journal.list().catch((err) => {
    view.unasked.push(`the release journal ${journal.dir}: ${errorText(err)}`);
    return [];
  });
  let held: ReturnType<Holdings["all"]> = [];
  try {
    held = new Holdings(node.stateDir).all();
  } catch (err) {
    view.unasked.push(`the node's records: ${errorText(err)}`);
  }
  const caches = await Promise.all(
    node.resultsDirs.map(async (d) => ({ d, l: await readLive([d]) })),
  );
  const journaled = new Set(owed.map((o) => `${o.entry?.containerId}\u0000${o.entry?.ifname}`));
  for (const { h } of held) {
    const addresses = h.claims.flatMap((c) => c.address ?? []);
    if (!wanted(h.pod, addresses)) continue;
    view.records.push({
      containerId: h.containerId,
      ifname: h.ifname,
      network: h.network,
      ...(h.pod ? { pod: h.pod } : {}),
      state: h.state,
      claims: h.claims.map((c) => c.name),
      addresses,
      at: new Date(h.at).toISOString(),
      cachesNaming: caches.filter((c) => isLive(c.l, h.containerId)).map((c) => c.d),
      journaled: journaled.has(`${h.containerId}\u0000${h.ifname}`),
    });
  }
  const recorded = new Set(view.records.map((r) => `${r.containerId}\u0000${r.ifname}`));
  for (const { entry: e } of owed) {
    if (!e) continue;
    const ofRecord = recorded.has(`${e.containerId}\u0000${e.ifname}`);
    if (!ofRecord && !wanted(e.pod, [])) continue;
    view.journal.push({
      containerId: e.containerId,
      ifname: e.ifname,
      network: e.network,
      ...(e.podNamespace ? { podNamespace: e.podNamespace } : {}),
      ...(e.pod ? { pod: e.pod } : {}),
      claims: e.claims.map((c) => c.name),
      attempts: e.attempts,
      ...(e.lastError ? { lastError: e.lastError } : {}),
      since: new Date(e.created).toISOString(),
    });
  }
  return view;
}

function holdsAddress(cidr: string, ip: Ip | null | undefined): boolean {
  return !!ip && holds({ allocatedCIDR: cidr }, ip);
}
