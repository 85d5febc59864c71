/**
 * milo-ipam on a Kubernetes node, from the image alone (nothing is fetched):
 * the init containers of deploy/base (the DaemonSet, the sweep's CronJob) and
 * deploy/uninstall. The host's paths are mounted at the same paths, the
 * ConfigMap at /config and the Secret at /secret.
 *
 * `install` reads the node config from the ConfigMap (`node.json`, without
 * `node`: the node's name comes from NODE_NAME), the token from the Secret
 * (`token`) and the CA from either (`ca.crt`, a PEM bundle: an empty or
 * placeholder one is refused); writes them to the paths the node config
 * names; and installs the plugin into /opt/cni/bin from the image's bundle,
 * compiled on the node so that its sandbox is derived from this cluster's
 * node config. `sweep` does the same for the sweep's CronJob into its
 * emptyDir. `uninstall` removes everything `install` wrote, refusing while a
 * pod on a milo-ipam network holds a lease on the node.
 */
import { X509Certificate } from "node:crypto";
import { dirname, join, resolve } from "node:path";
import { parseCommandLine, usageError } from "../lib/cli.ts";
import {
  DNS1123_SUBDOMAIN,
  type NodeConfig,
  requireScrapeToken,
  validateNodeConfig,
} from "../lib/config.ts";
import { errorText } from "../lib/errors.ts";
import { Holdings } from "../lib/holdings.ts";
import { tokenOf } from "../lib/http.ts";
import { Journal } from "../lib/journal.ts";
import { KubeClient } from "../lib/kube.ts";
import { inClusterAccess } from "../lib/kube_access.ts";
import { rotatedLog } from "../lib/log.ts";
import { ownSecretDir, ownSocketDir } from "../lib/owned.ts";
import { DEFAULT_NODE_CONFIG } from "../lib/paths.ts";
import { RELEASE } from "../lib/version.ts";
import { requireStateFormat } from "../lib/state_format.ts";
import { writeAtomic } from "./atomic.ts";
import { install, type Installed, type InstallOptions } from "./install.ts";
import { supportDir } from "./sandbox.ts";

/** `node-install --help`. */
export const NODE_INSTALL_USAGE =
  `usage: node-install install   [FLAGS]   the agent DaemonSet's init container
       node-install sweep     [FLAGS]   the sweep CronJob's init container
       node-install uninstall [FLAGS]   deploy/uninstall's init container

  --config-map DIR   the ConfigMap's files: node.json, and ca.crt (default /config)
  --secret DIR       the Secret's files: token, and ca.crt (default /secret)
  --dir DIR          where the plugin goes (default /opt/cni/bin; sweep: /work/bin)
  --node-config F    where the node config is written (default ${DEFAULT_NODE_CONFIG})
  --bundle DIR       the image's plugin bundle (default /usr/lib/milo-ipam/bundle)
  --deno PATH        the image's Deno, for a launcher (default: the running one)
  --mode M           auto (compile, else a launcher), compile or launcher (sweep: launcher)
  --work DIR         sweep: its emptyDir (default /work)
  --kubeconfig F     sweep: the kubeconfig naming the API server (default: in-cluster)
  --service-account DIR
                     install: the service account's token and ca.crt, to read the cluster's
                     kube-system UID (clusterUid) in a pod (default the kubelet's mount)

NODE_NAME names the node (install). Exit status: 0 done, 1 refused or failed, 2 a wrong
command line.`;

/** Where the image keeps what the node install uses. */
export const IMAGE_DIR = "/usr/lib/milo-ipam";

/** What one node install needs: the mounted ConfigMap and Secret, and where things go. */
export interface NodeInstallOptions {
  configMap: string;
  secret: string;
  /** The plugin's directory (/opt/cni/bin). */
  dir: string;
  /** Where the node config is written. */
  nodeConfig: string;
  nodeName: string;
  bundleDir?: string;
  denoPath?: string;
  mode?: InstallOptions["mode"];
  quiet?: boolean;
  /**
   * Reads the UID of the cluster's `kube-system` namespace from its API (the
   * init container's service account; lib/cluster_uid.ts); undefined when
   * the install runs outside a pod.
   */
  clusterUid?: () => Promise<string>;
}

