/**
 * The single mapping from failure outcomes to CNI error codes.
 *
 * Codes below 100 are defined by the CNI specification; codes 100 and above
 * are milo-ipam's own and are documented in docs/verbs.md's error table.
 */
import { redact } from "./redact.ts";

/** Every way an invocation can fail, each with its CNI code and a summary. */
export const OUTCOMES = {
  version: { code: 1, summary: "incompatible CNI version" },
  env: { code: 4, summary: "invalid environment variables" },
  io: { code: 5, summary: "I/O failure" },
  decode: { code: 6, summary: "failed to decode content" },
  config: { code: 7, summary: "invalid network config" },
  transient: { code: 11, summary: "try again later" },
  unavailable: { code: 50, summary: "plugin not available" },
  exhausted: { code: 100, summary: "Milo IP pool or quota exhausted" },
  auth: { code: 101, summary: "Milo refused the credentials" },
  rejected: { code: 102, summary: "Milo rejected the claim" },
  conflict: { code: 103, summary: "claim held by another attachment" },
  check: { code: 104, summary: "lease does not match Milo" },
  protocol: { code: 105, summary: "unexpected answer from Milo" },
  sandbox: { code: 106, summary: "refused by the permission sandbox" },
  internal: { code: 199, summary: "internal error" },
} as const;

/** Name of a failure outcome (a row of {@link OUTCOMES}). */
export type Outcome = keyof typeof OUTCOMES;

/** A failure that ends the invocation with a CNI error on stdout. */
export class CniError extends Error {
  readonly outcome: Outcome;
  readonly details: string;
  /**
   * Set on the failure of a call that sent Milo a create without reading its
   * answer (a timeout, a connection lost after sending, a 5xx): that create
   * may still land (lib/lease.ts, in doubt).
   */
  inDoubt = false;

  constructor(outcome: Outcome, msg: string, details = "") {
    super(clip(msg, MAX_MSG_CHARS));
    this.name = "CniError";
    this.outcome = outcome;
    this.details = clip(details, MAX_DETAILS_CHARS);
  }

  /** The CNI error code of this failure. */
  get code(): number {
    return OUTCOMES[this.outcome].code;
  }
}

/**
 * A wrong command line of a subcommand (a flag unknown or malformed): its
 * usage goes to stderr with exit 2, never a CNI error (main.ts). `usage` is
 * the command's usage line, `details` what is wrong.
 */
export class UsageError extends CniError {
  constructor(usage: string, details: string) {
    super("config", usage, details);
    this.name = "UsageError";
  }
}

/**
 * A request Milo may have executed without its answer reaching the client (a
 * timeout, a connection lost after sending, a 5xx): a DELETE is never sent
 * again blind (lib/milo_release.ts).
 */
export class Unanswered extends CniError {
  /** The request (`METHOD path`). */
  readonly what: string;

  constructor(what: string, why: string) {
    super("transient", `${what}: no answer from Milo; it may have been executed`, why);
    this.what = what;
  }
}

/** How much of one text from a server (a body, a Status message) an error quotes. */
export const QUOTE_CHARS = 300;
/**
 * Longest `msg` and `details` of a CNI error: the runtime puts both in the
 * pod's event, whose message Kubernetes cuts at 1 KiB, so the whole error
 * stays near that.
 */
const MAX_MSG_CHARS = 300;
const MAX_DETAILS_CHARS = 700;

/**
 * Cuts `text` to `max` characters, marking the cut; credentials are scrubbed
 * first ({@link redact}), so a cut never leaves the head of a token behind.
 */
export function clip(text: string, max: number): string {
  const t = redact(text);
  return t.length <= max ? t : `${t.slice(0, max - 1)}…`;
}

/**
 * Outcome of a Milo HTTP answer that the caller did not expect.
 * 507 is exhaustion, not a transient server error; 501 is not transient either.
 */
export function outcomeOfHttpStatus(status: number): Outcome {
  if (status === 507) return "exhausted";
  if (status === 401 || status === 403) return "auth";
  if (status === 409) return "conflict";
  if (status === 408 || status === 429 || status === 500 || (status >= 502 && status <= 504)) {
    return "transient";
  }
  if (status === 400 || status === 404 || status === 422) return "rejected";
  return "protocol";
}

