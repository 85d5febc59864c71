/**
 * The real file I/O of the code under simulation, made observable: while the
 * simulator runs, Deno's asynchronous file operations are counted in flight
 * (so the scheduler knows when every activity has come to rest on a simulated
 * event), and directory listings come back sorted by name (a file system's
 * own order differs between file systems and would leak into the run).
 * Everything is put back by {@link uninstallIo}.
 */

let inFlight = 0;

/** File operations started and not yet settled. */
export function ioInFlight(): number {
  return inFlight;
}

type AnyFn = (...args: unknown[]) => unknown;

const DENO_ASYNC = [
  "open",
  "mkdir",
  "readTextFile",
  "writeTextFile",
  "readFile",
  "writeFile",
  "remove",
  "rename",
  "stat",
  "lstat",
  "chmod",
  "realPath",
  "readLink",
  "copyFile",
  "truncate",
  "link",
  "symlink",
  "makeTempDir",
  "makeTempFile",
  "utime",
] as const;

const FILE_ASYNC = [
  "read",
  "write",
  "sync",
  "syncData",
  "stat",
  "truncate",
  "seek",
  "utime",
  "lock",
  "unlock",
] as const;

const saved: { target: Record<string, unknown>; name: string; fn: unknown }[] = [];

function counted(fn: AnyFn): AnyFn {
  return function (this: unknown, ...args: unknown[]) {
    inFlight++;
    let p: unknown;
    try {
      p = fn.apply(this, args);
    } catch (err) {
      inFlight--;
      throw err;
    }
    if (!(p instanceof Promise)) {
      inFlight--;
      return p;
    }
    return p.finally(() => inFlight--);
  };
}

function replace(target: Record<string, unknown>, name: string, fn: unknown): void {
  saved.push({ target, name, fn: target[name] });
  target[name] = fn;
}

/** Counts Deno's asynchronous file operations and sorts directory listings; idempotent. */
export function installIo(): void {
  if (saved.length) return;
  const deno = Deno as unknown as Record<string, unknown>;
  for (const name of DENO_ASYNC) {
    if (typeof deno[name] === "function") replace(deno, name, counted(deno[name] as AnyFn));
  }
  const proto = Deno.FsFile.prototype as unknown as Record<string, unknown>;
  for (const name of FILE_ASYNC) {
    if (typeof proto[name] === "function") replace(proto, name, counted(proto[name] as AnyFn));
  }
  const readDir = Deno.readDir;
  replace(deno, "readDir", (path: string | URL) => sortedDir(() => readDir(path)));
  const readDirSync = Deno.readDirSync;
  replace(
    deno,
    "readDirSync",
    (path: string | URL) => [...readDirSync(path)].sort((a, b) => byName(a.name, b.name)),
  );
}

/** Puts every replaced function back. */
export function uninstallIo(): void {
  for (const s of saved.reverse()) s.target[s.name] = s.fn;
  saved.length = 0;
}

const byName = (a: string, b: string) => a < b ? -1 : a > b ? 1 : 0;

/** A directory listing read whole (counted while it is read), then given out by name. */
async function* sortedDir(list: () => AsyncIterable<Deno.DirEntry>): AsyncGenerator<Deno.DirEntry> {
  const all: Deno.DirEntry[] = [];
  inFlight++;
  try {
    for await (const e of list()) all.push(e);
  } finally {
    inFlight--;
  }
  yield* all.sort((a, b) => byName(a.name, b.name));
}
