/**
 * Test support: a private containerd (Debian's 1.6, CRI plugin enabled) driven
 * over CRI the way kubelet drives it. Everything it may be told to keep
 * elsewhere lives in one temp dir: root, state, the gRPC and ttrpc sockets,
 * runc's state (`runtimes.runc.options.Root`), network namespaces
 * (`netns_mounts_under_state_dir`), the opt dir, its log, the CNI bin dir
 * (symlinks: the installed milo-ipam and Debian's plugins) and the CNI conf
 * dir (one conflist). Images use the `native` snapshotter; the sandbox
 * ("pause") image is built locally from busybox-static, nothing is pulled.
 *
 * What stays global, because containerd 1.6 and libcni give no knob for it:
 * libcni's result cache (`/var/lib/cni/results`: go-cni leaves libcni's
 * default cache dir), the shim sockets (`/run/containerd/s/`, removed by each
 * shim as it exits) and the sandboxes' cgroups (under the cgroup parent the
 * test names, removed by {@link Containerd.cleanup}).
 */
import { CNI_PLUGINS, LIBCNI_RESULTS, Podman, podmanMissing, runCmd } from "../podman.ts";
import { CriClient, type PodSandboxConfig } from "./client.ts";
import { deleteRuncLeftovers, killShims, removeCgroups, unmountUnder } from "./leftovers.ts";

export { LIBCNI_RESULTS };

/** Bounds of the start-up waits. */
const READY_MS = 30_000;
const STOP_MS = 10_000;
const SHIM_RUNTIME = "io.containerd.runc.v2";

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}

async function which(bin: string): Promise<boolean> {
  return (await runCmd("sh", ["-c", `command -v ${bin}`], { timeoutMs: 10_000 })).code === 0;
}

/**
 * The first prerequisite of the containerd e2e that is missing, or undefined:
 * those of the podman e2e (root, podman, runc, ip, a static busybox, Debian's
 * bridge; the pause image is built with podman), then containerd, ctr, the
 * runc shim, `loopback` (the CRI plugin always sets up `lo`) and nsenter.
 */
export async function criMissing(): Promise<string | undefined> {
  const podman = await podmanMissing();
  if (podman) return podman;
  for (const b of ["containerd", "ctr", "containerd-shim-runc-v2"]) {
    if (!await which(b)) return `${b} not installed (apt-get install containerd)`;
  }
  if (!await exists(`${CNI_PLUGINS}/loopback`)) {
    return `${CNI_PLUGINS}/loopback missing (apt-get install containernetworking-plugins)`;
  }
  if (!await which("nsenter")) return "nsenter not installed (apt-get install util-linux)";
  return undefined;
}

/**
 * Builds the sandbox image without a registry: a rootfs of busybox-static
 * whose entrypoint sleeps (as long as a 32-bit sleep goes), `podman import`ed
 * into a podman storage of its own ({@link Podman.importBusybox}) and saved as
 * a docker archive at `archive`. The podman storage is removed afterwards.
 */
export async function buildPauseImage(tag: string, archive: string): Promise<void> {
  const pm = await Podman.create({ pluginDirs: [CNI_PLUGINS] });
  try {
    await pm.importBusybox(tag, ["sleep"], ['ENTRYPOINT ["/bin/sleep"]', 'CMD ["2147483647"]']);
    await pm.ok(["save", "--format", "docker-archive", "-o", archive, tag]);
  } finally {
    const problems = await pm.cleanup();
    if (problems.length) console.warn(`pause image build cleanup: ${problems.join("; ")}`);
  }
}

/** A CNI network list as containerd reads it from its conf dir. */
export interface Conflist {
  cniVersion: string;
  name: string;
  plugins: ({ type: string; bridge?: string } & Record<string, unknown>)[];
  [key: string]: unknown;
}

/** Options of {@link Containerd.start}. */
export interface ContainerdOptions {
  /** The one network in the CNI conf dir. */
  network: Conflist;
  /** Extra plugins of the CNI bin dir by name (e.g. `milo-ipam` → the installed file). */
  plugins: Record<string, string>;
  /** The CRI `sandbox_image`; load it with {@link Containerd.importImage}. */
  sandboxImage: string;
  /** Temp dir prefix. */
  prefix?: string;
}

/** A containerd of the test's own, with a CRI client on its socket. */
export class Containerd {
  readonly dir: string;
  readonly socket: string;
  readonly root: string;
  readonly state: string;
  readonly binDir: string;
  readonly confDir: string;
  readonly runcRoot: string;
  readonly logFile: string;
  readonly network: Conflist;
  readonly cri: CriClient;
  /** Every sandbox id this containerd made (through {@link runPodSandbox} or found at cleanup). */
  readonly sandboxIds = new Set<string>();
  #child?: Deno.ChildProcess;
  #log?: Promise<void>;
  #createdRunDirs: string[] = [];

