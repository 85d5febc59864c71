/**
 * Address spaces are root's: the node config grants each network of a
 * namespace one scope, and the classes it may claim from (`allowScopes`), as
 * it grants stable identities (lib/identity_grant.ts). Milo keeps an address
 * unique only within a claim's scope projected onto its class's
 * `uniqueWithin` roles, each reference's uid included
 * (`CanonicalAddressSpace` and `writeUID`, `internal/scope/scope.go`): a
 * network config that chose its scope could claim in another tenant's space,
 * or split its own network in two (with and without the uid), and Milo would
 * give one address to two pods.
 */
import { isPlainObject } from "./values.ts";
import { clip, CniError } from "./errors.ts";
import type { Family } from "./ip.ts";

/** A scope role's reference, as Milo's `ScopeRef`. */
export interface ScopeRef {
  apiGroup: string;
  kind: string;
  name: string;
  uid?: string;
}

/** One entry of `allowScopes`: a field left out matches any namespace or network, or any class. */
export interface ScopeGrant {
  namespace?: string;
  network?: string;
  scope: Record<string, ScopeRef>;
  classes?: string[];
}

type Grants = { allowScopes: ScopeGrant[]; path: string };

/** The grant of a namespace's network and its index (at most one: {@link refuseGrantConflicts}). */
export function grantOf(
  node: Pick<Grants, "allowScopes">,
  namespace: string | undefined,
  network: string,
): { grant: ScopeGrant; index: number } | undefined {
  const index = node.allowScopes.findIndex((g) =>
    (g.namespace === undefined || g.namespace === namespace) &&
    (g.network === undefined || g.network === network)
  );
  return index < 0 ? undefined : { grant: node.allowScopes[index], index };
}

/**
 * Throws code 7 when two grants match one namespace's network (it would have
 * two spaces, the one chosen by the order of the list), or name one object
 * with two uids (two spaces, to Milo, for one object). Linear in the list.
 */
export function refuseGrantConflicts(grants: ScopeGrant[], path: string): void {
  const byNamespace = new Map<string, number>(), byNetwork = new Map<string, number>();
  const exact = new Map<string, number>(), namespaceWide = new Map<string, number>();
  const networkWide = new Map<string, number>();
  let anyNamespace: number | undefined, anyNetwork: number | undefined, all: number | undefined;
  const uids = new Map<string, { uid?: string; at: string }>();
  for (const [i, g] of grants.entries()) {
    const ns = g.namespace, net = g.network;
    const earlier = ns === undefined && net === undefined
      ? (i > 0 ? 0 : undefined)
      : net === undefined
      ? byNamespace.get(ns!) ?? anyNamespace
      : ns === undefined
      ? byNetwork.get(net) ?? anyNetwork
      : exact.get(`${ns}\u0000${net}`) ?? namespaceWide.get(ns) ?? networkWide.get(net) ?? all;
    if (earlier !== undefined) {
      const o = grants[earlier];
      throw new CniError(
        "config",
        `node config ${path}: field allowScopes.${i}: it and allowScopes.${earlier} both grant ` +
          describe(ns ?? o.namespace, net ?? o.network),
        "a network has one address space: give each grant its own namespace or network",
      );
    }
    if (ns !== undefined && !byNamespace.has(ns)) byNamespace.set(ns, i);
    if (net !== undefined && !byNetwork.has(net)) byNetwork.set(net, i);
    if (ns === undefined) anyNamespace ??= i;
    if (net === undefined) anyNetwork ??= i;
    if (ns !== undefined && net !== undefined) exact.set(`${ns}\u0000${net}`, i);
    else if (ns !== undefined) namespaceWide.set(ns, i);
    else if (net !== undefined) networkWide.set(net, i);
    else all = i;
    for (const [role, ref] of Object.entries(g.scope)) {
      const object = JSON.stringify([ref.apiGroup, ref.kind, ref.name]);
      const at = `allowScopes.${i}.scope.${role}`;
      const seen = uids.get(object);
      if (!seen) uids.set(object, { uid: ref.uid, at });
      else if (seen.uid !== ref.uid) {
        throw new CniError(
          "config",
          `node config ${path}: field ${at}.uid: ${seen.at} names the same ${ref.kind} ` +
            `${JSON.stringify(ref.name)} with ${seen.uid ? `uid ${seen.uid}` : "no uid"}`,
          "Milo counts the uid in the address space, so the two would be two spaces, in which " +
            "Milo may give one address to two pods of one network: give every reference to an " +
            "object the object's uid",
        );
      }
    }
  }
}

