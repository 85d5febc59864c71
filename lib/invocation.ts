import type { Attachment } from "./claims.ts";
import type { CniEnv } from "./cni.ts";
import type { IpamConfig, NetConf } from "./config.ts";
import { FAMILIES, type Family } from "./ip.ts";
import type { MiloClient } from "./milo.ts";

/** Everything a verb handler needs for one plugin invocation. */
export interface Invocation {
  env: CniEnv;
  conf: NetConf;
  cfg: IpamConfig;
  attachment: Attachment;
  milo: MiloClient;
  /** Claim names this invocation acted on, for the log line. */
  touched: string[];
}

/** A verb handler: returns the JSON to print on stdout, or null for none. */
export type Handler = (inv: Invocation) => Promise<Record<string, unknown> | null>;

/** The families configured in `classes`, IPv4 first. */
export function familiesOf(cfg: IpamConfig): Family[] {
  return FAMILIES.filter((f) => cfg.classes[f]);
}
