/**
 * The init containers' program, as the image holds it: scripts/image.ts
 * builds the image's files (the plugin's bundle, node-install.js), and
 * node-install.js runs with the DaemonSet's Deno flags against the rendered
 * ConfigMap and a Secret laid out as files (their host paths moved into a
 * temp dir, Milo being milo-dev). The plugin it installs leases from milo-dev
 * as a runtime runs it; a forgotten CA, a typo in node.json, a node name in
 * it, no token are refused; the uninstall refuses while a pod holds a lease
 * and then removes everything the install wrote.
 */
import assert from "node:assert/strict";
import { execCni } from "../scripts/cni_exec.ts";
import { buildImageFiles } from "../scripts/image.ts";
import { installToken, Refused } from "../scripts/node_install.ts";
import { kustomize as render } from "../testing/kustomize.ts";
import { type KubeDev, startKubeDev } from "../testing/kube_dev.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { PLUGIN_SEED, TOKEN } from "../testing/process.ts";
import { snoop, SNOOP_IGNORED } from "../testing/snoop.ts";
import { RELEASE } from "../lib/version.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
/** The objects of a kustomization, read here as the manifests spell them. */
const kustomize = (dir: string): Any[] => render(dir);

const ROOT = new URL("../", import.meta.url).pathname;
const OVERLAY = `${ROOT}deploy/overlays/cluster-a`;

/**
 * The argv of a rendered container's command with the image's paths moved to
 * `image`, and `$(VAR)` expanded from `env` as the kubelet expands it.
 */
function command(
  kind: string,
  name: string,
  image: string,
  env: Record<string, string> = {},
): string[] {
  const docs = kustomize(
    kind === "DaemonSet/milo-ipam-uninstall" ? `${OVERLAY}/uninstall` : OVERLAY,
  );
  const d = docs.find((d) => `${d.kind}/${d.metadata.name}` === kind)!;
  const spec = d.kind === "CronJob" ? d.spec.jobTemplate.spec.template.spec : d.spec.template.spec;
  const c = spec.initContainers.find((c: Any) => c.name === name);
  return c.command.map((a: string) =>
    a === "/usr/lib/milo-ipam/deno"
      ? Deno.execPath()
      : a === "--allow-run=/usr/lib/milo-ipam/deno"
      ? `--allow-run=${Deno.execPath()}`
      : a.replace("/usr/lib/milo-ipam/", `${image}/`).replace(
        /\$\(([A-Z_]+)\)/g,
        (m, v) => env[v] ?? m,
      )
  );
}

/**
 * A node in a temp dir: host paths under `root`, the ConfigMap and Secret as
 * files, and the init container's service account for the API stand-in `kube`.
 */
