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
 *
 * An entry also holds the delegate's config, whose size the network config's
 * author chooses: only each entry's head is read (the container ID, which
 * libcni writes first), one entry at a time, so memory does not grow with it.
 */
import type { Duplicate } from "./restore.ts";
import { isPlainObject } from "./values.ts";
import type { NodeConfig } from "./config.ts";
import { CniError, errorText } from "./errors.ts";

/**
 * The most of one cache entry read to find its container ID. libcni writes
 * `kind` and `containerId` first (`cachedInfo` in containernetworking/cni
 * `libcni/api.go`), ahead of the delegate's config, whose size the network
 * config's author chooses; the rest of the entry is never read.
 */
export const ENTRY_HEAD_BYTES = 64 * 1024;
/** How much of an entry is read at a time, up to {@link ENTRY_HEAD_BYTES}. */
const READ_STEP = 4 * 1024;

/** The live containers found in the result caches. */
export interface LiveSet {
  /** Container IDs named by at least one cache entry. */
  containers: Set<string>;
  /**
   * Entries whose container ID lies past {@link ENTRY_HEAD_BYTES} (not as
   * libcni writes them): each keeps live any container whose ID its file
   * name holds as `-ID-`, as libcni finds a container's entries by name.
   */
  unjudged: string[];
  /** Cache entries read, per directory (a missing directory reads as none). */
  dirs: { dir: string; entries: number; missing?: true }[];
}

/** Whether any cache entry of `live` keeps container `id` live. */
export function isLive(live: LiveSet, id: string): boolean {
  return live.containers.has(id) || live.unjudged.some((name) => name.includes(`-${id}-`));
}

/** What one entry said, remembered with what identified the file then. */
interface Seen {
  ino: number | null;
  size: number;
  mtime: number | undefined;
  id: string | typeof UNJUDGED | undefined;
}

const UNJUDGED = Symbol("unjudged");

/**
 * Reads the live set from `dirs`, each entry's head only, one entry at a time.
 * Read again, it lists the directories anew but reads only the entries that
 * are new or changed since (by inode, size and modification time): a run that
 * re-checks its candidates reads each entry once.
 */
export class LiveReader {
  readonly #dirs: string[];
  readonly #seen = new Map<string, Seen>();
  readonly #buf = new Uint8Array(ENTRY_HEAD_BYTES);

  constructor(dirs: string[]) {
    this.#dirs = dirs;
  }

  /** The live set as the caches are now. */
  async read(): Promise<LiveSet> {
    const live: LiveSet = { containers: new Set(), unjudged: [], dirs: [] };
    const present = new Set<string>();
    for (const dir of this.#dirs) {
      const names = await listCacheDir(dir);
      if (!names) {
        live.dirs.push({ dir, entries: 0, missing: true });
        continue;
      }
      let entries = 0;
      for (const name of names) {
        const path = `${dir}/${name}`;
        const id = await this.#entry(path);
        if (id === undefined) continue;
        present.add(path);
        entries++;
        if (id === UNJUDGED) live.unjudged.push(name);
        else live.containers.add(id);
      }
      live.dirs.push({ dir, entries });
    }
    for (const path of this.#seen.keys()) if (!present.has(path)) this.#seen.delete(path);
    return live;
  }

  /** The container ID the entry at `path` names (remembered while the file is unchanged). */
  async #entry(path: string): Promise<Seen["id"]> {
    let file: Deno.FsFile;
    try {
      file = await Deno.open(path, { read: true });
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw new CniError("io", `cannot read result cache entry ${path}`, errorText(err));
    }
    try {
      const info = await file.stat();
      if (!info.isFile) return undefined;
      const mark = { ino: info.ino, size: info.size, mtime: info.mtime?.getTime() };
      const was = this.#seen.get(path);
      if (
        was && was.ino === mark.ino && was.size === mark.size && was.mtime === mark.mtime &&
        mark.mtime !== undefined
      ) {
        return was.id;
      }
      const id = await this.#head(file, path);
      this.#seen.set(path, { ...mark, id });
      return id;
    } finally {
      file.close();
    }
  }

