/**
 * A release racing a re-creation of its claim's name, against milo-dev
 * deleting as Milo does (admin `/limits` `checkedPreconditions: false`:
 * `ipclaim/storage.go` `AllocatingREST.Delete` reads the claim by name), under
 * both reclaim policies. The handlers run in-process over real Milo clients;
 * the race is made between a release's GET and its DELETE, and a first-fit
 * create waits between a DELETE and anything that follows it. However the
 * calls interleave, no address ends up held by two live pods, and every
 * address an ADD printed is its claim in Milo.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { KEYS } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { gc } from "../lib/gc.ts";
import type { HandlerResult } from "../lib/invocation.ts";
import { formatCidr, parseCidr } from "../lib/ip.ts";
import { MiloClient } from "../lib/milo.ts";
import { miloApi, type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { invocation, type InvocationOptions, withTempDir } from "../testing/stub_invocation.ts";
import type { StubMilo } from "../testing/stub_milo.ts";

type Hook = (method: string, path: string, phase: "before" | "after") => Promise<void>;

/** A stand-in for the stub whose clients talk to milo-dev, through `hook` when given. */
function miloDev(dev: MiloDev, hook?: Hook): StubMilo {
  const f = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const method = init?.method ?? "GET";
    const path = new URL(String(input)).pathname;
    await hook?.(method, path, "before");
    const res = await dev.fetch(String(input), init);
    await hook?.(method, path, "after");
    return res;
  }) as typeof fetch;
  const client = (o: { requestMs?: number; deadline?: number } = {}) =>
    new MiloClient({
      baseUrl: dev.url,
      namespace: "default",
      token: dev.token,
      requestMs: o.requestMs ?? 2_000,
      deadline: o.deadline ?? Date.now() + 20_000,
      fetch: f,
    });
  return { client } as unknown as StubMilo;
}

/** One node: its state directory, name and host, and invocations of its verbs over milo-dev. */
function node(dev: MiloDev, dir: string, name: string) {
  Deno.writeTextFileSync(`${dir}/machine-id`, `${name.replace(/\W/g, "").padEnd(32, "0")}\n`);
  return (command: InvocationOptions["command"], o: Partial<InvocationOptions> = {}, hook?: Hook) =>
    invocation(miloDev(dev, hook), {
      command,
      stateDir: dir,
      ...o,
      // The stable identities the Retain race uses are the node's to grant.
      node: { node: name, gc: { minAgeS: 0 }, allowIdentities: [{ namespace: "shop" }], ...o.node },
      ipam: { classes: { ipv4: "vpc-pods-ipv4" }, ...o.ipam },
    });
}

/** The address a result printed, canonical. */
const printed = (r: HandlerResult) =>
  formatCidr(parseCidr((r.output?.ips as { address: string }[])[0].address)!);

/** Milo's claims: name → [address, container]. */
async function claims(dev: MiloDev): Promise<Map<string, [string, string]>> {
  const out = new Map<string, [string, string]>();
  for (const c of await dev.listClaims()) {
    const address = formatCidr(parseCidr(String(c.status.allocatedCIDR))!);
    out.set(c.metadata.name, [address, c.metadata.annotations?.[KEYS.containerId] ?? "?"]);
  }
  return out;
}

/**
 * The ledger: each live pod's printed address is a claim of Milo's recording
 * its container, and no address is held by two live pods.
 */
async function assertLedger(dev: MiloDev, live: Map<string, string>) {
  const held = [...(await claims(dev)).values()];
  for (const [cid, address] of live) {
    assert.ok(
      held.some(([a, c]) => a === address && c === cid),
      `${cid} runs on ${address}: Milo records it (${JSON.stringify(held)})`,
    );
  }
  const addresses = [...live.values()];
  assert.equal(new Set(addresses).size, addresses.length, `one pod per address: ${addresses}`);
}

async function withMilo(fn: (dev: MiloDev, dir: string) => Promise<void>) {
  const dev = await startMiloDev();
  try {
    assert.equal(
      (await dev.setLimits({ checkedPreconditions: false })).checkedPreconditions,
      false,
    );
    await withTempDir((dir) => fn(dev, dir));
  } finally {
    await dev.stop();
  }
}

const settle = () => new Promise((r) => setTimeout(r, 300));

