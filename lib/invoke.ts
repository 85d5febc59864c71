/**
 * One CNI invocation from its inputs (environment, stdin, start time) to its
 * answer (exit code, stdout JSON, log record). The exec'd plugin and the node
 * agent both run invocations through here, so both paths mean the same.
 */
import { add } from "./add.ts";
import { check } from "./check.ts";
import { attachmentOf, canName } from "./claims.ts";
import {
  type CniEnv,
  encodeError,
  LATEST_VERSION,
  parseVerb,
  readCniEnv,
  type Verb,
} from "./cni.ts";
import type { NodeConfig } from "./config.ts";
import { type NetConf, netConfOf, stdinJson } from "./netconf.ts";
import { del, journalUnreached } from "./del.ts";
import { toCniError, withNote } from "./errors.ts";
import { gc } from "./gc.ts";
import { claimNamesOf, type Handler, type Invocation } from "./invocation.ts";
import { Holdings } from "./holdings.ts";
import { Journal } from "./journal.ts";
import type { Purpose, Route } from "./limiter.ts";
import type { MiloClient } from "./milo.ts";
import { status } from "./status.ts";
import { decodeStdin } from "./stdin.ts";
import { version, versionOf } from "./version.ts";
import { requireStateFormat } from "./state_format.ts";

const HANDLERS: Record<Exclude<Verb, "VERSION">, Handler> = {
  ADD: add,
  DEL: del,
  CHECK: check,
  STATUS: status,
  GC: gc,
};

/** The verbs whose requests release claims (the limiter's release flows). */
const RELEASING: Verb[] = ["DEL", "GC"];

/** The inputs of one invocation. */
export interface InvokeRequest {
  env: (name: string) => string | undefined;
  /** Stdin as read (at most one byte over the limit, which is refused). */
  stdin: Uint8Array;
  /** When the plugin process started (ms since epoch); `timeouts.totalMs` counts from here. */
  started: number;
  /** Names the call; a random one when absent. */
  callId?: string;
  /** The call id of the ADD a DEL undoes (the agent's undo; see {@link Invocation.undoOf}). */
  undoOf?: string;
}

/** What an invocation needs from where it runs. */
export interface InvokeDeps {
  nodeConfig(): Promise<NodeConfig>;
  /** A Milo client for the call's requests; `flow` says whose they are and what for. */
  openMilo(
    node: NodeConfig,
    requestMs: number,
    deadline: number,
    flow: { route: Route; purpose: Purpose },
  ): Promise<MiloClient>;
  /**
   * Told the latest deadline the call may have (ms since epoch: the node's
   * `totalMs` from the start, which a network may only lower) once the node
   * config is read, before the network config on stdin is parsed.
   */
  onBound?(deadline: number): void;
  /** Told the final deadline (ms since epoch) and the result's version once the config fixes them. */
  onDeadline?(deadline: number, cniVersion: string): void;
  now?(): number;
}

/** The answer of one invocation. */
export interface Reply {
  exitCode: 0 | 1;
  /** The JSON to print on stdout, if any. */
  stdout?: Record<string, unknown>;
  /** The log line. */
  record: Record<string, unknown>;
  /** The node config, when it was read (the log file and level come from it). */
  node?: NodeConfig;
}

/**
 * The slice of `totalMs` kept back for rolling back a half ADD: a fifth,
 * between 100 ms and 2 s, so a rollback gets at least one real attempt even
 * when the main budget was spent waiting on Milo.
 */
export function rollbackReserveMs(totalMs: number): number {
  return Math.min(2_000, Math.max(100, Math.round(totalMs / 5)));
}

/**
 * The addresses the node's record names for the attachment (logged with a
 * DEL or CHECK, failed or not); undefined when it has none or cannot read it.
 */
function recordedAddresses(inv: Invocation): string[] | undefined {
  try {
    const a = inv.holdings.read(inv.attachment)?.claims.flatMap((c) => c.address ?? []);
    return a?.length ? a : undefined;
  } catch {
    return undefined;
  }
}

/**
 * What preparing a call reached, stage by stage: the log record, the result
 * version, and what was read before it failed (a DEL that failed before it
 * could ask Milo is journaled from it: lib/del.ts `journalUnreached`).
 */
interface Call {
  readonly record: Record<string, unknown>;
  cniVersion: string;
  verb?: Verb;
  cni?: CniEnv;
  node?: NodeConfig;
  /** Set once the node state is known to be in a format this release writes. */
  stateOk: boolean;
  conf?: NetConf;
  milo?: MiloClient;
}

