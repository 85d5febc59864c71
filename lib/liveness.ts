/**
 * Which attachments of this node are live, as the node reconcile judges them,
 * and the brakes that stop it when that judgement looks wrong.
 *
 * The oracle is every libcni result cache on the node (`resultsDirs`): the
 * runtime's (`/var/lib/cni/results`: containerd, CRI-O, podman) and Multus's
 * (`/var/lib/cni/multus/results`, where its delegates' results go, thin or
 * thick). libcni writes an entry after every successful ADD and removes it
 * after the DEL, in the process that called the plugin. A container is live
 * while any entry in any of those caches names its ID: Multus and galactic's
 * masters give their delegates the runtime's container ID, so the runtime's
 * own entry for the sandbox keeps every attachment of it live, whatever
 * network or interface name the meta-plugin cached the delegate under.
 */
import { isPlainObject } from "./cni.ts";
import type { NodeConfig } from "./config.ts";
import { CniError, errorText } from "./errors.ts";

/** The live containers found in the result caches. */
export interface LiveSet {
  /** Container IDs named by at least one cache entry. */
  containers: Set<string>;
  /** Cache entries read, per directory (a missing directory reads as none). */
  dirs: { dir: string; entries: number; missing?: true }[];
}

/** Reads every libcni cache entry of `dirs`. */
export async function readLive(dirs: string[]): Promise<LiveSet> {
  const containers = new Set<string>();
  const read = await Promise.all(dirs.map(async (dir) => {
    const ids = await readCacheDir(dir);
    for (const id of ids ?? []) containers.add(id);
    return ids ? { dir, entries: ids.length } : { dir, entries: 0, missing: true as const };
  }));
  return { containers, dirs: read };
}

/** The container IDs of one cache directory's entries, or undefined when it does not exist. */
async function readCacheDir(dir: string): Promise<string[] | undefined> {
  let names: string[];
  try {
    names = (await Array.fromAsync(Deno.readDir(dir))).filter((e) => e.isFile).map((e) => e.name);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw new CniError("io", `cannot list result cache ${dir}`, errorText(err));
  }
  const ids = await Promise.all(names.map((n) => containerOf(`${dir}/${n}`)));
  return ids.filter((id): id is string => id !== undefined);
}

/** The container ID a libcni cache file names, or undefined if it is absent or not one. */
async function containerOf(path: string): Promise<string | undefined> {
  let doc: unknown;
  try {
    doc = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof SyntaxError) return undefined;
    throw new CniError("io", `cannot read result cache entry ${path}`, errorText(err));
  }
  return isPlainObject(doc) && typeof doc.containerId === "string" && doc.containerId
    ? doc.containerId
    : undefined;
}

/** Why a run released nothing although it had claims to release. */
export interface Brake {
  reason: "empty" | "shrunk";
  message: string;
}

/** The live set of the last run in which every claim of this host was live (or journaled). */
export interface Baseline {
  live: number;
  at: number;
}

/**
 * The brake a run with `candidates` claims to release must stop at, if any:
 * no cache entry at all (a cache emptied, moved or not yet written), or a
 * live set under half the baseline's (a cache partly lost, or a runtime
 * moved to a cache dir not in `resultsDirs`).
 */
export function brakeOf(
  live: LiveSet,
  baseline: Baseline | undefined,
  candidates: number,
): Brake | undefined {
  if (!candidates) return undefined;
  const where = live.dirs.map((d) => `${d.dir} (${d.missing ? "missing" : d.entries})`).join(", ");
  if (live.containers.size === 0) {
    return {
      reason: "empty",
      message: `no live container in any result cache (${where}) while ${candidates} claim(s) ` +
        "of this host would be released",
    };
  }
  if (baseline && live.containers.size < baseline.live / 2) {
    return {
      reason: "shrunk",
      message: `the live set shrank from ${baseline.live} containers (${
        new Date(baseline.at).toISOString()
      }) to ${live.containers.size} (${where}) while ${candidates} claim(s) would be released`,
    };
  }
  return undefined;
}

/** The reconcile state file of a node. */
export function stateFileOf(node: NodeConfig): string {
  return `${node.stateDir}/reconcile-state.json`;
}

/** What the state file carries from one run to the next. */
export interface State {
  /** Claims absent from the caches: when first seen absent, and their uid then. */
  absent: Record<string, { firstAbsent: number; uid?: string }>;
  baseline?: Baseline;
}

/** The state file as the last run left it (none, or unreadable as JSON: nothing observed). */
export async function readState(path: string, now: number): Promise<State> {
  let v: unknown;
  try {
    v = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof SyntaxError) return { absent: {} };
    throw new CniError("io", `cannot read reconcile state ${path}`, errorText(err));
  }
  const doc = isPlainObject(v) ? v : {};
  const absent: State["absent"] = {};
  for (const [name, s] of Object.entries(isPlainObject(doc.absent) ? doc.absent : {})) {
    if (!isPlainObject(s)) continue;
    // A timestamp that is not a finite number is "first seen now", never "long ago".
    const at = typeof s.firstAbsent === "number" && Number.isFinite(s.firstAbsent)
      ? Math.min(s.firstAbsent, now)
      : now;
    absent[name] = { firstAbsent: at, uid: typeof s.uid === "string" ? s.uid : undefined };
  }
  const b = doc.baseline;
  const baseline = isPlainObject(b) && typeof b.live === "number" && typeof b.at === "number"
    ? { live: b.live, at: b.at }
    : undefined;
  return { absent, baseline };
}
