/**
 * The host's identity (lib/host.ts) when the node has no machine-id: made
 * from the machine's firmware UUID, so a wiped `stateDir` makes the same one
 * again and the node still knows, releases and verifies its own claims; and
 * the warning for a machine-id made afresh at every boot.
 */
import assert from "node:assert/strict";
import { add } from "../lib/add.ts";
import { claimName, KEYS } from "../lib/claims.ts";
import { del } from "../lib/del.ts";
import { CniError } from "../lib/errors.ts";
import { hardwareId, hostId, identityDrift } from "../lib/host.ts";
import { reconcile } from "../lib/reconcile.ts";
import { invocation, withTempDir } from "../testing/stub_invocation.ts";
import { StubMilo } from "../testing/stub_milo.ts";

const UUID = "4C4C4544-0042-3510-8052-B4C04F4A4E32";

Deno.test("hardwareId(): the firmware UUID, never a placeholder, never an error", async () => {
  await withTempDir(async (dir) => {
    const at = async (text: string) => {
      await Deno.writeTextFile(`${dir}/uuid`, text);
      return hardwareId(`${dir}/uuid`);
    };
    assert.equal(await at(`${UUID}\n`), "dmi-4c4c4544004235108052b4c04f4a4e32");
    for (
      const bogus of [
        "00000000-0000-0000-0000-000000000000",
        "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
        "03000200-0400-0500-0006-000700080009",
        "Not Settable",
        "",
      ]
    ) assert.equal(await at(bogus), undefined, bogus);
    assert.equal(hardwareId(`${dir}/absent`), undefined);
    assert.equal(hardwareId(undefined), undefined);
  });
});

Deno.test("a node without a machine-id whose stateDir is wiped knows its own claims again: its DEL and reconcile release them", async () => {
  await withTempDir(async (dir) => {
    const stub = new StubMilo();
    const state = `${dir}/state`;
    await Deno.writeTextFile(`${dir}/product_uuid`, UUID + "\n");
    // No machine-id (hostIdFile names no file): the firmware UUID is the host's identity.
    const node = { hostIdFile: `${dir}/no-machine-id`, hardwareIdFile: `${dir}/product_uuid` };
    const inv = (command: "ADD" | "DEL", containerId: string) =>
      invocation(stub, { command, stateDir: state, containerId, node });
    await add(inv("ADD", "web"));
    await add(inv("ADD", "gone"));
    const host = stub.get(claimName(inv("DEL", "web").attachment, "ipv4"))!.metadata
      .annotations![KEYS.host];
    assert.equal(host, "dmi-4c4c4544004235108052b4c04f4a4e32");
    // The state directory is wiped (a re-provisioned disk, rm -rf by hand).
    await Deno.remove(state, { recursive: true });
    assert.equal(hostId({ ...node, stateDir: state }), host, "the same identity again");
    // The runtime DELs an old sandbox: its claims are this host's, and go.
    await del(inv("DEL", "web"));
    assert.equal(stub.get(claimName(inv("DEL", "web").attachment, "ipv4")), undefined);
    // Reconcile lists this node's claims (it has no record) and takes "gone" for its own.
    const r = await reconcile({
      node: inv("DEL", "gone").node,
      milo: stub.client(),
      graceMs: 0,
      dryRun: false,
    });
    assert.equal(r.listed, true);
    assert.deepEqual(r.otherHosts, [], "no claim of this node looks like another host's");
    // No cache names its container: the liveness rule releases it (forced past the empty-cache
    // brake, this test's node running nothing else).
    const again = await reconcile({
      node: inv("DEL", "gone").node,
      milo: stub.client(),
      graceMs: 0,
      dryRun: false,
      force: true,
    });
    const gone = claimName(inv("DEL", "gone").attachment, "ipv4");
    assert.ok(again.released.some((x) => x.claim === gone), JSON.stringify(again.kept));
    assert.equal(stub.get(gone), undefined);
  });
});

Deno.test("identityDrift(): a machine-id made afresh at boot on the same machine is named, once per change", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/product_uuid`, UUID);
    const node = {
      hostIdFile: "/etc/machine-id",
      stateDir: dir,
      hardwareIdFile: `${dir}/product_uuid`,
    };
    assert.equal(identityDrift(node, "aaaa", "boot-1"), undefined, "first seen");
    assert.equal(identityDrift(node, "aaaa", "boot-1"), undefined, "the same");
    const why = identityDrift(node, "bbbb", "boot-2");
    assert.match(why!, /named this host aaaa before this boot and bbbb now, on the same machine/);
    assert.match(why!, /set hostIdFile to a stable identity/);
    assert.equal(identityDrift(node, "bbbb", "boot-2"), undefined, "said once");
    // Another machine (a clone, its own firmware UUID) with a copied stateDir is no drift.
    await Deno.writeTextFile(`${dir}/product_uuid`, "4C4C4544-0042-3510-8052-B4C04F4A4E33");
    assert.equal(identityDrift(node, "cccc", "boot-3"), undefined);
  });
});

Deno.test("host identity: the machine-id, else one made once in the state dir; a malformed one is 7", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const id = (file: string, stateDir = `${dir}/state`) =>
      hostId({ hostIdFile: `${dir}/${file}`, stateDir });
    await Deno.writeTextFile(`${dir}/machine-id`, "3d1219c7c4c5404aaa1f6d2a48adfda4\n");
    assert.equal(id("machine-id"), "3d1219c7c4c5404aaa1f6d2a48adfda4");
    const made = id("absent");
    assert.match(made, /^[0-9a-f]{32}$/);
    assert.equal(await Deno.readTextFile(`${dir}/state/host-id`), made + "\n");
    assert.equal(id("machine-id"), "3d1219c7c4c5404aaa1f6d2a48adfda4");
    assert.equal(id("absent"), made, "made once, read after");
    await Deno.writeTextFile(`${dir}/uninitialized`, "uninitialized\n");
    assert.equal(id("uninitialized"), made, "systemd's first-boot placeholder is no identity");
    await Deno.writeTextFile(`${dir}/bad`, "two words\n");
    assert.throws(
      () => id("bad"),
      (e: unknown) =>
        e instanceof CniError && e.code === 7 &&
        /not a label value/.test(`${e.message} ${e.details}`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