/** Runs one invocation: prepare it, then dispatch it to its verb's handler; never throws. */
export async function invoke(req: InvokeRequest, deps: InvokeDeps): Promise<Reply> {
  const now = deps.now ?? Date.now;
  const call: Call = {
    record: { verb: req.env("CNI_COMMAND") ?? null },
    cniVersion: LATEST_VERSION,
    stateOk: false,
  };
  const reply = (r: Omit<Reply, "record" | "node">, extra: Record<string, unknown>): Reply => ({
    ...r,
    node: call.node,
    record: {
      ...call.record,
      requests: call.milo?.requests,
      ...extra,
      durationMs: Math.round((now() - req.started) * 10) / 10,
    },
  });
  let inv: Invocation | "version";
  try {
    inv = await prepare(req, deps, call, now);
  } catch (err) {
    return reply(...await failure(call, err, now, req.undoOf === undefined));
  }
  if (inv === "version") return reply({ exitCode: 0, stdout: version(decodeStdin(req.stdin)) }, {});
  try {
    const r = await HANDLERS[call.verb as Exclude<Verb, "VERSION">](inv);
    return reply({ exitCode: 0, stdout: r.output }, {
      claims: r.claims,
      ...(r.addresses ? { addresses: r.addresses } : {}),
      outcome: "ok",
      ...(r.skipped ? { skipped: r.skipped } : {}),
      ...(r.duplicates?.length ? { duplicates: r.duplicates } : {}),
    });
  } catch (err) {
    return reply(...await failure(call, err, now, false));
  }
}

/**
 * Reads everything a handler gets, in order (the verb, the CNI environment,
 * the node config, the network config, a Milo client), recording each in
 * `call` as it is read; answers the handler's Invocation, or `version`.
 */
async function prepare(
  req: InvokeRequest,
  deps: InvokeDeps,
  call: Call,
  now: () => number,
): Promise<Invocation | "version"> {
  const { record } = call;
  const verb = call.verb = parseVerb(req.env("CNI_COMMAND"));
  const stdin = decodeStdin(req.stdin);
  if (verb === "VERSION") return "version";
  const cni = call.cni = readCniEnv(req.env);
  record.containerId = cni.containerId || undefined;
  record.ifname = cni.ifname || undefined;
  const pod = cni.args.K8S_POD_NAME;
  if (pod) record.pod = `${cni.args.K8S_POD_NAMESPACE ?? ""}/${pod}`;
  const node = call.node = await deps.nodeConfig();
  deps.onBound?.(req.started + node.timeouts.totalMs);
  record.node = node.node;
  requireStateFormat(node.stateDir);
  call.stateOk = true;
  const raw = stdinJson(stdin);
  call.cniVersion = versionOf(raw);
  const conf = call.conf = netConfOf(raw, node, verb);
  record.network = conf.name;
  const t = conf.network.timeouts;
  const final = req.started + t.totalMs;
  deps.onDeadline?.(final, call.cniVersion);
  const milo = call.milo = await deps.openMilo(
    node,
    t.requestMs,
    final - rollbackReserveMs(t.totalMs),
    {
      route: { tenant: cni.args.K8S_POD_NAMESPACE ?? "", network: conf.name },
      purpose: RELEASING.includes(verb) ? "release" : "lease",
    },
  );
  const inv: Invocation = {
    env: cni,
    conf,
    node,
    attachment: attachmentOf(node, conf, cni),
    milo,
    rollback: milo.withDeadline(final).unabortable().releasing(),
    journal: new Journal(node.stateDir),
    holdings: new Holdings(node.stateDir, node),
    deadline: final,
    callId: req.callId ?? crypto.randomUUID(),
    undoOf: req.undoOf,
    now,
  };
  if (cni.containerId && canName(inv.attachment)) record.claims = claimNamesOf(inv);
  if (verb === "DEL" || verb === "CHECK") record.addresses = recordedAddresses(inv);
  return inv;
}

/**
 * The reply of a failed call. A DEL that failed before its handler could
 * ask Milo (`unreached`: in preparing it, not the agent's undo) owes its
 * release all the same: journaled from what was read.
 */
async function failure(
  call: Call,
  err: unknown,
  now: () => number,
  unreached: boolean,
): Promise<[Omit<Reply, "record" | "node">, Record<string, unknown>]> {
  let e = toCniError(err);
  if (unreached && call.verb === "DEL" && call.node && call.cni && call.stateOk) {
    const note = await journalUnreached(call.node, call.cni, call.conf, e.message, now());
    if (note) e = withNote(e, note);
  }
  return [{ exitCode: 1, stdout: encodeError(call.cniVersion, e) }, {
    outcome: "error",
    code: e.code,
    msg: e.message,
    details: e.details,
  }];
}
