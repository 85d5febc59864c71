/**
 * The verbs' branches over the in-memory fake of their seam to Milo
 * (lib/milo_calls.ts, testing/milo_calls_fake.ts): no HTTP, so each case is
 * the handler's decision alone. The wire client keeps its own tests at the
 * wire (tests/milo_client.test.ts, the stub Milo).
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { check } from "../lib/check.ts";
import { claimBody, claimName, KEYS } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { CniError } from "../lib/errors.ts";
import { gc } from "../lib/gc.ts";
import type { Invocation } from "../lib/invocation.ts";
import { status } from "../lib/status.ts";
import { FakeMiloCalls, unanswered } from "../testing/milo_calls_fake.ts";
import {
  invocation,
  type InvocationOptions,
  rejectsWith,
  withTempDir,
} from "../testing/stub_invocation.ts";
import { StubMilo } from "../testing/stub_milo.ts";

/** An invocation of `command` whose calls to Milo are the fake's. */
function over(fake: FakeMiloCalls, dir: string, o: Partial<InvocationOptions> = {}): Invocation {
  const inv = invocation(new StubMilo(), { command: "ADD", stateDir: dir, ...o });
  return { ...inv, milo: fake, rollback: fake };
}

const names = (inv: Invocation) =>
  ["ipv4", "ipv6"].map((f) => claimName(inv.attachment, f as "ipv4"));

/** One case: what it sets up, the call, what must hold after. */
interface Case {
  name: string;
  run: (fake: FakeMiloCalls, dir: string) => Promise<void>;
}

