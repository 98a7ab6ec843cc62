import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// The import graph of src/ has no cycle: type-only imports, re-exports and dynamic imports count
// too (a type cycle is a layering cycle all the same). Edges are read with the TypeScript
// compiler's own pre-processor (no new dependency); `npx vitest run test/house` runs it alone.
const ROOT = path.resolve(import.meta.dirname, '../..');
const SRC = path.join(ROOT, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** file -> the src files it imports (relative specifiers only; `.js` names its `.ts` source). */
export function importGraph(files: readonly string[]): Map<string, string[]> {
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const targets = importedFiles
      .map((ref) => ref.fileName)
      .filter((spec) => spec.startsWith('.'))
      .map((spec) => path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')))
      .filter((target) => known.has(target));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
export function cycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = stack.pop(); w !== undefined; w = stack.pop()) {
      onStack.delete(w);
      component.push(w);
      if (w === v) break;
    }
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

describe('import graph of src/', () => {
  it('finds a planted cycle (the walker works)', () => {
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', ['c']],
          ['c', ['a']],
          ['d', ['a']],
        ]),
      ),
    ).toEqual([['a', 'b', 'c']]);
  });

  it('reads type-only imports and re-exports as edges', () => {
    const { importedFiles } = ts.preProcessFile(
      `import type { X } from './x.js';\nexport * from './y.js';`,
      true,
      true,
    );
    expect(importedFiles.map((f) => f.fileName)).toEqual(['./x.js', './y.js']);
  });

  it('has no cycle', () => {
    const graph = importGraph(sourceFiles(SRC));
    expect(graph.size).toBeGreaterThan(50);
    const found = cycles(graph).map((component) => component.map((file) => path.relative(ROOT, file)));
    expect(found).toEqual([]);
  });

  it('has no cycle between its folders (src/cli may use src/simulator, never the reverse)', () => {
    const folderOf = (file: string): string => path.relative(SRC, file).split(path.sep)[0] ?? '';
    const folders = new Map<string, string[]>();
    for (const [file, targets] of importGraph(sourceFiles(SRC))) {
      const edges = folders.get(folderOf(file)) ?? [];
      edges.push(...targets.map(folderOf).filter((folder) => folder !== folderOf(file)));
      folders.set(folderOf(file), [...new Set(edges)]);
    }
    expect(cycles(folders)).toEqual([]);
  });
});
