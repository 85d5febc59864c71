/** Runs a CNI plugin the way a container runtime does: clean env, config on stdin, JSON on stdout. */

/** What one plugin process did. */
export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (undefined when stdout is empty). */
  json: Record<string, unknown> | undefined;
  /** Wall time from spawn to exit. */
  ms: number;
}

/** How to run one plugin process. */
export interface ExecOptions {
  /** The complete environment (nothing is inherited). */
  env: Record<string, string>;
  args?: string[];
  /** stdin: bytes and text as given, anything else JSON-encoded. */
  stdin?: unknown;
  timeoutMs?: number;
  /** When it settles, the process is SIGKILLed (as a runtime kills a plugin mid-call). */
  killOn?: Promise<unknown>;
  /** Called with the process once it runs (a test may signal it). */
  onSpawn?: (child: Deno.ChildProcess) => void;
}

/** Execs `path` with `env` only, writes stdin, and collects its output. */
export async function execCni(path: string, o: ExecOptions): Promise<ExecResult> {
  const started = performance.now();
  const child = new Deno.Command(path, {
    args: o.args ?? [],
    env: o.env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(o.timeoutMs ?? 30_000),
  }).spawn();
  o.onSpawn?.(child);
  o.killOn?.finally(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // Exited already.
    }
  }).catch(() => {});
  const input = o.stdin instanceof Uint8Array ? o.stdin : new TextEncoder().encode(
    o.stdin === undefined ? "" : typeof o.stdin === "string" ? o.stdin : JSON.stringify(o.stdin),
  );
  const writer = child.stdin.getWriter();
  await writer.write(input).catch(() => {});
  await writer.close().catch(() => {});
  const out = await child.output();
  const stdout = new TextDecoder().decode(out.stdout);
  let json: Record<string, unknown> | undefined;
  try {
    if (stdout.trim()) json = JSON.parse(stdout);
  } catch {
    json = undefined;
  }
  return {
    code: out.code,
    stdout,
    stderr: new TextDecoder().decode(out.stderr),
    json,
    ms: performance.now() - started,
  };
}