const CASES: Case[] = [
  {
    name: "ADD makes one claim per family and records them held",
    run: async (fake, dir) => {
      const inv = over(fake, dir);
      const r = await add(inv);
      assert.equal((r.output?.ips as unknown[]).length, 2);
      assert.deepEqual([...fake.claims.keys()].sort(), names(inv).sort());
      assert.equal(inv.holdings.read(inv.attachment)?.state, "held");
    },
  },
  {
    name: "ADD again finds its own claims (a retry): no second claim",
    run: async (fake, dir) => {
      await add(over(fake, dir));
      const before = [...fake.claims.values()].map((c) => c.metadata.uid);
      await add(over(fake, dir));
      assert.deepEqual([...fake.claims.values()].map((c) => c.metadata.uid), before);
    },
  },
  {
    name: "ADD under pod identity while another sandbox holds the name: 11, nothing released",
    run: async (fake, dir) => {
      const pod = {
        ipam: { classes: { ipv4: "vpc-pods-ipv4" }, identity: "pod" },
        node: { allowIdentities: [{ namespace: "shop" }] },
      };
      await add(over(fake, dir, { ...pod, containerId: "old" }));
      await rejectsWith(
        add(over(fake, dir, { ...pod, containerId: "new" })),
        11,
        /no second holder/,
      );
      assert.equal(fake.claims.size, 1);
    },
  },
  {
    name: "ADD of an attachment whose name another holder's claim carries: 103, left alone",
    run: async (fake, dir) => {
      const inv = over(fake, dir);
      const other = { ...inv.attachment, node: "node-9" };
      await fake.createClaim(claimBody("default", inv.conf.network, other, "ipv4"));
      await rejectsWith(add(inv), 103, /held by another holder/);
      assert.equal(fake.claims.get(names(inv)[0])?.metadata.annotations?.[KEYS.node], "node-9");
    },
  },
  {
    name: "ADD whose create goes unanswered: 11, the record in doubt (it may land yet)",
    run: async (fake, dir) => {
      fake.fail("create", unanswered);
      fake.fail("create", unanswered);
      const inv = over(fake, dir, { ipam: { classes: { ipv6: "vpc-pods-ipv6" } } });
      await rejectsWith(add(inv), 11);
      assert.equal(inv.holdings.read(inv.attachment)?.state, "adding", "in doubt");
    },
  },
  {
    name: "ADD whose create Milo refuses (403): 101, the record as it was (none)",
    run: async (fake, dir) => {
      fake.fail("create", () => new CniError("auth", "Milo forbids this request (403)"), 2);
      const inv = over(fake, dir);
      await rejectsWith(add(inv), 101);
      assert.equal(inv.holdings.read(inv.attachment), undefined);
      assert.equal(fake.claims.size, 0, "nothing made");
    },
  },
  {
    name: "DEL releases the attachment's claims and its record",
    run: async (fake, dir) => {
      await add(over(fake, dir));
      const inv = over(fake, dir, { command: "DEL" });
      await del(inv);
      assert.equal(fake.claims.size, 0);
      assert.equal(inv.holdings.read(inv.attachment), undefined);
      assert.deepEqual(await inv.journal.list(), []);
    },
  },
  {
    name: "DEL leaves a claim of its name that records another holder",
    run: async (fake, dir) => {
      const inv = over(fake, dir, { command: "DEL" });
      await fake.createClaim(
        claimBody("default", inv.conf.network, { ...inv.attachment, containerId: "x" }, "ipv4"),
      );
      // The name is this attachment's; its annotations another's (a reused name).
      const c = [...fake.claims.values()][0];
      fake.claims.delete(c.metadata.name);
      fake.claims.set(names(inv)[0], { ...c, metadata: { ...c.metadata, name: names(inv)[0] } });
      const r = await del(inv);
      assert.match(r.skipped ?? "", /held by another sandbox, left alone/);
      assert.equal(fake.claims.size, 1);
    },
  },
  {
    name: "DEL whose DELETE fails: 11, journaled with the uid it read",
    run: async (fake, dir) => {
      await add(over(fake, dir, { ipam: { classes: { ipv4: "vpc-pods-ipv4" } } }));
      const uid = [...fake.claims.values()][0].metadata.uid;
      fake.fail("delete", () => new CniError("transient", "Milo unreachable or overloaded"), 99);
      const inv = over(fake, dir, { command: "DEL", ipam: { classes: { ipv4: "vpc-pods-ipv4" } } });
      await rejectsWith(del(inv), 11, /journaled/);
      const [entry] = await inv.journal.list();
      assert.deepEqual(entry.entry?.claims, [{ name: names(inv)[0], uid }]);
    },
  },
  {
    name: "CHECK passes on the claims it made, and is 104 once one is gone",
    run: async (fake, dir) => {
      await add(over(fake, dir));
      await check(over(fake, dir, { command: "CHECK" }));
      fake.claims.delete(names(over(fake, dir))[1]);
      await rejectsWith(check(over(fake, dir, { command: "CHECK" })), 104, /missing/);
    },
  },
  {
    name: "GC releases this node's claim of an attachment no longer valid, and keeps a valid one",
    run: async (fake, dir) => {
      await add(over(fake, dir, { containerId: "gone" }));
      await add(over(fake, dir, { containerId: "live" }));
      fake.now = () => Date.now() + 120_000;
      const live = { "cni.dev/valid-attachments": [{ containerID: "live", ifname: "eth0" }] };
      const r = await gc(over(fake, dir, { command: "GC", top: live }));
      assert.equal(r.claims.length, 2);
      assert.ok(
        [...fake.claims.values()].every((c) =>
          c.metadata.annotations?.[KEYS.containerId] === "live"
        ),
      );
    },
  },
  {
    name: "STATUS: a read of Milo answers; Milo failing is 50",
    run: async (fake, dir) => {
      await status(over(fake, dir, { command: "STATUS" }));
      fake.fail("get", () => new CniError("transient", "Milo unreachable"));
      await rejectsWith(status(over(fake, dir, { command: "STATUS" })), 50);
    },
  },
];

for (const c of CASES) {
  Deno.test(`handlers over the seam: ${c.name}`, () =>
    withTempDir((dir) => c.run(new FakeMiloCalls(), dir)));
}
