/** The utilization page at `/` and its JSON feed at `/-/utilization`. */

import type { Ipam } from "./ipam.ts";
import { familyBits } from "./ipmath.ts";
import type { IPAllocationObject, IPClaimObject } from "./objects.ts";

const P = "milo-ipam.io/";
const UNLABELLED = "(unlabelled)";

/** One pod interface lease: the claims that share pod, container and ifname. */
export interface Lease {
  pod: string;
  containerId: string;
  ifname: string;
  created: string;
  addresses: { cidr: string; address: string; family: string; pool: string; claim: string }[];
}

/** One pool's bar on the page (counts as decimal strings: IPv6 exceeds 64 bits). */
export interface PoolUsage {
  name: string;
  cidr: string;
  ipFamily: string;
  classNames: string[];
  unitPrefixLength: number;
  single: boolean;
  total: string;
  allocated: string;
  available: string;
  reserved: string;
  /** Allocated units held by retained allocations (their claim deleted under Retain). */
  retained: string;
  utilizationPercent: number;
}

/** One retained allocation: its claim is gone, its address still held. */
export interface RetainedAddress {
  allocation: string;
  namespace: string;
  cidr: string;
  pool: string;
  className: string;
  /** `Retained`, or `Expiring` once its lease elapsed. */
  phase: string;
  /** When its claim was deleted. */
  since: string;
}

/** Utilization snapshot of the projects shown on the page. */
export interface Utilization {
  generatedAt: string;
  projects: {
    name: string;
    claims: number;
    pools: PoolUsage[];
    retained: RetainedAddress[];
    clusters: { name: string; nodes: { name: string; leases: Lease[] }[] }[];
  }[];
}

function ident(o: IPClaimObject, key: string): string {
  return o.metadata.annotations?.[P + key] || o.metadata.labels?.[P + key] || "";
}

/** Builds the utilization snapshot, optionally for one project. */
export function utilization(ipam: Ipam, project?: string | null): Utilization {
  const names = ipam.projects().filter((p) => !project || p === project);
  return {
    generatedAt: new Date().toISOString(),
    projects: names.map((name) => {
      const retained = ipam.listAllocations(name).filter((a) => !a.spec.claimRef)
        .map(retainedAddress);
      const pools = ipam.poolPlans(name).map((plan): PoolUsage => {
        const c = ipam.capacity(name, plan);
        return {
          name: plan.name,
          cidr: plan.spec.cidr,
          ipFamily: plan.cidr.family,
          classNames: plan.spec.classNames,
          unitPrefixLength: plan.unitPrefix,
          single: plan.unitPrefix === familyBits(plan.cidr.family),
          total: String(c.total),
          allocated: String(c.allocated),
          available: String(c.available),
          reserved: String(c.reserved),
          retained: String(retained.filter((r) => r.pool === plan.name).length),
          utilizationPercent: c.utilizationPercent,
        };
      });
      const claims = ipam.listClaims(name);
      const clusters = new Map<string, Map<string, Map<string, Lease>>>();
      for (const o of claims) {
        const cluster = ident(o, "cluster") || UNLABELLED;
        const node = ident(o, "node") || UNLABELLED;
        const pod = ident(o, "pod") || `${o.metadata.namespace}/${o.metadata.name}`;
        const containerId = ident(o, "container-id");
        const ifname = ident(o, "ifname");
        const nodes = clusters.get(cluster) ?? new Map<string, Map<string, Lease>>();
        clusters.set(cluster, nodes);
        const leases = nodes.get(node) ?? new Map<string, Lease>();
        nodes.set(node, leases);
        const key = `${pod}\0${containerId}\0${ifname}`;
        const lease: Lease = leases.get(key) ??
          { pod, containerId, ifname, created: o.metadata.creationTimestamp, addresses: [] };
        leases.set(key, lease);
        if (o.metadata.creationTimestamp < lease.created) {
          lease.created = o.metadata.creationTimestamp;
        }
        lease.addresses.push({
          cidr: o.status.allocatedCIDR,
          address: o.status.address ?? "",
          family: o.status.allocatedCIDR.includes(":") ? "IPv6" : "IPv4",
          pool: o.status.poolRef.name,
          claim: o.metadata.name,
        });
      }
      const byName = (a: string, b: string) =>
        a === UNLABELLED ? 1 : b === UNLABELLED ? -1 : a.localeCompare(b, "en", { numeric: true });
      return {
        name,
        claims: claims.length,
        pools,
        retained,
        clusters: [...clusters].sort(([a], [b]) => byName(a, b)).map(([cn, nodes]) => ({
          name: cn,
          nodes: [...nodes].sort(([a], [b]) => byName(a, b)).map(([nn, leases]) => ({
            name: nn,
            leases: [...leases.values()].sort((a, b) =>
              a.pod.localeCompare(b.pod, "en", { numeric: true })
            ),
          })),
        })),
      };
    }),
  };
}

