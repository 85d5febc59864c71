/**
 * The ledger's independent reader: after every event of the simulated world
 * it compares what the world knows to be true (which sandboxes live, on which
 * addresses: runtime.ts) with what Milo records and what each node's state
 * directory remembers, read as files (never through lib/'s own judgement):
 *
 * - **duplicate**: no address is held by two live sandboxes, unless a
 *   claim of one was deleted behind its node's back (Milo freed the address:
 *   nothing on the node can prevent that), and then a node reports the
 *   duplicate within the verification window, or one a DELETE removed in
 *   place of the claim judged (Milo deletes by name), and then a node
 *   reports the duplicate within the release window, even when it ended
 *   sooner, where a node knew of it: the release that removed the claim
 *   heard its DELETE's answer, or the DEL of the sandbox it was removed from
 *   ended it;
 * - **unclaimed**: no live sandbox is without its claim in Milo (its holder,
 *   its address) beyond a window: the release paths make a claim they
 *   removed in place of another again at once, or owe it to the journal,
 *   which the next reconcile runs ({@link Windows.release}); a claim deleted
 *   behind the node's back comes back by reconcile's verification, which
 *   reads each live claim again within two of its intervals (a share of them
 *   each run) ({@link Windows.verify});
 * - **leaked**: no claim of a dead sandbox outlives the release rules'
 *   bound: its DEL released it, or the journal owes it (in doubt, for the
 *   reconcile grace after its ADD) and the next reconcile makes it
 *   ({@link Windows.dead});
 * - **forgotten**: while a dead sandbox's claim is in Milo, its node
 *   remembers it: the node's record of the attachment or a journal entry
 *   names it (nothing owed is dropped).
 *
 * Each window counts from the later of the fault and the moment the release
 * paths could act again: Milo answering (no trouble episode) and the node's
 * agent running.
 */
import type { WireClaim } from "../stub_types.ts";
import { canon } from "./milo.ts";
import type { Sandbox } from "./runtime.ts";

/** What the checker found wrong. */
export interface Violation {
  kind: "duplicate" | "unreported" | "unclaimed" | "leaked" | "forgotten";
  what: string;
  /** Addresses, container ids and claim names involved (to pick the trace lines that show it). */
  about: string[];
}

/** The windows the release rules state (ms). */
export interface Windows {
  release: number;
  verify: number;
  dead: number;
}

/** A claim a release path's DELETE removed in place of the one it judged. */
export interface InPlace {
  at: number;
  /** Whether that DELETE's answer (the claim it removed) reached its sender. */
  answered: boolean;
}

/** What the checker reads of the world. */
export interface Ledger {
  now(): number;
  sandboxes: Map<string, Sandbox>;
  claims(): Iterable<WireClaim>;
  /** A node's state directory. */
  stateDir(node: string): string;
  /** Since when the release paths of `node` could act (Milo quiet, its agent up). */
  quietSince(node: string): number;
  /** When a claim of this attachment (`container/ifname`) was last deleted behind its node's back. */
  deletedBehind(attachment: string): number | undefined;
  /**
   * When a release path (a DEL, a reconcile, the sweep) last deleted a claim
   * of this address while its holder was live: Milo deletes by name, so a
   * DELETE may remove a newer claim than the one it judged.
   */
  removedInPlace(address: string): InPlace | undefined;
  /**
   * When a node last reported a duplicate of this address: any report (a
   * reconcile's verification, a DEL, the journal, the sweep). One a DELETE
   * removed in place is reported by the release that knew it, or, when that
   * DELETE landed after its sender gave up, by the holder's own node.
   */
  reported(address: string): number | undefined;
}

const A = "milo-ipam.io/";

/** The address a claim leases: its address, or its block's first address (canonical). */
export function claimAddress(c: WireClaim): string {
  return canon(c.status.address ?? c.status.allocatedCIDR?.split("/")[0] ?? "");
}

export class Checker {
  readonly #l: Ledger;
  readonly #w: Windows;
  readonly #missing = new Map<string, number>();
  /** Duplicates excused (deleted behind a node's back, or removed in place), by address: since when. */
  readonly #excused = new Map<string, number>();
  /**
   * Duplicates a DELETE removed in place that ended unreported, by address,
   * where a node could know of them: their report is still owed.
   */
  readonly #owed = new Map<string, { since: number; what: string; about: string[] }>();
  /**
   * Each excused duplicate of a DELETE removed in place, by address: what it
   * says, and its sandboxes: `victim`, the one whose claim was removed (the
   * other's claim leases the address), when Milo records one of them.
   */
  readonly #raced = new Map<
    string,
    { what: string; about: string[]; victim?: Sandbox; other: Sandbox }
  >();