async function node(milo: MiloDev, image: string, kube: KubeDev) {
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-node-" });
  const root = `${dir}/host`;
  const cm = kustomize(OVERLAY).find((d) => d.kind === "ConfigMap")!;
  const values = JSON.parse(cm.data["node.json"]);
  const v = {
    ...values,
    milo: {
      ...values.milo,
      url: milo.url,
      tokenFile: root + values.milo.tokenFile,
      caFile: root + values.milo.caFile,
    },
    log: { ...values.log, file: root + values.log.file },
    resultsDirs: values.resultsDirs.map((d: string) => root + d),
    stateDir: root + values.stateDir,
    hostIdFile: `${root}/etc/machine-id`,
    agent: { ...values.agent, socket: root + values.agent.socket, metrics: undefined },
    timeouts: { requestMs: 2_000, totalMs: 6_000 },
  };
  const files = {
    configMap: `${dir}/config`,
    secret: `${dir}/secret`,
    bin: `${root}/opt/cni/bin`,
    nodeConfig: `${root}/etc/milo-ipam/node.json`,
  };
  const layOut = async (at: string, data: Record<string, string>) => {
    await Deno.remove(at, { recursive: true }).catch(() => {});
    await Deno.mkdir(at, { recursive: true });
    for (const [k, text] of Object.entries(data)) await Deno.writeTextFile(`${at}/${k}`, text);
  };
  const setConfigMap = (nodeJson: unknown, ca: string | null = cm.data["ca.crt"]) =>
    layOut(files.configMap, {
      "node.json": JSON.stringify(nodeJson, null, 2),
      ...(ca === null ? {} : { "ca.crt": ca }),
    });
  const setSecret = (data: Record<string, string>) => layOut(files.secret, data);
  for (const d of ["opt/cni/bin", "etc/milo-ipam", "run", "var/lib/cni/results"]) {
    await Deno.mkdir(`${root}/${d}`, { recursive: true });
  }
  // The kubelet's DirectoryOrCreate makes the token's hostPath 0755 before the init container runs.
  await Deno.mkdir(`${root}/run/milo-ipam-secrets`, { mode: 0o755 });
  await Deno.chmod(`${root}/run/milo-ipam-secrets`, 0o755);
  await Deno.writeTextFile(`${root}/etc/machine-id`, "0123456789abcdef0123456789abcdef\n");
  await setConfigMap(v);
  await setSecret({ token: TOKEN + "\n" });
  // The init container's projected service account (the volume kube-api): a token and the CA.
  const sa = `${dir}/serviceaccount`;
  await Deno.mkdir(sa);
  await Deno.writeTextFile(`${sa}/token`, kube.token);
  await Deno.writeTextFile(`${sa}/ca.crt`, await Deno.readTextFile(kube.caFile!));
  const api = new URL(kube.url);
  const kubeEnv = { KUBERNETES_SERVICE_HOST: api.hostname, KUBERNETES_SERVICE_PORT: api.port };
  const run = async (verb: "install" | "uninstall", nodeName = "node-17") => {
    const argv = command(
      verb === "install" ? "DaemonSet/milo-ipam-agent" : "DaemonSet/milo-ipam-uninstall",
      verb,
      image,
      kubeEnv,
    ).map((a) => a.replace(/^--allow-net=unix:/, `--allow-net=unix:${root}`));
    const out = await new Deno.Command(argv[0], {
      args: [
        ...argv.slice(1),
        "--config-map",
        files.configMap,
        "--secret",
        files.secret,
        "--dir",
        files.bin,
        "--node-config",
        files.nodeConfig,
        "--bundle",
        `${image}/bundle`,
        ...(verb === "install" ? ["--service-account", sa] : []),
      ],
      env: {
        NODE_NAME: nodeName,
        DENO_DIR: `${dir}/deno-dir`,
        DENO_NO_UPDATE_CHECK: "1",
        ...kubeEnv,
      },
      stdout: "piped",
      stderr: "piped",
    }).output();
    return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
  };
  const plugin = (command: string, id: string, env: Record<string, string> = {}) =>
    execCni(`${files.bin}/milo-ipam`, {
      env: {
        CNI_COMMAND: command,
        CNI_CONTAINERID: id,
        CNI_IFNAME: "net1",
        CNI_NETNS: "/var/run/netns/x",
        CNI_PATH: files.bin,
        CNI_ARGS: `K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-${id}`,
        ...env,
      },
      stdin: {
        cniVersion: "1.0.0",
        // The README's network, which the overlay's node.json grants namespace shop.
        name: "vpc7b3e",
        type: "bridge",
        ipam: {
          type: "milo-ipam",
          classes: { ipv4: "vpc-pods-ipv4" },
          scope: {
            network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc7b3e" },
          },
        },
      },
    });
  return { dir, root, v, files, run, plugin, setConfigMap, setSecret, ca: cm.data["ca.crt"] };
}

