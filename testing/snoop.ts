/**
 * Another user of the node: a process of uid 65534 (nobody) that lists a
 * directory over and over and reads every file it finds there, as a process
 * watching for a secret to appear would. It runs a copy of this Deno from a
 * directory nobody may read (root's home is 0700) and stops when told. Only
 * root can start it.
 */

/** Uid and gid of the unprivileged reader. */
export const NOBODY = 65534;

/** Tests that use it are ignored unless run as root, and fail under CI without root. */
export const SNOOP_IGNORED = Deno.uid() !== 0 && !Deno.env.get("CI");

/** What the reader saw: how often it looked, could list, and what it read. */
export interface Snooped {
  /** Times it listed `dir` or tried to. */
  looks: number;
  /** Times the listing succeeded. */
  listed: number;
  /** Files it read something from, each with the bytes it read first. */
  read: { name: string; text: string }[];
}

/** A running reader of `dir`. */
export interface Snoop {
  /** Stops it and answers what it read. */
  stop(): Promise<Snooped>;
}

// The reader: a tight synchronous loop, so that it catches a file in the moments between
// its creation and its chmod, until the stop file exists; "ready" once it has looked once.
const READER = `
const [dir, stop] = Deno.args;
const read = new Map();
let looks = 0, listed = 0;
for (;;) {
  looks++;
  let names = [];
  try {
    names = [...Deno.readDirSync(dir)].map((e) => e.name);
    listed++;
  } catch { /* not listable */ }
  for (const name of names) {
    if (read.has(name)) continue;
    try {
      const text = Deno.readTextFileSync(dir + "/" + name);
      if (text) read.set(name, text);
    } catch { /* refused, or gone */ }
  }
  if (looks === 1) console.log("ready");
  try {
    Deno.statSync(stop);
    break;
  } catch { /* go on */ }
}
console.log(JSON.stringify({ looks, listed, read: [...read].map(([name, text]) => ({ name, text })) }));
`;

/**
 * Starts the reader on `dir` (every directory above it must let others
 * through) and resolves once it has looked at `dir` once.
 */
export async function snoop(dir: string): Promise<Snoop> {
  const own = await Deno.makeTempDir({ prefix: "milo-ipam-snoop-" });
  await Deno.chmod(own, 0o755);
  const deno = `${own}/deno`;
  await Deno.link(Deno.execPath(), deno).catch(() => Deno.copyFile(Deno.execPath(), deno));
  const home = `${own}/home`;
  await Deno.mkdir(home);
  await Deno.chown(home, NOBODY, NOBODY);
  const stopFile = `${own}/stop`;
  const child = new Deno.Command(deno, {
    args: ["eval", "--no-config", READER, dir, stopFile],
    uid: NOBODY,
    gid: NOBODY,
    clearEnv: true,
    env: { DENO_DIR: `${home}/deno`, HOME: home, DENO_NO_UPDATE_CHECK: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  while (!out.includes("\n")) {
    const { value, done } = await lines.read();
    if (done) break;
    out += value;
  }
  if (!out.startsWith("ready\n")) {
    const status = await child.status;
    const err = await new Response(child.stderr).text();
    await Deno.remove(own, { recursive: true });
    throw new Error(`the reader did not start (exit ${status.code}): ${out}${err}`);
  }
  return {
    async stop() {
      await Deno.writeTextFile(stopFile, "");
      for (;;) {
        const { value, done } = await lines.read();
        if (done) break;
        out += value;
      }
      const [status, err] = await Promise.all([child.status, new Response(child.stderr).text()]);
      await Deno.remove(own, { recursive: true });
      if (!status.success) throw new Error(`the reader failed (exit ${status.code}): ${err}`);
      return JSON.parse(out.slice("ready\n".length));
    },
  };
}
