/** The usage of `milo-ipam` and of each of its subcommands, as `--help` prints it. */

/** `milo-ipam --help`. */
export const MAIN_USAGE = `usage: milo-ipam COMMAND [FLAGS]
       CNI_COMMAND=ADD|DEL|CHECK|STATUS|GC|VERSION milo-ipam < NETWORK_CONFIG

A CNI runtime (or a master plugin) execs milo-ipam with CNI_COMMAND set, the
network config on stdin and no arguments. The commands:

  agent         the node agent: the plugin's calls over a unix socket, the reconcile timer,
                metrics
  reconcile     release this node's leases whose holder is gone (the journal, then orphans)
  sweep         release the cluster's leases whose pod is gone (Milo against its API)
  show          who holds an address, a pod's or a node's claims; the pools' utilisation
  release       release one address by hand, its holder proven gone first
  decommission  release every lease of a deleted cluster (no Kubernetes API)
  version       the release, its node state format and the CNI versions

milo-ipam COMMAND --help prints a command's flags. Exit status 2: a wrong command line.`;

/** `milo-ipam agent --help`. */
export const AGENT_USAGE = `usage: milo-ipam agent [--config FILE]

Runs until SIGTERM or SIGINT: answers the plugin's calls on agent.socket, runs the
node reconcile every agent.reconcileIntervalS, serves /metrics, /readyz and /livez on
agent.metrics, and writes each record it logs to stdout as well as to log.file.

  --config FILE   the node config (default: the installed one, else /etc/milo-ipam/node.json)`;

/** `milo-ipam reconcile --help`. */
export const RECONCILE_USAGE =
  `usage: milo-ipam reconcile [--config FILE] [--grace SECONDS] [--dry-run] [--force] [--list]

Finishes the release journal, then releases this host's claims whose container no
result cache names in two runs --grace apart; prints a JSON report. Exit status: 0
done, 1 something failed, 2 a brake held (or a wrong command line).

  --config FILE      the node config (default: the installed one)
  --grace SECONDS    the absence to wait for (default reconcile.graceS)
  --dry-run          decide, release nothing
  --force            release past the brakes (by hand, when the node truly has no pod)
  --list             list this node's claims in Milo into the node's record first`;

/** `milo-ipam sweep --help`: the sweep's own usage line, then what it does. */
export function sweepUsage(line: string): string {
  return `${line}

Compares Milo's claims of the node config's cluster with the Kubernetes API and
releases the leases of pods that are gone (by pod UID), with --apply; else a dry run.
Exit status: 0 done, 1 an error, 2 a brake (or a wrong command line), 3 some releases
failed. --timeout bounds one operation (a LIST, Milo's or the API's, across its pages;
one claim's re-check and release) and --request-timeout one request (a LIST's answer
may pause no longer): the sweep's own, default the node config's timeouts for Milo
(120 s and 10 s for the API); the nodes' ADD deadline stays the node config's. Every
flag and rule: docs/sweep.md.`;
}

/** `milo-ipam show --help`. */
export const SHOW_USAGE =
  `usage: milo-ipam show ADDRESS | --pod NAMESPACE/NAME | --node NAME | --retained | --pools
                      [--config FILE] [--output text|json]

Who holds a lease: each matching claim with its address, holder (pod, container,
interface, network), node, host and age on Milo's clock; on the holder's own node,
also whether its result caches name the container, its record and its journal entry.

  ADDRESS              an IPv4 or IPv6 address (a CIDR's address part is used): every
                       claim in milo.namespace, of any cluster, whose lease holds it;
                       when none does, the retained allocation that holds it
  --pod NS/NAME        the claims of that pod in this node config's cluster; with none,
                       whether this node config grants its namespace a stable identity
  --node NAME          the claims of that node in this node config's cluster
  --retained           every retained address of milo.namespace (IPAllocations Milo
                       keeps after a Retain claim is deleted, for a claim of the same
                       name): address, allocation, since when, the lease's end once
                       Milo names it; by address, with the total
  --pools              each IPPool Milo shows the token: classes, CIDR, allocated,
                       total and available, and the utilisation Milo reports
  --config FILE        the node config (default: the installed one)
  --output text|json   text (default) or one JSON object

Each query is one LIST (an address no claim holds, two: the claims, then the
IPAllocations): Milo reads every object of its kind in the project for any LIST (a
label selector narrows only the answer), so run it by hand, not in a loop. Milo records
no pod, namespace or node on a retained allocation (it carries none of its claim's
labels): how many addresses are retained and which, not whose.

When Milo cannot be asked (unreachable, the token refused), ADDRESS, --pod and
--node report what this node itself holds (its records, its journal's owed
releases, which result caches name each container) and say what was not asked;
exit status 1.`;

