/**
 * The installed plugin run the way Multus's thick daemon runs a delegate: from
 * inside the multus-daemon container (a mount namespace whose root holds only
 * the container's own files and its DaemonSet's mounts), without and with
 * `chrootDir` (the daemon chroots to the host's root, mounted at /hostroot,
 * before it execs the delegate: multus-cni's docs/thick-plugin.md, and
 * deployments/multus-daemonset-thick.yml, which mounts /opt/cni/bin,
 * /var/lib/cni/multus and the host's / at /hostroot). Without chrootDir the
 * plugin needs the host paths docs/multus.md's table names; that
 * table covers every path the installed sandbox grants. As root (unshare,
 * mount, chroot); ignored otherwise, failed under CI.
 */
import assert from "node:assert/strict";
import { install } from "../scripts/install.ts";
import { planSandbox } from "../scripts/sandbox.ts";
import { isInside } from "../lib/permissions.ts";
import { startMiloDev } from "../testing/milo_dev.ts";
import { PLUGIN_SEED, TOKEN } from "../testing/process.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const OVERLAY_NODE = `${ROOT}deploy/overlays/cluster-a/node.json`;
const ROOTED = Deno.uid() === 0 &&
  ["unshare", "mount", "chroot"].every((c) =>
    new Deno.Command("sh", { args: ["-c", `command -v ${c}`], stdout: "null" }).outputSync().success
  );
if (!ROOTED && Deno.env.get("CI")) {
  throw new Error("tests/multus_thick.test.ts needs root, unshare, mount and chroot");
}

/** The host paths docs/multus.md's table names. */
function readmePaths(): string[] {
  const section = Deno.readTextFileSync(`${ROOT}docs/multus.md`);
  return section.split("\n").filter((l) => /^\| `\//.test(l))
    .flatMap((l) => [...l.split("|")[1].matchAll(/`(\/[^`]+)`/g)].map((m) => m[1]));
}

Deno.test("multus thick: docs/multus.md's host paths cover every path the installed sandbox grants", async () => {
  const paths = readmePaths();
  assert.ok(paths.includes("/etc/milo-ipam") && paths.includes("/opt/cni/bin"), `${paths}`);
  const g = (await planSandbox({ dir: "/opt/cni/bin", config: OVERLAY_NODE })).grants;
  const files = [...g.read, ...g.write].filter((p) => p !== OVERLAY_NODE);
  for (const p of [...files, "/etc/milo-ipam/node.json"]) {
    assert.ok(
      paths.some((r) => isInside(p, r)),
      `docs/multus.md names ${p} (or a directory of it)`,
    );
  }
  for (const r of paths) {
    assert.ok(files.some((p) => isInside(p, r) || isInside(r, p)) || r === "/etc/milo-ipam", r);
  }
});