/** A refusal of the node install: its message says what to fix. */
export class Refused extends Error {
  override name = "Refused";
}

/** Reads a mounted key's file, or undefined when the key is absent. */
async function key(dir: string, name: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(join(dir, name));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw new Refused(`cannot read ${join(dir, name)}: ${errorText(err)}`);
  }
}

/**
 * The CA bundle: every PEM block a certificate that parses, at least one, and
 * nothing else but whitespace. A forgotten placeholder is refused here rather
 * than at the first pod's TLS handshake.
 */
export function checkCa(text: string, where: string): string {
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  const rest = blocks.reduce((t, b) => t.replace(b, ""), text).trim();
  if (!blocks.length || rest) {
    throw new Refused(
      `${where} is not a PEM bundle of certificates${
        text.trim() ? "" : " (it is empty)"
      }: put the CA that signs Milo's serving certificate there (-----BEGIN CERTIFICATE-----)`,
    );
  }
  for (const [i, b] of blocks.entries()) {
    try {
      new X509Certificate(b);
    } catch (err) {
      throw new Refused(`${where}: certificate ${i + 1} does not parse: ${errorText(err)}`);
    }
  }
  return blocks.join("\n") + "\n";
}

/** The ConfigMap's node config with the node's name, validated. */
async function nodeConfigOf(o: NodeInstallOptions): Promise<Record<string, unknown>> {
  const where = join(o.configMap, "node.json");
  const text = await key(o.configMap, "node.json");
  if (text === undefined) throw new Refused(`${where} is missing: the ConfigMap needs node.json`);
  let values: unknown;
  try {
    values = JSON.parse(text);
  } catch (err) {
    throw new Refused(`${where} is not JSON: ${errorText(err)}`);
  }
  if (typeof values !== "object" || values === null || Array.isArray(values)) {
    throw new Refused(`${where} must be a JSON object`);
  }
  if ("node" in values) {
    throw new Refused(
      `${where} names a node: leave node out, each node's name comes from NODE_NAME`,
    );
  }
  if (!DNS1123_SUBDOMAIN.test(o.nodeName)) {
    throw new Refused(
      `NODE_NAME ${JSON.stringify(o.nodeName)} is not a node name (set it from spec.nodeName)`,
    );
  }
  return { node: o.nodeName, ...values };
}

function validate(values: Record<string, unknown>, path: string): NodeConfig {
  try {
    return { ...validateNodeConfig(values, path), node: String(values.node) } as NodeConfig;
  } catch (err) {
    const e = err as { message?: string; details?: string };
    throw new Refused(`${e.message}${e.details ? ` (${e.details})` : ""}`);
  }
}

/** The CA `milo.caFile` needs, from the ConfigMap or the Secret: its checked text, its file. */
async function caOf(
  o: NodeInstallOptions,
  node: NodeConfig,
): Promise<{ text: string; from: string } | undefined> {
  const [inMap, inSecret] = [await key(o.configMap, "ca.crt"), await key(o.secret, "ca.crt")];
  if (inMap !== undefined && inSecret !== undefined) {
    throw new Refused("ca.crt is in both the ConfigMap and the Secret: keep it in one");
  }
  const [ca, from] = inMap !== undefined
    ? [inMap, join(o.configMap, "ca.crt")]
    : [inSecret, join(o.secret, "ca.crt")];
  if (!node.milo.caFile) {
    if (ca !== undefined) {
      throw new Refused(`${from} is given but node.json sets no milo.caFile: set milo.caFile`);
    }
    return undefined;
  }
  if (ca === undefined) {
    throw new Refused(
      `node.json sets milo.caFile ${node.milo.caFile}, and neither the ConfigMap nor the Secret ` +
        "has ca.crt",
    );
  }
  return { text: checkCa(ca, from), from };
}

/** Runs a check of lib/: its refusal (code 7) becomes the install's. */
function refusing(check: () => void): void {
  try {
    check();
  } catch (err) {
    const e = err as { message?: string; details?: string };
    throw new Refused(`${e.message ?? String(err)}${e.details ? ` (${e.details})` : ""}`);
  }
}

/**
 * A directory nobody else may write: made 0700 when missing, narrowed to 0700
 * when this user's and writable by others, refused when another user's or not
 * a directory ({@link ownSocketDir}).
 */