function describe(namespace: string | undefined, network: string | undefined): string {
  const net = network === undefined ? "every network" : `network ${JSON.stringify(network)}`;
  return `${net} of ${namespace === undefined ? "every namespace" : `namespace ${namespace}`}`;
}

/**
 * The scope an ADD's claims carry: the one the node config grants the pod's
 * namespace for the network, uid included. Throws code 7, naming the key and
 * what root would grant, when none is granted, when the network config names
 * another scope (a role, object or uid the grant does not), or a class the
 * grant does not list. What the network config leaves out, the grant gives.
 */
export function grantedScope(
  node: Grants,
  a: { podNamespace?: string; network: string },
  net: { classes: Partial<Record<Family, string>>; scope?: Record<string, ScopeRef> },
): Record<string, ScopeRef> {
  const where = `network ${JSON.stringify(clip(a.network, 80))} of ${
    a.podNamespace ? `namespace ${a.podNamespace}` : "a pod without a namespace"
  }`;
  const found = grantOf(node, a.podNamespace, a.network);
  if (!found) {
    const example = {
      ...(a.podNamespace ? { namespace: a.podNamespace } : {}),
      network: a.network,
      scope: net.scope ?? { ROLE: { apiGroup: "GROUP", kind: "KIND", name: "NAME", uid: "UID" } },
      classes: Object.values(net.classes).filter((c) => c !== undefined),
    };
    throw new CniError(
      "config",
      `field ipam.scope: node config ${node.path} grants no address space to ${where}`,
      "a network's address space is root's (Milo keeps an address unique only within one): " +
        `root adds ${clip(JSON.stringify(example), 600)} to allowScopes, the scope with its ` +
        "object's uid (docs/address-spaces.md)",
    );
  }
  const { grant, index } = found;
  const granted = `allowScopes.${index} of node config ${node.path}`;
  for (const [role, ref] of Object.entries(net.scope ?? {})) {
    const have = grant.scope[role];
    const differs = !have
      ? ""
      : (["apiGroup", "kind", "name", "uid"] as const).find((k) =>
        ref[k] !== undefined && ref[k] !== have[k]
      );
    if (have && differs === undefined) continue;
    throw new CniError(
      "config",
      have
        ? `field ipam.scope.${role}.${differs}: not the ${differs} granted to ${where} (${granted})`
        : `field ipam.scope.${role}: no such scope role is granted to ${where} (${granted})`,
      `granted ${clip(JSON.stringify(grant.scope), 400)}: leave scope out of the network config ` +
        "(the grant's applies) or name the granted one; a network has one address space, which " +
        `root moves by changing allowScopes.${index} once the network's pods are gone`,
    );
  }
  for (const [family, cls] of Object.entries(net.classes)) {
    if (cls === undefined || !grant.classes || grant.classes.includes(cls)) continue;
    throw new CniError(
      "config",
      `field ipam.classes.${family}: class ${JSON.stringify(clip(cls, 80))} is not granted to ` +
        `${where} (${granted})`,
      `granted classes: ${grant.classes.join(", ")}; root adds ${
        JSON.stringify(clip(cls, 80))
      } to allowScopes.${index}.classes`,
    );
  }
  return grant.scope;
}

/**
 * True when a claim's `scope` has exactly `want`'s roles, each naming the
 * same object (apiGroup, kind, name) with the same uid: `exact`, the same
 * address space to Milo; `either`, also a reference without a uid against
 * one with it (claims made before root pinned the uid, or a network config's
 * scope that names none): a release path's judgement that a claim was made
 * for a network, never the space a claim is made in.
 */
export function namesScope(
  have: unknown,
  want: Record<string, ScopeRef>,
  uid: "exact" | "either",
): boolean {
  const scope = isPlainObject(have) ? have : {};
  const roles = Object.keys(want);
  if (Object.keys(scope).length !== roles.length) return false;
  return roles.every((role) => {
    const ref = scope[role], w = want[role];
    if (!isPlainObject(ref)) return false;
    if (ref.apiGroup !== w.apiGroup || ref.kind !== w.kind || ref.name !== w.name) return false;
    return ref.uid === w.uid ||
      (uid === "either" && (ref.uid === undefined || w.uid === undefined));
  });
}