  private constructor(dir: string, network: Conflist) {
    this.dir = dir;
    this.socket = `${dir}/containerd.sock`;
    this.root = `${dir}/root`;
    this.state = `${dir}/state`;
    this.binDir = `${dir}/cni-bin`;
    this.confDir = `${dir}/cni-conf`;
    this.runcRoot = `${dir}/runc`;
    this.logFile = `${dir}/containerd.log`;
    this.network = network;
    this.cri = new CriClient(this.socket);
  }

  /** Writes the config, CNI dirs and starts containerd; ready once CRI answers Version. */
  static async start(o: ContainerdOptions): Promise<Containerd> {
    const dir = await Deno.makeTempDir({ prefix: o.prefix ?? "micri-" });
    const c = new Containerd(dir, o.network);
    try {
      await c.#writeConfig(o);
      await c.#spawn();
      return c;
    } catch (err) {
      const tail = await c.logTail();
      await c.cleanup();
      throw new Error(`containerd did not start: ${err}\n${tail}`);
    }
  }

  async #writeConfig(o: ContainerdOptions): Promise<void> {
    for (const d of [this.root, this.state, this.binDir, this.confDir, this.runcRoot]) {
      await Deno.mkdir(d, { mode: 0o700 });
    }
    for await (const e of Deno.readDir(CNI_PLUGINS)) {
      if (!(e.name in o.plugins)) {
        await Deno.symlink(`${CNI_PLUGINS}/${e.name}`, `${this.binDir}/${e.name}`);
      }
    }
    for (const [name, path] of Object.entries(o.plugins)) {
      await Deno.symlink(path, `${this.binDir}/${name}`);
    }
    await Deno.writeTextFile(
      `${this.confDir}/10-${o.network.name}.conflist`,
      JSON.stringify(o.network, null, 2),
    );
    const q = (s: string) => JSON.stringify(s);
    const cri = '[plugins."io.containerd.grpc.v1.cri"';
    await Deno.writeTextFile(
      `${this.dir}/config.toml`,
      [
        "version = 2",
        `root = ${q(this.root)}`,
        `state = ${q(this.state)}`,
        "oom_score = 0",
        "",
        "[grpc]",
        `  address = ${q(this.socket)}`,
        "[ttrpc]",
        `  address = ${q(`${this.socket}.ttrpc`)}`,
        "[debug]",
        '  level = "info"',
        "",
        "[plugins]",
        `  [plugins."io.containerd.internal.v1.opt"]`,
        `    path = ${q(`${this.dir}/opt`)}`,
        `  ${cri}]`,
        `    sandbox_image = ${q(o.sandboxImage)}`,
        // The test's process lacks CAP_SYS_RESOURCE in some sandboxes: never lower a score.
        "    restrict_oom_score_adj = true",
        "    netns_mounts_under_state_dir = true",
        "    disable_tcp_service = true",
        '    stream_server_address = "127.0.0.1"',
        '    stream_server_port = "0"',
        "    enable_selinux = false",
        "    disable_apparmor = true",
        `    ${cri}.containerd]`,
        '      snapshotter = "native"',
        '      default_runtime_name = "runc"',
        `      ${cri}.containerd.runtimes.runc]`,
        `        runtime_type = ${q(SHIM_RUNTIME)}`,
        `        ${cri}.containerd.runtimes.runc.options]`,
        "          SystemdCgroup = false",
        `          Root = ${q(this.runcRoot)}`,
        `    ${cri}.cni]`,
        `      bin_dir = ${q(this.binDir)}`,
        `      conf_dir = ${q(this.confDir)}`,
        "      max_conf_num = 1",
        "",
      ].join("\n"),
    );
  }

  async #spawn(): Promise<void> {
    // The shims' socket dir is fixed in 1.6; note what this run creates there to remove it.
    for (const d of ["/run/containerd", "/run/containerd/s"]) {
      if (!await exists(d)) this.#createdRunDirs.unshift(d); // deepest first
    }
    this.#child = new Deno.Command("containerd", {
      args: ["--config", `${this.dir}/config.toml`],
      env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" },
      clearEnv: true,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const log = await Deno.open(this.logFile, { write: true, create: true, append: true });
    this.#log = this.#child.stderr.pipeTo(log.writable).catch(() => {});
    let exited = false;
    this.#child.status.then(() => exited = true);
    const deadline = Date.now() + READY_MS;
    let last: unknown;
    while (Date.now() < deadline) {
      if (exited) throw new Error("containerd exited");
      if (await exists(this.socket)) {
        try {
          const v = await this.cri.version(2_000);
          if (v.runtimeName === "containerd") return;
        } catch (err) {
          last = err;
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`no CRI answer on ${this.socket} within ${READY_MS} ms: ${last}`);
  }

  /** The last lines of containerd's log. */
  async logTail(lines = 30): Promise<string> {
    const text = await Deno.readTextFile(this.logFile).catch(() => "");
    return text.trim().split("\n").slice(-lines).join("\n");
  }

  /** `ctr images import` of an archive into the CRI namespace (`k8s.io`), unpacked for `native`. */
  async importImage(archive: string, image: string): Promise<void> {
    const r = await runCmd("ctr", [
      "-a",
      this.socket,
      "-n",
      "k8s.io",
      "images",
      "import",
      "--snapshotter",
      "native",
      archive,
    ], { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`ctr images import: ${r.stderr.trim()}`);
    // The CRI plugin learns of images from containerd's events: wait until it lists this one.
    const deadline = Date.now() + READY_MS;
    while (Date.now() < deadline) {
      if (await this.cri.imageStatus(image)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`the CRI plugin does not know ${image} after the import`);
  }

  /** Waits until the runtime reports RuntimeReady and NetworkReady (the conflist was loaded). */
  async waitReady(): Promise<void> {
    const deadline = Date.now() + READY_MS;
    let conds: unknown;
    while (Date.now() < deadline) {
      const c = await this.cri.status();
      conds = c;
      if (["RuntimeReady", "NetworkReady"].every((t) => c.some((x) => x.type === t && x.status))) {
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`containerd not ready: ${JSON.stringify(conds)}`);
  }

  /** RunPodSandbox, remembering the id for cleanup. */
  async runPodSandbox(config: PodSandboxConfig): Promise<string> {
    const id = await this.cri.runPodSandbox(config);
    this.sandboxIds.add(id);
    return id;
  }

  /** libcni's cache entries (in {@link LIBCNI_RESULTS}) of this containerd's sandboxes. */
  async cacheEntries(): Promise<string[]> {
    const names = (await Array.fromAsync(Deno.readDir(LIBCNI_RESULTS)).catch(() => []))
      .map((e) => e.name);
    return names.filter((n) =>
      n.startsWith(`${this.network.name}-`) ||
      [...this.sandboxIds].some((id) => n.includes(`-${id}-`))
    );
  }

  /**
   * Stops and removes every sandbox over CRI, stops containerd (SIGTERM, then
   * SIGKILL), deletes containers and shims it left, unmounts what is mounted
   * under the temp dir, removes libcni cache entries of its sandboxes and
   * network, the network's bridge, the sandboxes' cgroups and the temp dir.
   * Goes on past every error and answers them.
   */
  async cleanup(cgroupParent?: string): Promise<string[]> {
    const problems: string[] = [];
    const attempt = async (what: string, f: () => Promise<unknown>) => {
      try {
        await f();
      } catch (err) {
        problems.push(`${what}: ${err instanceof Error ? err.message : err}`);
      }
    };
    if (this.#child) {
      await attempt("CRI teardown", async () => {
        const items = await this.cri.listPodSandbox(undefined, 5_000);
        for (const s of items) this.sandboxIds.add(s.id);
        for (const s of items) {
          await attempt(`stop ${s.id}`, () => this.cri.stopPodSandbox(s.id, 30_000));
          await attempt(`remove ${s.id}`, () => this.cri.removePodSandbox(s.id, 30_000));
        }
      });
    }
    this.cri.close();
    if (this.#child) {
      const child = this.#child;
      this.#child = undefined;
      const kill = (sig: Deno.Signal) => {
        try {
          child.kill(sig);
        } catch { /* gone */ }
      };
      kill("SIGTERM");
      const timer = setTimeout(() => kill("SIGKILL"), STOP_MS);
      await child.status;
      clearTimeout(timer);
      await this.#log;
    }
    // Sandboxes containerd knew of but never removed (it died, or a removal failed).
    for (const d of [`${this.root}/io.containerd.grpc.v1.cri/sandboxes`]) {
      for (const e of await Array.fromAsync(Deno.readDir(d)).catch(() => [])) {
        this.sandboxIds.add(e.name);
      }
    }
    await attempt("runc leftovers", () => deleteRuncLeftovers(this.runcRoot));
    await attempt("shim leftovers", () => killShims(this.socket));
    await attempt("unmount", () => unmountUnder(this.dir));
    for (const name of await this.cacheEntries()) {
      await attempt(`remove cache ${name}`, () => Deno.remove(`${LIBCNI_RESULTS}/${name}`));
    }
    for (const p of this.network.plugins) {
      if (p.bridge && await exists(`/sys/class/net/${p.bridge}`)) {
        const r = await runCmd("ip", ["link", "del", p.bridge]);
        if (r.code !== 0) problems.push(`ip link del ${p.bridge}: ${r.stderr.trim()}`);
      }
    }
    if (cgroupParent) await removeCgroups(cgroupParent);
    await attempt("remove temp dir", () => Deno.remove(this.dir, { recursive: true }));
    for (const d of this.#createdRunDirs) {
      await Deno.remove(d).catch(() => {}); // only when empty: another containerd may use it.
    }
    return problems;
  }
}