const privateDirAt = (dir: string) => refusing(() => ownSocketDir(dir));

/**
 * The Milo token written where the node config names it: into a directory of
 * root's alone (0700 when the kubelet made it 0755, else refused: see
 * {@link ownSecretDir}), through a file that is 0600 from before its first
 * byte ({@link writeAtomic}), so no other user of the node ever reads it.
 */
export async function installToken(tokenFile: string, token: string): Promise<void> {
  refusing(() => ownSecretDir(tokenFile));
  await writeAtomic(tokenFile, token, 0o600);
}

/**
 * The agent DaemonSet's install: token, CA and node config written where the
 * node config names them, then the plugin installed from the image's bundle.
 */
export async function nodeInstall(o: NodeInstallOptions): Promise<Installed> {
  const values = await withClusterUid(await nodeConfigOf(o), o);
  const node = validate(values, o.nodeConfig);
  refusing(() => requireScrapeToken(node.agent));
  const token = await key(o.secret, "token");
  if (token === undefined || !token.trim()) {
    throw new Refused(`${join(o.secret, "token")} is missing or empty (the Secret's key token)`);
  }
  if (!tokenOf(token)) {
    throw new Refused(
      `${join(o.secret, "token")} is not one line of visible ASCII (a bearer token)`,
    );
  }
  const ca = await caOf(o, node);
  for (const d of [dirname(node.agent.socket), dirname(node.log.file), node.stateDir]) {
    privateDirAt(d);
  }
  requireStateFormat(node.stateDir);
  await installToken(node.milo.tokenFile, token);
  await Deno.mkdir(dirname(o.nodeConfig), { recursive: true, mode: 0o755 });
  if (ca && node.milo.caFile) await writeAtomic(node.milo.caFile, ca.text, 0o644);
  await writeAtomic(o.nodeConfig, JSON.stringify(values, null, 2) + "\n", 0o644);
  const r = await install({
    dir: o.dir,
    config: o.nodeConfig,
    mode: o.mode,
    bundleDir: o.bundleDir,
    denoPath: o.denoPath,
    quiet: o.quiet,
  });
  // The token's place in an older layout, on persistent disk beside the node config.
  const old = join(dirname(o.nodeConfig), "token");
  if (resolve(old) !== resolve(node.milo.tokenFile)) await Deno.remove(old).catch(() => {});
  return r;
}

/**
 * The node config with the cluster's `kube-system` UID (`clusterUid`), read
 * from the API: what tells this cluster's claims from another's given the
 * same name. One the ConfigMap names already must be this cluster's; none
 * and no API to ask is refused.
 */
async function withClusterUid(
  values: Record<string, unknown>,
  o: NodeInstallOptions,
): Promise<Record<string, unknown>> {
  const named = typeof values.clusterUid === "string" ? values.clusterUid : undefined;
  if (!o.clusterUid) {
    if (named) return values;
    throw new Refused(
      "cannot read the cluster's kube-system UID (clusterUid): run the install in the agent's " +
        "pod with its service account token mounted (deploy/base), or set clusterUid in node.json " +
        "(kubectl get namespace kube-system -o jsonpath='{.metadata.uid}')",
    );
  }
  let uid: string;
  try {
    uid = await o.clusterUid();
  } catch (err) {
    const e = err as { message?: string; details?: string };
    throw new Refused(
      `cannot read the cluster's kube-system UID from its API: ${e.message ?? errorText(err)}` +
        `${e.details ? ` (${e.details})` : ""}; the agent's ClusterRole grants get on ` +
        "namespaces/kube-system (deploy/base)",
    );
  }
  if (named !== undefined && named !== uid) {
    throw new Refused(
      `node.json names clusterUid ${named}, but this cluster's kube-system UID is ${uid}: it is ` +
        "another cluster's node config (a copied overlay?); give this cluster its own cluster name",
    );
  }
  return { ...values, clusterUid: uid };
}

