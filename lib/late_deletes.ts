/**
 * The DELETEs this node sent that Milo may still run: one small file per
 * claim name under `<stateDir>/deletes/`, holding until when a DELETE of
 * that name sent from here may still reach Milo.
 *
 * Milo's API server may run a request after its sender gave up on it (held in
 * priority and fairness's queue, behind a proxy) until its request timeout, and
 * Milo's DELETE removes the claim of that name whatever its uid
 * (`AllocatingREST.Delete`). A DELETE of a name that runs after the name was
 * made again (the same container started again, a sandbox of the same slot)
 * removes the new holder's claim. Nothing on the node can stop it from
 * landing, so the new claim is read again once nothing sent before it can
 * still run (`reconcile.recheckAfterS`, lib/_reconcile_verify.ts), and made
 * again if it went. A name other sandboxes share is read again after every
 * ADD (another node's DELETE may be in flight); this file tells an ADD of any
 * other name whether one of this node's may be.
 *
 * A mark is written before a DELETE is sent (a process killed while its
 * DELETE is in flight leaves it), never removed early, and dropped once past.
 */
import { writeAtomicSync } from "./atomic_write.ts";
import { isSharedName } from "./claims.ts";
import type { NodeConfig } from "./config.ts";

type Node = Pick<NodeConfig, "stateDir" | "reconcile">;

/** The Milo client's hook that marks each DELETE before it is sent (lib/_milo_options.ts). */
export function markingDeletes(node: Node): (name: string, lastSend: number) => void {
  const sent = new DeletesSent(node.stateDir);
  const lateMs = node.reconcile.recheckAfterS * 1000;
  return (name, lastSend) => sent.sending(name, lastSend, lateMs);
}

/**
 * When an ADD that made `names` at `now` reads them again: a name other
 * sandboxes share always, another while a DELETE this node sent of it may
 * still run; undefined when none needs it (or `recheckAfterS` is 0).
 */
export function recheckAt(node: Node, names: string[], now: number): number | undefined {
  const lateMs = node.reconcile.recheckAfterS * 1000;
  if (!lateMs) return undefined;
  const sent = new DeletesSent(node.stateDir);
  const late = names.some((n) => isSharedName(n) || sent.pending(n, now));
  return late ? now + lateMs : undefined;
}

/** The marks of one node's DELETEs. */
export class DeletesSent {
  readonly dir: string;

  constructor(stateDir: string) {
    this.dir = `${stateDir}/deletes`;
  }

  /**
   * Marks that a DELETE of `name` may be sent until `lastSend` (its call's
   * deadline): it may run at Milo until `lastSend + lateMs`. Best effort: a
   * mark that cannot be written leaves the claim to the periodic verification.
   */
  sending(name: string, lastSend: number, lateMs: number): void {
    const until = Math.max(lastSend + lateMs, this.#until(name) ?? 0);
    try {
      Deno.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      writeAtomicSync(this.#path(name), JSON.stringify({ until }), 0o600);
    } catch {
      // No state directory here (the sweep's Job): no ADD of this machine to warn.
    }
  }

  /** True when a DELETE of `name` sent from here may still run at Milo at `now`. */
  pending(name: string, now: number): boolean {
    const until = this.#until(name);
    if (until === undefined) return false;
    if (until > now) return true;
    this.#drop(name);
    return false;
  }

  /** Drops every mark past at `now` (reconcile's housekeeping). */
  prune(now: number): void {
    let names: string[];
    try {
      names = [...Deno.readDirSync(this.dir)].filter((e) => e.isFile).map((e) => e.name);
    } catch {
      return;
    }
    for (const name of names) if (!name.endsWith(".tmp")) this.pending(name, now);
  }

  #until(name: string): number | undefined {
    try {
      const v = JSON.parse(Deno.readTextFileSync(this.#path(name))) as { until?: unknown };
      return typeof v?.until === "number" ? v.until : Number.POSITIVE_INFINITY;
    } catch (err) {
      // Torn: treated as pending until the next DELETE writes it again.
      return err instanceof Deno.errors.NotFound ? undefined : Number.POSITIVE_INFINITY;
    }
  }

  #drop(name: string): void {
    try {
      Deno.removeSync(this.#path(name));
    } catch {
      // Gone already.
    }
  }

  #path(name: string): string {
    return `${this.dir}/${name}`;
  }
}
