/**
 * What galactic's masters read before they act: their config
 * (internal/cnimaster/config.go `ParseConf`), the environment it resolves
 * (internal/config/cni.go), and the pod's NetworkAttachmentDefinition
 * (internal/nadpatch/nadpatch.go, internal/hostconf/hostconf.go), as the
 * master stand-in (./master.ts) reads them. Read from datum-cloud/galactic;
 * nothing is copied.
 */
import { BGP_PLUGIN, HOST_INTERFACE_ANNOTATION, isBase62, nadPath } from "./chain.ts";
import { CniError, GoError, goQuote, type Json, log, setupLogging } from "./skel.ts";

const env = (k: string) => Deno.env.get(k) ?? "";

/** A master's config as ParseConf leaves it. */
export interface PluginConf {
  raw: Json;
  cniVersion: string;
  name: string;
  type: string;
  vpc: string;
  vpcattachment: string;
  mtu: number;
  /** The delegate's type when the config has an `ipam` block (delegation is decided by that). */
  ipamType?: string;
}

/** Go's json decoding of cnimaster.PluginConf: a field of the wrong type is code 7. */
function decode(stdin: Uint8Array): Json {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(stdin));
  } catch (err) {
    throw new CniError(7, "invalid CNI config", (err as Error).message);
  }
  const r = (raw ?? {}) as Json;
  const present = (k: string) => r[k] !== undefined && r[k] !== null;
  const wrong = [
    ...["cniVersion", "name", "type", "vpc", "vpcattachment", "namespace"]
      .filter((k) => present(k) && typeof r[k] !== "string"),
    ...(present("mtu") && !Number.isInteger(r.mtu) ? ["mtu"] : []),
    ...(present("ipam") && (typeof r.ipam !== "object" || Array.isArray(r.ipam)) ? ["ipam"] : []),
  ];
  if (wrong.length) {
    throw new CniError(7, "invalid CNI config", `json: cannot unmarshal field ${wrong[0]}`);
  }
  const ipam = r.ipam as Json | null | undefined;
  if (ipam && ipam.type !== undefined && ipam.type !== null && typeof ipam.type !== "string") {
    throw new CniError(7, "invalid CNI config", "json: cannot unmarshal field ipam.type");
  }
  return r;
}

/** internal/cnimaster/config.go `ParseConf` (both flavours' parseConf wrap it). */
export function parseConf(stdin: Uint8Array): PluginConf {
  const raw = decode(stdin);
  for (const field of ["vpc", "vpcattachment"] as const) {
    const v = (raw[field] ?? "") as string;
    if (!v) throw new CniError(7, `${field} is required and must be a non-empty base62 string`);
    if (!isBase62(v)) {
      const shown = /^[\x20-\x7e]*$/.test(v) ? v : "<binary>"; // SanitizeForError
      throw new CniError(7, `invalid base62 value for field '${field}': ${goQuote(shown)}`);
    }
  }
  // The node name (env > conflist > legacy NODE_NAME > API), then exported for the rest of the
  // call with the kubeconfig, so the IPAM delegate inherits both (os.Setenv).
  const node = env("GALACTIC_CNI_NODE_NAME") || env("NODE_NAME");
  if (!node) throw new CniError(4, "node name is required (or set GALACTIC_CNI_NODE_NAME)");
  Deno.env.set("NODE_NAME", node);
  const kubeconfig = env("GALACTIC_CNI_KUBECONFIG") || env("GALACTIC_CNI_KUBERNETES_CONFIG") ||
    "/var/lib/galactic/kubeconfig";
  Deno.env.set("KUBECONFIG", kubeconfig);
  setupLogging(env("GALACTIC_CNI_LOG_FILE") || undefined, env("GALACTIC_CNI_LOG_LEVEL"));
  log("DEBUG", "CNI config received", { stdin: new TextDecoder().decode(stdin) });
  // hostconf.RejectMovedIPAMKeys: the old flat addressing keys at the top level are refused.
  const moved = ["ipv6_subnet", "ipv4_subnet", "address_families", "static_ip"]
    .filter((k) => raw[k] !== undefined && raw[k] !== null).map((k) => `'${k}'`);
  if (moved.length) {
    const [f, b] = moved.length > 1 ? ["fields", "belong"] : ["field", "belongs"];
    throw new CniError(
      7,
      `addressing ${f} ${
        moved.join(", ")
      } ${b} inside the 'ipam' block, not at the top level of the config`,
    );
  }
  // (ParseConf's and ADD's prevResult checks read PluginConf.PrevResult, `json:"-"` in
  // types.PluginConf, which decoding never fills: nothing to mirror.)
  const ipam = raw.ipam as Json | null | undefined;
  return {
    raw,
    cniVersion: String(raw.cniVersion ?? ""),
    name: String(raw.name ?? ""),
    type: String(raw.type ?? ""),
    vpc: raw.vpc as string,
    vpcattachment: raw.vpcattachment as string,
    mtu: typeof raw.mtu === "number" ? raw.mtu : 0,
    ipamType: ipam ? String(ipam.type ?? "") : undefined,
  };
}

