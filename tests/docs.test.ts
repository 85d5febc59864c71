/**
 * The README is the user's page: at most 25,000 characters, the operator's
 * path in order; reference lives in docs/, linked. Every relative link of the
 * README and of docs/ reaches a file that is there, and an anchor a heading
 * of it makes.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url).pathname;

/** GitHub's anchor of a heading: lowercased, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, "").replace(/ /g, "-");
}

function anchors(text: string): Set<string> {
  const seen = new Map<string, number>(), out = new Set<string>();
  let fenced = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const m = !fenced && /^#{1,6} (.+)$/.exec(line);
    if (!m) continue;
    const a = anchorOf(m[1]);
    const n = seen.get(a) ?? 0;
    seen.set(a, n + 1);
    out.add(n ? `${a}-${n}` : a);
  }
  return out;
}

Deno.test("README: at most 25,000 characters, the operator's path in order", () => {
  const text = Deno.readTextFileSync(`${ROOT}README.md`);
  assert.ok(text.length <= 25_000, `README.md is ${text.length} characters`);
  const order = [
    "## Developer set-up: two commands",
    "## What Milo needs",
    "## Deploy",
    "## Verify",
    "## Operate",
    "## Troubleshoot",
    "## Upgrade",
    "## Uninstall",
    "## Decommission",
    "## Reference",
  ].map((h) => text.indexOf(`\n${h}\n`));
  assert.ok(order.every((i) => i > 0), `every heading: ${order}`);
  assert.deepEqual(order, [...order].sort((a, b) => a - b), "in this order");
});

Deno.test("docs: every relative link of the README and docs/ reaches its file and anchor", () => {
  const pages = ["README.md", ...[...Deno.readDirSync(`${ROOT}docs`)].map((e) => `docs/${e.name}`)]
    .filter((p) => p.endsWith(".md"));
  const broken: string[] = [];
  for (const page of pages) {
    const text = Deno.readTextFileSync(ROOT + page);
    const dir = page.includes("/") ? page.slice(0, page.lastIndexOf("/") + 1) : "";
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target)) continue;
      const [file, anchor] = target.split("#");
      const path = file ? new URL(dir + file, `file://${ROOT}`).pathname : ROOT + page;
      let body: string;
      try {
        body = Deno.statSync(path).isDirectory ? "" : Deno.readTextFileSync(path);
      } catch {
        broken.push(`${page}: ${target} (no such file)`);
        continue;
      }
      if (anchor && path.endsWith(".md") && !anchors(body).has(anchor)) {
        broken.push(`${page}: ${target} (no such heading)`);
      }
    }
  }
  assert.deepEqual(broken, []);
});
