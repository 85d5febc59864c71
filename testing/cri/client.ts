/**
 * A small CRI v1 client (the gRPC API kubelet uses to drive a container
 * runtime) over a unix socket, with `@grpc/grpc-js` and `@grpc/proto-loader`
 * reading the trimmed `api.proto` beside this file. Only the calls the
 * containerd e2e needs: Version, Status, ImageStatus, and the pod sandbox
 * lifecycle (RunPodSandbox, PodSandboxStatus, ListPodSandbox, StopPodSandbox,
 * RemovePodSandbox). Field names are proto-loader's camelCase of the proto's;
 * int64 values arrive as strings, enums as their names.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { fileURLToPath } from "node:url";

/** The trimmed CRI v1 proto (see its header for the upstream source). */
export const CRI_PROTO = fileURLToPath(new URL("./api.proto", import.meta.url));

/** Deadline of one call unless the caller gives one: RunPodSandbox runs the CNI ADD. */
const DEFAULT_DEADLINE_MS = 60_000;

/** `runtime.v1.PodSandboxMetadata`. */
export interface PodSandboxMetadata {
  name: string;
  uid: string;
  namespace: string;
  attempt?: number;
}

/** `runtime.v1.NamespaceMode` by name. */
export type NamespaceMode = "POD" | "CONTAINER" | "NODE" | "TARGET";

/** `runtime.v1.PodSandboxConfig` (the fields this client sends). */
export interface PodSandboxConfig {
  metadata: PodSandboxMetadata;
  hostname?: string;
  logDirectory?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  linux?: {
    cgroupParent?: string;
    securityContext?: {
      namespaceOptions?: { network?: NamespaceMode; pid?: NamespaceMode; ipc?: NamespaceMode };
      readonlyRootfs?: boolean;
      privileged?: boolean;
    };
    sysctls?: Record<string, string>;
  };
}

/** `runtime.v1.PodSandboxState` by name. */
export type PodSandboxState = "SANDBOX_READY" | "SANDBOX_NOTREADY";

/** `runtime.v1.PodSandboxStatus` as decoded. */
export interface PodSandboxStatus {
  id: string;
  metadata: PodSandboxMetadata;
  state: PodSandboxState;
  createdAt: string;
  network: { ip: string; additionalIps: { ip: string }[] } | null;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
}

/** `runtime.v1.PodSandboxStatusResponse`; `info` only with `verbose` (containerd: key `info`, JSON). */
export interface PodSandboxStatusResponse {
  status: PodSandboxStatus;
  info: Record<string, string>;
}

/** `runtime.v1.PodSandbox` (a ListPodSandbox item). */
export interface PodSandbox {
  id: string;
  metadata: PodSandboxMetadata;
  state: PodSandboxState;
  createdAt: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
}

/** `runtime.v1.PodSandboxFilter`. */
export interface PodSandboxFilter {
  id?: string;
  state?: { state: PodSandboxState };
  labelSelector?: Record<string, string>;
}

/** `runtime.v1.VersionResponse`. */
export interface VersionResponse {
  version: string;
  runtimeName: string;
  runtimeVersion: string;
  runtimeApiVersion: string;
}

/** `runtime.v1.RuntimeCondition`. */
export interface RuntimeCondition {
  type: string;
  status: boolean;
  reason: string;
  message: string;
}

/** `runtime.v1.Image` (the fields of the trimmed proto). */
export interface CriImage {
  id: string;
  repoTags: string[];
  repoDigests: string[];
  size: string;
}

/** A gRPC error of one call, naming the method. */
export class CriError extends Error {
  constructor(readonly method: string, readonly code: number, readonly details: string) {
    super(`CRI ${method}: ${grpc.status[code] ?? code} ${details}`);
    this.name = "CriError";
  }
}

type Callback = (err: grpc.ServiceError | null, res: unknown) => void;
type Stub =
  & grpc.Client
  & Record<string, (req: unknown, opts: grpc.CallOptions, cb: Callback) => void>;
