import { type Attachment, claimName } from "./claims.ts";
import type { CniEnv } from "./cni.ts";
import type { NetworkConfig, NodeConfig } from "./config.ts";
import type { NetConf } from "./netconf.ts";
import { FAMILIES, type Family } from "./ip.ts";
import type { Holdings } from "./holdings.ts";
import type { Journal } from "./journal.ts";
import type { MiloCalls } from "./milo_calls.ts";
import type { Duplicate } from "./restore.ts";

/** Everything a verb handler needs for one plugin invocation. */
export interface Invocation {
  env: CniEnv;
  conf: NetConf;
  node: NodeConfig;
  attachment: Attachment;
  /** What the call asks of Milo, within the main budget. */
  milo: MiloCalls;
  /** The same with the slice of `totalMs` reserved for rolling back a half ADD. */
  rollback: MiloCalls;
  journal: Journal;
  holdings: Holdings;
  /** The call's deadline (ms since epoch): the plugin's start and `timeouts.totalMs`. */
  deadline: number;
  /** Names this call (an ADD's id in the node's record, see lib/holdings.ts). */
  callId: string;
  /**
   * Set on the agent's undo of an ADD whose caller is gone (a DEL): the ADD's
   * call id. The DEL releases nothing unless that ADD is still the last one
   * of the attachment the node recorded.
   */
  undoOf?: string;
  /** The clock (ms since epoch). */
  now: () => number;
}

/** What a handler answers: the JSON to print (if any) and the claims it acted on. */
export interface HandlerResult {
  output?: Record<string, unknown>;
  claims: string[];
  /** The addresses leased or released (logged: an operator greps the log for an address). */
  addresses?: string[];
  /** Why the handler left the claims alone, when it did (logged). */
  skipped?: string;
  /** Addresses it found two sandboxes on (logged as errors and counted: never silent). */
  duplicates?: Duplicate[];
}

/** A verb handler. */
export type Handler = (inv: Invocation) => Promise<HandlerResult>;

/** The families configured in `classes`, IPv4 first. */
export function familiesOf(net: NetworkConfig): Family[] {
  return FAMILIES.filter((f) => net.classes[f]);
}

/** The claim names of an attachment, one per configured family. */
export function claimNamesOf(inv: Pick<Invocation, "conf" | "attachment">): string[] {
  return familiesOf(inv.conf.network).map((f) => claimName(inv.attachment, f));
}
