/**
 * Paths only the plugin's own user (root) may change: the log's directory
 * and the state directory. A directory qualifies when it is a real directory
 * (not a symlink), owned by this process's user, and not writable by group
 * or others; files in it are appended to without following a symlink, so
 * whoever can write a parent cannot point the plugin's writes elsewhere.
 */
import { CniError } from "./errors.ts";
import { dirOf } from "./paths.ts";

/** This process's user, or undefined where the platform has none. */
let uid: number | null | undefined;

function ownUid(): number | null {
  if (uid === undefined) uid = Deno.uid();
  return uid;
}

/**
 * Why `dir` is not a private directory, or undefined when it is one. A
 * missing directory answers `missing`.
 */
export function unsafeDir(dir: string): string | undefined {
  let info: Deno.FileInfo;
  try {
    info = Deno.lstatSync(dir);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return "missing";
    throw err;
  }
  if (info.isSymlink) return `${dir} is a symlink`;
  if (!info.isDirectory) return `${dir} is not a directory`;
  const me = ownUid();
  if (me !== null && info.uid !== me) return `${dir} is owned by uid ${info.uid}, not ${me}`;
  if (info.mode !== null && (info.mode & 0o022) !== 0) {
    return `${dir} is writable by its group or others (mode ${(info.mode & 0o777).toString(8)})`;
  }
  return undefined;
}

/** Makes `dir` (0700) when it is missing; answers why it is not private, if it is not. */
export function privateDir(dir: string): string | undefined {
  if (unsafeDir(dir) === "missing") Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
  return unsafeDir(dir);
}

/**
 * Makes the log's directory and the state directory (0700) when missing, and
 * refuses (code 7) either when it is not private: the install and the agent
 * start with it, so nobody but root can point the plugin's writes elsewhere.
 */
export function requirePrivateDirs(node: { log: { file: string }; stateDir: string }): void {
  for (const [what, dir] of [["log.file's", dirOf(node.log.file)], ["stateDir", node.stateDir]]) {
    const why = privateDir(dir);
    if (why) {
      throw new CniError(
        "config",
        `${what} directory ${dir} is not private: ${why}`,
        "it must be a directory of its own, owned by root and writable by nobody else " +
          "(for the log, /var/log/milo-ipam/ by default)",
      );
    }
  }
}

/**
 * The agent socket's directory, as the agent binds in it: made (0700) when
 * missing, made 0700 when it is this user's with looser modes, refused
 * (code 7) when it is a symlink, not a directory, or another user's.
 */
export function ownSocketDir(dir: string): void {
  const why = privateDir(dir);
  if (!why) return;
  const info = Deno.lstatSync(dir);
  if (info.isDirectory && !info.isSymlink && (ownUid() === null || info.uid === ownUid())) {
    Deno.chmodSync(dir, 0o700);
    return;
  }
  throw new CniError(
    "config",
    `the agent socket's directory ${dir} is not private: ${why}`,
    "remove it, or give it to root with mode 0700",
  );
}

/**
 * The directory of a secret (`file`, the Milo token) as the node install
 * writes it: made 0700 when missing, made 0700 when it is this user's and
 * open to its group or others (the kubelet's `DirectoryOrCreate` makes a
 * hostPath 0755) while it holds nothing but `file` and its temporary files,
 * refused (code 7) otherwise: a symlink, not a directory, another user's, or
 * a directory shared with other files, which is not narrowed under their
 * readers (so the secret goes elsewhere).
 */
export function ownSecretDir(file: string): void {
  const dir = dirOf(file);
  const why = privateDir(dir);
  const info = Deno.lstatSync(dir);
  if (!why && (info.mode === null || (info.mode & 0o077) === 0)) return;
  const refuse = (reason: string) =>
    new CniError(
      "config",
      `the directory of ${file} is not private: ${reason}`,
      "give the secret a directory of its own, owned by root, mode 0700 " +
        "(/run/milo-ipam-secrets/ in deploy/base)",
    );
  if (!info.isDirectory || info.isSymlink || (ownUid() !== null && info.uid !== ownUid())) {
    throw refuse(why!);
  }
  const name = file.slice(file.lastIndexOf("/") + 1);
  const others = [...Deno.readDirSync(dir)].map((e) => e.name)
    .filter((n) => n !== name && !(n.startsWith(`${name}.`) && n.endsWith(".tmp")));
  if (others.length) {
    const mode = (info.mode! & 0o777).toString(8);
    throw refuse(`${dir} is mode ${mode} and holds ${others.slice(0, 3).join(", ")}`);
  }
  Deno.chmodSync(dir, 0o700);
}

/**
 * Why the plugin must not talk to the agent socket at `path` (not a socket
 * of this user in a private directory), or undefined when it may, or when
 * there is none to talk to.
 */
export function untrustedSocket(path: string): string | undefined {
  const info = lstatOrNull(path);
  if (!info) return undefined;
  const why = unsafeDir(dirOf(path));
  if (why) return why;
  if (!info.isSocket) return `${path} is not a socket`;
  const me = ownUid();
  return me !== null && info.uid !== me ? `${path} is owned by uid ${info.uid}` : undefined;
}

/**
 * Appends `bytes` to `path` (made with `mode`) in a private directory,
 * never through a symlink or into a file with another name (a hard link):
 * what the path names is checked before the open and compared with what was
 * opened before anything is written. Throws with the reason otherwise.
 * Answers the file's size after the write (as this process saw it) and its inode.
 */
export async function appendOwned(
  path: string,
  bytes: Uint8Array,
  mode: number,
): Promise<{ size: number; ino: number | null }> {
  const why = unsafeDir(dirOf(path));
  if (why) throw new Error(`not writing ${path}: ${why}`);
  const before = lstatOrNull(path);
  if (before && !before.isFile) throw new Error(`not writing ${path}: not a regular file`);
  // Deno's open follows symlinks: the check above keeps it from creating a file elsewhere, the
  // one below from writing into one swapped in meanwhile.
  using f = await Deno.open(path, { append: true, create: true, mode });
  const opened = f.statSync();
  const named = lstatOrNull(path);
  if (!named?.isFile || named.ino !== opened.ino || named.dev !== opened.dev) {
    throw new Error(`not writing ${path}: it changed while it was opened`);
  }
  if ((opened.nlink ?? 1) > 1) throw new Error(`not writing ${path}: it has other names`);
  for (let at = 0; at < bytes.byteLength;) at += await f.write(bytes.subarray(at));
  return { size: opened.size + bytes.byteLength, ino: opened.ino };
}

function lstatOrNull(path: string): Deno.FileInfo | null {
  try {
    return Deno.lstatSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return null;
    throw err;
  }
}
