/**
 * The skeleton of the galactic master stand-in (testing/galactic/master.ts):
 * what libcni's `pkg/skel` and `pkg/invoke` do for galactic's masters, the
 * verb dispatch with their registration, errors as skel prints them, slog-like
 * logging, and the IPAM delegation itself. Read from the sources named on
 * each piece; nothing is copied.
 */

/** `version.All` of libcni: the versions skel accepts for galactic's `skel.PluginMainFuncs`. */
export const SUPPORTED_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
export type Json = Record<string, unknown>;

/** A CNI error the master prints itself (libcni `types.Error`: code, msg, details). */
export class CniError extends Error {
  constructor(readonly code: number, msg: string, readonly details = "") {
    super(msg);
  }
}

/**
 * The delegate's own error, as libcni's invoke parses it from the delegate's stdout. galactic
 * wraps it with `%w`, and skel's `errors.As` finds it inside the wrapping, so the master prints
 * the delegate's error object unchanged (its code, msg and details), not its own words.
 */
export class DelegateError extends Error {
  constructor(readonly error: Json) {
    super(String(error.msg ?? "delegate failed"));
  }
}

// ---------------------------------------------------------------------------------------------
// Logging: galactic uses slog (JSON to the log file once cnimaster.SetupLogging ran, stderr
// before). The stand-in logs to GALACTIC_CNI_LOG_FILE, or stderr.

let logFile: string | undefined;

/** Sends the log to `path` (cnimaster.SetupLogging), or stderr when undefined. */
export function logTo(path: string | undefined): void {
  logFile = path;
}

export function log(
  level: "DEBUG" | "INFO" | "WARN" | "ERROR",
  msg: string,
  attrs: Json = {},
): void {
  const line = JSON.stringify({ time: new Date().toISOString(), level, msg, ...attrs }) + "\n";
  const bytes = new TextEncoder().encode(line);
  if (logFile) Deno.writeFileSync(logFile, bytes, { append: true });
  else Deno.stderr.writeSync(bytes);
}

// ---------------------------------------------------------------------------------------------
// Delegation: libcni `invoke.DelegateAdd/DelegateCheck/DelegateDel`, reached through
// containernetworking/plugins `ipam.ExecAdd/ExecCheck/ExecDel(pluginConf.IPAM.Type, args.StdinData)`.

/** `invoke.FindInPath`: the first `CNI_PATH` directory holding the plugin. */
function findInPath(plugin: string): string {
  const dirs = (Deno.env.get("CNI_PATH") ?? "").split(":").filter(Boolean);
  for (const dir of dirs) {
    try {
      if (Deno.statSync(`${dir}/${plugin}`).isFile) return `${dir}/${plugin}`;
    } catch {
      // Not in this directory.
    }
  }
  throw new Error(`failed to find plugin "${plugin}" in path [${dirs.join(" ")}]`);
}

/**
 * Execs the delegate: galactic passes its own stdin through unmodified (internal/cni
 * `configureIPAM`, internal/cnitap `cmdAdd`: `ipam.ExecAdd(pluginConf.IPAM.Type,
 * args.StdinData)`), and invoke runs it with this process's whole environment with CNI_COMMAND
 * overridden (`invoke.DelegateArgs.AsEnv`). The delegate's stderr goes to ours (`RawExec`).
 */
