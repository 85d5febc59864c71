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
 * else the one kept in `<stateDir>/host-id`, made once from the machine's
 * firmware UUID (`hardwareIdFile`: a wiped `stateDir` makes the same one
 * again, so the node still knows its own claims) or, without one, at random.
 */
export function hostId(
  node: Pick<NodeConfig, "hostIdFile" | "stateDir"> & Partial<Pick<NodeConfig, "hardwareIdFile">>,
): string {
  const key = `${node.hostIdFile}\u0000${node.stateDir}\u0000${node.hardwareIdFile ?? ""}`;
  if (cached?.key === key) return cached.id;
  const id = readId(node.hostIdFile) ?? ownId(node.stateDir, node.hardwareIdFile);
  cached = { key, id };
  return id;
}

/**
 * Firmware UUIDs that name no machine: unset, or a vendor's placeholder that
 * many boards share (dmidecode's and systemd's lists of known bogus ones).
 */
const NO_MACHINE = new Set([
  "00000000000000000000000000000000",
  "ffffffffffffffffffffffffffffffff",
  "03000200040005000006000700080009",
  "00020003000400050006000700080009",
]);

/**
 * The machine's firmware UUID as a host identity (`dmi-` and 32 hex digits),
 * or undefined when the file is absent, unreadable, not a UUID or a
 * placeholder: never an error (the machine-id, or a made one, serves then).
 */
export function hardwareId(path: string | undefined): string | undefined {
  if (!path) return undefined;
  let text: string;
  try {
    text = Deno.readTextFileSync(path).trim().toLowerCase();
  } catch {
    return undefined;
  }
  const hex = text.replaceAll("-", "");
  if (!/^[0-9a-f]{32}$/.test(hex) || NO_MACHINE.has(hex)) return undefined;
  return `dmi-${hex}`;
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

/**
 * The identity this host keeps in its state directory (made once, published
 * whole): the firmware's, else a random one.
 */
function ownId(stateDir: string, hardwareIdFile?: string): string {
  const path = `${stateDir}/host-id`;
  const existing = readId(path);
  if (existing) return existing;
  const id = hardwareId(hardwareIdFile) ?? crypto.randomUUID().replaceAll("-", "");
  const tmp = `${path}.${crypto.randomUUID().slice(0, 8)}.tmp`;
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

/** What the last reconcile saw of this host: its identity, its firmware's, its boot. */
interface Seen {
  host: string;
  hardware?: string;
  boot?: string;
}

/**
 * Why this host's identity cannot be trusted across boots, or undefined: the
 * identity changed since the last boot while the machine's firmware UUID did
 * not (a machine-id made afresh at every boot). Every lease made before then
 * looks like another host's to every release path (kept, never released);
 * the fix is root's: `hostIdFile` naming a stable identity. Records what it
 * saw in `<stateDir>/host-seen.json`.
 */
export function identityDrift(
  node: Pick<NodeConfig, "hostIdFile" | "stateDir" | "hardwareIdFile">,
  host: string,
  boot: string | undefined,
): string | undefined {
  const path = `${node.stateDir}/host-seen.json`;
  const now: Seen = { host, hardware: hardwareId(node.hardwareIdFile), boot };
  let before: Seen | undefined;
  try {
    before = JSON.parse(Deno.readTextFileSync(path)) as Seen;
  } catch {
    before = undefined;
  }
  try {
    Deno.writeTextFileSync(path, JSON.stringify(now) + "\n", { mode: 0o600 });
  } catch {
    // Seen again at the next run.
  }
  const drifted = before?.host !== undefined && before.host !== host && !!now.hardware &&
    before.hardware === now.hardware && !!boot && before.boot !== boot;
  if (!drifted) return undefined;
  return `hostIdFile ${node.hostIdFile} named this host ${before!.host} before this boot and ` +
    `${host} now, on the same machine (firmware ${now.hardware}): it is made afresh at boot, ` +
    `so the leases this node made before look like another host's and are never released; ` +
    `set hostIdFile to a stable identity (${node.hardwareIdFile})`;
}
