/**
 * The deploy kit (deploy/) as a security review reads it: every manifest valid
 * against the Kubernetes schemas; images and base images pinned; every
 * container without privilege escalation, capabilities, a writable root or an
 * unconfined seccomp; no API token where nothing calls the API, and the
 * sweep's role exactly the calls it makes; host paths exactly those the
 * sandbox grants, the token on tmpfs outside every writable path; the image
 * compiling the plugin from checksum-verified Deno; and the init container's
 * script, run here against a temp dir standing in for the host.
 */
import assert from "node:assert/strict";
import { loadAll } from "js-yaml";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { ServiceAccount } from "kubernetes-models/v1/ServiceAccount";
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { CronJob } from "kubernetes-models/batch/v1/CronJob";
import { ClusterRole } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole";
import { ClusterRoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding";
import { DEFAULT_BOOT_ID_FILE, parseNodeConfig } from "../lib/config.ts";
import { KubeClient } from "../lib/kube.ts";
import { isInside } from "../lib/permissions.ts";
import { planSandbox, supportDir } from "../scripts/sandbox.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const ROOT = new URL("../", import.meta.url).pathname;
const DEPLOY = `${ROOT}deploy/`;
const SCRIPT = `${DEPLOY}milo-ipam-node.sh`;
const IMAGE =
  /^[a-z0-9.-]+(?:\/[a-z0-9._-]+)+:\d+\.\d+\.\d+[\w.-]*@sha256:(?:[0-9a-f]{64}|<fill>)$/;

/** A model class of kubernetes-models: its group/version, and a validating constructor. */
interface ModelClass {
  apiVersion: string;
  new (data: Any): { validate(): void };
}
const MODELS: Record<string, ModelClass> = {
  ServiceAccount,
  ConfigMap,
  DaemonSet,
  CronJob,
  ClusterRole,
  ClusterRoleBinding,
} as Record<string, ModelClass>;

interface Doc {
  file: string;
  doc: Any;
}

async function manifests(): Promise<Doc[]> {
  const files = [...Deno.readDirSync(DEPLOY)].map((e) => e.name).filter((n) => n.endsWith(".yaml"));
  const out: Doc[] = [];
  for (const file of files.sort()) {
    for (const doc of loadAll(await Deno.readTextFile(DEPLOY + file))) {
      if (doc !== null && doc !== undefined) out.push({ file, doc });
    }
  }
  return out;
}

function find(docs: Doc[], kind: string, name: string): Any {
  const d = docs.find((d) => d.doc.kind === kind && d.doc.metadata?.name === name);
  assert.ok(d, `${kind} ${name} is in deploy/`);
  return d.doc;
}

/** Every pod template in the kit, named `file: kind/name`. */
function pods(docs: Doc[]): { where: string; spec: Any }[] {
  const out: { where: string; spec: Any }[] = [];
  for (const { file, doc } of docs) {
    const where = `${file}: ${doc.kind}/${doc.metadata.name}`;
    if (doc.kind === "DaemonSet") out.push({ where, spec: doc.spec.template.spec });
    if (doc.kind === "CronJob") out.push({ where, spec: doc.spec.jobTemplate.spec.template.spec });
  }
  return out;
}

/** Every container (init containers too), named `file: kind/name container`. */
function containers(docs: Doc[]): { where: string; c: Any }[] {
  return pods(docs).flatMap(({ where, spec }) =>
    [...(spec.initContainers ?? []), ...spec.containers].map((c: Any) => ({
      where: `${where} ${c.name}`,
      c,
    }))
  );
}

/** `name → host path` of a pod's hostPath volumes. */
function hostPaths(spec: Any): Map<string, string> {
  return new Map(
    (spec.volumes ?? []).filter((v: Any) => v.hostPath).map((v: Any) => [v.name, v.hostPath.path]),
  );
}

/** A container's mounts as `path ro|rw`, sorted. */
function mounts(c: Any): string[] {
  return c.volumeMounts.map((m: Any) => `${m.mountPath} ${m.readOnly ? "ro" : "rw"}`).sort();
}

const readJson = async (name: string) => JSON.parse(await Deno.readTextFile(DEPLOY + name));

Deno.test("deploy: every manifest is valid against the Kubernetes schemas", async () => {
  const docs = await manifests();
  const seen = docs.map(({ file, doc }) => `${file} ${doc.kind}/${doc.metadata?.name}`).sort();
  assert.deepEqual(seen, [
    "agent.yaml ConfigMap/milo-ipam-node",
    "agent.yaml DaemonSet/milo-ipam-agent",
    "agent.yaml ServiceAccount/milo-ipam-agent",
    "sweep.yaml ClusterRole/milo-ipam-sweep",
    "sweep.yaml ClusterRoleBinding/milo-ipam-sweep",
    "sweep.yaml ConfigMap/milo-ipam-sweep",
    "sweep.yaml CronJob/milo-ipam-sweep",
    "sweep.yaml ServiceAccount/milo-ipam-sweep",
    "uninstall.yaml DaemonSet/milo-ipam-uninstall",
  ]);
  for (const { file, doc } of docs) {
    const Model = MODELS[doc.kind];
    assert.ok(Model, `${file}: no schema model for ${doc.kind}`);
    assert.equal(doc.apiVersion, Model.apiVersion, `${file}: ${doc.kind}'s apiVersion`);
    try {
      new Model(doc).validate();
    } catch (err) {
      assert.fail(`${file}: ${doc.kind}/${doc.metadata?.name}: ${(err as Error).message}`);
    }
  }
  // The schemas catch a wrong type; a manifest that is not valid must fail here.
  const bad = structuredClone(find(docs, "DaemonSet", "milo-ipam-agent"));
  bad.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation = "no";
  assert.throws(() => new DaemonSet(bad).validate(), /allowPrivilegeEscalation/);
});

Deno.test("deploy: images are pinned by version and digest, never latest", async () => {
  const docs = await manifests();
  const images = new Set<string>();
  for (const { where, c } of containers(docs)) {
    assert.match(c.image, IMAGE, `${where}: image is REGISTRY/NAME:VERSION@sha256:DIGEST`);
    assert.doesNotMatch(c.image, /latest/, where);
    images.add(c.image);
  }
  assert.equal(images.size, 1, `one image for the whole kit: ${[...images]}`);
  const froms = (await Deno.readTextFile(`${DEPLOY}Containerfile`)).split("\n")
    .filter((l) => /^FROM\s/i.test(l));
  assert.equal(froms.length, 2, "a build stage and the image");
  for (const f of froms) {
    assert.match(
      f,
      /^FROM \S+:[\w.-]+@sha256:(?:[0-9a-f]{64}|<fill>)(?: AS \w+)?$/,
      `${f}: pinned by tag and digest`,
    );
    assert.doesNotMatch(f, /latest/, f);
  }
  assert.equal(froms[0].replace(/ AS \w+$/, ""), froms[1], "both stages on the same base");
});

Deno.test("deploy: every container drops privileges: no escalation, no capability, read-only root, RuntimeDefault seccomp", async () => {
  const docs = await manifests();
  const root: string[] = [];
  for (const { where, c } of containers(docs)) {
    const sc = c.securityContext ?? {};
    assert.equal(sc.allowPrivilegeEscalation, false, `${where}: allowPrivilegeEscalation`);
    assert.notEqual(sc.privileged, true, `${where}: privileged`);
    // Root needs no capability here: it owns every host path it writes (no DAC override or
    // chown), binds only a unix socket and a port above 1024.
    assert.deepEqual(sc.capabilities, { drop: ["ALL"] }, `${where}: drops all, adds none`);
    assert.equal(sc.readOnlyRootFilesystem, true, `${where}: readOnlyRootFilesystem`);
    assert.deepEqual(sc.seccompProfile, { type: "RuntimeDefault" }, `${where}: seccomp`);
    if (sc.runAsNonRoot !== true) {
      assert.equal(sc.runAsUser, 0, `${where}: root said explicitly, or runAsNonRoot`);
      root.push(where.replace(/^.*\//, ""));
    }
  }
  assert.deepEqual(root.sort(), [
    "milo-ipam-agent agent", // binds the socket in root's 0700 directory, writes root's log/state
    "milo-ipam-agent install", // writes the host's /opt/cni/bin, /etc and /run
    "milo-ipam-sweep sweep", // reads the 0400 token Secret; its log directory must be root's
    "milo-ipam-uninstall uninstall", // removes root's token from the host
  ]);
  for (const { where, spec } of pods(docs)) {
    assert.ok(!spec.hostPID && !spec.hostIPC, `${where}: no host PID or IPC namespace`);
    assert.equal(!!spec.hostNetwork, where.endsWith("DaemonSet/milo-ipam-agent"), where);
    const podSc = spec.securityContext ?? {};
    assert.ok(!podSc.seccompProfile || podSc.seccompProfile.type === "RuntimeDefault", where);
  }
});

Deno.test("deploy: no API token where nothing calls the API; the sweep's role is exactly its calls", async () => {
  const docs = await manifests();
  assert.equal(find(docs, "ServiceAccount", "milo-ipam-agent").automountServiceAccountToken, false);
  const agent = find(docs, "DaemonSet", "milo-ipam-agent").spec.template.spec;
  assert.equal(agent.automountServiceAccountToken, false, "the agent has no API token");
  const uninstall = find(docs, "DaemonSet", "milo-ipam-uninstall").spec.template.spec;
  assert.equal(uninstall.automountServiceAccountToken, false, "the uninstall has no API token");
  const sweep = find(docs, "CronJob", "milo-ipam-sweep").spec.jobTemplate.spec.template.spec;
  assert.equal(sweep.serviceAccountName, "milo-ipam-sweep");
  assert.notEqual(sweep.automountServiceAccountToken, false, "the sweep calls the API");

  // lib/kube.ts: GET /api/v1/pods and /api/v1/nodes (paged lists), GET one pod by namespace/name.
  assert.deepEqual(find(docs, "ClusterRole", "milo-ipam-sweep").rules, [
    { apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] },
    { apiGroups: [""], resources: ["nodes"], verbs: ["list"] },
  ]);
  const calls = Object.getOwnPropertyNames(KubeClient.prototype).filter((n) => n !== "constructor");
  assert.deepEqual(
    calls.sort(),
    ["close", "getPod", "listNodes", "listPods", "requests"],
    "a new Kubernetes call needs its verb in deploy/sweep.yaml's ClusterRole (and this list)",
  );
  const binding = find(docs, "ClusterRoleBinding", "milo-ipam-sweep");
  assert.deepEqual(binding.roleRef, {
    apiGroup: "rbac.authorization.k8s.io",
    kind: "ClusterRole",
    name: "milo-ipam-sweep",
  });
  assert.deepEqual(binding.subjects, [
    { kind: "ServiceAccount", name: "milo-ipam-sweep", namespace: "kube-system" },
  ]);
});

Deno.test("deploy: host paths are exactly the listed ones, at the paths the sandbox grants", async () => {
  const docs = await manifests();
  const agent = find(docs, "DaemonSet", "milo-ipam-agent").spec.template.spec;
  const host = hostPaths(agent);
  assert.deepEqual([...host.values()].sort(), [
    "/etc/machine-id",
    "/etc/milo-ipam",
    "/opt/cni/bin",
    "/run/milo-ipam",
    "/run/milo-ipam-secrets",
    "/var/lib/cni/multus/results",
    "/var/lib/cni/results",
    "/var/lib/milo-ipam",
    "/var/log/milo-ipam",
  ]);
  const [install] = agent.initContainers;
  const [main] = agent.containers;
  assert.deepEqual(mounts(install), [
    "/config ro",
    "/host/etc/milo-ipam rw",
    "/host/opt/cni/bin rw",
    "/host/run/milo-ipam rw",
    "/host/run/milo-ipam-secrets rw",
    "/host/var/lib/milo-ipam rw",
    "/host/var/log/milo-ipam rw",
    "/secret ro",
  ]);
  assert.deepEqual(mounts(main), [
    "/etc/machine-id ro",
    "/etc/milo-ipam ro",
    "/run/milo-ipam rw",
    "/run/milo-ipam-secrets ro",
    "/var/lib/cni/multus/results ro",
    "/var/lib/cni/results ro",
    "/var/lib/milo-ipam rw",
    "/var/log/milo-ipam rw",
  ]);
  for (const m of install.volumeMounts.filter((m: Any) => host.has(m.name))) {
    assert.equal(m.mountPath, `/host${host.get(m.name)}`, `init: ${m.name} under /host`);
  }
  for (const m of main.volumeMounts.filter((m: Any) => host.has(m.name))) {
    assert.equal(m.mountPath, host.get(m.name), `agent: ${m.name} at its host path`);
  }

  // What the plugin compiled from deploy/node.json may touch, the agent sees at the same paths.
  const g = (await planSandbox({ dir: "/opt/cni/bin", config: `${DEPLOY}node.json` })).grants;
  // The boot id is the kernel's: every container's /proc shows the host's.
  const compiledIn = new Set([
    `${DEPLOY}node.json`,
    supportDir("/opt/cni/bin"),
    DEFAULT_BOOT_ID_FILE,
  ]);
  const mountOf = (p: string) =>
    main.volumeMounts.find((m: Any) => host.has(m.name) && isInside(p, m.mountPath));
  for (const p of [...g.read, "/etc/milo-ipam/node.json"].filter((p) => !compiledIn.has(p))) {
    assert.ok(mountOf(p), `the agent mounts ${p}, which the sandbox lets it read`);
  }
  for (const p of g.write) {
    assert.ok(mountOf(p) && !mountOf(p).readOnly, `the agent mounts ${p} writable`);
  }
  for (const m of main.volumeMounts.filter((m: Any) => host.has(m.name))) {
    const used = [...g.read, ...g.write, "/etc/milo-ipam/node.json"]
      .some((p) => isInside(p, m.mountPath) || isInside(m.mountPath, p));
    assert.ok(used, `the agent mounts ${m.mountPath}, which nothing in its sandbox uses`);
  }

  const sweep = find(docs, "CronJob", "milo-ipam-sweep").spec.jobTemplate.spec.template.spec;
  assert.equal(hostPaths(sweep).size, 0, "the sweep mounts nothing of its node");
  const un = find(docs, "DaemonSet", "milo-ipam-uninstall").spec.template.spec;
  assert.deepEqual([...hostPaths(un).values()].sort(), [
    "/run/milo-ipam",
    "/run/milo-ipam-secrets",
  ]);
  assert.deepEqual(mounts(un.initContainers[0]), [
    "/host/run/milo-ipam ro",
    "/host/run/milo-ipam-secrets rw",
  ]);
  assert.deepEqual(un.containers[0].volumeMounts ?? [], [], "the pod holder mounts nothing");
});

Deno.test("deploy: the node config puts the token on tmpfs outside every writable path, the log in its own directory", async () => {
  const values = await readJson("node.json");
  assert.equal(values.node, undefined, "the node's name comes from NODE_NAME at run time");
  const node = parseNodeConfig({ ...values, node: "node-17" }, `${DEPLOY}node.json`);
  const token = node.milo.tokenFile;
  assert.equal(token, "/run/milo-ipam-secrets/token");
  const socketDir = node.agent.socket.replace(/\/[^/]+$/, "");
  assert.ok(!isInside(token, socketDir), "the token is not in the socket's (writable) directory");
  assert.equal(node.log.file, "/var/log/milo-ipam/milo-ipam.log");
  // planSandbox refuses a token, CA or config inside a path the plugin may write.
  const { grants } = await planSandbox({ dir: "/opt/cni/bin", config: `${DEPLOY}node.json` });
  for (const w of grants.write) assert.ok(!isInside(token, w), `${token} outside ${w}`);
  assert.ok(grants.read.includes(token));
  assert.deepEqual(grants.net.sort(), [
    "127.0.0.1:9464",
    "milo.example.com:443",
    "unix:/run/milo-ipam/agent.sock",
  ]);
});

Deno.test("deploy: the sweep's sandbox is Milo, the API server by name, its token and CA, its emptyDir", async () => {
  const docs = await manifests();
  const [nodeValues, sweepValues] = [
    await readJson("node.json"),
    await readJson("sweep-node.json"),
  ];
  for (const k of ["url", "namespace"]) assert.equal(sweepValues.milo[k], nodeValues.milo[k], k);
  assert.equal(sweepValues.cluster, nodeValues.cluster, "the sweep sweeps the nodes' cluster");
  const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  const { grants } = await planSandbox({
    dir: "/opt/milo-ipam-sweep",
    config: `${DEPLOY}sweep-node.json`,
    kube: `${DEPLOY}sweep.kubeconfig`,
  });
  assert.deepEqual(grants.net.sort(), [
    "kubernetes.default.svc:443",
    "milo.example.com:443",
    "unix:/work/run/agent.sock",
  ]);
  assert.ok(grants.read.includes(`${sa}/token`) && grants.read.includes(`${sa}/ca.crt`));
  const spec = find(docs, "CronJob", "milo-ipam-sweep").spec.jobTemplate.spec.template.spec;
  const c = spec.containers[0];
  const inImage = new Set([
    `${DEPLOY}sweep-node.json`,
    `${DEPLOY}sweep.kubeconfig`,
    supportDir("/opt/milo-ipam-sweep"),
    `${sa}/token`,
    `${sa}/ca.crt`,
    "/etc/machine-id", // absent in the container: the host id is made in stateDir
    DEFAULT_BOOT_ID_FILE, // the kernel's, in every container's /proc
  ]);
  for (const p of grants.read.filter((p) => !inImage.has(p))) {
    assert.ok(c.volumeMounts.some((m: Any) => isInside(p, m.mountPath)), `the sweep mounts ${p}`);
  }
  for (const p of grants.write) assert.ok(isInside(p, "/work"), `${p} is in the emptyDir`);
  assert.deepEqual(spec.volumes.find((v: Any) => v.name === "work").emptyDir, {
    sizeLimit: "64Mi",
  });
  const script = c.args.join("\n").replace(/\\\n\s*/g, "");
  assert.match(
    script,
    /exec \/opt\/milo-ipam-sweep\/milo-ipam sweep --kubeconfig \/etc\/milo-ipam-sweep\/kubeconfig --apply --output json/,
  );
});

Deno.test("deploy: the Containerfile compiles the plugin from checksum-verified Deno and denort", async () => {
  const text = (await Deno.readTextFile(`${DEPLOY}Containerfile`)).replace(/\\\n\s*/g, "");
  const lines = text.split("\n");
  const installTs = await Deno.readTextFile(`${ROOT}scripts/install.ts`);
  const pinned = installTs.match(/const DENO_VERSION = "([^"]+)"/)?.[1];
  assert.ok(lines.includes(`ARG DENO_VERSION=${pinned}`), "the Deno the install requires");
  for (const a of ["DENO_SHA256", "DENORT_SHA256"]) {
    assert.ok(lines.some((l) => new RegExp(`^ARG ${a}=\\S+$`).test(l)), a);
  }
  const fetch = lines.find((l) => l.includes("sha256sum -c")) ?? "";
  for (const part of ["deno-x86_64-unknown-linux-gnu.zip", "denort-x86_64-unknown-linux-gnu.zip"]) {
    assert.ok(fetch.includes(`curl -fsSLO --proto '=https' "$base/${part}"`), `fetches ${part}`);
  }
  assert.match(
    fetch,
    /printf '%s {2}%s\\n' "\$DENO_SHA256" deno-\S+\.zip "\$DENORT_SHA256" denort-\S+\.zip \| sha256sum -c -; unzip/,
    "both checked before either is unpacked",
  );
  assert.ok(lines.some((l) => l.startsWith("ENV DENORT_BIN=/usr/local/lib/denort/denort")));
  assert.ok(lines.includes("ARG NODE_CONFIG=deploy/node.json"));
  assert.ok(lines.includes("COPY ${NODE_CONFIG} /etc/milo-ipam/node.json"));
  assert.ok(
    text.includes(
      "deno task install --dir /opt/cni/bin --config /etc/milo-ipam/node.json --mode compile",
    ),
    "the node plugin: the same install, compile only, against the node's config path",
  );
  assert.ok(
    text.includes(
      "deno task install --dir /opt/milo-ipam-sweep --config /etc/milo-ipam-sweep/node.json " +
        "--kube /etc/milo-ipam-sweep/kubeconfig --mode compile",
    ),
  );
  assert.ok(text.includes("sha256sum milo-ipam > /out/SHA256SUMS"), "the sha256 recorded");
  const image = text.slice(text.lastIndexOf("\nFROM "));
  assert.doesNotMatch(image, /curl|wget|apt-get|deno (task|run|cache|compile)/, "fetches nothing");
  for (const path of ["/opt/cni/bin/milo-ipam", "/opt/milo-ipam-sweep/milo-ipam"]) {
    assert.ok(image.includes(`COPY --from=build ${path} ${path}`), path);
  }
  assert.ok(image.includes("COPY deploy/milo-ipam-node.sh /usr/lib/milo-ipam/milo-ipam-node.sh"));
  // The manifests run what the image holds.
  const docs = await manifests();
  const commands = containers(docs).map(({ c }) => [...c.command, ...(c.args ?? [])].join(" "));
  assert.ok(commands.includes("/bin/sh /usr/lib/milo-ipam/milo-ipam-node.sh install"));
  assert.ok(commands.includes("/bin/sh /usr/lib/milo-ipam/milo-ipam-node.sh uninstall"));
  assert.ok(commands.includes("/opt/cni/bin/milo-ipam agent"));
  const nodeScript = await Deno.readTextFile(SCRIPT);
  assert.doesNotMatch(nodeScript, /curl|wget|https?:|deno /, "the init container fetches nothing");
});

/** A temp dir standing in for a node and the image: the script's paths, all under it. */
async function fakeNode() {
  const dir = await Deno.makeTempDir({ prefix: "milo-ipam-deploy-" });
  const host = `${dir}/host`;
  for (
    const d of [
      "opt/cni/bin",
      "etc/milo-ipam",
      "run/milo-ipam-secrets",
      "run/milo-ipam",
      "var/log/milo-ipam",
      "var/lib/milo-ipam",
    ]
  ) {
    await Deno.mkdir(`${host}/${d}`, { recursive: true });
    await Deno.chmod(`${host}/${d}`, 0o755); // as kubelet's DirectoryOrCreate makes them
  }
  await Deno.mkdir(`${dir}/image`);
  await Deno.copyFile(`${DEPLOY}node.json`, `${dir}/image/node.json`);
  const binary = `${dir}/image/milo-ipam`;
  const setBinary = async (text: string, recorded = text) => {
    await Deno.writeTextFile(binary, text);
    const sum = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(recorded));
    const hex = Array.from(new Uint8Array(sum), (b) => b.toString(16).padStart(2, "0")).join("");
    await Deno.writeTextFile(`${dir}/image/SHA256SUMS`, `${hex}  milo-ipam\n`);
  };
  await setBinary("#!/bin/sh\necho milo-ipam 1\n");
  await Deno.writeTextFile(`${dir}/token`, "milo-token-1\n");
  await Deno.writeTextFile(`${dir}/ca.crt`, "-----BEGIN CERTIFICATE-----\n");
  const run = async (verb: string, nodeName = "node-17") => {
    const out = await new Deno.Command("sh", {
      args: [SCRIPT, verb],
      clearEnv: true,
      env: {
        PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
        NODE_NAME: nodeName,
        MILO_IPAM_HOST: host,
        MILO_IPAM_IMAGE: `${dir}/image`,
        MILO_IPAM_BINARY: binary,
        MILO_IPAM_TOKEN: `${dir}/token`,
        MILO_IPAM_CA: `${dir}/ca.crt`,
      },
      stdout: "piped",
      stderr: "piped",
    }).output();
    return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
  };
  const mode = async (p: string) => (await Deno.stat(`${host}/${p}`)).mode! & 0o777;
  const leftovers = () =>
    [...Deno.readDirSync(`${host}/opt/cni/bin`)].map((e) => e.name).filter((n) =>
      n !== "milo-ipam"
    );
  return { dir, host, run, mode, setBinary, leftovers };
}

