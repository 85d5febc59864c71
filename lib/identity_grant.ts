/**
 * Stable identities are the node's privilege: a network config asks for one
 * (`identity` `pod` or `network`), the node config grants it
 * (`allowIdentities`), as requested addresses (lib/requested.ts).
 */
import type { Identity, NodeConfig } from "./config.ts";
import { CniError } from "./errors.ts";

/**
 * Throws code 7 unless the node config grants the stable `identity` of a
 * network config (`pod` or `network`: claims made with Retain, whose address
 * waits for the same name after every DEL) to the pod's namespace and the
 * network (`allowIdentities`): pods that never return under the same name (a
 * Deployment's, a Job's) would each leave an address retained. The attachment
 * identity needs no grant.
 */
export function requireIdentityGrant(
  node: Pick<NodeConfig, "allowIdentities" | "path">,
  a: { identity?: Identity; podNamespace?: string; network: string },
): void {
  const identity = a.identity ?? "attachment";
  if (identity === "attachment") return;
  const granted = node.allowIdentities.some((g) =>
    (g.namespace === undefined || g.namespace === a.podNamespace) &&
    (g.network === undefined || g.network === a.network) &&
    (g.identity === undefined || g.identity === identity)
  );
  if (granted) return;
  const where = `${a.podNamespace ? `namespace ${a.podNamespace}` : "a pod without a namespace"}` +
    ` on network ${JSON.stringify(a.network)}`;
  const example = JSON.stringify({
    namespace: a.podNamespace ?? "NAMESPACE",
    network: a.network,
    identity,
  });
  throw new CniError(
    "config",
    `field ipam.identity: "${identity}" is the node's to grant, and node config ${node.path} ` +
      `does not grant it to ${where}`,
    `its claims are made with Retain: every DEL leaves the address retained for the same name, so ` +
      "pods that never return under it (a Deployment's, a Job's) would pin the pool; use the " +
      `default identity, or, for pods that do return (a StatefulSet's), root adds ${example} to ` +
      "allowIdentities in the node config and gives the class a retentionLease",
  );
}
