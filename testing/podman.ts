/**
 * Test support: a podman (CNI backend) of the test's own. Everything podman
 * reads or writes that a test may choose lives in one temp dir: containers.conf,
 * storage.conf, registries.conf, the signature policy, the network config dir,
 * image and container storage (`--root`, `--runroot`, vfs) and podman's tmpdir.
 * Nothing under /etc is read for configuration or changed.
 *
 * Two paths stay global because podman 4.3 and libcni give no way to move
 * them: network namespaces (`/run/netns/cni-*`, removed with their container)
 * and libcni's result cache (`/var/lib/cni/results`); {@link Podman.cleanup}
 * removes the cache entries of the test's network.
 */
import { runtimeSeed } from "./seeds.ts";

/** Whether `path` exists (following symlinks). */
async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

/** Debian's busybox-static binary, the whole userland of the test image. */
export const BUSYBOX = "/bin/busybox";
/** Debian's CNI plugins (the `bridge` master). */
export const CNI_PLUGINS = "/usr/lib/cni";
/** libcni's default cache directory, where podman 4.3 keeps its CNI results. */
export const LIBCNI_RESULTS = "/var/lib/cni/results";

/** What one podman (or other) command did. */
export interface CmdResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cmd args`, bounded by `timeoutMs`; never throws for a non-zero exit. */
export async function runCmd(
  cmd: string,
  args: string[],
  o: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<CmdResult> {
  try {
    const out = await new Deno.Command(cmd, {
      args,
      env: o.env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(o.timeoutMs ?? 60_000),
    }).output();
    const dec = new TextDecoder();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  } catch (err) {
    return { code: -1, stdout: "", stderr: `${cmd} ${args.join(" ")}: ${err}` };
  }
}

/** The first prerequisite of the podman e2e that is missing, or undefined. */
export async function podmanMissing(): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return "not Linux";
  if (Deno.uid() !== 0) return "not root";
  const which = async (b: string) => (await runCmd("sh", ["-c", `command -v ${b}`])).code === 0;
  if (!await which("podman")) return "podman not installed (apt-get install podman)";
  if (!await which("runc")) return "runc not installed (apt-get install runc)";
  if (!await which("ip")) return "ip not installed (apt-get install iproute2)";
  if (!await exists(BUSYBOX)) return `${BUSYBOX} missing (apt-get install busybox-static)`;
  const file = await Deno.readFile(BUSYBOX);
  if (isDynamicElf(file)) return `${BUSYBOX} is not static (apt-get install busybox-static)`;
  if (!await exists(`${CNI_PLUGINS}/bridge`)) {
    return `${CNI_PLUGINS}/bridge missing (apt-get install containernetworking-plugins)`;
  }
  return await podmanCannotRun();
}

/** Why podman cannot run here (its own storage, runc), from `podman info`; else undefined. */
async function podmanCannotRun(): Promise<string | undefined> {
  const runc = await runCmd("runc", ["--version"], { timeoutMs: 10_000 });
  if (runc.code !== 0) return `runc cannot run: ${firstLine(runc.stderr)}`;
  const p = await Podman.create({ pluginDirs: [CNI_PLUGINS] });
  try {
    const r = await p.run(["info", "--format", "{{.Host.OCIRuntime.Name}}"], 30_000);
    if (r.code !== 0) return `podman cannot run here: ${firstLine(r.stderr)}`;
    return undefined;
  } finally {
    await Deno.remove(p.dir, { recursive: true }).catch(() => {});
  }
}

function firstLine(text: string): string {
  return text.trim().split("\n")[0]?.slice(0, 200) || "(no message)";
}

/** Whether an ELF file has a PT_INTERP program header (dynamically linked). */
function isDynamicElf(b: Uint8Array): boolean {
  if (b.length < 64 || b[0] !== 0x7f || b[1] !== 0x45 || b[2] !== 0x4c || b[3] !== 0x46) {
    return false;
  }
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const le = b[5] === 1;
  const is64 = b[4] === 2;
  const phoff = is64 ? Number(v.getBigUint64(32, le)) : v.getUint32(28, le);
  const phentsize = v.getUint16(is64 ? 54 : 42, le);
  const phnum = v.getUint16(is64 ? 56 : 44, le);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > b.length) break;
    if (v.getUint32(at, le) === 3) return true; // PT_INTERP
  }
  return false;
}

/** Options of {@link Podman.create}. */
export interface PodmanOptions {
  /** Directories podman searches for CNI plugins (the install's bin dir first). */
  pluginDirs: string[];
  /** Limits given to every container: podman's defaults exceed what a test may raise. */
  ulimits?: string[];
}

/** A podman of the test's own: every invocation carries its flags and environment. */
export class Podman {
  readonly dir: string;
  readonly networkDir: string;
  readonly #env: Record<string, string>;
  readonly #global: string[];
  readonly #ulimits: string[];
  readonly #networks: { name: string; bridge: string }[] = [];

  private constructor(dir: string, env: Record<string, string>, ulimits: string[]) {
    this.dir = dir;
    this.networkDir = `${dir}/networks`;
    this.#env = env;
    this.#ulimits = ulimits;
    this.#global = [
      "--root",
      `${dir}/root`,
      "--runroot",
      `${dir}/runroot`,
      "--tmpdir",
      `${dir}/tmp`,
      "--storage-driver",
      "vfs",
      "--cgroup-manager",
      "cgroupfs",
      "--events-backend",
      "file",
      "--runtime",
      "runc",
      "--network-config-dir",
      this.networkDir,
    ];
  }

  /** Writes the configuration files into a new temp dir. */
  static async create(o: PodmanOptions): Promise<Podman> {
    const dir = await Deno.makeTempDir({ prefix: "mipod-" });
    for (const d of ["networks", "root", "runroot", "tmp"]) {
      await Deno.mkdir(`${dir}/${d}`, { mode: 0o700 });
    }
    const toml = (s: string) => JSON.stringify(s);
    await Deno.writeTextFile(
      `${dir}/containers.conf`,
      [
        "[containers]",
        'netns = "bridge"',
        "[engine]",
        'cgroup_manager = "cgroupfs"',
        'events_logger = "file"',
        `events_logfile_path = ${toml(`${dir}/events.log`)}`,
        'runtime = "runc"',
        `static_dir = ${toml(`${dir}/root/libpod`)}`,
        `tmp_dir = ${toml(`${dir}/tmp`)}`,
        `volume_path = ${toml(`${dir}/root/volumes`)}`,
        "[network]",
        'network_backend = "cni"',
        `network_config_dir = ${toml(`${dir}/networks`)}`,
        `cni_plugin_dirs = [${o.pluginDirs.map(toml).join(", ")}]`,
        'default_network = "podman"',
        "",
      ].join("\n"),
    );
    await Deno.writeTextFile(
      `${dir}/storage.conf`,
      [
        "[storage]",
        'driver = "vfs"',
        `graphroot = ${toml(`${dir}/root`)}`,
        `runroot = ${toml(`${dir}/runroot`)}`,
        "",
      ].join("\n"),
    );
    await Deno.writeTextFile(`${dir}/registries.conf`, "unqualified-search-registries = []\n");
    await Deno.writeTextFile(
      `${dir}/policy.json`,
      JSON.stringify({ default: [{ type: "insecureAcceptAnything" }] }),
    );
    const env = {
      PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      HOME: dir,
      CONTAINERS_CONF: `${dir}/containers.conf`,
      CONTAINERS_STORAGE_CONF: `${dir}/storage.conf`,
      CONTAINERS_REGISTRIES_CONF: `${dir}/registries.conf`,
      XDG_RUNTIME_DIR: `${dir}/runroot`,
      XDG_CONFIG_HOME: `${dir}/config`,
      XDG_DATA_HOME: `${dir}/data`,
    };
    return new Podman(dir, env, o.ulimits ?? ["nofile=1024:1024", "nproc=1024:1024"]);
  }

  /** `podman <global flags> args`, with the test's environment only. */
  run(args: string[], timeoutMs = 60_000): Promise<CmdResult> {
    return runCmd("podman", [...this.#global, ...args], { env: this.#env, timeoutMs });
  }

  /** Like {@link run}, but throws with podman's stderr when it fails. */
  async ok(args: string[], timeoutMs = 60_000): Promise<string> {
    const r = await this.run(args, timeoutMs);
    if (r.code !== 0) {
      throw new Error(`podman ${args.join(" ")} exited ${r.code}: ${r.stderr.trim()}`);
    }
    return r.stdout;
  }

  /**
   * Builds a rootfs of `busybox` and its applet symlinks, and `podman import`s
   * it as `tag` with the image config `changes` (no registry is ever contacted).
   */
  async importBusybox(
    tag: string,
    applets = ["sh", "sleep", "ip", "cat", "ls"],
    changes = ['CMD ["/bin/sh"]'],
  ): Promise<void> {
    const rootfs = `${this.dir}/rootfs`;
    await Deno.mkdir(`${rootfs}/bin`, { recursive: true });
    await Deno.copyFile(BUSYBOX, `${rootfs}/bin/busybox`);
    await Deno.chmod(`${rootfs}/bin/busybox`, 0o755);
    for (const a of applets) await Deno.symlink("busybox", `${rootfs}/bin/${a}`);
    for (const d of ["etc", "proc", "sys", "dev", "tmp", "run"]) await Deno.mkdir(`${rootfs}/${d}`);
    const tar = `${this.dir}/rootfs.tar`;
    const t = await runCmd("tar", ["-C", rootfs, "-cf", tar, "."]);
    if (t.code !== 0) throw new Error(`tar: ${t.stderr}`);
    await this.ok([
      "import",
      "--signature-policy",
      `${this.dir}/policy.json`,
      ...changes.flatMap((c) => ["--change", c]),
      tar,
      tag,
    ]);
  }

  /**
   * Writes a CNI network (conflist) into the test's network config dir; the
   * bridge named in it is deleted by {@link cleanup}.
   */
  async writeNetwork(
    conflist: {
      name: string;
      plugins: ({ type: string; bridge?: string } & Record<string, unknown>)[];
    } & Record<string, unknown>,
  ): Promise<void> {
    const path = `${this.networkDir}/${conflist.name}.conflist`;
    await Deno.writeTextFile(path, JSON.stringify(conflist, null, 2));
    this.#networks.push({ name: conflist.name, bridge: conflist.plugins[0]?.bridge ?? "" });
  }

  /** `podman run -d` of `cmd` in `image` on `network`; answers the container ID. */
  async runDetached(
    image: string,
    network: string,
    name: string,
    cmd: string[],
  ): Promise<string> {
    const limits = this.#ulimits.flatMap((u) => ["--ulimit", u]);
    const out = await this.ok([
      "run",
      "-d",
      "--runtime",
      "runc",
      "--pull",
      "never",
      "--network",
      network,
      "--name",
      name,
      ...limits,
      image,
      ...cmd,
    ], 120_000);
    return out.trim().split("\n").pop()!.trim();
  }

  /** `podman inspect` of containers. */
  async inspect(ids: string[]): Promise<Inspected[]> {
    if (!ids.length) return [];
    return JSON.parse(await this.ok(["inspect", "--type", "container", ...ids])) as Inspected[];
  }

  /**
   * Removes every container and image, the networks' bridges and libcni
   * cache entries, unmounts what podman left mounted under the temp dir, and
   * removes the temp dir. Goes on past every error and answers them.
   */
  async cleanup(): Promise<string[]> {
    const problems: string[] = [];
    const note = (what: string, r: CmdResult) => {
      if (r.code !== 0) problems.push(`${what}: ${r.code} ${r.stderr.trim().slice(0, 300)}`);
    };
    note("podman rm -af", await this.run(["rm", "-a", "-f", "-t", "0"], 120_000));
    note("podman rmi -af", await this.run(["rmi", "-a", "-f"], 60_000));
    for (const n of this.#networks) {
      if (n.bridge && await exists(`/sys/class/net/${n.bridge}`)) {
        note(`ip link del ${n.bridge}`, await runCmd("ip", ["link", "del", n.bridge]));
      }
      for (const e of await Array.fromAsync(Deno.readDir(LIBCNI_RESULTS)).catch(() => [])) {
        if (e.name.startsWith(`${n.name}-`)) {
          await Deno.remove(`${LIBCNI_RESULTS}/${e.name}`).catch((err) =>
            problems.push(`remove ${e.name}: ${err}`)
          );
        }
      }
    }
    // Mounts podman may leave (shm, overlay of a container whose removal failed), deepest first.
    const mounts = (await Deno.readTextFile("/proc/self/mounts").catch(() => ""))
      .split("\n").map((l) => l.split(" ")[1]?.replace(/\\040/g, " "))
      .filter((m): m is string => !!m && m.startsWith(`${this.dir}/`))
      .sort((a, b) => b.length - a.length);
    for (const m of mounts) note(`umount ${m}`, await runCmd("umount", ["-l", m]));
    await Deno.remove(this.dir, { recursive: true }).catch((err) =>
      problems.push(`remove ${this.dir}: ${err}`)
    );
    return problems;
  }
}

/** The parts of `podman inspect` the tests read. */
export interface Inspected {
  Id: string;
  Name: string;
  State: { Running: boolean; Status: string };
  NetworkSettings: {
    Networks?: Record<string, { IPAddress?: string; IPPrefixLen?: number; MacAddress?: string }>;
  };
}

const podmanSeed = runtimeSeed("mipod", "p", "10.213.0.0/24");
/** The milo-dev seed of the podman e2e: one tenant, IPv4 /32s from 10.213.0.0/24. */
export const PODMAN_SEED = podmanSeed.seed;
/** Bearer token of {@link PODMAN_SEED}. */
export const PODMAN_TOKEN = podmanSeed.token;
/** The IPClass the podman network's ipam block asks for. */
export const PODMAN_CLASS = podmanSeed.className;