/** The sweep's install into its emptyDir: the cluster's node config, its own paths. */
export async function sweepInstall(o: {
  configMap: string;
  secret: string;
  work: string;
  kubeconfig?: string;
  bundleDir?: string;
  denoPath?: string;
  mode?: InstallOptions["mode"];
  quiet?: boolean;
}): Promise<Installed> {
  const m: NodeInstallOptions = {
    configMap: o.configMap,
    secret: o.secret,
    dir: join(o.work, "bin"),
    nodeConfig: join(o.work, "etc", "node.json"),
    nodeName: "sweep",
  };
  const values = await nodeConfigOf(m);
  const given = validate(values, m.nodeConfig);
  const ca = await caOf(m, given);
  const milo = values.milo as Record<string, unknown>;
  const sweep = {
    ...values,
    milo: {
      ...milo,
      tokenFile: join(o.secret, "token"),
      ...(ca ? { caFile: ca.from } : {}),
    },
    log: { file: join(o.work, "log", "sweep.log"), level: "info" },
    resultsDirs: [join(o.work, "results")],
    resultsDir: undefined,
    stateDir: join(o.work, "state"),
    hostIdFile: join(o.work, "state", "host-id"),
    agent: { socket: join(o.work, "run", "agent.sock") },
  };
  validate(sweep, m.nodeConfig);
  for (const d of ["log", "results", "state", "run"]) privateDirAt(join(o.work, d));
  await Deno.mkdir(dirname(m.nodeConfig), { recursive: true, mode: 0o755 });
  await writeAtomic(m.nodeConfig, JSON.stringify(sweep, null, 2) + "\n", 0o644);
  return await install({
    dir: m.dir,
    config: m.nodeConfig,
    kube: o.kubeconfig ?? "in-cluster",
    mode: o.mode ?? "launcher",
    bundleDir: o.bundleDir,
    denoPath: o.denoPath,
    quiet: o.quiet,
  });
}

/** What an uninstall removed. */
export interface Uninstalled {
  removed: string[];
}

/**
 * Removes what `install` wrote: the plugin and its support directory, the
 * node config, token and CA, the state directory and the log. Refused while
 * an agent answers on its socket (the DaemonSet still runs; a socket nothing
 * answers, a crashed agent's, is removed), while the node's
 * record holds a lease (a pod on a milo-ipam network), or while the release
 * journal owes a release (removing it would leak the address).
 */
export async function nodeUninstall(o: { dir: string; nodeConfig: string }): Promise<Uninstalled> {
  let text: string;
  try {
    text = await Deno.readTextFile(o.nodeConfig);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
    return { removed: await removeAll([join(o.dir, "milo-ipam"), supportDir(o.dir)]) };
  }
  const values = JSON.parse(text);
  const node = validate(values, o.nodeConfig);
  const stale: string[] = [];
  const socket = await Deno.lstat(node.agent.socket).then((s) => s, () => null);
  if (socket) {
    if (!socket.isSocket || await answers(node.agent.socket)) {
      throw new Refused(
        `an agent answers on this node's socket (${node.agent.socket}): delete the ` +
          "milo-ipam-agent DaemonSet first",
      );
    }
    // A crashed agent's socket, which nothing answers: its agent is gone.
    await Deno.remove(node.agent.socket);
    stale.push(node.agent.socket);
  }
  const held = new Holdings(node.stateDir).all();
  if (held.length) {
    const pods = held.slice(0, 5).map(({ h }) => `${h.network}/${h.containerId}/${h.ifname}`);
    throw new Refused(
      `${held.length} attachment(s) on this node hold milo-ipam leases (${pods.join(", ")}${
        held.length > 5 ? ", ..." : ""
      }): delete the pods on milo-ipam networks first; for pods already gone, run ` +
        "milo-ipam reconcile (it releases their leases), then uninstall again",
    );
  }
  const owed = await new Journal(node.stateDir).countOwed();
  if (owed) {
    throw new Refused(
      `the release journal owes ${owed} release(s): run milo-ipam reconcile until it owes none ` +
        "(Milo must be reachable), then uninstall again",
    );
  }
  const files = [
    join(o.dir, "milo-ipam"),
    supportDir(o.dir),
    node.milo.tokenFile,
    ...(node.milo.caFile ? [node.milo.caFile] : []),
    node.log.file,
    rotatedLog(node.log.file),
    node.stateDir,
    o.nodeConfig,
  ];
  const removed = [...stale, ...await removeAll(files)];
  for (
    const d of [dirname(node.log.file), dirname(node.agent.socket), dirname(node.milo.tokenFile)]
  ) {
    await Deno.remove(d).then(() => removed.push(d), () => {}); // only when left empty
  }
  return { removed };
}