  /** Reads the entry's head a step at a time until its container ID is known. */
  async #head(file: Deno.FsFile, path: string): Promise<Seen["id"]> {
    let used = 0;
    for (;;) {
      let n: number | null;
      try {
        n = await file.read(this.#buf.subarray(used, Math.min(used + READ_STEP, this.#buf.length)));
      } catch (err) {
        throw new CniError("io", `cannot read result cache entry ${path}`, errorText(err));
      }
      if (n !== null) used += n;
      const found = containerIdOf(new TextDecoder().decode(this.#buf.subarray(0, used)));
      if (found !== MORE) return found;
      if (n === null) return undefined;
      if (used >= this.#buf.length) return UNJUDGED;
    }
  }
}

/** Reads every libcni cache entry of `dirs` once. */
export function readLive(dirs: string[]): Promise<LiveSet> {
  return new LiveReader(dirs).read();
}

/** The names of a cache directory's files, or undefined when it does not exist. */
async function listCacheDir(dir: string): Promise<string[] | undefined> {
  try {
    const names: string[] = [];
    for await (const e of Deno.readDir(dir)) if (e.isFile) names.push(e.name);
    return names;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw new CniError("io", `cannot list result cache ${dir}`, errorText(err));
  }
}

/** {@link containerIdOf}: the text ends before the answer. */
const MORE = Symbol("more");

/**
 * The top-level `containerId` string of the JSON object whose text begins
 * with `text`: undefined when the text is not such an object or the object
 * has none (or its first string one is empty), {@link MORE} when the text
 * ends first. Values before it are skipped, never built.
 */
export function containerIdOf(text: string): string | undefined | typeof MORE {
  let i = skipSpace(text, 0);
  if (i >= text.length) return MORE;
  if (text[i] !== "{") return undefined;
  i++;
  for (;;) {
    i = skipSpace(text, i);
    if (i >= text.length) return MORE;
    if (text[i] === "}") return undefined;
    if (text[i] !== '"') return undefined;
    const keyEnd = stringEnd(text, i);
    if (keyEnd === MORE) return MORE;
    if (keyEnd === undefined) return undefined;
    const key = parseString(text.slice(i, keyEnd));
    i = skipSpace(text, keyEnd);
    if (i >= text.length) return MORE;
    if (text[i] !== ":") return undefined;
    i = skipSpace(text, i + 1);
    if (i >= text.length) return MORE;
    const end = valueEnd(text, i);
    if (end === MORE) return MORE;
    if (end === undefined || key === undefined) return undefined;
    if (key === "containerId" && text[i] === '"') {
      return parseString(text.slice(i, end)) || undefined;
    }
    i = skipSpace(text, end);
    if (i >= text.length) return MORE;
    if (text[i] === ",") i++;
    else return undefined;
  }
}

function skipSpace(text: string, i: number): number {
  while (
    i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\r" ||
      text[i] === "\t")
  ) i++;
  return i;
}

function parseString(literal: string): string | undefined {
  try {
    const v = JSON.parse(literal);
    return typeof v === "string" ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The index after the string literal at `i`. */
function stringEnd(text: string, i: number): number | undefined | typeof MORE {
  for (let j = i + 1; j < text.length; j++) {
    const c = text[j];
    if (c === "\\") j++;
    else if (c === '"') return j + 1;
    else if (c < " ") return undefined;
  }
  return MORE;
}

/** The index after the JSON value at `i` (nested values skipped, strings heeded). */
function valueEnd(text: string, i: number): number | undefined | typeof MORE {
  const c = text[i];
  if (c === '"') return stringEnd(text, i);
  if (c === "{" || c === "[") {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      const d = text[j];
      if (d === '"') {
        const end = stringEnd(text, j);
        if (end === MORE || end === undefined) return end;
        j = end - 1;
      } else if (d === "{" || d === "[") depth++;
      else if (d === "}" || d === "]") {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return MORE;
  }
  let j = i;
  while (j < text.length && /[-+.0-9a-zA-Z]/.test(text[j])) j++;
  if (j === i) return undefined;
  return j >= text.length ? MORE : j;
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

/** What {@link State}'s `verified` knows a live claim by: its name and its record's container. */
export function verifiedKey(name: string, containerId: string): string {
  return `${name} ${containerId}`;
}

/** What the state file carries from one run to the next. */
export interface State {
  /** Claims absent from the caches: when first seen absent, and their uid then. */
  absent: Record<string, { firstAbsent: number; uid?: string }>;
  /** Claims of galactic attachments a cache has named: their uid then (lib/evidence.ts). */
  seen: Record<string, string>;
  baseline?: Baseline;
  /** Live claims last found in Milo as recorded (ms, the node's clock), by {@link verifiedKey}. */
  verified?: Record<string, number>;
  /**
   * What the last run's verification found wrong (addresses two sandboxes
   * use, live attachments without their claim), for `milo-ipam show`.
   */
  findings?: {
    at: number;
    duplicates: Duplicate[];
    missing: { claim: string; address?: string; why: string }[];
  };
}

/** The state file as the last run left it (none, or unreadable as JSON: nothing observed). */
export async function readState(path: string, now: number): Promise<State> {
  let v: unknown;
  try {
    v = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound || err instanceof SyntaxError) {
      return { absent: {}, seen: {} };
    }
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
  const seen = Object.fromEntries(
    Object.entries(isPlainObject(doc.seen) ? doc.seen : {}).filter(([, u]) =>
      typeof u === "string"
    ),
  ) as State["seen"];
  const b = doc.baseline;
  const baseline = isPlainObject(b) && typeof b.live === "number" && typeof b.at === "number"
    ? { live: b.live, at: b.at }
    : undefined;
  const verified: Record<string, number> = {};
  for (const [name, at] of Object.entries(isPlainObject(doc.verified) ? doc.verified : {})) {
    if (typeof at === "number" && Number.isFinite(at)) verified[name] = Math.min(at, now);
  }
  const findings = isPlainObject(doc.findings) ? doc.findings as State["findings"] : undefined;
  return { absent, seen, baseline, verified, ...(findings ? { findings } : {}) };
}
