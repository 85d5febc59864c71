/** What of Milo's address space a network config may set (README: One address space per network). */
import { isPlainObject } from "./cni.ts";
import type { NodeConfig } from "./config.ts";
import { CniError } from "./errors.ts";

/**
 * Throws code 7 naming the first `scope.<role>.uid` of the ipam block that
 * differs from the node config's: Milo counts the uid in a claim's address
 * space (`CanonicalAddressSpace` and `writeUID`, `internal/scope/scope.go`),
 * so two versions of one network's config that disagree on it are two spaces
 * to Milo, which may give one address to two of the network's pods. The
 * instance a network is pinned to is root's (the node config).
 */
export function refuseScopeUid(
  ipam: Record<string, unknown>,
  node: Pick<NodeConfig, "defaults" | "path">,
): void {
  if (!isPlainObject(ipam.scope)) return;
  const nodeScope = isPlainObject(node.defaults.scope) ? node.defaults.scope : {};
  for (const [role, ref] of Object.entries(ipam.scope)) {
    if (!isPlainObject(ref) || ref.uid === undefined) continue;
    const have = nodeScope[role];
    if (isPlainObject(have) && have.uid === ref.uid) continue;
    throw new CniError(
      "config",
      `field ipam.scope.${role}.uid: a network config may not set it, only the node config`,
      "Milo counts the uid in the network's address space: configs of one network that " +
        "disagree on it (a NAD edited while its pods run) are two spaces, in which Milo may " +
        `give one address to two pods; leave it out, or set scope in the node config ${node.path}`,
    );
  }
}
