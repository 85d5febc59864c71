/**
 * The deploy kit (deploy/) as a security review reads it: the kustomizations
 * rendered as `kubectl kustomize` renders them (and compared with it where
 * kubectl is installed), every rendered manifest valid against the
 * Kubernetes schemas; images pinned; every container without privilege
 * escalation, capabilities, a writable root or an unconfined seccomp; no API
 * token where nothing calls the API, the sweep's role exactly its calls; host
 * paths exactly those the sandbox grants; probes and scrape port where the
 * node config puts the metrics, and /metrics only for the scraper's token;
 * alert rules on metrics the agent exports; the image built from
 * checksum-verified Deno. The init container's node install
 * runs here from the image's files against the rendered ConfigMap and a
 * Secret laid out as files, and the plugin it makes leases from milo-dev.
 */
import assert from "node:assert/strict";
import { loadAll } from "js-yaml";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { ServiceAccount } from "kubernetes-models/v1/ServiceAccount";
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { CronJob } from "kubernetes-models/batch/v1/CronJob";
import { ClusterRole } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole";
import { ClusterRoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding";
import {
  DEFAULT_BOOT_ID_FILE,
  DEFAULT_HARDWARE_ID_FILE,
  parseNodeConfig,
  requireScrapeToken,
} from "../lib/config.ts";
import { KubeClient } from "../lib/kube.ts";
import { Metrics } from "../lib/metrics.ts";
import { isInside } from "../lib/permissions.ts";
import { parseSweepArgs } from "../lib/sweep_cli.ts";
import { SETTLE_MS } from "../lib/sweep_rules.ts";
import { RELEASE } from "../lib/version.ts";
import { planSandbox, supportDir } from "../scripts/sandbox.ts";
import { containersOf, kustomize as render } from "../testing/kustomize.ts";

// deno-lint-ignore no-explicit-any
type Any = any;
/** A rendered object, read here as the manifests spell it. */
type Resource = Any;
/** The objects of a kustomization, as `kubectl kustomize` renders them. */
const kustomize = (dir: string): Resource[] => render(dir);

const ROOT = new URL("../", import.meta.url).pathname;
const DEPLOY = `${ROOT}deploy/`;
const OVERLAY = `${DEPLOY}overlays/cluster-a`;
const KUSTOMIZATIONS = [
  "base",
  "overlays/cluster-a",
  "overlays/cluster-a/uninstall",
  "uninstall",
  "monitoring",
];
const IMAGE =
  /^[a-z0-9.-]+(?:\/[a-z0-9._-]+)+:(\d+\.\d+\.\d+[\w.-]*)@sha256:(?:[0-9a-f]{64}|<fill>)$/;

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

/** What a cluster applies: its overlay, and its uninstall. */
const rendered = () => kustomize(OVERLAY);
const uninstallRendered = () => kustomize(`${OVERLAY}/uninstall`);

function find(docs: Resource[], kind: string, name: string): Any {
  const d = docs.find((d) => d.kind === kind && d.metadata?.name === name);
  assert.ok(d, `${kind} ${name} is rendered`);
  return d;
}

/** Every pod template, named `kind/name`. */
function pods(docs: Resource[]): { where: string; spec: Any }[] {
  const out: { where: string; spec: Any }[] = [];
  for (const doc of docs) {
    const where = `${doc.kind}/${doc.metadata.name}`;
    if (doc.kind === "DaemonSet") out.push({ where, spec: doc.spec.template.spec });
    if (doc.kind === "CronJob") out.push({ where, spec: doc.spec.jobTemplate.spec.template.spec });
  }
  return out;
}

function containers(docs: Resource[]): { where: string; c: Any }[] {
  return docs.flatMap((d) =>
    containersOf(d).map((c) => ({ where: `${d.kind}/${d.metadata.name} ${c.name}`, c }))
  );
}

function hostPaths(spec: Any): Map<string, string> {
  return new Map(
    (spec.volumes ?? []).filter((v: Any) => v.hostPath).map((v: Any) => [v.name, v.hostPath.path]),
  );
}

function mounts(c: Any): string[] {
  return c.volumeMounts.map((m: Any) => `${m.mountPath} ${m.readOnly ? "ro" : "rw"}`).sort();
}

/** Objects with their keys sorted, to compare renders. */
function sorted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sorted);
  if (v && typeof v === "object") {
    return Object.fromEntries(
      Object.keys(v).sort().map((k) => [k, sorted((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
}

const hasKubectl = (() => {
  try {
    return new Deno.Command("kubectl", {
      args: ["version", "--client"],
      stdout: "null",
      stderr: "null",
    })
      .outputSync().success;
  } catch {
    return false;
  }
})();

Deno.test({
  name: "deploy: the suite's render of every kustomization is kubectl kustomize's",
  ignore: !hasKubectl,
  fn: () => {
    for (const k of KUSTOMIZATIONS) {
      const out = new Deno.Command("kubectl", { args: ["kustomize", DEPLOY + k], stdout: "piped" })
        .outputSync();
      assert.ok(out.success, `kubectl kustomize ${k}`);
      const theirs = (loadAll(new TextDecoder().decode(out.stdout)) as Resource[]).filter(Boolean);
      const key = (r: Resource) => `${r.kind}/${r.metadata.namespace ?? ""}/${r.metadata.name}`;
      const mine = kustomize(DEPLOY + k);
      assert.deepEqual(mine.map(key).sort(), theirs.map(key).sort(), k);
      for (const t of theirs) {
        assert.deepEqual(sorted(mine.find((m) => key(m) === key(t))), sorted(t), `${k}: ${key(t)}`);
      }
    }
  },
});

Deno.test("deploy: every rendered manifest is valid against the Kubernetes schemas", () => {
  const docs = [...rendered(), ...uninstallRendered()];
  const seen = docs.map((d) => `${d.kind}/${d.metadata.name.replace(/-[a-z0-9]{10}$/, "-HASH")}`);
  assert.deepEqual(seen.sort(), [
    "ClusterRole/milo-ipam-agent",
    "ClusterRole/milo-ipam-sweep",
    "ClusterRoleBinding/milo-ipam-agent",
    "ClusterRoleBinding/milo-ipam-sweep",
    "ConfigMap/milo-ipam-node-HASH",
    "CronJob/milo-ipam-sweep",
    "DaemonSet/milo-ipam-agent",
    "DaemonSet/milo-ipam-uninstall",
    "ServiceAccount/milo-ipam-agent",
    "ServiceAccount/milo-ipam-sweep",
  ]);
  for (const doc of docs) {
    const Model = MODELS[doc.kind];
    assert.ok(Model, `no schema model for ${doc.kind}`);
    assert.equal(doc.apiVersion, Model.apiVersion, `${doc.kind}'s apiVersion`);
    try {
      new Model(doc).validate();
    } catch (err) {
      assert.fail(`${doc.kind}/${doc.metadata?.name}: ${(err as Error).message}`);
    }
  }
  // The schemas catch a wrong type; a manifest that is not valid must fail here.
  const bad = structuredClone(find(docs, "DaemonSet", "milo-ipam-agent"));
  bad.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation = "no";
  assert.throws(() => new DaemonSet(bad).validate(), /allowPrivilegeEscalation/);
  // The renderer refuses a kustomization field it does not render.
  const dir = Deno.makeTempDirSync();
  try {
    Deno.writeTextFileSync(`${dir}/kustomization.yaml`, "resources: []\nnamePrefix: x-\n");
    assert.throws(() => kustomize(dir), /namePrefix is not rendered here/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("deploy: one image for the kit, pinned by this release and a digest; the ConfigMap is the overlay's", () => {
  const docs = [...rendered(), ...uninstallRendered()];
  const images = new Set<string>();
  for (const { where, c } of containers(docs)) {
    const m = IMAGE.exec(c.image);
    assert.ok(m, `${where}: ${c.image} is REGISTRY/NAME:VERSION@sha256:DIGEST`);
    assert.equal(m[1], RELEASE, `${where}: the image of this release`);
    images.add(c.image);
  }
  assert.equal(images.size, 1, `one image for the whole kit: ${[...images]}`);
  for (const { c } of containers(kustomize(`${DEPLOY}base`))) {
    assert.equal(c.image, "milo-ipam", "the base names the image; each overlay pins it");
  }
  // The per-cluster values are the overlay's files, under a name that changes with them.
  const cm = rendered().find((d) => d.kind === "ConfigMap")!;
  assert.equal(cm.data["node.json"], Deno.readTextFileSync(`${OVERLAY}/node.json`));
  assert.equal(cm.data["ca.crt"], Deno.readTextFileSync(`${OVERLAY}/ca.crt`));
  const volume = (spec: Any) => spec.volumes.find((v: Any) => v.name === "config").configMap.name;
  for (const { spec } of pods(rendered())) assert.equal(volume(spec), cm.metadata.name);
  const file = Deno.readTextFileSync(`${DEPLOY}Containerfile`);
  const froms = file.split("\n").filter((l) => /^FROM\s/i.test(l));
  assert.deepEqual(froms, ["FROM ${DEBIAN} AS build", "FROM ${DEBIAN}"], "both stages on one base");
  assert.match(file, /^ARG DEBIAN=docker\.io\/library\/debian:12-slim$/m, "one base, by argument");
  assert.doesNotMatch(file, /<fill>/, "nothing to fill in before it builds");
});

Deno.test("deploy: every container drops privileges: no escalation, no capability, read-only root, RuntimeDefault seccomp", () => {
  const docs = [...rendered(), ...uninstallRendered()];
  const root: string[] = [];
  for (const { where, c } of containers(docs)) {
    const sc = c.securityContext ?? {};
    assert.equal(sc.allowPrivilegeEscalation, false, `${where}: allowPrivilegeEscalation`);
    assert.notEqual(sc.privileged, true, `${where}: privileged`);
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
    "milo-ipam-sweep install", // makes the emptyDir's private directories root's
    "milo-ipam-sweep sweep", // reads the 0400 token Secret; its log directory must be root's
    "milo-ipam-uninstall uninstall", // removes root's files from the host
  ]);
  for (const { where, spec } of pods(docs)) {
    assert.ok(!spec.hostPID && !spec.hostIPC, `${where}: no host PID or IPC namespace`);
    assert.equal(!!spec.hostNetwork, where === "DaemonSet/milo-ipam-agent", where);
  }
  // The node install runs with the image's Deno: no other program than Deno, and no network but
  // the agent's install's one GET of the kube-system namespace from the API server.
  for (const { where, c } of containers(docs).filter(({ c }) => c.command[0].endsWith("/deno"))) {
    const flags = c.command.filter((a: string) => a.startsWith("--"));
    // The uninstall asks the agent's socket alone whether an agent still answers there.
    const socket = `--allow-net=unix:${
      JSON.parse(Deno.readTextFileSync(`${OVERLAY}/node.json`)).agent.socket
    }`;
    const net = where === "DaemonSet/milo-ipam-agent install"
      ? ["--allow-net=$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"]
      : where === "DaemonSet/milo-ipam-uninstall uninstall"
      ? [socket]
      : [];
    assert.deepEqual(flags.filter((f: string) => f.startsWith("--allow-net")), net, where);
    assert.ok(
      !flags.some((f: string) => /^--allow-(all|ffi)|^-A$/.test(f)),
      `${where}: ${flags}`,
    );
    assert.ok(flags.includes("--no-remote") && flags.includes("--no-npm"), where);
    for (const f of flags.filter((f: string) => f.startsWith("--allow-run"))) {
      assert.equal(f, "--allow-run=/usr/lib/milo-ipam/deno", `${where}: runs only Deno (compile)`);
    }
  }
});

Deno.test("deploy: no API token where nothing calls the API; each role is exactly its calls", () => {
  const docs = [...rendered(), ...uninstallRendered()];
  assert.equal(find(docs, "ServiceAccount", "milo-ipam-agent").automountServiceAccountToken, false);
  const agent = find(docs, "DaemonSet", "milo-ipam-agent").spec.template.spec;
  assert.equal(agent.automountServiceAccountToken, false, "the agent has no API token");
  // The install alone reads the kube-system UID (the cluster's identity), with its own token.
  const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  const [install] = agent.initContainers;
  assert.ok(install.volumeMounts.some((m: Any) => m.mountPath === sa && m.readOnly), "install");
  assert.ok(!agent.containers[0].volumeMounts.some((m: Any) => m.mountPath === sa), "agent: none");
  const kubeApi = agent.volumes.find((v: Any) => v.name === "kube-api");
  assert.equal(kubeApi.projected.sources[0].serviceAccountToken.expirationSeconds, 600);
  const kubeSystem = {
    apiGroups: [""],
    resources: ["namespaces"],
    resourceNames: ["kube-system"],
    verbs: ["get"],
  };
  assert.deepEqual(find(docs, "ClusterRole", "milo-ipam-agent").rules, [kubeSystem]);
  assert.deepEqual(find(docs, "ClusterRoleBinding", "milo-ipam-agent").subjects, [
    { kind: "ServiceAccount", name: "milo-ipam-agent", namespace: "kube-system" },
  ]);
  const un = find(docs, "DaemonSet", "milo-ipam-uninstall").spec.template.spec;
  assert.equal(un.automountServiceAccountToken, false, "the uninstall has no API token");
  const sweep = find(docs, "CronJob", "milo-ipam-sweep").spec.jobTemplate.spec.template.spec;
  assert.equal(sweep.serviceAccountName, "milo-ipam-sweep");
  assert.notEqual(sweep.automountServiceAccountToken, false, "the sweep calls the API");
  assert.deepEqual(find(docs, "ClusterRole", "milo-ipam-sweep").rules, [
    { apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] },
    { apiGroups: [""], resources: ["nodes"], verbs: ["list"] },
    kubeSystem,
  ]);
  const calls = Object.getOwnPropertyNames(KubeClient.prototype).filter((n) => n !== "constructor");
  assert.deepEqual(
    calls.sort(),
    ["close", "clusterUid", "getPod", "listNodes", "listPods", "requests"],
    "a new Kubernetes call needs its verb in deploy/base/sweep.yaml's ClusterRole (and this list)",
  );
  assert.deepEqual(find(docs, "ClusterRoleBinding", "milo-ipam-sweep").subjects, [
    { kind: "ServiceAccount", name: "milo-ipam-sweep", namespace: "kube-system" },
  ]);
});

Deno.test("deploy: host paths are the sandbox's, at the same paths in the install and the agent", async () => {
  const docs = rendered();
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
    "/etc/milo-ipam rw",
    "/opt/cni/bin rw",
    "/run/milo-ipam rw",
    "/run/milo-ipam-secrets rw",
    "/secret ro",
    "/tmp rw",
    "/var/lib/milo-ipam rw",
    "/var/log/milo-ipam rw",
    "/var/run/secrets/kubernetes.io/serviceaccount ro",
  ]);
  assert.deepEqual(mounts(main), [
    "/etc/machine-id ro",
    "/etc/milo-ipam ro",
    "/opt/cni/bin ro",
    "/run/milo-ipam rw",
    "/run/milo-ipam-metrics ro",
    "/run/milo-ipam-secrets ro",
    "/var/lib/cni/multus/results ro",
    "/var/lib/cni/results ro",
    "/var/lib/milo-ipam rw",
    "/var/log/milo-ipam rw",
  ]);
  for (const c of [install, main]) {
    for (const m of c.volumeMounts.filter((m: Any) => host.has(m.name))) {
      assert.equal(m.mountPath, host.get(m.name), `${c.name}: ${m.name} at its host path`);
    }
  }
  // What the plugin compiled from the overlay's node.json may touch, the agent sees.
  const g = (await planSandbox({ dir: "/opt/cni/bin", config: `${OVERLAY}/node.json` })).grants;
  const mountOf = (p: string) =>
    main.volumeMounts.find((m: Any) => host.has(m.name) && isInside(p, m.mountPath));
  // The scraper's token is read from its Secret's volume: it has no business on the host.
  const secrets = new Set(agent.volumes.filter((v: Any) => v.secret).map((v: Any) => v.name));
  const secretMountOf = (p: string) =>
    main.volumeMounts.find((m: Any) => secrets.has(m.name) && isInside(p, m.mountPath));
  // The boot id is the kernel's (every container's /proc shows the host's), and so is the
  // firmware's UUID (every container's sysfs shows the machine's).
  const kernels = [DEFAULT_BOOT_ID_FILE, DEFAULT_HARDWARE_ID_FILE];
  const read = [
    ...g.read.filter((p) => p !== `${OVERLAY}/node.json` && !kernels.includes(p)),
    "/etc/milo-ipam/node.json",
  ];
  for (const p of read) {
    assert.ok(mountOf(p) ?? secretMountOf(p), `the agent mounts ${p}, which its sandbox reads`);
  }
  assert.deepEqual(read.filter((p) => !mountOf(p)), ["/run/milo-ipam-metrics/token"]);
  for (const p of g.write) assert.ok(mountOf(p) && !mountOf(p).readOnly, `${p} writable`);
  assert.ok(read.includes(supportDir("/opt/cni/bin")), "the plugin's code, read-only");
  for (const m of main.volumeMounts.filter((m: Any) => host.has(m.name))) {
    const used = [...read, ...g.write, "/opt/cni/bin/milo-ipam"]
      .some((p) => isInside(p, m.mountPath) || isInside(m.mountPath, p));
    assert.ok(used, `the agent mounts ${m.mountPath}, which nothing in its sandbox uses`);
  }
  assert.deepEqual(g.net.sort(), [
    "0.0.0.0:9464",
    "milo.example.com:443",
    "unix:/run/milo-ipam/agent.sock",
  ]);
  const node = parseNodeConfig(
    { ...JSON.parse(Deno.readTextFileSync(`${OVERLAY}/node.json`)), node: "n" },
    "node.json",
  );
  assert.equal(node.milo.tokenFile, "/run/milo-ipam-secrets/token", "the token on tmpfs");
  for (const w of g.write) assert.ok(!isInside(node.milo.tokenFile, w), `token outside ${w}`);

  const sweep = find(docs, "CronJob", "milo-ipam-sweep").spec.jobTemplate.spec.template.spec;
  assert.equal(hostPaths(sweep).size, 0, "the sweep mounts nothing of its node");
  const un = find(uninstallRendered(), "DaemonSet", "milo-ipam-uninstall").spec.template.spec;
  assert.deepEqual(
    mounts(un.initContainers[0]).filter((m) => m !== "/tmp rw"),
    mounts(install).filter((m) => !/^\/(config|secret|tmp|var\/run\/secrets\/\S+) /.test(m)),
    "the uninstall reaches what the install wrote",
  );
  assert.deepEqual(un.containers[0].volumeMounts ?? [], [], "the pod holder mounts nothing");
});

Deno.test("deploy: probes and the scrape port are where the node config puts the metrics; the scrape bears the token the agent checks; alerts use exported metrics", () => {
  const docs = rendered();
  const ds = find(docs, "DaemonSet", "milo-ipam-agent");
  const [agent] = ds.spec.template.spec.containers;
  const node = JSON.parse(Deno.readTextFileSync(`${OVERLAY}/node.json`));
  const { metrics, metricsTokenFile } = node.agent;
  const port = Number(metrics.split(":").at(-1));
  assert.match(metrics, /^0\.0\.0\.0:\d+$/, "the node's addresses, for Prometheus");
  assert.deepEqual(agent.readinessProbe.httpGet, { host: "127.0.0.1", path: "/readyz", port });
  assert.deepEqual(agent.livenessProbe.httpGet, { host: "127.0.0.1", path: "/livez", port });
  assert.deepEqual(agent.ports, [{ name: "metrics", containerPort: port, protocol: "TCP" }]);
  // Only the scraper reads /metrics: its bearer token, from a Secret the agent mounts (optional:
  // without it the agent and its probes run, and every scrape is refused).
  requireScrapeToken(node.agent);
  const at = agent.volumeMounts.find((m: Any) => isInside(metricsTokenFile, m.mountPath));
  assert.deepEqual(at, {
    name: "metrics-token",
    mountPath: "/run/milo-ipam-metrics",
    readOnly: true,
  });
  const volume = ds.spec.template.spec.volumes.find((v: Any) => v.name === at.name);
  assert.deepEqual(volume.secret, {
    secretName: "milo-ipam-metrics",
    defaultMode: 0o400,
    optional: true,
  });
  assert.equal(metricsTokenFile, `${at.mountPath}/token`, "the Secret's key token");
  const annotations = Object.keys(ds.spec.template.metadata.annotations ?? {});
  assert.deepEqual(
    annotations.filter((a) => a.startsWith("prometheus.io/")),
    [],
    "no scrape by annotation: such a job would send the token to every pod it scrapes",
  );

  const mon = kustomize(`${DEPLOY}monitoring`);
  const pm = find(mon, "PodMonitor", "milo-ipam-agent");
  assert.equal(pm.apiVersion, "monitoring.coreos.com/v1");
  assert.deepEqual(pm.spec.selector.matchLabels, ds.spec.selector.matchLabels);
  assert.equal(pm.metadata.namespace, ds.metadata.namespace, "the Secret is the PodMonitor's");
  assert.deepEqual(pm.spec.namespaceSelector, { matchNames: [ds.metadata.namespace] });
  assert.deepEqual(pm.spec.podMetricsEndpoints.map((e: Any) => [e.port, e.path, e.authorization]), [
    ["metrics", "/metrics", {
      type: "Bearer",
      credentials: { name: volume.secret.secretName, key: "token" },
    }],
  ]);
  const rules = find(mon, "PrometheusRule", "milo-ipam").spec.groups.flatMap((g: Any) => g.rules);
  const exported = new Set(
    [...new Metrics().render(0).matchAll(/^# TYPE (\S+) (\w+)$/gm)].flatMap(([, n, t]) =>
      t === "histogram" ? [`${n}_bucket`, `${n}_sum`, `${n}_count`] : [n]
    ),
  );
  const alerts = rules.map((r: Any) => r.alert);
  for (
    const a of [
      "MiloIpamAgentNotReady",
      "MiloIpamReleaseJournalBacklog",
      "MiloIpamReconcileBrake",
      "MiloIpamMiloThrottling",
      "MiloIpamCode11Rate",
      "MiloIpamPoolExhausted",
      "MiloIpamSweepFailed",
    ]
  ) assert.ok(alerts.includes(a), `alert ${a}`);
  for (const r of rules) {
    assert.ok(r.alert && r.expr && r.labels?.severity && r.annotations?.summary, r.alert);
    for (const [name] of String(r.expr).matchAll(/\b(milo_ipam_\w+|kube_\w+)/g)) {
      assert.ok(exported.has(name) || name.startsWith("kube_"), `${r.alert}: ${name} is exported`);
    }
  }
});

Deno.test("deploy: the Containerfile builds for amd64 and arm64 by argument, from checksum-verified Deno", () => {
  const text = Deno.readTextFileSync(`${DEPLOY}Containerfile`).replace(/\\\n\s*/g, "");
  const lines = text.split("\n");
  const installTs = Deno.readTextFileSync(`${ROOT}scripts/install.ts`);
  const pinned = installTs.match(/const DENO_VERSION = "([^"]+)"/)?.[1];
  assert.ok(lines.includes(`ARG DENO_VERSION=${pinned}`), "the Deno the install requires");
  assert.ok(lines.includes("ARG TARGETARCH=amd64"), "the architecture is the build's platform");
  // Deno from the npm registry's package of each architecture, its sha512 (the registry's
  // dist.integrity of that release) checked before it is unpacked.
  for (const a of ["AMD64", "ARM64"]) {
    assert.ok(lines.some((l) => new RegExp(`^ARG DENO_SHA512_${a}=[0-9a-f]{128}$`).test(l)), a);
  }
  const fetch = lines.find((l) => l.includes("sha512sum -c")) ?? "";
  assert.match(fetch, /amd64\) pkg=linux-x64-glibc; sum="\$DENO_SHA512_AMD64"/);
  assert.match(fetch, /arm64\) pkg=linux-arm64-glibc; sum="\$DENO_SHA512_ARM64"/);
  assert.match(
    fetch,
    /\*\) echo "TARGETARCH \$TARGETARCH: [^"]*" >&2; exit 1/,
    "no other architecture",
  );
  assert.ok(
    fetch.includes(
      `curl -fsSL --proto '=https' -o /tmp/deno.tgz "https://registry.npmjs.org/@deno/$pkg/-/$pkg-\${DENO_VERSION}.tgz"`,
    ),
    fetch,
  );
  assert.match(
    fetch,
    /printf '%s {2}%s\\n' "\$sum" \/tmp\/deno\.tgz \| sha512sum -c -; tar -xzf/,
    "checked before it is unpacked",
  );
  // denort: the one deno compile fetches for the target, recorded, and checked when pinned.
  const denort = lines.find((l) => l.includes("denort-*.zip")) ?? "";
  assert.match(denort, /if \[ -n "\$DENORT_SHA256" \] && \[ "\$sha" != "\$DENORT_SHA256" \]/);
  assert.match(denort, /> \/out\/milo-ipam\/DENORT\.sha256/);
  assert.ok(text.indexOf("ENV DENORT_BIN=") > text.indexOf("denort-*.zip"), "then compile uses it");
  assert.ok(text.includes("deno run --allow-all scripts/image.ts --out /out/milo-ipam"));
  const image = text.slice(text.lastIndexOf("\nFROM "));
  assert.doesNotMatch(image, /curl|wget|apt-get|deno (task|run|cache|compile)/, "fetches nothing");
  for (
    const copy of [
      "COPY --from=build /usr/local/bin/deno /usr/lib/milo-ipam/deno",
      "COPY --from=build /usr/local/lib/denort/denort /usr/lib/milo-ipam/denort",
      "COPY --from=build /out/milo-ipam/ /usr/lib/milo-ipam/",
    ]
  ) assert.ok(image.includes(copy), copy);
  // The manifests run what the image holds.
  const commands = containers([...rendered(), ...uninstallRendered()]).map(({ c }) =>
    c.command.join(" ")
  );
  for (const verb of ["install", "sweep", "uninstall"]) {
    assert.ok(
      commands.some((c) =>
        c.startsWith("/usr/lib/milo-ipam/deno run ") &&
        c.includes(` /usr/lib/milo-ipam/node-install.js ${verb}`)
      ),
      `node-install ${verb}`,
    );
  }
  assert.ok(commands.includes("/opt/cni/bin/milo-ipam agent"));
  assert.ok(
    commands.includes(
      "/work/bin/milo-ipam sweep --apply --output=json --timeout=5m --request-timeout=30s",
    ),
  );
});

Deno.test("deploy: every kustomization of deploy/ renders, each object once", () => {
  const found: string[] = [], components: string[] = [];
  const walk = (dir: string) => {
    for (const e of Deno.readDirSync(DEPLOY + dir)) {
      if (e.isDirectory) walk(`${dir}${e.name}/`);
      else if (e.name === "kustomization.yaml") {
        const kind = (loadAll(Deno.readTextFileSync(`${DEPLOY}${dir}${e.name}`))[0] as Any).kind;
        (kind === "Component" ? components : found).push(dir.replace(/\/$/, ""));
      }
    }
  };
  walk("");
  assert.deepEqual(found.sort(), [...KUSTOMIZATIONS].sort(), "each kustomization is rendered here");
  assert.deepEqual(components, ["overlays/cluster-a/image"], "the cluster's image, named once");
  for (const k of KUSTOMIZATIONS) {
    const docs = kustomize(DEPLOY + k);
    assert.ok(docs.length, `${k} renders objects`);
    const keys = docs.map((d) => `${d.kind}/${d.metadata.namespace ?? ""}/${d.metadata.name}`);
    assert.equal(new Set(keys).size, keys.length, `${k}: ${keys}`);
    for (const d of docs) {
      const Model = MODELS[d.kind];
      if (Model) new Model(d).validate();
      else assert.equal(k, "monitoring", `${k}: ${d.kind} has no schema model here`);
    }
  }
});

Deno.test("deploy: every pod goes to Linux nodes of the architectures the image is built for; the image is named once per cluster", () => {
  const file = Deno.readTextFileSync(`${DEPLOY}Containerfile`).replace(/\\\n\s*/g, "");
  const built = [...file.matchAll(/ (\w+)\) pkg=linux-/g)].map(([, a]) => a).sort();
  assert.deepEqual(built, ["amd64", "arm64"]);
  for (const { where, spec } of pods([...rendered(), ...uninstallRendered()])) {
    const terms = spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
      ?.nodeSelectorTerms;
    assert.equal(terms?.length, 1, `${where}: one required node selector term`);
    const by = Object.fromEntries(
      terms[0].matchExpressions.map((e: Any) => [e.key, [e.operator, [...e.values].sort()]]),
    );
    assert.deepEqual(by, {
      "kubernetes.io/os": ["In", ["linux"]],
      "kubernetes.io/arch": ["In", built],
    }, where);
  }
  // The overlay and its uninstall take the one image component; neither names an image itself.
  for (const k of ["overlays/cluster-a", "overlays/cluster-a/uninstall"]) {
    const y = loadAll(Deno.readTextFileSync(`${DEPLOY}${k}/kustomization.yaml`))[0] as Any;
    assert.equal(y.images, undefined, `${k} names no image`);
    assert.equal(y.components.length, 1, k);
  }
});