type StubCtor = new (address: string, creds: grpc.ChannelCredentials) => Stub;

let loaded: { runtime: StubCtor; image: StubCtor } | undefined;

/** Loads the proto once per process. */
function stubs(): { runtime: StubCtor; image: StubCtor } {
  if (loaded) return loaded;
  const def = protoLoader.loadSync(CRI_PROTO, {
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    runtime: { v1: { RuntimeService: StubCtor; ImageService: StubCtor } };
  };
  loaded = { runtime: pkg.runtime.v1.RuntimeService, image: pkg.runtime.v1.ImageService };
  return loaded;
}

/** A CRI client of one runtime socket (both services over one channel each). */
export class CriClient {
  readonly socket: string;
  readonly #runtime: Stub;
  readonly #image: Stub;

  constructor(socket: string) {
    this.socket = socket;
    const { runtime, image } = stubs();
    const creds = grpc.credentials.createInsecure();
    this.#runtime = new runtime(`unix://${socket}`, creds);
    this.#image = new image(`unix://${socket}`, creds);
  }

  #call<T>(stub: Stub, method: string, req: unknown, deadlineMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      stub[method](req, { deadline: Date.now() + deadlineMs }, (err, res) => {
        if (err) reject(new CriError(method, err.code, err.details || err.message));
        else resolve(res as T);
      });
    });
  }

  version(deadlineMs = 10_000): Promise<VersionResponse> {
    return this.#call(this.#runtime, "Version", { version: "v1" }, deadlineMs);
  }

  /** The runtime's conditions (RuntimeReady, NetworkReady). */
  async status(deadlineMs = 10_000): Promise<RuntimeCondition[]> {
    const r = await this.#call<{ status: { conditions: RuntimeCondition[] } | null }>(
      this.#runtime,
      "Status",
      { verbose: false },
      deadlineMs,
    );
    return r.status?.conditions ?? [];
  }

  /** The image as the CRI plugin knows it, or null when it does not. */
  async imageStatus(image: string, deadlineMs = 10_000): Promise<CriImage | null> {
    const r = await this.#call<{ image: CriImage | null }>(
      this.#image,
      "ImageStatus",
      { image: { image } },
      deadlineMs,
    );
    return r.image && r.image.id ? r.image : null;
  }

  /** Creates and starts a sandbox (the runtime runs the CNI ADD); answers its id. */
  async runPodSandbox(
    config: PodSandboxConfig,
    runtimeHandler = "",
    deadlineMs = DEFAULT_DEADLINE_MS,
  ): Promise<string> {
    const r = await this.#call<{ podSandboxId: string }>(
      this.#runtime,
      "RunPodSandbox",
      { config, runtimeHandler },
      deadlineMs,
    );
    return r.podSandboxId;
  }

  podSandboxStatus(
    id: string,
    verbose = false,
    deadlineMs = 10_000,
  ): Promise<PodSandboxStatusResponse> {
    return this.#call(this.#runtime, "PodSandboxStatus", { podSandboxId: id, verbose }, deadlineMs);
  }

  async listPodSandbox(filter?: PodSandboxFilter, deadlineMs = 10_000): Promise<PodSandbox[]> {
    const r = await this.#call<{ items: PodSandbox[] }>(
      this.#runtime,
      "ListPodSandbox",
      filter ? { filter } : {},
      deadlineMs,
    );
    return r.items;
  }

  /** Stops the sandbox (the runtime runs the CNI DEL); idempotent. */
  async stopPodSandbox(id: string, deadlineMs = DEFAULT_DEADLINE_MS): Promise<void> {
    await this.#call(this.#runtime, "StopPodSandbox", { podSandboxId: id }, deadlineMs);
  }

  /** Removes a stopped sandbox; idempotent. */
  async removePodSandbox(id: string, deadlineMs = DEFAULT_DEADLINE_MS): Promise<void> {
    await this.#call(this.#runtime, "RemovePodSandbox", { podSandboxId: id }, deadlineMs);
  }

  close(): void {
    this.#runtime.close();
    this.#image.close();
  }
}
