/**
 * What in-process handler tests build on {@link StubMilo}: the network config
 * of the fixtures, an {@link Invocation} over a real MiloClient with the stub's
 * fetch and an injected clock and sleep, and small assertion helpers.
 */
import assert from "node:assert/strict";
import { attachmentOf, claimBody, claimName } from "../lib/claims.ts";
import { readCniEnv, type Verb } from "../lib/cni.ts";
import { parseNodeConfig } from "../lib/config.ts";
import { parseNetConf } from "../lib/netconf.ts";
import { CniError } from "../lib/errors.ts";
import type { Invocation } from "../lib/invocation.ts";
import type { Family } from "../lib/ip.ts";
import { Holdings } from "../lib/holdings.ts";
import { Journal } from "../lib/journal.ts";
import { markingDeletes } from "../lib/late_deletes.ts";
import { API_PATH } from "../lib/milo.ts";
import { type Json, STUB_BASE, StubMilo, type WireClaim } from "./stub_milo.ts";

/** A default network config: dual-stack, as docs/galactic.md's example. */
export const NET_CONF: Json = {
  cniVersion: "1.1.0",
  name: "vpc-7b3e",
  type: "galactic-veth",
  vpc: "vpc-7b3e",
  vpcattachment: "vpc-7b3e-attach-1",
  ipam: {
    type: "milo-ipam",
    classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
    scope: {
      network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" },
    },
    gateways: { ipv4: "169.254.1.1", ipv6: "fe80::1" },
  },
};

/**
 * The node config's grant of {@link NET_CONF}'s scope to every namespace's
 * networks (the one space every claim of these tests is made in), as a
 * cluster of one network grants it; a test of the grants sets its own.
 */
export const SCOPE_GRANT: Json = {
  allowScopes: [{ scope: (NET_CONF.ipam as { scope: Json }).scope }],
};

/** The container ID of the fixtures' claims. */
export const CONTAINER_ID = "9f0c1e6a4b2d48e7a1c3b5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9";

/** The IPClaims collection the invocations' client talks to. */
export const CLAIMS_PATH = `${API_PATH}/namespaces/default/ipclaims`;
/** The attachment of {@link invocation}'s defaults (and of the fixtures' claims). */
export const ATTACHMENT = { cluster: "cluster-a", containerId: CONTAINER_ID, ifname: "eth0" };
/** Its claim names, per family. */
export const NAME_V4 = claimName(ATTACHMENT, "ipv4");
export const NAME_V6 = claimName(ATTACHMENT, "ipv6");

/** How to build one invocation. */
export interface InvocationOptions {
  command: Exclude<Verb, "VERSION">;
  /** The node's state directory (a temp dir of the test). */
  stateDir: string;
  resultsDir?: string;
  containerId?: string;
  ifname?: string;
  /** Fields replacing those of the `ipam` block of {@link NET_CONF}. */
  ipam?: Json;
  /** Top-level fields of the network config (prevResult, valid attachments, cniVersion). */
  top?: Json;
  /** Node config keys replacing the defaults. */
  node?: Json;
  now?: () => number;
  /** The deadline of the main client (ms since epoch). */
  deadline?: number;
  callId?: string;
  /** The agent's undo of the ADD with this call id (a DEL). */
  undoOf?: string;
  /** CNI_ARGS entries replacing the defaults (a pod in shop/web-0); `""` removes one. */
  args?: Record<string, string>;
}

/** The CNI_ARGS of {@link invocation}'s defaults. */
const ARGS = {
  IgnoreUnknown: "1",
  K8S_POD_NAMESPACE: "shop",
  K8S_POD_NAME: "web-0",
  K8S_POD_UID: "uid-web-0",
};

/**
 * An invocation as `lib/invoke.ts` builds it, from a node config, a CNI
 * environment and a network config parsed by the real parsers, over clients
 * of `stub`.
 */