/** The period of a schedule of every N minutes, in seconds. */
function everyS(schedule: string): number {
  const m = /^\*\/(\d+) \* \* \* \*$/.exec(schedule);
  assert.ok(m, `schedule ${schedule} is every N minutes`);
  return Number(m[1]) * 60;
}

Deno.test("deploy: the sweep has its own timeouts and schedule, sized for 5,000 nodes; the nodes' ADD deadline is untouched", () => {
  const cron = find(rendered(), "CronJob", "milo-ipam-sweep");
  const job = cron.spec.jobTemplate.spec;
  const [sweep] = job.template.spec.containers;
  assert.deepEqual(sweep.command.slice(0, 2), ["/work/bin/milo-ipam", "sweep"]);
  const a = parseSweepArgs(sweep.command.slice(2));
  assert.equal(a.apply, true);
  // A LIST of 300,000 claims (one answer of some 450 MB) took 35-69 s on 2 cores
  // (bench/README.md): its own budget, with room for a slower Milo.
  assert.equal(a.timeoutMs, 300_000, "--timeout");
  assert.equal(a.requestTimeoutMs, 30_000, "--request-timeout");
  const node = parseNodeConfig(
    { ...JSON.parse(Deno.readTextFileSync(`${OVERLAY}/node.json`)), node: "n" },
    "node.json",
  );
  assert.deepEqual(
    [node.timeouts.requestMs, node.timeouts.totalMs],
    [2_000, 10_000],
    "the nodes' ADD deadline is the node config's, not the sweep's",
  );
  // A run whose every operation takes its whole --timeout ends within activeDeadlineSeconds:
  // the install, two observations (the API's lists, then Milo's LIST), the wait between them,
  // the wait for a pod gone from a Ready node, and the re-checks and releases.
  const installS = 60;
  const worstS = installS + 2 * 2 * a.timeoutMs! / 1000 +
    Math.max(a.intervalMs, a.nodeMonitorGraceMs) / 1000 +
    (a.terminationGraceMs + SETTLE_MS) / 1000 + a.timeoutMs! / 1000;
  assert.ok(job.activeDeadlineSeconds >= worstS, `${job.activeDeadlineSeconds} s < ${worstS} s`);
  assert.ok(
    job.activeDeadlineSeconds < everyS(cron.spec.schedule),
    "a run ends before the next is due",
  );
  assert.equal(cron.spec.concurrencyPolicy, "Forbid");
  assert.ok(
    cron.spec.startingDeadlineSeconds < everyS(cron.spec.schedule),
    "a late start is still this period's",
  );
  // The sweep install copies the node config's timeouts as they are: the flags are the sweep's.
  const text = Deno.readTextFileSync(`${ROOT}scripts/node_install.ts`);
  assert.doesNotMatch(text.slice(text.indexOf("export async function sweepInstall")), /timeouts/);
});

