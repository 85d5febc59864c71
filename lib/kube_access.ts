/**
 * Where the sweep's Kubernetes credentials come from: the pod's service
 * account (in-cluster), or a kubeconfig's current context (server, CA as file
 * or data, bearer token or client certificate as file or data).
 */
import * as z from "zod/mini";
import { load as parseYaml } from "js-yaml";
import { CniError, errorText } from "./errors.ts";
import { readConfigFile, tokenOf } from "./http.ts";
import type { KubeAccess } from "./kube.ts";
import { dirOf } from "./paths.ts";

/** Where a pod's service account token and the cluster CA are mounted. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

const str = z.string();
const opt = z.optional(z.string());

function checkToken(token: string, where: string): string {
  const t = tokenOf(token);
  if (t === undefined) {
    throw new CniError("config", `${where} does not hold exactly one token`, "one line, no spaces");
  }
  return t;
}

/** In-cluster access: `KUBERNETES_SERVICE_HOST`/`PORT` and the service account's token and CA. */
export async function inClusterAccess(
  env: (name: string) => string | undefined,
  dir = SERVICE_ACCOUNT_DIR,
): Promise<KubeAccess> {
  const host = env("KUBERNETES_SERVICE_HOST"), port = env("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw new CniError(
      "config",
      "not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST/PORT unset)",
      "pass --kubeconfig FILE",
    );
  }
  const [token, ca] = await Promise.all([
    readConfigFile("the service account token", `${dir}/token`),
    readConfigFile("the service account CA", `${dir}/ca.crt`),
  ]);
  const h = host.includes(":") ? `[${host}]` : host;
  return {
    server: `https://${h}:${port}`,
    token: checkToken(token, `${dir}/token`),
    ca,
    source: "in-cluster",
  };
}

const KubeconfigSchema = z.object({
  "current-context": opt,
  clusters: z._default(z.array(z.object({ name: str, cluster: z.record(str, z.unknown()) })), []),
  users: z._default(z.array(z.object({ name: str, user: z.record(str, z.unknown()) })), []),
  contexts: z._default(
    z.array(z.object({ name: str, context: z.object({ cluster: str, user: opt }) })),
    [],
  ),
});

/** One kubeconfig credential: a file (absolute), or the value inline. */
export interface FileOrData {
  file?: string;
  data?: string;
}

/** What a kubeconfig's current context names: the server, and each credential as file or data. */
export interface KubeconfigRefs {
  server: string;
  ca: FileOrData;
  cert: FileOrData;
  key: FileOrData;
  token: FileOrData;
}

/** Resolves the current context of a kubeconfig's text (`dir`: base of relative paths). */
export function parseKubeconfig(text: string, dir: string): KubeconfigRefs {
  const fail = (msg: string) => new CniError("config", `kubeconfig: ${msg}`);
  let doc: z.infer<typeof KubeconfigSchema>;
  try {
    doc = KubeconfigSchema.parse(parseYaml(text));
  } catch (err) {
    throw fail(`not a valid kubeconfig (${errorText(err)})`);
  }
  const ctx = doc.contexts.find((c) => c.name === doc["current-context"]);
  if (!ctx) throw fail(`current-context ${JSON.stringify(doc["current-context"] ?? "")} not found`);
  const cluster = doc.clusters.find((c) => c.name === ctx.context.cluster)?.cluster;
  if (!cluster) throw fail(`cluster ${ctx.context.cluster} of the current context not found`);
  const user = doc.users.find((u) => u.name === ctx.context.user)?.user ?? {};
  if (cluster["insecure-skip-tls-verify"] === true) {
    throw fail("insecure-skip-tls-verify is refused");
  }
  for (const k of ["exec", "auth-provider", "username"]) {
    if (user[k] !== undefined) throw fail(`user.${k} is not supported (use a token or a cert)`);
  }
  const s = (v: unknown) => typeof v === "string" && v !== "" ? v : undefined;
  const file = (v: unknown) => {
    const f = s(v);
    return f === undefined || f.startsWith("/") ? f : `${dir}/${f}`;
  };
  const pick = (o: Record<string, unknown>, f: string, d: string): FileOrData => ({
    file: file(o[f]),
    data: s(o[d]),
  });
  const server = s(cluster.server);
  if (!server) throw fail("the cluster has no server");
  return {
    server,
    ca: pick(cluster, "certificate-authority", "certificate-authority-data"),
    cert: pick(user, "client-certificate", "client-certificate-data"),
    key: pick(user, "client-key", "client-key-data"),
    token: { file: file(user.tokenFile), data: s(user.token) },
  };
}

/** Access from a kubeconfig file's current context (certificate data is base64, as kubectl's). */
export async function kubeconfigAccess(path: string): Promise<KubeAccess> {
  const refs = parseKubeconfig(await readConfigFile("kubeconfig", path), dirOf(path));
  const load = async (what: string, r: FileOrData, base64: boolean) => {
    if (r.data !== undefined) return base64 ? decodeBase64(r.data, what) : r.data;
    return r.file ? await readConfigFile(`kubeconfig ${what}`, r.file) : undefined;
  };
  const [ca, cert, key, token] = await Promise.all([
    load("certificate-authority", refs.ca, true),
    load("client-certificate", refs.cert, true),
    load("client-key", refs.key, true),
    load("token", refs.token, false),
  ]);
  if (!cert !== !key) throw new CniError("config", "kubeconfig: client certificate without key");
  const t = token === undefined ? undefined : checkToken(token, `kubeconfig ${path} token`);
  return { server: refs.server, ca, cert, key, token: t, source: path };
}

/** What `install --kubeconfig` grants: the server's `host:port` and every file the config names. */
export async function kubeconfigGrants(path: string): Promise<{ net: string; read: string[] }> {
  const refs = parseKubeconfig(await readConfigFile("kubeconfig", path), dirOf(path));
  const u = new URL(refs.server);
  const files = [refs.ca, refs.cert, refs.key, refs.token].flatMap((r) => r.file ? [r.file] : []);
  return { net: `${u.hostname}:${u.port || (u.protocol === "https:" ? 443 : 80)}`, read: files };
}

function decodeBase64(data: string, what: string): string {
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(data.trim()), (c) => c.charCodeAt(0)));
  } catch {
    throw new CniError("config", `kubeconfig: ${what}-data is not base64`);
  }
}