Deno.test("node install: from the image's files, the ConfigMap and the Secret to a plugin that leases; uninstall", async () => {
  const milo = await startMiloDev({ seed: PLUGIN_SEED, tls: true });
  const kube = await startKubeDev({ tls: true });
  const image = await Deno.makeTempDir({ prefix: "milo-ipam-image-" });
  try {
    await buildImageFiles(image);
    const n = await node(milo, image, kube);
    try {
      const milosCa = await Deno.readTextFile(milo.caFile!);

      // The overlay's placeholder CA: refused, nothing installed.
      let r = await n.run("install");
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /config\/ca\.crt is not a PEM bundle of certificates/);
      await assert.rejects(Deno.stat(`${n.files.bin}/milo-ipam`), Deno.errors.NotFound);

      // A typo in the ConfigMap's node.json: refused naming the key and the nearest one.
      await n.setConfigMap({ ...n.v, stateDirectory: "/x" }, milosCa);
      r = await n.run("install");
      assert.equal(r.code, 1);
      assert.match(
        r.stderr,
        /field stateDirectory: unknown key; the nearest known key is stateDir/,
      );

      // Metrics on the node's addresses without the scraper's token: any pod would read them.
      const agent = { ...n.v.agent, metrics: "0.0.0.0:9464", metricsTokenFile: undefined };
      await n.setConfigMap({ ...n.v, agent }, milosCa);
      r = await n.run("install");
      assert.equal(r.code, 1);
      assert.match(r.stderr, /0\.0\.0\.0:9464 listens on every address .* agent\.metricsTokenFile/);
      assert.match(r.stderr, /\(set agent\.metricsTokenFile to a file holding the token/);

      // A ConfigMap copied from another cluster's overlay, naming that cluster's kube-system UID.
      await n.setConfigMap({ ...n.v, clusterUid: "uid-of-another-cluster" }, milosCa);
      r = await n.run("install");
      assert.equal(r.code, 1);
      assert.match(
        r.stderr,
        new RegExp(
          `names clusterUid uid-of-another-cluster, but this cluster's kube-system ` +
            `UID is ${kube.store.clusterUid}: it is another cluster's node config`,
        ),
      );

      // A node name in the ConfigMap, a bad NODE_NAME, no token: refused.
      await n.setConfigMap({ ...n.v, node: "node-1" }, milosCa);
      assert.match((await n.run("install")).stderr, /names a node: leave node out/);
      await n.setConfigMap(n.v, milosCa);
      assert.match((await n.run("install", "Node_17")).stderr, /not a node name/);
      await n.setSecret({});
      assert.match((await n.run("install")).stderr, /secret\/token is missing or empty/);
      await n.setSecret({ token: TOKEN + "\n", "ca.crt": milosCa });
      assert.match(
        (await n.run("install")).stderr,
        /ca\.crt is in both the ConfigMap and the Secret/,
      );

      // The CA in the Secret, the rest in the ConfigMap: installed.
      await n.setConfigMap(n.v, null);
      r = await n.run("install");
      assert.equal(r.code, 0, r.stderr);
      assert.match(
        r.stderr,
        new RegExp(`milo-ipam ${RELEASE} installed: .*milo-ipam \\((compiled|launcher)\\)`),
      );
      const written = JSON.parse(await Deno.readTextFile(n.files.nodeConfig));
      assert.equal(written.node, "node-17", "the node's name from NODE_NAME");
      assert.equal(written.clusterUid, kube.store.clusterUid, "the cluster's, from its API");
      assert.equal(await Deno.readTextFile(n.v.milo.tokenFile), TOKEN + "\n");
      assert.equal((await Deno.stat(n.v.milo.tokenFile)).mode! & 0o777, 0o600);
      assert.equal(await Deno.readTextFile(n.v.milo.caFile), milosCa.trim() + "\n");
      for (
        const d of [n.v.stateDir, `${n.root}/var/log/milo-ipam`, `${n.root}/run/milo-ipam-secrets`]
      ) {
        assert.equal((await Deno.stat(d)).mode! & 0o777, 0o700, `${d} is root's alone`);
      }

      // The plugin made on the node: it leases from Milo (TLS with the CA) and names its release.
      const add = await n.plugin("ADD", "c1");
      assert.equal(add.code, 0, add.stdout + add.stderr);
      assert.match(JSON.stringify(add.json), /10\.40\.0\.\d+\/32/);
      const [claim] = await milo.listClaims("tenant-a");
      assert.equal(
        claim.metadata.annotations?.["milo-ipam.io/cluster-uid"],
        kube.store.clusterUid,
        "the claim records its cluster",
      );
      const version = await new Deno.Command(`${n.files.bin}/milo-ipam`, {
        args: ["version"],
        stdout: "piped",
      }).output();
      assert.match(new TextDecoder().decode(version.stdout), new RegExp(`^milo-ipam ${RELEASE} `));
      // Its help, within its sandbox.
      for (const args of [["--help"], ["show", "--help"], ["agent", "--help"]]) {
        const h = await new Deno.Command(`${n.files.bin}/milo-ipam`, {
          args,
          clearEnv: true,
          stdout: "piped",
          stderr: "piped",
        }).output();
        assert.equal(h.code, 0, `${args}: ${new TextDecoder().decode(h.stderr)}`);
        assert.match(new TextDecoder().decode(h.stdout), /^usage: milo-ipam/);
      }
      // Its sandbox names only this cluster's Milo: another node config path is refused, in words.
      const other = await n.plugin("ADD", "c2", { MILO_IPAM_CONFIG: `${n.dir}/other.json` });
      assert.equal(other.code, 1);
      assert.doesNotMatch(other.stdout, /run again with|--allow-read/, other.stdout);

      // Installing again (a rolled DaemonSet) keeps the lease and the state.
      assert.equal((await n.run("install")).code, 0);
      assert.equal((await n.plugin("CHECK", "c1", {})).code, 0);

      // Uninstall: refused while an agent answers on its socket, and while a pod holds a lease.
      await Deno.mkdir(`${n.root}/run/milo-ipam`, { recursive: true });
      const live = Deno.listen({ transport: "unix", path: n.v.agent.socket });
      r = await n.run("uninstall");
      live.close();
      assert.equal(r.code, 1);
      assert.match(r.stderr, /an agent answers on this node's socket .*delete the milo-ipam-agent/);
      // A crashed agent's socket (its process killed, nothing answers it) blocks nothing: removed.
      const crashed = new Deno.Command(Deno.execPath(), {
        args: [
          "eval",
          `const l = Deno.listen({ transport: "unix", path: ${JSON.stringify(n.v.agent.socket)} });
          console.log("listening"); await l.accept();`,
        ],
        stdout: "piped",
      }).spawn();
      await crashed.stdout.pipeThrough(new TextDecoderStream()).getReader().read();
      crashed.kill("SIGKILL");
      await crashed.status;
      assert.ok((await Deno.lstat(n.v.agent.socket)).isSocket, "the socket outlives its agent");
      r = await n.run("uninstall");
      await assert.rejects(Deno.lstat(n.v.agent.socket), Deno.errors.NotFound, "stale removed");
      assert.equal(r.code, 1);
      assert.match(
        r.stderr,
        /1 attachment\(s\) on this node hold milo-ipam leases.*delete the pods/,
      );
      assert.ok(await Deno.stat(`${n.files.bin}/milo-ipam`), "nothing removed");

      // The pod deleted (its DEL released the lease): everything goes.
      assert.equal((await n.plugin("DEL", "c1")).code, 0);
      r = await n.run("uninstall");
      assert.equal(r.code, 0, r.stderr);
      for (
        const gone of [
          `${n.files.bin}/milo-ipam`,
          `${n.files.bin}/.milo-ipam`,
          n.files.nodeConfig,
          n.v.milo.tokenFile,
          n.v.milo.caFile,
          n.v.stateDir,
          n.v.log.file,
          `${n.root}/var/log/milo-ipam`,
        ]
      ) await assert.rejects(Deno.stat(gone), Deno.errors.NotFound, `${gone} removed`);
      assert.deepEqual(await milo.listClaims("tenant-a"), [], "no lease left in Milo");
      assert.equal((await n.run("uninstall")).code, 0, "nothing left: done");

      // The API refuses the install's service account: refused, saying what grants it.
      kube.api.faults.forbidden = true;
      await n.setSecret({ token: TOKEN + "\n" });
      r = await n.run("install");
      assert.equal(r.code, 1);
      assert.match(r.stderr, /cannot read the cluster's kube-system UID from its API/);
      assert.match(r.stderr, /grants get on namespaces\/kube-system/);
    } finally {
      await Deno.remove(n.dir, { recursive: true });
    }
  } finally {
    await milo.stop();
    await kube.close();
    await Deno.remove(image, { recursive: true });
  }
});

/** A temp dir others may pass through, and in it the token's directory as the kubelet makes it. */
async function kubeletSecrets(): Promise<{ base: string; dir: string; token: string }> {
  const base = await Deno.makeTempDir({ prefix: "milo-ipam-secrets-" });
  await Deno.chmod(base, 0o755);
  const dir = `${base}/run/milo-ipam-secrets`;
  await Deno.mkdir(dir, { recursive: true });
  await Deno.chmod(dir, 0o755);
  return { base, dir, token: `${dir}/token` };
}

Deno.test({
  name: "installToken(): the kubelet's 0755 directory becomes root's alone; another user " +
    "watching it reads no token (as root)",
  ignore: SNOOP_IGNORED,
}, async () => {
  const s = await kubeletSecrets();
  try {
    const reader = await snoop(s.dir);
    // A DaemonSet rolled again and again: each install writes the token anew.
    for (let i = 0; i < 100; i++) await installToken(s.token, `${TOKEN}-${i}\n`);
    const seen = await reader.stop();
    assert.ok(seen.looks > 0);
    assert.deepEqual(seen.read, [], "another user read the token");
    assert.equal((await Deno.stat(s.dir)).mode! & 0o777, 0o700);
    assert.equal((await Deno.stat(s.token)).mode! & 0o777, 0o600);
    assert.equal(await Deno.readTextFile(s.token), `${TOKEN}-99\n`);
    assert.deepEqual([...Deno.readDirSync(s.dir)].map((e) => e.name), ["token"]);
  } finally {
    await Deno.remove(s.base, { recursive: true });
  }
});

Deno.test({
  name: "installToken(): a directory open to others that holds other files, a symlink, another " +
    "user's: refused, nothing written (as root)",
  ignore: SNOOP_IGNORED,
}, async () => {
  const s = await kubeletSecrets();
  try {
    // Shared with other files (a token put beside the node config): not narrowed under them.
    await Deno.writeTextFile(`${s.dir}/node.json`, "{}");
    await assert.rejects(
      installToken(s.token, TOKEN),
      (e: Error) =>
        e instanceof Refused &&
        /directory of .*token is not private: .*secrets is mode 755 and holds node\.json/.test(
          e.message,
        ) && /a directory of its own/.test(e.message),
    );
    assert.equal((await Deno.stat(s.dir)).mode! & 0o777, 0o755, "left as it was");
    await assert.rejects(Deno.stat(s.token), Deno.errors.NotFound);
    // Private already (0700): the other files are root's business.
    await Deno.chmod(s.dir, 0o700);
    await installToken(s.token, TOKEN);
    assert.equal(await Deno.readTextFile(s.token), TOKEN);

    await Deno.remove(s.dir, { recursive: true });
    await Deno.mkdir(`${s.base}/elsewhere`, { mode: 0o700 });
    await Deno.symlink(`${s.base}/elsewhere`, s.dir);
    await assert.rejects(installToken(s.token, TOKEN), /secrets is a symlink/);
    await Deno.remove(s.dir);
    await Deno.mkdir(s.dir, { mode: 0o700 });
    await Deno.chown(s.dir, 65534, 65534);
    await assert.rejects(installToken(s.token, TOKEN), /secrets is owned by uid 65534, not 0/);
    assert.deepEqual([...Deno.readDirSync(`${s.base}/elsewhere`)], []);
    assert.deepEqual([...Deno.readDirSync(s.dir)], []);
  } finally {
    await Deno.remove(s.base, { recursive: true });
  }
});
