/**
 * The skeleton of the galactic master stand-in (testing/galactic/master.ts):
 * what libcni's `pkg/skel` (containernetworking/cni v1.3.0, galactic's go.mod)
 * does for galactic's masters, Go's error values as the masters build them,
 * and slog's JSON log. Read from the sources named on each piece; nothing is
 * copied. The delegation itself is in ./invoke.ts.
 */

/** `version.All` (`pkg/version/version.go`): the versions galactic's masters register. */
export const SUPPORTED_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
export type Json = Record<string, unknown>;

// ---------------------------------------------------------------------------------------------
// Errors: Go's error chain. `types.Error` is the one skel prints as it is.

/** An error with the errors it wraps (`%w`), or joins (`errors.Join`). */
export class GoError extends Error {
  constructor(message: string, readonly wrapped: Error[] = []) {
    super(message);
  }
}

/** `fmt.Errorf("<prefix>: %w", err)`. */
export function wrap(prefix: string, err: unknown): GoError {
  const e = err instanceof Error ? err : new Error(String(err));
  return new GoError(`${prefix}: ${e.message}`, [e]);
}

/** `errors.Join(errs...)`: the texts joined by newlines. */
export function join(errs: Error[]): GoError {
  return new GoError(errs.map((e) => e.message).join("\n"), errs);
}

/** libcni `types.Error` (`pkg/types/types.go`): its Error() is msg, then "; details" when set. */
export class CniError extends GoError {
  constructor(readonly code: number, readonly msg: string, readonly details = "") {
    super(details ? `${msg}; ${details}` : msg);
  }

  /** The JSON object skel prints (`code`, `msg`, `details` omitted when empty). */
  toJson(): Json {
    return { code: this.code, msg: this.msg, ...(this.details ? { details: this.details } : {}) };
  }
}

/** `errors.As(err, &*types.Error)`: depth-first through wrapped and joined errors. */
export function typedError(err: unknown): CniError | undefined {
  if (err instanceof CniError) return err;
  if (err instanceof GoError) {
    for (const w of err.wrapped) {
      const found = typedError(w);
      if (found) return found;
    }
  }
  return undefined;
}

/** Go's `%q` of a string (strconv.Quote), as error texts quote values. */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    const named: Record<string, string> = {
      "\u0007": "\\a",
      "\b": "\\b",
      "\f": "\\f",
      "\n": "\\n",
      "\r": "\\r",
      "\t": "\\t",
      "\v": "\\v",
      '"': '\\"',
      "\\": "\\\\",
    };
    if (named[ch]) out += named[ch];
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return out + '"';
}

// ---------------------------------------------------------------------------------------------
// Logging: slog's JSON handler once cnimaster.SetupLogging ran (internal/cnimaster/config.go):
// `GALACTIC_CNI_LOG_FILE` (else /var/log/galactic/galactic-cni.log; the stand-in writes stderr)
// at `GALACTIC_CNI_LOG_LEVEL` (default info). An error attribute is written as its Error()
// string (slog's JSONHandler writes a value implementing `error` as err.Error()).

const LEVELS = { DEBUG: -4, INFO: 0, WARN: 4, ERROR: 8 } as const;
type Level = keyof typeof LEVELS;
let logFile: string | undefined;
let minLevel: number = LEVELS.INFO;

/** cnimaster.SetupLogging: the file (stderr when undefined) and the level by its name. */
export function setupLogging(path: string | undefined, level: string | undefined): void {
  logFile = path;
  const name = (level ?? "").trim().toUpperCase();
  const known: Record<string, number> = { ...LEVELS, WARNING: LEVELS.WARN, "": LEVELS.INFO };
  minLevel = known[name] ?? LEVELS.INFO;
}

export function log(level: Level, msg: string, attrs: Record<string, unknown> = {}): void {
  if (LEVELS[level] < minLevel) return;
  const values = Object.fromEntries(
    Object.entries(attrs).map(([k, v]) => [k, v instanceof Error ? v.message : v]),
  );
  const line = JSON.stringify({ time: new Date().toISOString(), level, msg, ...values }) + "\n";
  const bytes = new TextEncoder().encode(line);
  if (logFile) Deno.writeFileSync(logFile, bytes, { append: true });
  else Deno.stderr.writeSync(bytes);
}