/** True when a Milo HTTP status is worth retrying within the deadline. */
export function isTransientStatus(status: number): boolean {
  return outcomeOfHttpStatus(status) === "transient";
}

/** What an operator does about a sandbox refusal (never Deno's `--allow-*` advice). */
export const SANDBOX_ADVICE = "the sandbox is derived from the node config at install: install " +
  "again with the node config that names this path or host (deno task install --dir DIR " +
  "--config FILE; in Kubernetes, roll the DaemonSet, whose init container installs from the " +
  "ConfigMap); the sweep reaches the Kubernetes API only when installed with --kube";

/**
 * `e` with `note` (what was done about it: a rollback, a journal entry) after
 * its details, the details cut first so the note is kept whole.
 */
export function withNote(e: CniError, note: string): CniError {
  if (!note) return e;
  const room = MAX_DETAILS_CHARS - Math.min(note.length, MAX_DETAILS_CHARS / 2) - 2;
  const head = e.details ? `${clip(e.details, Math.max(room, 1))}; ` : "";
  const noted = new CniError(e.outcome, e.message, head + note);
  noted.inDoubt = e.inDoubt;
  return noted;
}

/** Converts anything thrown into a {@link CniError}, never leaking a stack. */
export function toCniError(err: unknown): CniError {
  if (err instanceof CniError) return err;
  if (err instanceof Deno.errors.NotCapable) {
    return new CniError(
      "sandbox",
      "the permission sandbox refused an operation",
      `${errorText(err)}; ${SANDBOX_ADVICE}`,
    );
  }
  return new CniError("internal", "unexpected failure", errorText(err));
}

/**
 * Deno's refusal (`Requires read access to "/x", run again with the
 * --allow-read flag`) as what it means here: the installed sandbox does not
 * grant it. Running again with a flag is not something an operator of an
 * installed plugin can do.
 */
export function sandboxText(message: string): string {
  return message.replace(
    /Requires (\w+) access to ("[^"]*"|\S+)(?:, (?:run again with|specify the required permissions)[^.;)]*(?:flag|permissions))?/g,
    (_m, kind: string, what: string) => `the installed sandbox grants no ${kind} access to ${what}`,
  );
}

/**
 * The message of an error without its stack (a sandbox refusal translated:
 * {@link sandboxText}), and without the URL a failed fetch quotes (`error
 * sending request for url (https://...)`): the caller names the request.
 */
export function errorText(err: unknown): string {
  if (!(err instanceof Error)) return sandboxText(String(err));
  const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
  return sandboxText(`${err.name}: ${err.message}${cause}`)
    .replace(/ for url \((?:[^()]|\([^()]*\))*\)/g, "");
}

/**
 * Folds several failures into one: the first one's code, message and
 * details, then each other's message, with its details only when they are
 * not the first's (two families failing alike say it once).
 */
export function combineErrors(errors: CniError[]): CniError {
  if (errors.length === 1) return errors[0];
  const [first, ...rest] = errors;
  const others = rest.map((e) =>
    `[${e.code}] ${e.message}${
      !e.details ? "" : e.details === first.details ? " (the same)" : ` (${e.details})`
    }`
  );
  const head = first.details ? `${first.details}; also ` : "also ";
  const e = new CniError(first.outcome, first.message, head + [...new Set(others)].join("; "));
  e.inDoubt = errors.some((x) => x.inDoubt);
  return e;
}

/** Awaits every task; throws the combined failure if any failed, else returns the values. */
export async function settleAll<T>(tasks: Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(tasks);
  const errors = settled.flatMap((s) => s.status === "rejected" ? [toCniError(s.reason)] : []);
  if (errors.length) throw combineErrors(errors);
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

/** Runs `fn` on every item concurrently; returns the items done and each failure labelled. */
export async function attemptAll<T>(
  items: T[],
  fn: (item: T) => Promise<unknown>,
  label: (item: T) => string,
): Promise<{ done: T[]; failures: CniError[] }> {
  const settled = await Promise.allSettled(items.map(fn));
  const done: T[] = [];
  const failures: CniError[] = [];
  settled.forEach((s, i) => {
    if (s.status === "fulfilled") return void done.push(items[i]);
    const e = toCniError(s.reason);
    failures.push(new CniError(e.outcome, `${label(items[i])}: ${e.message}`, e.details));
  });
  return { done, failures };
}
