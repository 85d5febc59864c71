/** `milo-ipam reconcile`: the command line of the node reconcile (lib/reconcile.ts). */
import { parseFlags } from "./cli.ts";
import { readNodeConfig, withConfigFlag } from "./config_file.ts";
import { UsageError } from "./errors.ts";
import { redactedJson } from "./redact.ts";
import { MiloClient } from "./milo.ts";
import { exitOf, reconcile } from "./reconcile.ts";
import { requireStateFormat } from "./state_format.ts";

/** `milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run] [--force]`. */
export async function reconcileCli(args: string[]): Promise<number> {
  const usage =
    "usage: milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run] [--force] [--list]";
  const values = parseFlags(args, usage, {
    config: { type: "string" },
    grace: { type: "string" },
    "dry-run": { type: "boolean", default: false },
    force: { type: "boolean", default: false },
    list: { type: "boolean", default: false },
  });
  const grace = values.grace === undefined ? undefined : Number(values.grace);
  if (grace !== undefined && (!Number.isFinite(grace) || grace < 0)) {
    throw new UsageError(usage, "--grace must be a number of seconds");
  }
  const node = await readNodeConfig(withConfigFlag(values.config));
  // A node state in a newer format (a rollback past a format change) is refused before any run.
  requireStateFormat(node.stateDir);
  const t = node.timeouts;
  const milo = await MiloClient.open(node, t.requestMs, Date.now() + t.totalMs);
  try {
    const report = await reconcile({
      node,
      milo,
      graceMs: (grace ?? node.reconcile.graceS) * 1000,
      dryRun: values["dry-run"],
      force: values.force,
      list: values.list,
    });
    console.log(redactedJson(report, 2));
    for (const w of report.warnings) console.error(`milo-ipam reconcile: warning: ${w}`);
    return exitOf(report);
  } finally {
    milo.close();
  }
}