/** The cluster's ConfigMap and a Secret as the kubelet lays them out: one file per key. */
export function layOut(dir: string, data: Record<string, string>): void {
  Deno.mkdirSync(dir, { recursive: true });
  for (const [k, v] of Object.entries(data)) Deno.writeTextFileSync(`${dir}/${k}`, v);
}

/** The rendered ConfigMap's data. */
export function configMapData(): Record<string, string> {
  return { ...rendered().find((d) => d.kind === "ConfigMap")!.data };
}

/** Every ConfigMap key of a node config in `data` with its host paths moved under `root`. */
export function underRoot(data: Record<string, string>, root: string, url: string) {
  const v = JSON.parse(data["node.json"]);
  v.milo = { ...v.milo, url, tokenFile: root + v.milo.tokenFile, caFile: root + v.milo.caFile };
  v.log = { ...v.log, file: root + v.log.file };
  v.resultsDirs = v.resultsDirs.map((d: string) => root + d);
  v.stateDir = root + v.stateDir;
  v.hostIdFile = `${root}/etc/machine-id`;
  v.agent = { ...v.agent, socket: root + v.agent.socket, metrics: "127.0.0.1:0" };
  delete v.agent.metrics;
  return { ...data, "node.json": JSON.stringify(v, null, 2) };
}

Deno.test("deploy: the ConfigMap's placeholder CA fails the init container's install", async () => {
  const { checkCa, Refused } = await import("../scripts/node_install.ts");
  for (
    const ca of [configMapData()["ca.crt"], Deno.readTextFileSync(`${DEPLOY}base/ca.crt`), "", "\n"]
  ) {
    assert.throws(() => checkCa(ca, "/config/ca.crt"), (err: unknown) => {
      assert.ok(err instanceof Refused);
      assert.match(err.message, /\/config\/ca\.crt is not a PEM bundle of certificates/);
      return true;
    });
  }
  const broken = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n";
  assert.throws(() => checkCa(broken, "ca.crt"), /certificate 1 does not parse/);
});