/**
 * Whether a process listens on the unix socket at `path`: a connection is
 * taken (a live agent), or refused (a socket its crashed agent left).
 */
async function answers(path: string): Promise<boolean> {
  try {
    (await Deno.connect({ transport: "unix", path })).close();
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.ConnectionRefused || err instanceof Deno.errors.NotFound) {
      return false;
    }
    throw new Refused(`cannot tell whether an agent answers on ${path}: ${errorText(err)}`);
  }
}

async function removeAll(paths: string[]): Promise<string[]> {
  const removed: string[] = [];
  for (const p of paths) {
    try {
      await Deno.remove(p, { recursive: true });
      removed.push(p);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  return removed;
}

/** The command line: `install`, `sweep` or `uninstall`; answers the exit code. */
export async function nodeInstallCli(args: string[]): Promise<number> {
  const p = parseCommandLine("node-install", args, {
    usage: NODE_INSTALL_USAGE,
    positionals: true,
    options: {
      "config-map": { type: "string", default: "/config" },
      secret: { type: "string", default: "/secret" },
      dir: { type: "string" },
      "node-config": { type: "string", default: DEFAULT_NODE_CONFIG },
      bundle: { type: "string", default: join(IMAGE_DIR, "bundle") },
      deno: { type: "string" },
      mode: { type: "string" },
      work: { type: "string", default: "/work" },
      kubeconfig: { type: "string" },
      "service-account": { type: "string" },
    },
  });
  if ("exit" in p) return p.exit;
  const v = p.values as Record<string, string | undefined>;
  const verb = p.positionals[0];
  if (p.positionals.length !== 1 || !["install", "sweep", "uninstall"].includes(verb)) {
    return usageError("node-install", "name one of install, sweep, uninstall", NODE_INSTALL_USAGE)
      .exit;
  }
  if (v.mode !== undefined && !["auto", "compile", "launcher"].includes(v.mode)) {
    const why = `--mode ${v.mode}: auto, compile or launcher`;
    return usageError("node-install", why, NODE_INSTALL_USAGE).exit;
  }
  const mode = v.mode as InstallOptions["mode"];
  const say = (m: string) => console.error(`milo-ipam node-install: ${m}`);
  try {
    if (verb === "uninstall") {
      const r = await nodeUninstall({
        dir: v.dir ?? "/opt/cni/bin",
        nodeConfig: v["node-config"]!,
      });
      say(r.removed.length ? `removed ${r.removed.join(", ")}` : "nothing of milo-ipam was left");
      return 0;
    }
    const common = { bundleDir: v.bundle, denoPath: v.deno, mode, quiet: true };
    const r = verb === "sweep"
      ? await sweepInstall({
        configMap: v["config-map"]!,
        secret: v.secret!,
        work: v.work!,
        kubeconfig: v.kubeconfig,
        ...common,
      })
      : await nodeInstall({
        configMap: v["config-map"]!,
        secret: v.secret!,
        dir: v.dir ?? "/opt/cni/bin",
        nodeConfig: v["node-config"]!,
        nodeName: Deno.env.get("NODE_NAME") ?? "",
        ...(Deno.env.get("KUBERNETES_SERVICE_HOST")
          ? { clusterUid: () => inClusterUid(v["service-account"]) }
          : {}),
        ...common,
      });
    say(`milo-ipam ${RELEASE} installed: ${r.path} (${r.kind})`);
    return 0;
  } catch (err) {
    say(err instanceof Refused ? err.message : `failed: ${errorText(err)}`);
    return 1;
  }
}

/** The kube-system UID, asked with the pod's service account (in-cluster; its files in `dir`). */
async function inClusterUid(dir?: string): Promise<string> {
  const kube = KubeClient.open(await inClusterAccess((n) => Deno.env.get(n), dir));
  try {
    return await kube.clusterUid();
  } finally {
    kube.close();
  }
}

if (import.meta.main) Deno.exit(await nodeInstallCli(Deno.args));