// ---------------------------------------------------------------------------------------------
// The skel dispatcher (`pkg/skel/skel.go` pluginMain), with galactic's registration:
// internal/cni/cni.go and internal/cnitap/cnitap.go `RunPlugin` register Add, Check, Del and
// Status with `version.All`; GC is not registered.

/** One call's CNI arguments (skel `CmdArgs`). */
export interface Args {
  containerId: string;
  ifName: string;
  netns: string;
  args: string;
  netnsOverride: string;
  stdin: Uint8Array;
}

/** The verbs a master registers; ADD and DEL print their own result (types.PrintResult). */
export interface Verbs {
  add(args: Args): Promise<void>;
  check(args: Args): Promise<void>;
  del(args: Args): Promise<void>;
  status(args: Args): Promise<void>;
}

/** `pkg/utils/utils.go`: container IDs and network names. */
const CNI_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

function validateContainerId(id: string): void {
  if (!CNI_NAME.test(id)) throw new CniError(4, "invalid characters in containerID", id);
}

/** utils.ValidateInterfaceName: non-empty, at most 15 bytes, not . or .., no / : or space. */
function validateIfName(name: string): void {
  if (new TextEncoder().encode(name).length > 15) {
    throw new CniError(
      4,
      "interface name is too long",
      "interface name should be less than 16 characters",
    );
  }
  if (name === "." || name === "..") throw new CniError(4, "interface name is . or ..");
  if (/[/:\s]/u.test(name)) {
    throw new CniError(4, "interface name contains / or : or whitespace characters");
  }
}

/** skel `validateConfig`: every verb but VERSION needs a JSON config with a valid `name`. */
function validateConfig(stdin: Uint8Array): void {
  let conf: unknown;
  try {
    conf = JSON.parse(new TextDecoder().decode(stdin));
  } catch (err) {
    throw new CniError(6, `error unmarshall network config: ${(err as Error).message}`);
  }
  if (conf !== null && (typeof conf !== "object" || Array.isArray(conf))) {
    throw new CniError(6, "error unmarshall network config: json: cannot unmarshal into a struct");
  }
  const name = (conf as Json | null)?.name;
  if (name === undefined || name === null || name === "") {
    throw new CniError(7, "missing network name");
  }
  if (typeof name !== "string") {
    throw new CniError(6, "error unmarshall network config: json: cannot unmarshal name");
  }
  if (!CNI_NAME.test(name)) {
    throw new CniError(7, "invalid characters found in network name", name);
  }
}

/** `version.ParseVersion` (absent is 0.1.0) and `GreaterThanOrEqualTo`. */
function atLeast(v: string, floor: string): boolean {
  const parse = (s: string) => {
    if (s === "") return [0, 1, 0];
    const parts = s.split(".");
    if (parts.length >= 4 || parts.some((p) => !/^[+-]?\d+$/.test(p))) {
      throw new CniError(6, `invalid version ${goQuote(s)}`);
    }
    return [0, 1, 2].map((i) => Number(parts[i] ?? 0));
  };
  const a = parse(v), b = parse(floor);
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i];
  return true;
}

/** `create.DecodeVersion`: the config's cniVersion, 0.1.0 when absent. */
function configVersion(stdin: Uint8Array): string {
  const v = (JSON.parse(new TextDecoder().decode(stdin)) as Json | null)?.cniVersion;
  if (v !== undefined && v !== null && typeof v !== "string") {
    throw new CniError(6, "decoding version from network config: cniVersion is not a string");
  }
  return v || "0.1.0";
}

/** `checkVersionAndCall`: the version reconciler, then the verb (a nil verb succeeds). */
async function call(version: string, fn: (() => Promise<void>) | undefined): Promise<void> {
  if (!SUPPORTED_VERSIONS.includes(version)) {
    const supported = `[${SUPPORTED_VERSIONS.map(goQuote).join(" ")}]`;
    throw new CniError(
      1,
      "incompatible CNI versions",
      `config is ${goQuote(version)}, plugin supports ${supported}`,
    );
  }
  if (fn) await fn();
}

/**
 * skel's netns guard after ADD and DEL: unless `CNI_NETNS_OVERRIDE` is true or 1, a CNI_NETNS
 * that is the plugin's own namespace is code 8 (`pkg/ns/ns_linux.go` CheckNetNS; a path that
 * does not open passes).
 */