export async function delegate(verb: "ADD" | "CHECK" | "DEL", type: string, stdin: Uint8Array) {
  const path = findInPath(type);
  const child = new Deno.Command(path, {
    env: { ...Deno.env.toObject(), CNI_COMMAND: verb },
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(stdin).catch(() => {});
  await writer.close().catch(() => {});
  const out = await child.output();
  if (out.stderr.length) Deno.stderr.writeSync(out.stderr);
  const stdout = new TextDecoder().decode(out.stdout);
  if (out.code !== 0) {
    // `RawExec.pluginErr`: the delegate's stdout parsed as a types.Error, or a message about it.
    let parsed: Json;
    try {
      const j = JSON.parse(stdout);
      parsed = { code: j.code, msg: j.msg, ...(j.details ? { details: j.details } : {}) };
    } catch {
      parsed = {
        code: 0,
        msg: stdout.trim()
          ? `netplugin failed but error parsing its diagnostic message "${stdout}"`
          : `netplugin failed with no error message: exit status ${out.code}`,
      };
    }
    throw new DelegateError(parsed);
  }
  return stdout;
}

/** One call's CNI arguments (skel `CmdArgs`). */
export interface Args {
  containerId: string;
  ifName: string;
  netns: string;
  stdin: Uint8Array;
}

// ---------------------------------------------------------------------------------------------
// The skel dispatcher (libcni pkg/skel `pluginMain`), with galactic's registration: internal/cni
// /cni.go and internal/cnitap/cnitap.go `RunPlugin` register Add, Check, Del and Status with
// `version.All`; GC is not registered.

/** `version.GreaterThanOrEqualTo` on x.y.z strings. */
function atLeast(v: string, floor: string): boolean {
  const a = v.split(".").map(Number), b = floor.split(".").map(Number);
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  return true;
}

/** The verbs a master registers (galactic: ADD, CHECK, DEL and STATUS; no GC). */
export interface Verbs {
  add(args: Args): Promise<Json>;
  check(args: Args): Promise<void>;
  del(args: Args): Promise<Json>;
  status(args: Args): Promise<void>;
}

async function main(verbs: Verbs): Promise<number> {
  const env = (k: string) => Deno.env.get(k) ?? "";
  const cmd = env("CNI_COMMAND");
  const required: Record<string, string[]> = {
    CNI_CONTAINERID: ["ADD", "CHECK", "DEL"],
    CNI_NETNS: ["ADD", "CHECK"],
    CNI_IFNAME: ["ADD", "CHECK", "DEL"],
    CNI_PATH: ["ADD", "CHECK", "DEL"],
  };
  if (!cmd) {
    // skel: no CNI_COMMAND prints the "about" string and the versions on stderr, and succeeds.
    console.error("CNI galactic plugin (milo-ipam test stand-in)");
    console.error(`CNI protocol versions supported: ${SUPPORTED_VERSIONS.join(", ")}`);
    return 0;
  }
  const missing = [
    ...Object.entries(required).filter(([k, verbs]) => verbs.includes(cmd) && !env(k)).map(([k]) =>
      k
    ),
  ];
  if (missing.length) {
    throw new CniError(4, `required env variables [${missing.join(",")}] missing`);
  }
  if (cmd === "VERSION") {
    print({ cniVersion: "1.1.0", supportedVersions: SUPPORTED_VERSIONS });
    return 0;
  }
  const stdin = new Uint8Array(await new Response(Deno.stdin.readable).arrayBuffer());
  const args: Args = {
    containerId: env("CNI_CONTAINERID"),
    ifName: env("CNI_IFNAME"),
    netns: env("CNI_NETNS"),
    stdin,
  };
  // skel: the network name, then the version (`ConfVersionDecoder`: absent is 0.1.0; not in
  // version.All is code 1 before any verb runs); CHECK needs ≥ 0.4.0, GC and STATUS ≥ 1.1.0.
  let version = "0.1.0";
  try {
    const conf = JSON.parse(new TextDecoder().decode(stdin));
    if (["ADD", "CHECK", "DEL"].includes(cmd) && !conf?.name) {
      throw new CniError(7, "missing network name");
    }
    if (typeof conf?.cniVersion === "string" && conf.cniVersion) version = conf.cniVersion;
  } catch (err) {
    if (err instanceof CniError) throw err;
    throw new CniError(6, `error unmarshall network config: ${err}`);
  }
  const floor = { CHECK: "0.4.0", GC: "1.1.0", STATUS: "1.1.0" }[cmd];
  if (floor && SUPPORTED_VERSIONS.includes(version) && !atLeast(version, floor)) {
    throw new CniError(1, `config version does not allow ${cmd}`);
  }
  const known = ["ADD", "CHECK", "DEL", "GC", "STATUS"].includes(cmd);
  if (known && !SUPPORTED_VERSIONS.includes(version)) {
    throw new CniError(
      1,
      "incompatible CNI versions",
      `config is "${version}", plugin supports ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  switch (cmd) {
    case "ADD":
      print(await verbs.add(args));
      return 0;
    case "CHECK":
      await verbs.check(args);
      return 0;
    case "DEL":
      print(await verbs.del(args));
      return 0;
    case "STATUS":
      await verbs.status(args);
      return 0;
    case "GC":
      // Not registered: skel's checkVersionAndCall returns nil for a nil func, so GC succeeds
      // silently and the IPAM delegate's GC is never called.
      return 0;
    default:
      throw new CniError(4, `unknown CNI_COMMAND: ${cmd}`);
  }
}

function print(v: Json): void {
  Deno.stdout.writeSync(new TextEncoder().encode(JSON.stringify(v, null, 4)));
}

/** Runs `verbs` as skel's `PluginMainFuncs` does, printing errors as skel does, and exits. */
export async function pluginMain(verbs: Verbs): Promise<never> {
  let code: number;
  try {
    code = await main(verbs);
  } catch (err) {
    // skel: a types.Error anywhere in the chain is printed as it is (no cniVersion field);
    // anything else is ErrInternal (999) with the error's text.
    if (err instanceof DelegateError) print(err.error);
    else if (err instanceof CniError) {
      print({ code: err.code, msg: err.message, ...(err.details ? { details: err.details } : {}) });
    } else print({ code: 999, msg: err instanceof Error ? err.message : String(err) });
    code = 1;
  }
  Deno.exit(code);
}
