/**
 * The e2e's network primitives: commands with a clean environment and a hard
 * timeout, network namespaces, bridges, veths, addresses and reachability,
 * through iproute2's `ip`. Root only.
 */

/** What one command did. */
export interface Exec {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
  /** True when the command was ended by the timeout. */
  timedOut: boolean;
}

/** Options of {@link exec}. */
export interface ExecOptions {
  env?: Record<string, string>;
  stdin?: string;
  timeoutMs?: number;
  cwd?: string;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Where the CNI plugins of Debian's containernetworking-plugins live. */
export const CNI_BIN = "/usr/lib/cni";

/** Runs a command with a clean environment and a hard timeout (SIGKILL). */
export async function exec(cmd: string, args: string[], o: ExecOptions = {}): Promise<Exec> {
  const started = performance.now();
  const ac = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ac.abort();
  }, o.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  try {
    const child = new Deno.Command(cmd, {
      args,
      env: { PATH, ...o.env },
      clearEnv: true,
      cwd: o.cwd,
      stdin: o.stdin === undefined ? "null" : "piped",
      stdout: "piped",
      stderr: "piped",
      signal: ac.signal,
    }).spawn();
    if (o.stdin !== undefined) {
      const w = child.stdin.getWriter();
      await w.write(new TextEncoder().encode(o.stdin)).catch(() => {});
      await w.close().catch(() => {});
    }
    const out = await child.output();
    const dec = new TextDecoder();
    return {
      code: out.code,
      stdout: dec.decode(out.stdout),
      stderr: dec.decode(out.stderr),
      ms: performance.now() - started,
      timedOut,
    };
  } finally {
    clearTimeout(timer);
  }
}

/** Runs `ip ARGS...` and throws with its stderr when it fails. */
export async function ip(...args: string[]): Promise<string> {
  const r = await exec("ip", args);
  if (r.code !== 0) throw new Error(`ip ${args.join(" ")}: ${r.stderr.trim() || r.code}`);
  return r.stdout;
}

/** Runs a command inside network namespace `ns` (`ip netns exec`). */
export function execIn(
  ns: string,
  cmd: string,
  args: string[],
  o: ExecOptions = {},
): Promise<Exec> {
  return exec("ip", ["netns", "exec", ns, cmd, ...args], o);
}

function which(name: string): string | undefined {
  for (const dir of PATH.split(":")) {
    try {
      if (Deno.statSync(`${dir}/${name}`).isFile) return `${dir}/${name}`;
    } catch { /* not here */ }
  }
  return undefined;
}

/**
 * True when `ping` (iputils-ping) is installed; otherwise (or with E2E_NO_PING
 * set) a TCP probe between the two namespaces is used.
 */
export const HAVE_PING = which("ping") !== undefined && !Deno.env.get("E2E_NO_PING");

/**
 * Why the e2e suite cannot run here, or undefined when it can: it needs root,
 * iproute2, openssl and Debian's CNI plugins (bridge, ptp).
 */
export function e2eMissing(): string | undefined {
  const missing: string[] = [];
  if (Deno.build.os !== "linux") return "needs Linux network namespaces";
  if (Deno.uid() !== 0) missing.push("root (uid 0)");
  if (!which("ip")) missing.push("`ip` (Debian package iproute2)");
  if (!which("openssl")) missing.push("`openssl`");
  if (!which("timeout")) missing.push("`timeout` (coreutils)");
  for (const p of ["bridge", "ptp"]) {
    try {
      Deno.statSync(`${CNI_BIN}/${p}`);
    } catch {
      missing.push(`${CNI_BIN}/${p} (Debian package containernetworking-plugins)`);
    }
  }
  return missing.length ? `e2e needs ${missing.join(", ")}` : undefined;
}

/** Names of the network namespaces that exist now. */
export async function listNetns(): Promise<string[]> {
  const out = await exec("ip", ["-j", "netns", "list"]);
  if (out.code !== 0 || !out.stdout.trim()) return [];
  return (JSON.parse(out.stdout) as { name: string }[]).map((n) => n.name);
}

/** Creates a namespace with `lo` up. */
export async function addNetns(name: string): Promise<void> {
  await ip("netns", "add", name);
  await ip("-n", name, "link", "set", "lo", "up");
}

/** Deletes a namespace; a missing one is fine. */
export async function delNetns(name: string): Promise<void> {
  const r = await exec("ip", ["netns", "del", name]);
  if (r.code !== 0 && !/No such file|not exist/i.test(r.stderr)) {
    throw new Error(`ip netns del ${name}: ${r.stderr.trim()}`);
  }
}

/** Deletes every namespace whose name starts with `prefix`; returns how many. */
export async function delNetnsByPrefix(prefix: string): Promise<number> {
  const names = (await listNetns()).filter((n) => n.startsWith(prefix));
  for (let i = 0; i < names.length; i += 32) {
    await Promise.all(names.slice(i, i + 32).map((n) => delNetns(n).catch(() => {})));
  }
  return names.length;
}