/** `milo-ipam version --help`. */
export const VERSION_USAGE = `usage: milo-ipam version [--output text|json]

Prints the release, the node state format it reads and writes, and the CNI versions.`;

/** `milo-ipam release --help`. */
export const RELEASE_USAGE =
  `usage: milo-ipam release ADDRESS (--kubeconfig FILE | --in-cluster | --holder POD_UID)
                         [--apply] [--config FILE] [--output text|json]
                         [--interval D] [--node-monitor-grace D] [--termination-grace D]
                         [--quiet D] [--timeout D]

Releases the one claim holding ADDRESS once its holder is proven gone; a dry run
without --apply. Exit status: 0 released (or would be, or gone already), 1 an
error, 2 refused (its holder may live; nothing released).

  --kubeconfig FILE    the claim's cluster's API (the node config's cluster): the pod
  --in-cluster         the claim records is absent by UID in two looks, judged by the
                       sweep's rules (not a static pod, its node Ready and its kubelet
                       certain to have ended it: the node monitor's and its
                       termination grace waited), and absent again after
  --holder POD_UID     your word that this pod is gone (its cluster's API is gone too):
                       the claim must record exactly this pod UID, and no claim of its
                       node may have been made within --quiet
  --apply              release it (by its uid; a fresh GET finds the same claim)
  --interval D         between the two looks (default 30s; at least the node monitor's)
  --node-monitor-grace D   how long a cut-off node still shows Ready (default 55s)
  --termination-grace D    a deleted pod's time to end (default 30s, or the pod's)
  --quiet D            with --holder: the node's newest claim at least this old (default 1h)
  --timeout D          one operation's budget (default 1m)
  --config FILE        the node config naming Milo (default: the installed one)
  --output text|json   text (default) or one JSON object

Every rule, and the state that makes each true for a live pod: docs/release.md.`;

/** `milo-ipam decommission --help`. */
export const DECOMMISSION_USAGE =
  `usage: milo-ipam decommission --cluster NAME [--apply --expect N] [--config FILE]
                              [--quiet D] [--interval D] [--timeout D]
                              [--request-timeout D] [--output text|json]

Releases every lease a deleted cluster holds in Milo, from outside it (no
Kubernetes API). First a dry run: it lists the cluster's claims twice --interval
apart and says how many it would release; then --apply --expect N, N the number
the dry run listed. Refused (nothing released) while the cluster shows activity:
a claim of it made within --quiet, or its claims changed between the two LISTs.
Exit status: 0 done, 1 an error, 2 refused, 3 some releases failed.

  --cluster NAME       the cluster (its claims' milo-ipam.io/cluster label)
  --apply              release them (each by its uid; a fresh GET finds the same claim)
  --expect N           with --apply: the dry run's count; any other count is refused
  --quiet D            no claim of the cluster made within this long (default 1h)
  --interval D         between the two LISTs (default 1m)
  --timeout D          one LIST's, or one claim's release, budget (default 5m)
  --request-timeout D  one request's, and a LIST's longest pause (default 30s)
  --config FILE        a node config naming the cluster's Milo project and token
  --output text|json   text (default) or one JSON object

Every rule, and the state that makes it true for a live pod: docs/release.md.`;