Deno.test("release race, reclaimPolicy Delete: GC's window is closed by the attachment's lock; the attachment's DEL and ADD wait", async () => {
  await withMilo(async (dev, dir) => {
    const a = node(dev, dir, "node-a");
    const first = await add(a("ADD", { containerId: "x" }));
    const address = printed(first);
    const live = new Map<string, string>();
    let race: Promise<string> | undefined;
    let raced = false;
    let remade = false;
    const hook: Hook = async (method, path, phase) => {
      if (method === "GET" && path.endsWith("-v4") && phase === "after" && !raced) {
        raced = true;
        // Between GC's GET and its DELETE: the runtime DELs the container and ADDs it again
        // (a restarted container keeps its ID), on the same node.
        race = (async () => {
          await del(a("DEL", { containerId: "x" }));
          return printed(await add(a("ADD", { containerId: "x" })));
        })();
        await settle();
      }
      if (method === "POST" && phase === "before" && !remade) {
        remade = true;
        // Between a DELETE and a re-create of what it removed: a first-fit create.
        live.set("y", printed(await add(a("ADD", { containerId: "y" }))));
      }
    };
    const r = await gc(a("GC", { top: { "cni.dev/valid-attachments": [] } }, hook)).catch((e) => e);
    assert.ok(raced, "the race was run");
    live.set("x", await race!);
    assert.equal(remade, false, `nothing was made again: ${r?.message ?? ""} ${r?.details ?? ""}`);
    assert.equal(live.get("x"), address, "first fit: the address freed went to the re-ADD");
    await assertLedger(dev, live);
  });
});

Deno.test("release race, reclaimPolicy Delete: the DEL's own window; the attachment's ADD waits", async () => {
  await withMilo(async (dev, dir) => {
    const a = node(dev, dir, "node-a");
    await add(a("ADD", { containerId: "x" }));
    const live = new Map<string, string>();
    let race: Promise<string> | undefined;
    const hook: Hook = async (method, path, phase) => {
      if (method === "GET" && phase === "after" && !race) {
        // Between the DEL's GET and its DELETE: another party deletes the claim (the sweep),
        // and the runtime ADDs the container again.
        const name = path.split("/").pop()!;
        assert.equal(
          (await miloApi(dev, "DELETE", `/namespaces/default/ipclaims/${name}`)).status,
          200,
        );
        race = add(a("ADD", { containerId: "x" })).then(printed);
        await settle();
      }
    };
    const r = await del(a("DEL", { containerId: "x" }, hook));
    assert.deepEqual(r.claims.length, 1);
    live.set("x", await race!);
    await assertLedger(dev, live);
  });
});

Deno.test("release race, reclaimPolicy Retain: a DEL that removed the next sandbox's claim makes it again; Milo re-binds its address", async () => {
  await withMilo(async (dev, dir) => {
    const b = `${dir}/node-b`;
    await Deno.mkdir(b);
    const a = node(dev, dir, "node-a");
    const other = node(dev, b, "node-b");
    const pod = { ipam: { identity: "pod" }, args: { K8S_POD_NAME: "db-0", K8S_POD_UID: "u1" } };
    await add(a("ADD", { containerId: "old", ...pod }));
    const live = new Map<string, string>();
    let raced = false;
    let competed = false;
    const hook: Hook = async (method, path, phase) => {
      if (method === "GET" && phase === "after" && !raced) {
        raced = true;
        // Between the old sandbox's GET and its DELETE: the sweep releases its claim (its pod
        // is gone), and the re-created pod's sandbox on node B takes the name.
        const name = path.split("/").pop()!;
        assert.equal(
          (await miloApi(dev, "DELETE", `/namespaces/default/ipclaims/${name}`)).status,
          200,
        );
        const next = { ...pod, args: { K8S_POD_NAME: "db-0", K8S_POD_UID: "u2" } };
        live.set("new", printed(await add(other("ADD", { containerId: "new", ...next }))));
      }
      if (method === "POST" && phase === "before" && !competed) {
        competed = true;
        // Between the DELETE that removed the new claim and its re-create: a first-fit create.
        const web = { ...pod, args: { K8S_POD_NAME: "web-1", K8S_POD_UID: "u3" } };
        live.set("web", printed(await add(other("ADD", { containerId: "web", ...web }))));
      }
    };
    const r = await del(a("DEL", { containerId: "old", ...pod }, hook));
    assert.ok(raced && competed, "the race was run");
    assert.deepEqual(r.claims, []);
    assert.match(
      r.skipped ?? "",
      /removed a newer claim of that name \(uid [0-9a-f-]+\): made again/,
    );
    await assertLedger(dev, live);
  });
});
