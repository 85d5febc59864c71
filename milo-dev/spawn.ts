/**
 * Runs milo-dev (the development Milo IPAM server) as a child process on
 * loopback with a temporary database, and drives its admin port. For tests,
 * the demo and benchmarks; `tests/support/milo_dev.ts` re-exports it.
 */

import seedExample from "./seed.example.json" with { type: "json" };
import { makeTestCA } from "./testca.ts";

/** The default seed: tenant-a (dev-token-a) and tenant-b (dev-token-b). */
export const DEV_SEED: object = seedExample;

const MAIN = new URL("./main.ts", import.meta.url).pathname;
const ROOT = new URL("../", import.meta.url).pathname;
const READY_TIMEOUT_MS = 30_000;
const EXIT_TIMEOUT_MS = 10_000;

/** A running milo-dev child process. */
export interface MiloDev {
  url: string;
  adminUrl: string;
  dbPath: string;
  seedPath: string;
  /** CA bundle to trust when started with `tls: true`. */
  caFile?: string;
  /** Bearer token used by the helper's own API calls. */
  token: string;
  setFaults(f: Record<string, unknown>): Promise<void>;
  clearFaults(): Promise<void>;
  stats(): Promise<
    & { total: number; byKind: Record<string, number>; byMethod: Record<string, number> }
    & Record<string, unknown>
  >;
  resetStats(): Promise<void>;
  /** Sends a signal (default SIGKILL) and waits for the process to exit. */
  kill(signal?: Deno.Signal): Promise<void>;
  /** Starts the server again on the same ports and database. */
  restart(): Promise<void>;
  /** SIGTERM, wait (SIGKILL after 10 s), remove the temporary directory. */
  stop(): Promise<void>;
  /** fetch() that trusts the test CA when started with `tls: true`. */
  fetch(input: string, init?: RequestInit): Promise<Response>;
  /** Lists IPClaims through the API with the seed token of `project`. */
  // deno-lint-ignore no-explicit-any
  listClaims(project?: string, labelSelector?: string): Promise<any[]>;
}

interface SeedShape {
  projects: { name: string; tokens: string[] }[];
}

function tokenFor(seed: SeedShape, project: string): string {
  const p = seed.projects.find((x) => x.name === project);
  if (!p || !p.tokens.length) throw new Error(`seed has no token for project ${project}`);
  return p.tokens[0];
}

async function readReady(
  child: Deno.ChildProcess,
  stderr: () => string,
): Promise<{ url: string; admin: string }> {
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`milo-dev not ready within ${READY_TIMEOUT_MS} ms\n${stderr()}`)),
      READY_TIMEOUT_MS,
    );
  });
  try {
    const read = (async () => {
      for (let i = 0; i < 10_000; i++) {
        const nl = buf.indexOf("\n");
        if (nl >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          const msg = JSON.parse(line);
          if (msg.ready) return { url: msg.url as string, admin: msg.admin as string };
          continue;
        }
        const { value, done } = await reader.read();
        if (done) throw new Error(`milo-dev exited before it was ready\n${stderr()}`);
        buf += value;
      }
      throw new Error("milo-dev printed too much before the ready line");
    })();
    return await Promise.race([read, timeout]);
  } finally {
    clearTimeout(timer);
    // Keep draining stdout so the child never blocks on a full pipe.
    (async () => {
      try {
        while (!(await reader.read()).done) { /* drain */ }
      } catch { /* closed */ }
    })();
  }
}