/** nadpatch.ParsePodNamespace: `K8S_POD_NAMESPACE` from CNI_ARGS. */
export function podNamespace(cniArgs: string): string {
  for (const part of cniArgs.split(";")) {
    const i = part.indexOf("=");
    if (i >= 0 && part.slice(0, i) === "K8S_POD_NAMESPACE") return part.slice(i + 1);
  }
  return "";
}

/** cnimaster.NewK8sClient (ctrl.GetConfig): the stand-in's API is the NAD directory knob. */
export function k8sClient(): string {
  const dir = env("GALACTIC_MASTER_TEST_NADS");
  if (!dir) {
    throw new GoError(
      "create k8s client: get kubeconfig: invalid configuration: no configuration has been " +
        "provided, try setting KUBERNETES_MASTER environment variable",
    );
  }
  return dir;
}

/**
 * nadpatch.VerifyChainComplete + hostconf.VerifyChainIncludes: the NAD named by the conflist's
 * `name` in the pod's namespace must chain galactic-bgp anywhere in its plugins (presence only);
 * no namespace (no CNI_ARGS) is nothing to check. Any failure is code 7, before anything exists.
 */
export function verifyChain(dir: string, name: string, ns: string): void {
  if (!ns) return;
  const fail = (why: string) => new CniError(7, `chain completeness check: ${why}`);
  let nad: Json;
  try {
    nad = JSON.parse(Deno.readTextFileSync(nadPath(dir, ns, name)));
  } catch {
    throw fail(
      `get NetworkAttachmentDefinition ${ns}/${name}: ` +
        `networkattachmentdefinitions.k8s.cni.cncf.io "${name}" not found`,
    );
  }
  const config = (nad.spec as Json | undefined)?.config;
  if (typeof config !== "string" || !config) {
    throw fail(`NetworkAttachmentDefinition ${ns}/${name} has no spec.config`);
  }
  let list: Json;
  try {
    list = JSON.parse(config) ?? {};
    if (list.plugins !== undefined && list.plugins !== null && !Array.isArray(list.plugins)) {
      throw new Error("json: cannot unmarshal plugins");
    }
  } catch (err) {
    throw fail(`parse attachment conflist: ${(err as Error).message}`);
  }
  if (((list.plugins ?? []) as Json[]).some((p) => p?.type === BGP_PLUGIN)) return;
  throw fail(
    `attachment conflist is missing required plugin "${BGP_PLUGIN}" — the attachment would ` +
      "succeed with no path to its VPC",
  );
}

/** nadpatch.AnnotateNAD: a JSON patch replacing the NAD's annotations with the host interface. */
export function annotateNad(dir: string, name: string, ns: string, host: string): void {
  if (!ns) return;
  const path = nadPath(dir, ns, name);
  const nad = JSON.parse(Deno.readTextFileSync(path)) as Json;
  nad.metadata = { ...(nad.metadata as Json), annotations: { [HOST_INTERFACE_ANNOTATION]: host } };
  Deno.writeTextFileSync(`${path}.tmp`, JSON.stringify(nad));
  Deno.renameSync(`${path}.tmp`, path);
}
