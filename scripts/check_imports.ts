/**
 * The import checks of a flat directory of modules (`deno task test` runs
 * them on lib/): every `import` and `export ... from` of a sibling, type
 * imports included, is an edge. Any cycle fails with the modules in it (a
 * cycle, even of types only, means two files hold one idea between them); so
 * does a module importing another family's private helper (a name beginning
 * with `_`, its family the word after it: `_reconcile_verify.ts` is the
 * reconcile's).
 */

/** The sibling modules each module of `dir` imports (static imports, types included). */
export function importGraph(dir: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const e of Deno.readDirSync(dir)) {
    if (!e.isFile || !e.name.endsWith(".ts")) continue;
    const text = Deno.readTextFileSync(`${dir}/${e.name}`);
    const deps = [...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+"\.\/([\w.-]+\.ts)"/gm)]
      .map((m) => m[1]);
    graph.set(e.name, [...new Set(deps)].sort());
  }
  return graph;
}

/** Every cycle of `graph` as its strongly connected components of more than one module. */
export function cyclesOf(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    const selfLoop = graph.get(v)?.includes(v);
    if (scc.length > 1 || selfLoop) out.push(scc.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return out;
}

/** The family of a module: its name's first word, a leading `_` dropped. */
function familyOf(name: string): string {
  return name.replace(/^_/, "").split(/[_.]/)[0];
}

/** Each import of a private helper (`_family_….ts`) by a module of another family. */
export function privateLeaks(graph: Map<string, string[]>): string[] {
  const out: string[] = [];
  for (const [from, deps] of graph) {
    for (const d of deps) {
      if (d.startsWith("_") && familyOf(d) !== familyOf(from)) out.push(`${from} -> ${d}`);
    }
  }
  return out.sort();
}

if (import.meta.main) {
  const dir = Deno.args[0] ?? "lib";
  const graph = importGraph(dir);
  const cycles = cyclesOf(graph);
  for (const c of cycles) console.error(`import cycle in ${dir}/: ${c.join(" <-> ")}`);
  const leaks = privateLeaks(graph);
  for (const l of leaks) console.error(`another family's private helper in ${dir}/: ${l}`);
  if (cycles.length || leaks.length) Deno.exit(1);
  console.error(`no import cycle and no private helper of another family in ${dir}/`);
}