  constructor(ledger: Ledger, windows: Windows) {
    this.#l = ledger;
    this.#w = windows;
  }

  /** The first thing wrong now, if any. */
  check(): Violation | undefined {
    return this.#duplicates() ?? this.#unclaimed() ?? this.#dead();
  }

  #live(): Sandbox[] {
    return [...this.#l.sandboxes.values()].filter((s) => s.state === "live");
  }

  /**
   * True when the claim of `s`'s attachment holding `ip` was deleted behind
   * its node's back: by another than the release paths, once this sandbox
   * began (a claim its ADD made and a tool deleted before the ADD answered
   * is as much its own as one deleted later).
   */
  #behind(s: Sandbox, ip: string): boolean {
    const n = s.nets.find((x) => x.ips.includes(ip));
    const t = n && this.#l.deletedBehind(`${s.id}/${n.ifname}`);
    return t !== undefined && t >= s.born;
  }

  #duplicates(): Violation | undefined {
    const now = this.#l.now();
    const holders = new Map<string, Sandbox>();
    const shared = new Set<string>();
    for (const s of this.#live()) {
      for (const n of s.nets) {
        for (const ip of n.ips) {
          const other = holders.get(ip);
          holders.set(ip, s);
          if (!other || other === s) continue;
          shared.add(ip);
          const what = `${ip} is held by two live sandboxes: ${who(other)} and ${who(s)}`;
          const about = [ip, other.id, s.id];
          // Excused only where nothing on a node could prevent it, and then reported in time:
          // a claim deleted behind the node's back (by its verification), or one a DELETE
          // removed in place of the claim it judged (by that release, at once).
          const behind = this.#behind(other, ip) || this.#behind(s, ip);
          const inPlace = this.#l.removedInPlace(ip);
          const raced = inPlace !== undefined &&
            inPlace.at >= Math.min(other.since, s.since) - this.#w.release;
          if (!behind && !raced) return { kind: "duplicate", what, about };
          const since = this.#excused.get(ip) ?? now;
          this.#excused.set(ip, since);
          if (behind) this.#raced.delete(ip);
          else this.#raced.set(ip, { what, about, ...this.#victim(ip, other, s) });
          const window = behind ? this.#w.verify : this.#w.release;
          if (!this.#told(ip, since, window) && now - since > window) {
            return unreported(what, behind, window, about);
          }
        }
      }
    }
    for (const [ip, since] of this.#excused) {
      if (shared.has(ip)) continue;
      this.#excused.delete(ip);
      const raced = this.#raced.get(ip);
      this.#raced.delete(ip);
      // Over before its window, but known to a node all the same: to the release that removed
      // the claim when its DELETE was answered, or to the DEL of the sandbox it was removed
      // from, which ended it while the other still held the address.
      const knew = raced && (
        this.#l.removedInPlace(ip)?.answered ||
        (raced.victim && raced.victim.state !== "live" && raced.other.state === "live")
      );
      if (raced && knew && !this.#told(ip, since, this.#w.release)) {
        this.#owed.set(ip, { since, what: raced.what, about: raced.about });
      }
    }
    for (const [ip, o] of this.#owed) {
      if (this.#told(ip, o.since, this.#w.release)) this.#owed.delete(ip);
      else if (now - o.since > this.#w.release) {
        return unreported(o.what, false, this.#w.release, o.about);
      }
    }
    return undefined;
  }

  /**
   * Which of `a` and `b` (two live sandboxes on `ip`) had its claim removed:
   * the other is the holder Milo's claim of `ip` records; neither, when it
   * records none of them.
   */
  #victim(ip: string, a: Sandbox, b: Sandbox): { victim?: Sandbox; other: Sandbox } {
    for (const c of this.#l.claims()) {
      if (claimAddress(c) !== ip) continue;
      const holder = c.metadata.annotations?.[`${A}container-id`];
      if (holder === a.id) return { victim: b, other: a };
      if (holder === b.id) return { victim: a, other: b };
    }
    return { other: a };
  }

  /** Whether a node reported a duplicate of `ip` since `window` before `since`. */
  #told(ip: string, since: number, window: number): boolean {
    const told = this.#l.reported(ip);
    return told !== undefined && told >= since - window;
  }

  #unclaimed(): Violation | undefined {
    const now = this.#l.now();
    const byHolder = new Map<string, WireClaim[]>();
    for (const c of this.#l.claims()) {
      const a = c.metadata.annotations ?? {};
      const k = `${a[`${A}container-id`]}/${a[`${A}ifname`]}`;
      byHolder.set(k, [...byHolder.get(k) ?? [], c]);
    }
    const seen = new Set<string>();
    for (const s of this.#live()) {
      for (const n of s.nets) {
        const att = `${s.id}/${n.ifname}`;
        for (const ip of n.ips) {
          const key = `${att} ${ip}`;
          seen.add(key);
          if ((byHolder.get(att) ?? []).some((c) => claimAddress(c) === ip)) {
            this.#missing.delete(key);
            continue;
          }
          const since = this.#missing.get(key) ?? now;
          this.#missing.set(key, since);
          // Its address given to another after its claim was deleted behind its back: a
          // duplicate, judged above, which no repair can undo.
          if (this.#excused.has(ip)) continue;
          // Deleted behind the node's back, or reported a duplicate (its address another's,
          // made again when that one goes): reconcile's verification brings it back.
          const told = this.#l.reported(ip);
          const verify = this.#behind(s, ip) || (told !== undefined && told >= since);
          const window = verify ? this.#w.verify : this.#w.release;
          const from = Math.max(since, this.#l.quietSince(s.node));
          if (now - from > window) {
            return {
              kind: "unclaimed",
              what: `live sandbox ${who(s)} runs on ${ip} without its claim in Milo since ` +
                `${clock(since)} (window ${window / 1000} s)`,
              about: [ip, s.id],
            };
          }
        }
      }
    }
    for (const k of this.#missing.keys()) if (!seen.has(k)) this.#missing.delete(k);
    return undefined;
  }

  #dead(): Violation | undefined {
    const now = this.#l.now();
    const byId = this.#l.sandboxes;
    for (const c of this.#l.claims()) {
      const a = c.metadata.annotations ?? {};
      const s = byId.get(a[`${A}container-id`] ?? "");
      if (!s || s.state !== "dead") continue;
      const name = c.metadata.name;
      const ifname = a[`${A}ifname`] ?? "";
      if (!remembered(this.#l.stateDir(s.node), s.id, ifname, name)) {
        return {
          kind: "forgotten",
          what: `claim ${name} (${claimAddress(c)}) of ${who(s)}, dead since ${clock(s.since)}, ` +
            `is in Milo and neither its node's record nor its journal names it`,
          about: [name, claimAddress(c), s.id],
        };
      }
      const from = Math.max(s.since, this.#l.quietSince(s.node));
      if (now - from > this.#w.dead) {
        return {
          kind: "leaked",
          what: `claim ${name} (${claimAddress(c)}) of ${who(s)}, dead since ${clock(s.since)}, ` +
            `is still in Milo past ${this.#w.dead / 1000} s`,
          about: [name, claimAddress(c), s.id],
        };
      }
    }
    return undefined;
  }
}

/** Whether the node's record or journal (files under `stateDir`) names claim `name` of an attachment. */
export function remembered(
  stateDir: string,
  containerId: string,
  ifname: string,
  name: string,
): boolean {
  for (const dir of ["holdings", "journal"]) {
    let entries: Deno.DirEntry[];
    try {
      entries = [...Deno.readDirSync(`${stateDir}/${dir}`)];
    } catch {
      continue;
    }
    for (const e of entries) {
      if (!e.isFile || !e.name.endsWith(".json")) continue;
      let v: {
        kind?: string;
        name?: string;
        containerId?: string;
        ifname?: string;
        claims?: { name: string }[];
      };
      try {
        v = JSON.parse(Deno.readTextFileSync(`${stateDir}/${dir}/${e.name}`));
      } catch {
        continue;
      }
      if (v.kind === "remake" && v.name === name) return true;
      if (
        v.containerId === containerId && v.ifname === ifname &&
        v.claims?.some((c) => c.name === name)
      ) {
        return true;
      }
    }
  }
  return false;
}

function unreported(what: string, behind: boolean, window: number, about: string[]): Violation {
  const how = behind
    ? "a claim deleted behind its node's back"
    : "a claim a DELETE removed in place";
  return {
    kind: "unreported",
    what: `${what}, ${how}, and no node reported it within ${window / 1000} s`,
    about,
  };
}

function who(s: Sandbox): string {
  return `${s.pod.namespace}/${s.pod.name} ${s.id.slice(0, 8)} on ${s.node}`;
}

/** A time of the simulated day as mm:ss.mmm since the world began. */
export function clock(ms: number): string {
  const t = ms - Date.UTC(2027, 0, 4);
  const m = Math.floor(t / 60_000), s = Math.floor((t % 60_000) / 1000), r = t % 1000;
  return `${String(m).padStart(3, "0")}:${String(s).padStart(2, "0")}.${
    String(r).padStart(3, "0")
  }`;
}