function retainedAddress(a: IPAllocationObject): RetainedAddress {
  const bound = a.status.conditions?.find((c) => c.type === "Bound");
  return {
    allocation: a.metadata.name,
    namespace: a.metadata.namespace ?? "",
    cidr: a.status.allocatedCIDR,
    pool: a.spec.poolRef.name,
    className: a.spec.className,
    phase: a.status.conditions?.some((c) => c.type === "Expiring") ? "Expiring" : "Retained",
    since: bound?.lastTransitionTime ?? a.metadata.creationTimestamp,
  };
}

/** The page: static HTML with the first snapshot inlined, then polling. */
export function renderPage(data: Utilization, project?: string | null): string {
  const json = JSON.stringify(data).replace(/</g, "\\u003c");
  const feed = "/-/utilization" + (project ? `?project=${encodeURIComponent(project)}` : "");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>milo-dev · IPAM utilization</title>
<style>${CSS}</style>
</head>
<body>
<header>
  <div class="brand"><span class="logo">◆</span> milo-dev <span class="sub">IPAM utilization</span></div>
  <div class="right"><span class="badge">development server · not a production backend</span>
  <span id="live" class="live"><span class="dot"></span><span id="live-text">live</span></span></div>
</header>
<nav id="projects"></nav>
<main id="app"></main>
<script id="initial" type="application/json">${json}</script>
<script>const FEED = ${JSON.stringify(feed)};
${SCRIPT}</script>
</body>
</html>
`;
}

const CSS = `
:root { --bg:#f5f7fa; --card:#fff; --ink:#1f2933; --muted:#6b7785; --line:#e3e8ee;
  --ok:#16a34a; --warn:#d97706; --bad:#dc2626; --accent:#4f46e5; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { display:flex; align-items:center; justify-content:space-between; padding:14px 28px;
  background:#111827; color:#f9fafb; }
.brand { font-weight:700; font-size:17px; letter-spacing:.2px; }
.brand .logo { color:#818cf8; margin-right:4px; }
.brand .sub { font-weight:400; color:#9ca3af; margin-left:8px; }
.right { display:flex; gap:14px; align-items:center; }
.badge { font-size:12px; color:#fde68a; border:1px solid #92400e; background:#451a03;
  padding:2px 8px; border-radius:999px; }
.live { font-size:12px; color:#d1d5db; display:flex; align-items:center; gap:6px; }
.live .dot { width:8px; height:8px; border-radius:50%; background:var(--ok); box-shadow:0 0 0 3px rgba(22,163,74,.25); }
.live.stale .dot { background:var(--bad); box-shadow:0 0 0 3px rgba(220,38,38,.25); }
nav { padding:12px 28px 0; display:flex; gap:8px; flex-wrap:wrap; }
nav a { text-decoration:none; color:var(--muted); padding:4px 12px; border-radius:999px; border:1px solid var(--line);
  background:#fff; font-size:13px; }
nav a.on { color:#fff; background:var(--accent); border-color:var(--accent); }
main { padding:8px 28px 40px; max-width:1280px; }
h2 { font-size:18px; margin:22px 0 4px; }
h2 .meta, h3 .meta, .nname .meta, .cluster .meta { font-weight:400; color:var(--muted); font-size:13px; margin-left:8px; }
h3 { font-size:15px; margin:18px 0 8px; color:#374151; }
.pools { display:grid; grid-template-columns:repeat(auto-fill, minmax(340px, 1fr)); gap:14px; margin-top:10px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:14px 16px;
  box-shadow:0 1px 2px rgba(16,24,40,.04); }
.pool .top { display:flex; justify-content:space-between; align-items:baseline; gap:10px; }
.pool .name { font-weight:600; }
.pool .pct { font-size:22px; font-weight:700; font-variant-numeric:tabular-nums; }
.mono { font-family:ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px; }
.pool .cidr { color:var(--muted); margin:2px 0 10px; }
.chip { display:inline-block; font-size:11px; padding:1px 7px; border-radius:999px; background:#eef2ff; color:#3730a3;
  margin-left:4px; }
.chip.fam { background:#ecfdf5; color:#065f46; }
.bar { height:12px; background:#eef1f5; border-radius:6px; overflow:hidden; }
.fill { height:100%; border-radius:6px; background:var(--ok); min-width:0; transition:width .4s ease; }
.fill.warn { background:var(--warn); } .fill.bad { background:var(--bad); }
.fill.some { min-width:3px; }
.nums { display:flex; flex-wrap:wrap; gap:4px 12px; justify-content:space-between; color:var(--muted); margin-top:8px; font-size:12.5px;
  font-variant-numeric:tabular-nums; }
.nums b { color:var(--ink); font-weight:600; }
.cluster { margin-top:14px; }
.cluster > .head { display:flex; align-items:baseline; gap:10px; }
.cluster > .head .cname { font-weight:700; font-size:15px; }
.node { margin-top:10px; border-top:1px solid var(--line); padding-top:8px; }
.node .nname { font-weight:600; color:#374151; }
table { width:100%; border-collapse:collapse; margin-top:6px; table-layout:fixed; }
col.c-pod { width:30%; } col.c-if { width:10%; } col.c-addr { width:30%; } col.c-ctr { width:18%; } col.c-age { width:12%; }
td { overflow:hidden; text-overflow:ellipsis; }
th { text-align:left; font-size:11.5px; text-transform:uppercase; letter-spacing:.04em; color:var(--muted);
  font-weight:600; padding:4px 8px; border-bottom:1px solid var(--line); }
td { padding:5px 8px; border-bottom:1px solid #f0f2f5; vertical-align:top; }
tr:last-child td { border-bottom:0; }
td.age { color:var(--muted); white-space:nowrap; font-variant-numeric:tabular-nums; }
.addr { display:block; }
.empty { color:var(--muted); padding:16px; text-align:center; }
.err { margin:12px 0; padding:10px 14px; border-radius:8px; background:#fef2f2; color:#991b1b; border:1px solid #fecaca; }
`;

const SCRIPT = `
"use strict";
let data = JSON.parse(document.getElementById("initial").textContent);
let lastOk = Date.now();
let failing = false;
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
function big(s) {
  try {
    const n = BigInt(s);
    if (n >= 10000000n) return new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 2 }).format(Number(n));
    return n.toLocaleString("en-US");
  } catch { return s; }
}
function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }
function pctText(p) {
  const pct = p.utilizationPercent;
  if (pct === 0 && p.allocated !== "0") return "<0.01%";
  if (pct > 0 && pct < 0.01) return "<0.01%";
  return pct.toFixed(2) + "%";
}
function age(ts, now) {
  let s = Math.max(0, Math.floor((now - Date.parse(ts)) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + Math.floor(s % 86400 / 3600) + "h";
}
function poolCard(p) {
  const pct = p.utilizationPercent;
  const level = pct >= 90 ? " bad" : pct >= 70 ? " warn" : "";
  const unit = p.single ? "addresses" : "/" + p.unitPrefixLength + " blocks";
  return h("div", { class: "card pool", "data-pool": p.name },
    h("div", { class: "top" },
      h("div", null, h("span", { class: "name" }, p.name), h("span", { class: "chip fam" }, p.ipFamily),
        ...p.classNames.map((c) => h("span", { class: "chip" }, c))),
      h("div", { class: "pct", title: pct + "%" }, pctText(p))),
    h("div", { class: "cidr mono" }, p.cidr),
    h("div", { class: "bar", role: "progressbar", "aria-valuenow": String(pct), "aria-valuemin": "0", "aria-valuemax": "100" },
      h("div", { class: "fill" + level + (p.allocated !== "0" ? " some" : ""), style: "width:" + Math.min(100, pct) + "%" })),
    h("div", { class: "nums" },
      h("span", { title: p.allocated + " / " + p.total }, h("b", { class: "allocated" }, big(p.allocated)), " / ",
        h("span", { class: "total" }, big(p.total)), " " + unit + " allocated"),
      h("span", { title: p.available + " free" }, h("b", null, big(p.available)), " free · " + big(p.reserved) + " reserved" +
        (p.retained !== "0" ? " · " + big(p.retained) + " retained" : ""))));
}
function retainedCard(rs) {
  const now = Date.now();
  const cols = ["Allocation", "Address", "Pool", "Class", "Phase", "Retained for"].map((t) => h("th", null, t));
  return h("div", { class: "card retained" },
    h("table", null, h("thead", null, h("tr", null, cols)),
      h("tbody", null, rs.map((r) => h("tr", { class: "retained-row", "data-allocation": r.allocation },
        h("td", { class: "mono" }, r.namespace + "/" + r.allocation), h("td", { class: "mono" }, r.cidr),
        h("td", null, r.pool), h("td", null, r.className), h("td", null, r.phase),
        h("td", { class: "age", "data-created": r.since }, age(r.since, now)))))));
}
function leaseRow(l, now) {
  return h("tr", { class: "lease", "data-pod": l.pod },
    h("td", { class: "pod" }, l.pod),
    h("td", { class: "mono" }, l.ifname || "—"),
    h("td", { class: "mono" }, l.addresses.map((a) => h("span", { class: "addr", title: a.claim + " · " + a.pool }, a.address || a.cidr))),
    h("td", { class: "mono", title: l.containerId }, l.containerId ? l.containerId.slice(0, 12) : "—"),
    h("td", { class: "age", "data-created": l.created }, age(l.created, now)));
}
function nodeBlock(n, now) {
  const cols = ["Pod", "Interface", "Addresses", "Container", "Age"].map((t) => h("th", null, t));
  return h("div", { class: "node", "data-node": n.name },
    h("div", { class: "nname" }, n.name, h("span", { class: "meta" }, plural(n.leases.length, "lease"))),
    h("table", null,
      h("colgroup", null, ["c-pod", "c-if", "c-addr", "c-ctr", "c-age"].map((c) => h("col", { class: c }))),
      h("thead", null, h("tr", null, cols)),
      h("tbody", null, n.leases.map((l) => leaseRow(l, now)))));
}
function clusterCard(c) {
  const now = Date.now();
  const count = c.nodes.reduce((n, x) => n + x.leases.length, 0);
  const meta = plural(c.nodes.length, "node") + " · " + plural(count, "lease");
  return h("div", { class: "card cluster", "data-cluster": c.name },
    h("div", { class: "head" }, h("span", { class: "cname" }, c.name), h("span", { class: "meta" }, meta)),
    c.nodes.map((n) => nodeBlock(n, now)));
}
function render() {
  const nav = document.getElementById("projects");
  const params = new URLSearchParams(location.search);
  const cur = params.get("project");
  nav.replaceChildren(h("a", { href: "/", class: cur ? "" : "on" }, "all projects"),
    ...(cur ? [h("a", { href: "?project=" + encodeURIComponent(cur), class: "on" }, cur)] :
      data.projects.map((p) => h("a", { href: "?project=" + encodeURIComponent(p.name) }, p.name))));
  const app = document.getElementById("app");
  const parts = [];
  if (failing) parts.push(h("div", { class: "err" }, "milo-dev is not answering; showing the last snapshot."));
  if (data.projects.length === 0) parts.push(h("div", { class: "card empty" }, "No such project."));
  for (const p of data.projects) {
    const leases = p.clusters.reduce((n, c) => n + c.nodes.reduce((m, x) => m + x.leases.length, 0), 0);
    const head = h("h2", null, "Project " + p.name,
      h("span", { class: "meta" }, plural(p.pools.length, "pool") + " · " + plural(p.claims, "claim") + " · " + plural(leases, "pod lease")));
    const clusters = p.clusters.length === 0
      ? [h("div", { class: "card empty" }, "No leases yet.")]
      : p.clusters.map(clusterCard);
    parts.push(h("section", { class: "project", "data-project": p.name },
      head,
      h("div", { class: "pools" }, p.pools.map(poolCard)),
      ...(p.retained.length ? [h("h3", null, "Retained addresses", h("span", { class: "meta" },
        plural(p.retained.length, "allocation") + " held after its claim was deleted (reclaimPolicy Retain)")),
        retainedCard(p.retained)] : []),
      h("h3", null, "Pod leases", h("span", { class: "meta" }, "by cluster and node")),
      clusters));
  }
  app.replaceChildren(...parts);
}
function tickLive() {
  const el = document.getElementById("live");
  const s = Math.round((Date.now() - lastOk) / 1000);
  el.classList.toggle("stale", failing);
  document.getElementById("live-text").textContent = failing ? "offline · " + s + "s" : "live · updated " + s + "s ago";
  for (const td of document.querySelectorAll("td.age")) td.textContent = age(td.dataset.created, Date.now());
}
async function poll() {
  try {
    const r = await fetch(FEED, { cache: "no-store" });
    if (!r.ok) throw new Error(String(r.status));
    data = await r.json();
    lastOk = Date.now();
    failing = false;
  } catch {
    failing = true;
  }
  render();
  tickLive();
}
render();
tickLive();
setInterval(poll, 2000);
setInterval(tickLive, 1000);
`;
