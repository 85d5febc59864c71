/** scripts/check_imports.ts: the import checks `deno task test` runs on lib/. */
import assert from "node:assert/strict";
import { cyclesOf, importGraph, privateLeaks } from "../scripts/check_imports.ts";
import { withTempDir } from "../testing/stub_invocation.ts";

Deno.test("cyclesOf(): a cycle of types only is one; a chain is none", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(
      `${dir}/a.ts`,
      'import type { B } from "./b.ts";\nexport type A = B;\n',
    );
    await Deno.writeTextFile(`${dir}/b.ts`, 'export type { C as B } from "./c.ts";\n');
    await Deno.writeTextFile(
      `${dir}/c.ts`,
      'import {\n  x,\n} from "./a.ts";\nexport type C = number;\nexport const y = x;\n',
    );
    await Deno.writeTextFile(`${dir}/d.ts`, 'import { y } from "./c.ts";\nexport const z = y;\n');
    assert.deepEqual(cyclesOf(importGraph(dir)), [["a.ts", "b.ts", "c.ts"]]);
    await Deno.writeTextFile(`${dir}/c.ts`, "export type C = number;\nexport const y = 1;\n");
    assert.deepEqual(cyclesOf(importGraph(dir)), []);
  });
});

Deno.test("lib/ has no import cycle, type imports included", () => {
  assert.deepEqual(cyclesOf(importGraph(new URL("../lib", import.meta.url).pathname)), []);
});

Deno.test("privateLeaks(): a private helper is its family's alone", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/_show_render.ts`, "export const r = 1;\n");
    await Deno.writeTextFile(
      `${dir}/show.ts`,
      'import { r } from "./_show_render.ts";\nexport const s = r;\n',
    );
    await Deno.writeTextFile(
      `${dir}/_show_local.ts`,
      'import type { r } from "./_show_render.ts";\n',
    );
    assert.deepEqual(privateLeaks(importGraph(dir)), []);
    await Deno.writeTextFile(`${dir}/sweep.ts`, 'export { r } from "./_show_render.ts";\n');
    assert.deepEqual(privateLeaks(importGraph(dir)), ["sweep.ts -> _show_render.ts"]);
  });
});

Deno.test("lib/: no module imports another family's private helper", () => {
  assert.deepEqual(privateLeaks(importGraph(new URL("../lib", import.meta.url).pathname)), []);
});
