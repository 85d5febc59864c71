/**
 * Test support: renders a kustomization the way `kubectl kustomize` does, for
 * the parts of kustomize that deploy/ uses: `resources` (files and
 * kustomization directories), `images` (newName, newTag, digest) and
 * `configMapGenerator` (files and literals; behavior create, replace or merge;
 * the content-hash name suffix and the references to it in pod templates).
 * Any other field of a kustomization is refused, so the kit cannot use one
 * this renderer would silently get wrong. kustomize's rules:
 * sigs.k8s.io/kustomize api/hasher (the suffix), api/filters/imagetag (images),
 * api/internal/generators (the generators' merge behaviors).
 */
import { loadAll } from "js-yaml";
import { createHash } from "node:crypto";
import { basename, join, resolve } from "node:path";

/** An object of a YAML document, as read. */
type Obj = Record<string, unknown>;

/** One rendered object: its kind and name, and the rest as the YAML says. */
export interface Resource {
  apiVersion?: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  [key: string]: unknown;
}

/** An entry of `images`. */
interface Image {
  name: string;
  newName?: string;
  newTag?: string;
  digest?: string;
}

/** An entry of `configMapGenerator`. */
interface Generator {
  name: string;
  namespace?: string;
  behavior?: string;
  files?: string[];
  literals?: string[];
}

/** A kustomization (or a Component) as deploy/ writes them. */
interface Kustomization {
  kind?: string;
  resources?: string[];
  components?: string[];
  images?: Image[];
  configMapGenerator?: Generator[];
}

/** A container of a pod template. */
interface Container {
  name?: string;
  image?: string;
  env?: { valueFrom?: { configMapKeyRef?: { name?: string } } }[];
  envFrom?: { configMapRef?: { name?: string } }[];
  [key: string]: unknown;
}

/** A pod template's spec, the fields read here. */
interface PodSpec {
  initContainers?: Container[];
  containers?: Container[];
  volumes?: {
    configMap?: { name?: string };
    projected?: { sources?: { configMap?: { name?: string } }[] };
  }[];
}

/** The value at `path` under `v`, when every step is an object. */
function at(v: unknown, ...path: string[]): unknown {
  let x = v;
  for (const k of path) x = x && typeof x === "object" ? (x as Obj)[k] : undefined;
  return x;
}

const KNOWN = new Set([
  "apiVersion",
  "kind",
  "resources",
  "components",
  "images",
  "configMapGenerator",
]);
/** What a Component (`kind: Component`) may hold here: images, as a kustomization's. */
const COMPONENT_KNOWN = new Set(["apiVersion", "kind", "images"]);
const GENERATOR_KEYS = new Set(["name", "namespace", "behavior", "files", "literals"]);

/** A generated ConfigMap, before its name gets the hash suffix. */
interface Generated {
  cm: Resource;
}

/** Renders the kustomization in `dir`: its resources, in the order read. */
export function kustomize(dir: string): Resource[] {
  const { resources, generated } = build(resolve(dir));
  // Names get their suffix once every layer has merged its content.
  const renamed = new Map<string, string>();
  for (const g of generated) {
    const name = g.cm.metadata.name;
    const suffixed = `${name}-${configMapHash(g.cm)}`;
    renamed.set(`${g.cm.metadata.namespace ?? ""}/${name}`, suffixed);
    g.cm.metadata.name = suffixed;
  }
  for (const r of resources) renameConfigMapRefs(r, renamed);
  return resources;
}

function build(dir: string): { resources: Resource[]; generated: Generated[] } {
  const k = loadAll(Deno.readTextFileSync(join(dir, "kustomization.yaml")))[0] as Kustomization;
  for (const key of Object.keys(k)) {
    if (!KNOWN.has(key)) throw new Error(`${dir}: kustomization field ${key} is not rendered here`);
  }
  const resources: Resource[] = [];
  const generated: Generated[] = [];
  for (const r of k.resources ?? []) {
    const path = resolve(dir, r);
    if (Deno.statSync(path).isDirectory) {
      const sub = build(path);
      resources.push(...sub.resources);
      generated.push(...sub.generated);
    } else {
      for (const doc of loadAll(Deno.readTextFileSync(path))) {
        if (doc) resources.push(doc as Resource);
      }
    }
  }
  for (const g of k.configMapGenerator ?? []) {
    for (const key of Object.keys(g)) {
      if (!GENERATOR_KEYS.has(key)) throw new Error(`${dir}: configMapGenerator field ${key}`);
    }
    const data: Record<string, string> = {};
    for (const f of g.files ?? []) data[basename(f)] = Deno.readTextFileSync(resolve(dir, f));
    for (const l of g.literals ?? []) {
      const at = l.indexOf("=");
      data[l.slice(0, at)] = l.slice(at + 1);
    }
    const behavior = g.behavior ?? "create";
    const same = generated.find((x) =>
      x.cm.metadata.name === g.name && (x.cm.metadata.namespace ?? "") === (g.namespace ?? "")
    );
    if (behavior === "create") {
      if (same) throw new Error(`${dir}: ConfigMap ${g.name} is generated twice`);
      const cm: Resource = {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: g.name, ...(g.namespace ? { namespace: g.namespace } : {}) },
        data,
      };
      generated.push({ cm });
      resources.push(cm);
    } else if (behavior === "replace" || behavior === "merge") {
      if (!same) throw new Error(`${dir}: no ConfigMap ${g.name} to ${behavior}`);
      same.cm.data = behavior === "replace" ? data : { ...(same.cm.data as Obj), ...data };
    } else {
      throw new Error(`${dir}: configMapGenerator behavior ${behavior}`);
    }
  }
  // A component's images apply to what the kustomization that names it has gathered.
  const images = [...(k.images ?? [])];
  for (const c of k.components ?? []) images.push(...component(resolve(dir, c)).images);
  for (const image of images) {
    for (const r of resources) for (const c of containersOf(r)) setImage(c, image);
  }
  return { resources, generated };
}