/** Starts milo-dev as a child process on 127.0.0.1 with a fresh temp dir. */
export async function startMiloDev(
  opts: { seed?: object; tls?: boolean; token?: string; listen?: string } = {},
): Promise<MiloDev> {
  const seed = (opts.seed ?? DEV_SEED) as SeedShape;
  const dir = await Deno.makeTempDir({ prefix: "milo-dev-" });
  const seedPath = `${dir}/seed.json`;
  const dbPath = `${dir}/milo.db`;
  await Deno.writeTextFile(seedPath, JSON.stringify(seed, null, 2));
  const token = opts.token ?? seed.projects[0]?.tokens[0] ?? "";
  let caFile: string | undefined;
  let tlsArgs: string[] = [];
  if (opts.tls) {
    const ca = await makeTestCA(`${dir}/tls`);
    caFile = ca.caFile;
    tlsArgs = ["--cert", ca.certFile, "--key", ca.keyFile];
  }
  const client = caFile
    ? Deno.createHttpClient({ caCerts: [await Deno.readTextFile(caFile)] })
    : undefined;

  let listen = opts.listen ?? "127.0.0.1:0";
  let admin = "127.0.0.1:0";
  let child: Deno.ChildProcess | undefined;
  let status: Promise<Deno.CommandStatus> | undefined;
  let errText = "";

  async function spawn(): Promise<{ url: string; admin: string }> {
    errText = "";
    const cmd = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-all",
        MAIN,
        "--seed",
        seedPath,
        "--db",
        dbPath,
        "--listen",
        listen,
        "--admin",
        admin,
        ...tlsArgs,
      ],
      cwd: ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      env: { NO_COLOR: "1" },
    });
    const c = cmd.spawn();
    child = c;
    status = c.status;
    (async () => {
      const r = c.stderr.pipeThrough(new TextDecoderStream()).getReader();
      try {
        for (;;) {
          const { value, done } = await r.read();
          if (done) break;
          errText = (errText + value).slice(-20_000);
          if (Deno.env.get("MILO_DEV_VERBOSE")) {
            Deno.stderr.writeSync(new TextEncoder().encode(value));
          }
        }
      } catch { /* closed */ }
    })();
    try {
      return await readReady(c, () => errText);
    } catch (err) {
      try {
        c.kill("SIGKILL");
      } catch { /* gone */ }
      await c.status;
      throw err;
    }
  }

  async function waitExit(): Promise<void> {
    if (!status) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const exited = await Promise.race([
      status.then(() => true),
      new Promise<boolean>((r) => timer = setTimeout(() => r(false), EXIT_TIMEOUT_MS)),
    ]);
    clearTimeout(timer);
    if (!exited) {
      try {
        child?.kill("SIGKILL");
      } catch { /* gone */ }
      await status;
    }
    child = undefined;
    status = undefined;
  }

  let first: { url: string; admin: string };
  try {
    first = await spawn();
  } catch (err) {
    client?.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
  listen = `127.0.0.1:${new URL(first.url).port}`;
  admin = `127.0.0.1:${new URL(first.admin).port}`;

  async function adminCall(method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await fetch(`${first.admin}${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`milo-dev admin ${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  }

  const dev: MiloDev = {
    url: first.url,
    adminUrl: first.admin,
    dbPath,
    seedPath,
    caFile,
    token,
    async setFaults(f) {
      await adminCall("PUT", "/faults", f);
    },
    async clearFaults() {
      await adminCall("DELETE", "/faults");
    },
    // deno-lint-ignore no-explicit-any
    stats: () => adminCall("GET", "/stats") as Promise<any>,
    async resetStats() {
      await adminCall("POST", "/stats/reset");
    },
    async kill(signal: Deno.Signal = "SIGKILL") {
      if (!child) return;
      try {
        child.kill(signal);
      } catch { /* already gone */ }
      await waitExit();
    },
    async restart() {
      if (child) await dev.kill("SIGKILL");
      let last: unknown;
      for (let i = 0; i < 20; i++) {
        try {
          await spawn();
          return;
        } catch (err) {
          last = err;
          if (!/in use|AddrInUse/i.test(String(err))) throw err;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      throw last;
    },
    async stop() {
      try {
        if (child) {
          try {
            child.kill("SIGTERM");
          } catch { /* gone */ }
          await waitExit();
        }
      } finally {
        client?.close();
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    },
    fetch(input: string, init: RequestInit = {}) {
      return fetch(input, { ...init, client });
    },
    async listClaims(project?: string, labelSelector?: string) {
      const tok = project ? tokenFor(seed, project) : token;
      const base = project
        ? `${first.url}/apis/resourcemanager.miloapis.com/v1alpha1/projects/${project}/control-plane`
        : first.url;
      const q = labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : "";
      const res = await fetch(`${base}/apis/ipam.miloapis.com/v1alpha1/ipclaims${q}`, {
        headers: { authorization: `Bearer ${tok}` },
        client,
      });
      const body = await res.json();
      if (!res.ok) throw new Error(`listClaims: ${res.status} ${JSON.stringify(body)}`);
      return body.items;
    },
  };
  return dev;
}
