/**
 * The import-cycle check of a flat directory of modules (`deno task test`
 * runs it on lib/): every `import` and `export ... from` of a sibling, type
 * imports included, is an edge; any cycle fails with the modules in it. A
 * cycle, even of types only, means two files hold one idea between them.
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

if (import.meta.main) {
  const dir = Deno.args[0] ?? "lib";
  const cycles = cyclesOf(importGraph(dir));
  for (const c of cycles) console.error(`import cycle in ${dir}/: ${c.join(" <-> ")}`);
  if (cycles.length) Deno.exit(1);
  console.error(`no import cycle in ${dir}/`);
}