/** A Component's fields, refusing any this renderer does not render. */
function component(dir: string): { images: Image[] } {
  const k = loadAll(Deno.readTextFileSync(join(dir, "kustomization.yaml")))[0] as Kustomization;
  if (k.kind !== "Component") throw new Error(`${dir}: a component is kind Component`);
  for (const key of Object.keys(k)) {
    if (!COMPONENT_KNOWN.has(key)) {
      throw new Error(`${dir}: component field ${key} is not rendered here`);
    }
  }
  return { images: k.images ?? [] };
}

/** A resource's pod template spec, if it has one. */
function podSpecOf(r: Resource): PodSpec | undefined {
  const spec = r.kind === "CronJob"
    ? at(r, "spec", "jobTemplate", "spec", "template", "spec")
    : r.kind === "Pod"
    ? at(r, "spec")
    : at(r, "spec", "template", "spec");
  return spec && typeof spec === "object" ? spec as PodSpec : undefined;
}

/** Every container (init containers too) of a resource's pod template. */
export function containersOf(r: Resource): Container[] {
  const spec = podSpecOf(r);
  return spec ? [...(spec.initContainers ?? []), ...(spec.containers ?? [])] : [];
}

/** The images transformer: a container whose image's name matches gets the new name, tag, digest. */
function setImage(c: Container, image: Image): void {
  const m = /^([^@]+?)(?::([\w][\w.-]*))?(?:@(.+))?$/.exec(c.image ?? "");
  if (!m || m[1] !== image.name) return;
  const tag = image.newTag ?? m[2];
  const digest = image.digest ?? (image.newTag ? undefined : m[3]);
  c.image = `${image.newName ?? m[1]}${tag ? `:${tag}` : ""}${digest ? `@${digest}` : ""}`;
}

/** Go's json.Marshal of a string: HTML characters and U+2028/9 escaped. */
function goJson(value: unknown): string {
  return JSON.stringify(value).replace(
    /[<>&\u2028\u2029]/g,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** kustomize's name suffix of a ConfigMap: sha256 of its kind and data, encoded. */
export function configMapHash(cm: Resource): string {
  const data = Object.fromEntries(Object.entries(cm.data ?? {}).sort(([a], [b]) => a < b ? -1 : 1));
  // kustomize v5 hashes the generated object with an empty name (its name comes after).
  const text = `{"data":${goJson(data)},"kind":"ConfigMap","name":""}`;
  const hex = sha256Hex(text);
  const swap: Record<string, string> = { "0": "g", "1": "h", "3": "k", a: "m", e: "t" };
  return [...hex.slice(0, 10)].map((ch) => swap[ch] ?? ch).join("");
}

function sha256Hex(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** Points a pod template's references to generated ConfigMaps at their suffixed names. */
function renameConfigMapRefs(r: Resource, renamed: Map<string, string>): void {
  const ns = r.metadata?.namespace ?? "";
  const to = (name: string) => renamed.get(`${ns}/${name}`) ?? name;
  const spec = podSpecOf(r);
  if (!spec || r.kind === "Pod") return;
  for (const v of spec.volumes ?? []) {
    if (v.configMap?.name) v.configMap.name = to(v.configMap.name);
    for (const s of v.projected?.sources ?? []) {
      if (s.configMap?.name) s.configMap.name = to(s.configMap.name);
    }
  }
  for (const c of containersOf(r)) {
    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.configMapKeyRef;
      if (ref?.name) ref.name = to(ref.name);
    }
    for (const e of c.envFrom ?? []) {
      if (e.configMapRef?.name) e.configMapRef.name = to(e.configMapRef.name);
    }
  }
}