export function invocation(stub: StubMilo, o: InvocationOptions): Invocation {
  const node = parseNodeConfig(
    {
      milo: { url: STUB_BASE, tokenFile: "/stub/token" },
      cluster: "cluster-a",
      node: "node-1",
      log: { level: "off" },
      stateDir: o.stateDir,
      resultsDirs: [o.resultsDir ?? `${o.stateDir}/results`],
      hostIdFile: `${o.stateDir}/machine-id`,
      // The machine's own firmware UUID, if it has one, is no test host's.
      hardwareIdFile: `${o.stateDir}/product_uuid`,
      ...SCOPE_GRANT,
      ...o.node,
    },
    "/stub/node.json",
  );
  const vars: Record<string, string> = {
    CNI_COMMAND: o.command,
    CNI_CONTAINERID: o.containerId ?? CONTAINER_ID,
    CNI_IFNAME: o.ifname ?? "eth0",
    CNI_NETNS: "/var/run/netns/test",
    CNI_ARGS: Object.entries({ ...ARGS, ...o.args }).filter(([, v]) => v !== "")
      .map(([k, v]) => `${k}=${v}`).join(";"),
  };
  if (o.command === "GC" || o.command === "STATUS") {
    delete vars.CNI_CONTAINERID;
    delete vars.CNI_IFNAME;
  }
  const env = readCniEnv((n) => vars[n]);
  const stdin = {
    ...NET_CONF,
    ...o.top,
    ipam: { ...(NET_CONF.ipam as Json), ...o.ipam },
  };
  const conf = parseNetConf(JSON.stringify(stdin), node, o.command);
  const deadline = o.deadline ?? Date.now() + 60_000;
  const milo = stub.client({
    deadline,
    requestMs: conf.network.timeouts.requestMs,
    namespace: node.milo.namespace,
    // As the node's clients do (lib/milo.ts `open`, lib/agent.ts).
    deletes: markingDeletes(node),
  });
  return {
    env,
    conf,
    node,
    attachment: attachmentOf(node, conf, env),
    milo,
    rollback: milo.withDeadline(deadline + 2_000),
    journal: new Journal(node.stateDir),
    holdings: new Holdings(node.stateDir, node),
    deadline,
    callId: o.callId ?? crypto.randomUUID(),
    undoOf: o.undoOf,
    now: o.now ?? Date.now,
  };
}

/** Stores in `stub` the claim a previous ADD of `inv` made for `family` (see {@link StubMilo.materialize}). */
export function existingClaim(
  stub: StubMilo,
  inv: Invocation,
  family: Family,
  over: Parameters<StubMilo["materialize"]>[1] = {},
): WireClaim {
  const body = claimBody(inv.node.milo.namespace, inv.conf.network, inv.attachment, family);
  return stub.materialize(body, over);
}

/** Awaits `p`, asserts it fails with a CniError of `code` whose message and details match. */
export async function rejectsWith(
  p: Promise<unknown>,
  code: number,
  pattern?: RegExp,
): Promise<CniError> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof CniError, `expected a CniError, got ${err ?? "success"}`);
  assert.equal(err.code, code, `code of: ${err.message} (${err.details})`);
  if (pattern) assert.match(`${err.message} ${err.details}`, pattern);
  return err;
}

/** Runs `fn` with a fresh temp dir, removed afterwards. */
export async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-stub-" });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Runs `fn` with a fresh stub and a builder of `command` invocations over a temp state dir. */
export function withVerb(
  command: InvocationOptions["command"],
  fn: (
    stub: StubMilo,
    inv: (o?: Partial<InvocationOptions>) => Invocation,
    dir: string,
  ) => Promise<void>,
): Promise<void> {
  return withTempDir(async (dir) => {
    const stub = new StubMilo();
    await fn(stub, (o = {}) => invocation(stub, { command, stateDir: dir, ...o }), dir);
  });
}
