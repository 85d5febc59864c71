/**
 * Files replaced whole (scripts/atomic.ts for the install, lib/atomic_write.ts
 * for the node state): a file meant for root alone (0600) is never readable by
 * another user of the node, not even the temporary file it is written through,
 * however fast that user looks (testing/snoop.ts, uid 65534, in a directory
 * others may list, as the kubelet makes a hostPath).
 */
import assert from "node:assert/strict";
import { writeAtomic } from "../scripts/atomic.ts";
import {
  writeAtomic as writeStateAtomic,
  writeAtomicSync as writeStateAtomicSync,
} from "../lib/atomic_write.ts";
import { snoop, SNOOP_IGNORED } from "../testing/snoop.ts";

/** Writes per writer: the reader caught the old install's temporary file several times a write. */
const WRITES = 100;

/** A directory others may list (0755), under a temp dir they may pass through. */
async function openDir(): Promise<{ base: string; dir: string }> {
  const base = await Deno.makeTempDir({ prefix: "milo-ipam-atomic-" });
  await Deno.chmod(base, 0o755);
  const dir = `${base}/secrets`;
  await Deno.mkdir(dir);
  await Deno.chmod(dir, 0o755);
  return { base, dir };
}

Deno.test({
  name: "writeAtomic(): a 0600 file, and the file it is written through, are never readable by " +
    "another user (as root)",
  ignore: SNOOP_IGNORED,
}, async () => {
  const { base, dir } = await openDir();
  try {
    const reader = await snoop(dir);
    const writers: [string, (i: number) => Promise<void>][] = [
      ["scripts/atomic.ts", (i) => writeAtomic(`${dir}/token`, `secret-${i}\n`, 0o600)],
      ["lib/atomic_write.ts", (i) => writeStateAtomic(`${dir}/state.json`, { secret: i })],
      [
        "lib/atomic_write.ts (sync)",
        (i) => Promise.resolve(writeStateAtomicSync(`${dir}/record`, `secret-${i}\n`, 0o600)),
      ],
    ];
    for (const [, write] of writers) {
      for (let i = 0; i < WRITES; i++) await write(i);
    }
    const seen = await reader.stop();
    assert.ok(seen.listed > 0, "the reader could list the directory while the files were written");
    assert.deepEqual(seen.read, [], "another user read a secret");
    for (const f of ["token", "state.json", "record"]) {
      assert.equal((await Deno.stat(`${dir}/${f}`)).mode! & 0o777, 0o600, f);
    }
    assert.equal(await Deno.readTextFile(`${dir}/token`), `secret-${WRITES - 1}\n`);
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});

Deno.test("writeAtomic(): a file made new, never through what was planted at its temporary name", async () => {
  const { base, dir } = await openDir();
  try {
    // Whoever could write the directory: a symlink at every name is beyond guessing, but an
    // existing file is refused, never opened (O_EXCL), so nothing written lands elsewhere.
    const uuid = crypto.randomUUID;
    crypto.randomUUID = () => "00000000-0000-4000-8000-000000000000";
    try {
      await Deno.symlink(`${base}/elsewhere`, `${dir}/token.00000000.tmp`);
      await assert.rejects(
        writeAtomic(`${dir}/token`, "secret\n", 0o600),
        Deno.errors.AlreadyExists,
      );
    } finally {
      crypto.randomUUID = uuid;
    }
    await assert.rejects(Deno.lstat(`${base}/elsewhere`), Deno.errors.NotFound);
    await assert.rejects(Deno.lstat(`${dir}/token`), Deno.errors.NotFound);
  } finally {
    await Deno.remove(base, { recursive: true });
  }
});