function checkNetns(a: Args): void {
  if (a.netnsOverride.toUpperCase() === "TRUE" || a.netnsOverride === "1") return;
  try {
    const ns = Deno.statSync(a.netns), own = Deno.statSync("/proc/self/ns/net");
    if (ns.ino === own.ino && ns.dev === own.dev) {
      throw new CniError(8, "plugin's netns and netns from CNI_NETNS should not be the same");
    }
  } catch (err) {
    if (err instanceof CniError) throw err;
  }
}

async function main(verbs: Verbs, about: string): Promise<number> {
  const env = (k: string) => Deno.env.get(k) ?? "";
  const cmd = env("CNI_COMMAND");
  // getCmdArgsFromEnv: each variable in this order; a set one required for the verb is
  // validated at once, and the missing ones are reported together.
  const vars: [string, string[], ((v: string) => void)?][] = [
    ["CNI_COMMAND", ["ADD", "CHECK", "DEL", "GC", "STATUS"]],
    ["CNI_CONTAINERID", ["ADD", "CHECK", "DEL"], validateContainerId],
    ["CNI_NETNS", ["ADD", "CHECK"]],
    ["CNI_IFNAME", ["ADD", "CHECK", "DEL"], validateIfName],
    ["CNI_ARGS", []],
    ["CNI_PATH", ["ADD", "CHECK", "DEL", "GC", "STATUS"]],
    ["CNI_NETNS_OVERRIDE", []],
  ];
  const missing: string[] = [];
  for (const [name, required, validate] of vars) {
    const v = env(name);
    if (!v) {
      if (required.includes(cmd) || name === "CNI_COMMAND") missing.push(name);
    } else if (required.includes(cmd)) validate?.(v);
  }
  if (missing.length) {
    if (!cmd) {
      console.error(about);
      console.error(`CNI protocol versions supported: ${SUPPORTED_VERSIONS.join(", ")}`);
      return 0;
    }
    throw new CniError(4, `required env variables [${missing.join(",")}] missing`);
  }
  const stdin = cmd === "VERSION"
    ? new Uint8Array()
    : new Uint8Array(await new Response(Deno.stdin.readable).arrayBuffer());
  if (cmd !== "VERSION") validateConfig(stdin);
  const a: Args = {
    containerId: env("CNI_CONTAINERID"),
    ifName: env("CNI_IFNAME"),
    netns: env("CNI_NETNS"),
    args: env("CNI_ARGS"),
    netnsOverride: env("CNI_NETNS_OVERRIDE"),
    stdin,
  };
  const floors: Record<string, [string, (() => Promise<void>) | undefined]> = {
    CHECK: ["0.4.0", () => verbs.check(a)],
    GC: ["1.1.0", undefined],
    STATUS: ["1.1.0", () => verbs.status(a)],
  };
  switch (cmd) {
    case "ADD":
    case "DEL":
      await call(configVersion(stdin), () => cmd === "ADD" ? verbs.add(a) : verbs.del(a));
      checkNetns(a);
      return 0;
    case "CHECK":
    case "GC":
    case "STATUS": {
      const v = configVersion(stdin);
      const [floor, fn] = floors[cmd];
      if (!atLeast(v, floor)) throw new CniError(1, `config version does not allow ${cmd}`);
      if (!SUPPORTED_VERSIONS.some((p) => atLeast(p, v))) {
        throw new CniError(1, `plugin version does not allow ${cmd}`);
      }
      await call(v, fn);
      return 0;
    }
    case "VERSION":
      Deno.stdout.writeSync(
        new TextEncoder().encode(
          JSON.stringify({ cniVersion: "1.1.0", supportedVersions: SUPPORTED_VERSIONS }) + "\n",
        ),
      );
      return 0;
    default:
      throw new CniError(4, `unknown CNI_COMMAND: ${cmd}`);
  }
}

/** types.PrintResult / prettyPrint: the JSON with a four-space indent. */
export function print(v: Json): void {
  Deno.stdout.writeSync(new TextEncoder().encode(JSON.stringify(v, null, 4)));
}

/**
 * skel `PluginMainFuncs`: runs the verbs, prints an error as skel does (a `types.Error` found
 * anywhere in the chain as it is, anything else as code 999 with its text) and exits 1.
 */
export async function pluginMain(verbs: Verbs, about: string): Promise<never> {
  let code: number;
  try {
    code = await main(verbs, about);
  } catch (err) {
    const typed = typedError(err);
    print(typed ? typed.toJson() : { code: 999, msg: (err as Error).message ?? String(err) });
    code = 1;
  }
  Deno.exit(code);
}
