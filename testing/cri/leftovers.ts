/**
 * What a containerd of the test's own (testing/cri/containerd.ts) can leave
 * on the host when it dies or a removal fails, removed: runc's containers,
 * the runc shims, mounts under its temp dir, and the sandboxes' cgroups.
 */
import { runCmd } from "../podman.ts";

/** `runc delete --force` of every container left in a containerd's runc root (CRI's namespace). */
export async function deleteRuncLeftovers(runcRoot: string): Promise<void> {
  const nsRoot = `${runcRoot}/k8s.io`;
  for (const e of await Array.fromAsync(Deno.readDir(nsRoot)).catch(() => [])) {
    if (!e.isDirectory) continue;
    const r = await runCmd("runc", ["--root", nsRoot, "delete", "--force", e.name], {
      timeoutMs: 20_000,
    });
    if (r.code !== 0) throw new Error(`runc delete ${e.name}: ${r.stderr.trim()}`);
  }
}

/** SIGKILLs the runc shims of the containerd on `socket` (their command line names it). */
export async function killShims(socket: string): Promise<void> {
  for (const e of await Array.fromAsync(Deno.readDir("/proc"))) {
    if (!/^\d+$/.test(e.name)) continue;
    const cmd = await Deno.readTextFile(`/proc/${e.name}/cmdline`).catch(() => "");
    const argv = cmd.split("\0");
    if (!argv[0]?.endsWith("containerd-shim-runc-v2")) continue;
    const at = argv.indexOf("-address");
    if (at >= 0 && argv[at + 1] === socket) {
      try {
        Deno.kill(Number(e.name), "SIGKILL");
      } catch { /* gone */ }
    }
  }
}

/** Lazily unmounts everything mounted under `dir`, deepest first. */
export async function unmountUnder(dir: string): Promise<void> {
  const mounts = (await Deno.readTextFile("/proc/self/mounts").catch(() => ""))
    .split("\n").map((l) => l.split(" ")[1]?.replace(/\\040/g, " "))
    .filter((m): m is string => !!m && m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) {
    const r = await runCmd("umount", ["-l", m]);
    if (r.code !== 0) throw new Error(`umount ${m}: ${r.stderr.trim()}`);
  }
}

/** Removes the (empty) cgroup `parent` and its children in every mounted hierarchy. */
export async function removeCgroups(parent: string): Promise<void> {
  const roots = (await Deno.readTextFile("/proc/self/mounts").catch(() => ""))
    .split("\n").map((l) => l.split(" ")).filter((f) => f[2] === "cgroup" || f[2] === "cgroup2")
    .map((f) => f[1]);
  for (const root of roots) {
    const dir = `${root}/${parent.replace(/^\/+/, "")}`;
    const children = await Array.fromAsync(Deno.readDir(dir)).catch(() => []);
    for (const c of children) {
      if (c.isDirectory) await Deno.remove(`${dir}/${c.name}`).catch(() => {});
    }
    await Deno.remove(dir).catch(() => {});
  }
}