Deno.test("deploy: the init container copies the verified binary and writes token, CA and node config", async () => {
  const n = await fakeNode();
  try {
    await Deno.writeTextFile(`${n.host}/etc/milo-ipam/token`, "old-layout-token\n");
    const r = await n.run("install");
    assert.equal(r.code, 0, r.stderr);
    const bin = `${n.host}/opt/cni/bin/milo-ipam`;
    assert.equal(await Deno.readTextFile(bin), "#!/bin/sh\necho milo-ipam 1\n");
    assert.equal(await n.mode("opt/cni/bin/milo-ipam"), 0o755);
    assert.deepEqual(n.leftovers(), [], "nothing left beside the binary");
    const token = `${n.host}/run/milo-ipam-secrets/token`;
    assert.equal(await Deno.readTextFile(token), "milo-token-1\n");
    assert.equal(await n.mode("run/milo-ipam-secrets/token"), 0o600);
    for (const d of ["run/milo-ipam-secrets", "run/milo-ipam", "var/log/milo-ipam"]) {
      assert.equal(await n.mode(d), 0o700, `${d} is root's alone`);
    }
    assert.equal(await n.mode("var/lib/milo-ipam"), 0o700);
    assert.equal(await n.mode("etc/milo-ipam"), 0o755);
    const written = JSON.parse(await Deno.readTextFile(`${n.host}/etc/milo-ipam/node.json`));
    assert.deepEqual(written, { node: "node-17", ...await readJson("node.json") });
    assert.equal(parseNodeConfig(written, "node.json").node, "node-17");
    assert.equal(
      await Deno.readTextFile(`${n.host}/etc/milo-ipam/ca.crt`),
      "-----BEGIN CERTIFICATE-----\n",
    );
    await assert.rejects(Deno.stat(`${n.host}/etc/milo-ipam/token`), Deno.errors.NotFound);
    assert.match(r.stderr, /removed the token the older layout kept/);

    const again = await n.run("install");
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /already this image's binary/);

    // A binary that is not the one recorded at build never replaces the installed one.
    await n.setBinary("#!/bin/sh\necho tampered\n", "#!/bin/sh\necho milo-ipam 2\n");
    const bad = await n.run("install");
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /has sha256 [0-9a-f]{64}, not [0-9a-f]{64} recorded at build/);
    assert.equal(await Deno.readTextFile(bin), "#!/bin/sh\necho milo-ipam 1\n");
    assert.deepEqual(n.leftovers(), [], "the rejected copy is removed");

    await n.setBinary("#!/bin/sh\necho milo-ipam 2\n");
    const upgrade = await n.run("install");
    assert.equal(upgrade.code, 0, upgrade.stderr);
    assert.equal(await Deno.readTextFile(bin), "#!/bin/sh\necho milo-ipam 2\n");

    for (const name of ["", "Node_17", "node-17\nnode-18", "-node", 'node"x']) {
      const r = await n.run("install", name);
      assert.equal(r.code, 1, `NODE_NAME ${JSON.stringify(name)} is refused`);
      assert.match(r.stderr, /not a node name/);
    }
    assert.equal(
      JSON.parse(await Deno.readTextFile(`${n.host}/etc/milo-ipam/node.json`)).node,
      "node-17",
    );

    // A directory that is a symlink (someone else's path) is refused.
    await Deno.remove(`${n.host}/var/log/milo-ipam`, { recursive: true });
    await Deno.mkdir(`${n.dir}/elsewhere`);
    await Deno.symlink(`${n.dir}/elsewhere`, `${n.host}/var/log/milo-ipam`);
    const sym = await n.run("install");
    assert.equal(sym.code, 1);
    assert.match(sym.stderr, /var\/log\/milo-ipam is not a directory/);
  } finally {
    await Deno.remove(n.dir, { recursive: true });
  }
});

Deno.test("deploy: uninstall removes the token, never while the agent's socket is on the node", async () => {
  const n = await fakeNode();
  try {
    assert.equal((await n.run("install")).code, 0);
    const token = `${n.host}/run/milo-ipam-secrets/token`;
    await Deno.writeTextFile(`${n.host}/run/milo-ipam/agent.sock`, "");
    const refused = await n.run("uninstall");
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /delete the milo-ipam-agent DaemonSet first/);
    assert.equal(await Deno.readTextFile(token), "milo-token-1\n", "the token stays");
    await Deno.remove(`${n.host}/run/milo-ipam/agent.sock`);
    const r = await n.run("uninstall");
    assert.equal(r.code, 0, r.stderr);
    await assert.rejects(Deno.stat(token), Deno.errors.NotFound);
    assert.match(r.stderr, /no Milo token left on this node/);
    assert.equal((await n.run("uninstall")).code, 0, "idempotent");
  } finally {
    await Deno.remove(n.dir, { recursive: true });
  }
});
