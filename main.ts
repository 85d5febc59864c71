import { add } from "./lib/add.ts";
import { check } from "./lib/check.ts";
import { attachmentOf } from "./lib/claims.ts";
import {
  encodeError,
  LATEST_VERSION,
  parseVerb,
  readCniEnv,
  requireVersion,
  SUPPORTED_VERSIONS,
  type Verb,
} from "./lib/cni.ts";
import { MAX_STDIN_BYTES, parseNetConf, readNodeConfig } from "./lib/config.ts";
import { del } from "./lib/del.ts";
import { CniError, toCniError } from "./lib/errors.ts";
import { gc } from "./lib/gc.ts";
import type { Handler, Invocation } from "./lib/invocation.ts";
import { Logger } from "./lib/log.ts";
import { MiloClient } from "./lib/milo.ts";
import { status } from "./lib/status.ts";
import { readStdin } from "./lib/stdin.ts";
import { version } from "./lib/version.ts";

const HANDLERS: Record<Exclude<Verb, "VERSION">, Handler> = {
  ADD: add,
  DEL: del,
  CHECK: check,
  STATUS: status,
  GC: gc,
};

/** Extra time the watchdog allows past `timeouts.totalMs` (counted from process start). */
const WATCHDOG_GRACE_MS = 500;

function print(value: unknown): void {
  Deno.stdout.writeSync(new TextEncoder().encode(JSON.stringify(value) + "\n"));
}

/** Runs one CNI invocation and returns the exit code. */
export async function runCni(): Promise<number> {
  const started = performance.now();
  const logger = new Logger();
  const env = (name: string) => Deno.env.get(name);
  let cniVersion: string = LATEST_VERSION;
  let record: Record<string, unknown> = { verb: env("CNI_COMMAND") ?? null };
  try {
    const command = parseVerb(env("CNI_COMMAND"));
    const stdin = await readStdin(MAX_STDIN_BYTES);
    if (command === "VERSION") {
      print(version(stdin));
      return 0;
    }
    const conf = parseNetConf(stdin, await readNodeConfig(env("MILO_IPAM_CONFIG")));
    if ((SUPPORTED_VERSIONS as readonly string[]).includes(conf.cniVersion)) {
      cniVersion = conf.cniVersion;
    }
    const cfg = conf.ipam;
    logger.configure(cfg.log.file, cfg.log.level);
    const cni = readCniEnv(env);
    record = {
      verb: cni.command,
      containerId: cni.containerId || undefined,
      ifname: cni.ifname || undefined,
    };
    requireVersion(conf.cniVersion, cni.command);
    const deadline = performance.timeOrigin + cfg.timeouts.totalMs;
    const watchdog = setTimeout(() => {
      const e = new CniError(
        "transient",
        "invocation exceeded timeouts.totalMs",
        `${cfg.timeouts.totalMs} ms since the process started`,
      );
      print(encodeError(cniVersion, e));
      Deno.exit(1);
    }, Math.max(0, deadline + WATCHDOG_GRACE_MS - Date.now()));
    Deno.unrefTimer(watchdog);
    const node = cfg.node || env("NODE_NAME") || Deno.hostname();
    const milo = await MiloClient.open(cfg, deadline);
    const inv: Invocation = {
      env: cni,
      conf,
      cfg,
      attachment: attachmentOf(cfg, node, conf.name, cni, conf),
      milo,
      touched: [],
    };
    record = { ...record, node, claims: inv.touched };
    try {
      const result = await HANDLERS[cni.command as Exclude<Verb, "VERSION">](inv);
      if (result) print(result);
    } finally {
      record.requests = milo.requests;
      milo.close();
      clearTimeout(watchdog);
    }
    await logger.write("info", { ...record, outcome: "ok", durationMs: elapsed(started) });
    return 0;
  } catch (err) {
    const e = toCniError(err);
    print(encodeError(cniVersion, e));
    await logger.write("error", {
      ...record,
      outcome: "error",
      code: e.code,
      msg: e.message,
      details: e.details,
      durationMs: elapsed(started),
    });
    return 1;
  }
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 10) / 10;
}

/** Runs `milo-ipam reconcile ...`; failures print a CNI error JSON like the verbs do. */
export async function runReconcile(args: string[]): Promise<number> {
  try {
    const { reconcileCli } = await import("./lib/reconcile.ts");
    return await reconcileCli(args);
  } catch (err) {
    print(encodeError(LATEST_VERSION, toCniError(err)));
    return 1;
  }
}

if (import.meta.main) {
  Deno.exit(Deno.args[0] === "reconcile" ? await runReconcile(Deno.args.slice(1)) : await runCni());
}