/**
 * Deletes namespaces of earlier runs (`<base><pid>-...`) whose process is
 * gone, so an interrupted run does not leak namespaces into the next one.
 */
export async function delStaleNetns(base: string): Promise<number> {
  const stale = (await listNetns()).filter((n) => {
    const m = n.startsWith(base) ? /^(\d+)-/.exec(n.slice(base.length)) : null;
    if (!m || Number(m[1]) === Deno.pid) return false;
    try {
      Deno.statSync(`/proc/${m[1]}`);
      return false;
    } catch {
      return true;
    }
  });
  for (const n of stale) await delNetns(n).catch(() => {});
  return stale.length;
}

/** A Linux bridge with an address inside namespace `ns`. */
export async function addBridge(ns: string, name: string, cidr: string): Promise<void> {
  await ip("-n", ns, "link", "add", name, "type", "bridge");
  await ip("-n", ns, "addr", "add", cidr, "dev", name);
  await ip("-n", ns, "link", "set", name, "up");
}

/**
 * A veth pair created straight into two namespaces (the host namespace never
 * sees it): `hubIf` in `hub` enslaved to `hubBridge`, `leafIf` in `leaf` with
 * address `leafCidr`.
 */
export async function linkVeth(o: {
  hub: string;
  hubIf: string;
  hubBridge: string;
  leaf: string;
  leafIf: string;
  leafCidr: string;
}): Promise<void> {
  await ip(
    "link",
    "add",
    o.hubIf,
    "netns",
    o.hub,
    "type",
    "veth",
    "peer",
    "name",
    o.leafIf,
    "netns",
    o.leaf,
  );
  await ip("-n", o.hub, "link", "set", o.hubIf, "master", o.hubBridge, "up");
  await ip("-n", o.leaf, "addr", "add", o.leafCidr, "dev", o.leafIf);
  await ip("-n", o.leaf, "link", "set", o.leafIf, "up");
}

/** Global addresses (CIDR form) on `dev` inside `ns`, as the kernel reports them. */
export async function addrsOf(ns: string, dev: string): Promise<string[]> {
  const r = await exec("ip", ["-n", ns, "-j", "addr", "show", "dev", dev]);
  if (r.code !== 0) return [];
  const links = JSON.parse(r.stdout) as {
    addr_info?: { local: string; prefixlen: number; scope: string }[];
  }[];
  return links.flatMap((l) => l.addr_info ?? []).filter((a) => a.scope === "global")
    .map((a) => `${a.local}/${a.prefixlen}`);
}

/**
 * True when namespace `from` reaches `to` (an address): ping where installed,
 * else a TCP connection to a one-shot listener started inside `toNs`.
 * Bounded: a few attempts of one second (IPv6 addresses may still be in DAD).
 */
export async function reaches(
  from: string,
  toNs: string,
  to: string,
  attempts = 5,
): Promise<boolean> {
  const v6 = to.includes(":");
  if (HAVE_PING) {
    for (let i = 0; i < attempts; i++) {
      const r = await execIn(from, "ping", [v6 ? "-6" : "-4", "-c1", "-W1", to], {
        timeoutMs: 5_000,
      });
      if (r.code === 0) return true;
      await new Promise((res) => setTimeout(res, 500));
    }
    return false;
  }
  return await tcpProbe(from, toNs, to, attempts);
}

async function tcpProbe(
  from: string,
  toNs: string,
  to: string,
  attempts: number,
): Promise<boolean> {
  const deno = Deno.execPath();
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const server = new Deno.Command("ip", {
    args: [
      "netns",
      "exec",
      toNs,
      deno,
      "eval",
      `const l = Deno.listen({ hostname: "${to}", port: ${port} }); console.log("up");` +
      `const c = await l.accept(); c.close(); l.close();`,
    ],
    stdout: "piped",
    stderr: "null",
    env: { PATH, DENO_NO_UPDATE_CHECK: "1" },
    clearEnv: true,
  }).spawn();
  const reader = server.stdout.getReader();
  try {
    await Promise.race([reader.read(), new Promise((r) => setTimeout(r, 10_000))]);
    for (let i = 0; i < attempts; i++) {
      const host = to.includes(":") ? `[${to}]` : to;
      const r = await execIn(from, deno, [
        "eval",
        `const c = await Deno.connect({ hostname: "${to}", port: ${port} }); c.close(); // ${host}`,
      ], { env: { DENO_NO_UPDATE_CHECK: "1" }, timeoutMs: 10_000 });
      if (r.code === 0) return true;
      await new Promise((res) => setTimeout(res, 500));
    }
    return false;
  } finally {
    try {
      server.kill("SIGKILL");
    } catch { /* gone */ }
    reader.releaseLock();
    await server.stdout.cancel().catch(() => {});
    await server.status;
  }
}
