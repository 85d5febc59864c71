/**
 * The host's identity, recorded on every claim (`milo-ipam.io/host`): two
 * machines under one node name (cloned VMs, a hostname default) make claims
 * that look alike but for it, and the node-side release paths judge only the
 * claims of their own host.
 */
import type { NodeConfig } from "./config.ts";
import { CniError, errorText } from "./errors.ts";

/** What a host identity may look like: a label value (systemd's machine-id is 32 hex digits). */
const HOST_ID = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$/;
/** What systemd writes before the first boot completes: not an identity. */
const UNSET = new Set(["", "uninitialized"]);

/** The host identity of the last file read, by path: it does not change while a process lives. */
let cached: { key: string; id: string } | undefined;

/**
 * This host's identity: the node config's `hostIdFile` (`/etc/machine-id`),
 * else one made once and kept in `<stateDir>/host-id`.
 */
export function hostId(node: Pick<NodeConfig, "hostIdFile" | "stateDir">): string {
  const key = `${node.hostIdFile}\u0000${node.stateDir}`;
  if (cached?.key === key) return cached.id;
  const id = readId(node.hostIdFile) ?? ownId(node.stateDir);
  cached = { key, id };
  return id;
}

function readId(path: string): string | undefined {
  let text: string;
  try {
    text = Deno.readTextFileSync(path).trim();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw new CniError("config", `cannot read the host identity ${path}`, errorText(err));
  }
  if (UNSET.has(text)) return undefined;
  if (!HOST_ID.test(text)) {
    throw new CniError(
      "config",
      `the host identity in ${path} is not a label value`,
      "expected a machine-id: 32 hex digits",
    );
  }
  return text;
}

/** The identity this host made for itself in its state directory (made once, published whole). */
function ownId(stateDir: string): string {
  const path = `${stateDir}/host-id`;
  const existing = readId(path);
  if (existing) return existing;
  const id = crypto.randomUUID().replaceAll("-", "");
  const tmp = `${path}.${id.slice(0, 8)}.tmp`;
  try {
    Deno.mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    Deno.writeTextFileSync(tmp, id + "\n", { mode: 0o600 });
    Deno.linkSync(tmp, path);
    return id;
  } catch (err) {
    const other = err instanceof Deno.errors.AlreadyExists ? readId(path) : undefined;
    if (other) return other;
    throw new CniError("io", `cannot write the host identity ${path}`, errorText(err));
  } finally {
    try {
      Deno.removeSync(tmp);
    } catch {
      // Never made.
    }
  }
}

/** What a boot id looks like: the kernel's random UUID. */
const BOOT_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The kernel's id of the current boot (`bootIdFile`,
 * `/proc/sys/kernel/random/boot_id`, made afresh at every boot and the same
 * in every container of the machine), or undefined when it cannot be read: a
 * record of the node's claims names the boot its ADD ran in, and every
 * sandbox of an earlier boot died with it.
 */
export function bootId(node: Pick<NodeConfig, "bootIdFile">): string | undefined {
  try {
    const text = Deno.readTextFileSync(node.bootIdFile).trim();
    return BOOT_ID.test(text) ? text : undefined;
  } catch {
    return undefined;
  }
}