Deno.test({
  name:
    "multus thick: the delegate run from the multus-daemon container, without and with chrootDir",
  ignore: !ROOTED,
  fn: async () => {
    const milo = await startMiloDev({ seed: PLUGIN_SEED });
    const dir = await Deno.makeTempDir({ prefix: "milo-ipam-thick-" });
    try {
      // The host: the overlay's layout under `host`, Milo being milo-dev.
      const host = `${dir}/host`;
      const v = JSON.parse(await Deno.readTextFile(OVERLAY_NODE));
      const at = (p: string) => host + p;
      const node = {
        ...v,
        milo: { url: milo.url, tokenFile: at(v.milo.tokenFile) },
        node: "node-17",
        log: { ...v.log, file: at(v.log.file) },
        resultsDirs: v.resultsDirs.map(at),
        stateDir: at(v.stateDir),
        hostIdFile: at("/etc/machine-id"),
        agent: { socket: at(v.agent.socket) },
      };
      // As the agent DaemonSet leaves them (its hostPath volumes are DirectoryOrCreate).
      for (
        const d of [
          "/etc/milo-ipam",
          "/run/milo-ipam-secrets",
          "/run/milo-ipam-metrics",
          "/run/milo-ipam",
          "/var/lib/cni/results",
          "/var/lib/cni/multus/results",
        ]
      ) {
        await Deno.mkdir(at(d), { recursive: true });
      }
      for (const d of [v.stateDir, "/var/log/milo-ipam"]) {
        await Deno.mkdir(at(d), { recursive: true, mode: 0o700 });
      }
      await Deno.writeTextFile(at("/etc/machine-id"), "0123456789abcdef0123456789abcdef\n");
      await Deno.writeTextFile(node.milo.tokenFile, TOKEN + "\n");
      const config = at("/etc/milo-ipam/node.json");
      await Deno.writeTextFile(config, JSON.stringify(node));
      const installed = await install({ dir: at("/opt/cni/bin"), config, quiet: true });

      // The multus-daemon container's root: its own userland, /dev, /proc, and its mounts.
      const ctr = `${dir}/ctr`;
      for (const d of ["usr", "dev", "proc", "tmp", "hostroot"]) {
        await Deno.mkdir(`${ctr}/${d}`, { recursive: true });
      }
      for (const l of ["bin", "lib", "lib64", "sbin"]) {
        await Deno.symlink(`usr/${l}`, `${ctr}/${l}`);
      }
      const thickMounts = [at("/opt/cni/bin"), at("/var/lib/cni/multus")];
      // /proc and /sys are the container's own, which show the host kernel's boot id and the
      // machine's firmware UUID: nothing to mount.
      const readme = readmePaths().filter((p) => !/^\/(proc|sys)\//.test(p)).map(at);

      /** Execs the plugin as the daemon does: in its container, chrooted to /hostroot or not. */
      const delegate = async (mounts: string[], command: string, id: string, chroot: boolean) => {
        const binds = mounts.map((p) => {
          const file = Deno.statSync(p).isFile;
          const target = `${ctr}${p}`;
          return `${
            file ? `mkdir -p "$(dirname ${target})"; touch ${target}` : `mkdir -p ${target}`
          }; ` +
            `mount --bind ${p} ${target}`;
        });
        const exec = chroot ? `/usr/sbin/chroot /hostroot ${installed.path}` : installed.path;
        const script = [
          "mount --bind /usr " + `${ctr}/usr`,
          `mount --rbind /dev ${ctr}/dev`,
          `mount -t proc proc ${ctr}/proc`,
          ...(chroot ? [`mount --rbind / ${ctr}/hostroot`] : []),
          ...binds,
          `exec chroot ${ctr} ${exec}`,
        ].join("\n");
        const child = new Deno.Command("unshare", {
          args: ["--mount", "--propagation", "private", "sh", "-ec", script],
          clearEnv: true,
          // libcni passes the daemon's environment with the CNI variables.
          env: {
            PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
            MULTUS_NODE_NAME: "node-17",
            KUBERNETES_SERVICE_HOST: "10.96.0.1",
            KUBERNETES_SERVICE_PORT: "443",
            CNI_COMMAND: command,
            CNI_CONTAINERID: id,
            CNI_IFNAME: "net1",
            CNI_NETNS: "/var/run/netns/x",
            CNI_PATH: at("/opt/cni/bin"),
            CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-${id}`,
          },
          stdin: "piped",
          stdout: "piped",
          stderr: "piped",
        }).spawn();
        const w = child.stdin.getWriter();
        await w.write(new TextEncoder().encode(JSON.stringify({
          cniVersion: "1.0.0",
          name: "vpc7b3e",
          type: "macvlan",
          ipam: {
            type: "milo-ipam",
            classes: { ipv4: "vpc-pods-ipv4" },
            scope: {
              network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc7b3e" },
            },
          },
        })));
        await w.close();
        const out = await child.output();
        const stdout = new TextDecoder().decode(out.stdout);
        return { code: out.code, stdout, stderr: new TextDecoder().decode(out.stderr) };
      };

      // The reference DaemonSet's mounts alone: the node config is not there.
      const bare = await delegate(thickMounts, "ADD", "c1", false);
      assert.equal(bare.code, 1, bare.stderr);
      assert.match(bare.stdout, /"code":7,"msg":"no node config/);

      // With docs/multus.md's host paths mounted at the same paths: it leases.
      const added = await delegate([...new Set([...thickMounts, ...readme])], "ADD", "c1", false);
      assert.equal(added.code, 0, added.stdout + added.stderr);
      assert.match(added.stdout, /10\.40\.0\.\d+\/32/);
      assert.equal((await milo.listClaims("tenant-a")).length, 1);

      // chrootDir: the daemon chroots to the host's root; the reference mounts suffice.
      const check = await delegate(thickMounts, "DEL", "c1", true);
      assert.equal(check.code, 0, check.stdout + check.stderr);
      assert.deepEqual(await milo.listClaims("tenant-a"), [], "released");
      const again = await delegate(thickMounts, "ADD", "c2", true);
      assert.equal(again.code, 0, again.stdout + again.stderr);
      assert.equal((await delegate(thickMounts, "DEL", "c2", true)).code, 0);
      assert.deepEqual(await milo.listClaims("tenant-a"), []);
    } finally {
      await milo.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
