/** Rules of the repository itself, held by a test. */
import assert from "node:assert/strict";

Deno.test("repo: no any outside tests/ (deno lint's no-explicit-any is never silenced there)", () => {
  const root = new URL("../", import.meta.url).pathname;
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const e of Deno.readDirSync(root + dir)) {
      const path = `${dir}${e.name}`;
      if (e.isDirectory && !["tests", ".git", ".tmp", "node_modules"].includes(e.name)) {
        walk(`${path}/`);
      } else if (e.isFile && e.name.endsWith(".ts")) {
        const text = Deno.readTextFileSync(root + path);
        // deno lint refuses an explicit any unless its no-explicit-any is ignored at the line.
        if (/deno-lint-ignore[^\n]*no-explicit-any/.test(text)) found.push(path);
      }
    }
  };
  walk("");
  assert.deepEqual(found, []);
});
