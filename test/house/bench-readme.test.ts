import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// bench/README.md's table of programs lists every program in bench/: every file outside
// bench/lib, bench/scripts and bench/sql (bench/out holds a run's output, not tracked), and no
// row names a file that is gone. A module of bench/lib is shared, so some file of bench/ or
// test/ loads it: one that nothing loads is a program in the wrong place. Reads files only.
const ROOT = path.resolve(import.meta.dirname, '../..');
const BENCH = path.join(ROOT, 'bench');
const SHARED = new Set(['lib', 'scripts', 'sql', 'out', 'notes']);

/** Paths relative to the repository of every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    return entry.isDirectory() ? filesUnder(full) : [path.relative(ROOT, full)];
  });
}

/** bench/ files that must have a row: everything outside the shared folders but the READMEs. */
function programs(): string[] {
  return readdirSync(BENCH, { withFileTypes: true })
    .filter((entry) => !(entry.isDirectory() && SHARED.has(entry.name)))
    .flatMap((entry) => (entry.isDirectory() ? filesUnder(path.join(BENCH, entry.name)) : [`bench/${entry.name}`]))
    .filter((file) => !file.endsWith('.md'))
    .sort();
}

/** The first cell of every row of the "Programs" table: `bench/...`. */
function tableRows(readme: string): string[] {
  const section = readme.split(/^## /m).find((part) => part.startsWith('Programs\n')) ?? '';
  return [...section.matchAll(/^\| `(bench\/[^`]+)` \|/gm)].map((match) => match[1] ?? '').sort();
}

describe('bench/README.md', () => {
  const readme = readFileSync(path.join(BENCH, 'README.md'), 'utf8');

  it('finds the programs and the rows it compares', () => {
    const sample =
      '## Programs\n\n| program | what | command |\n|---|---|---|\n| `bench/a.ts` | x | y |\n\n## Other\n| `bench/b.ts` | z |\n';
    expect(tableRows(sample)).toEqual(['bench/a.ts']);
    expect(programs()).toContain('bench/main.ts');
    expect(programs()).not.toContain('bench/lib/database.ts');
  });

  it('lists every program of bench/ in its table, and nothing that is not there', () => {
    const rows = tableRows(readme);
    expect(rows.length).toBeGreaterThan(10);
    expect(rows).toEqual(programs());
  });

  it('every module of bench/lib is loaded by some file of bench/ or test/', () => {
    const lib = readdirSync(path.join(BENCH, 'lib')).filter((file) => file.endsWith('.ts'));
    expect(lib.length).toBeGreaterThan(5);
    const loaders = [...filesUnder(BENCH), ...filesUnder(path.join(ROOT, 'test'))]
      .filter((file) => /\.(ts|sh)$/.test(file))
      .map((file) => ({ file, text: readFileSync(path.join(ROOT, file), 'utf8') }));
    const unused = lib.filter((module) => {
      const stem = module.replace(/\.ts$/, '');
      const load = new RegExp(`['"][./]*(?:bench/)?(?:lib/)?${stem}\\.(?:js|ts)['"]`);
      return !loaders.some(({ file, text }) => file !== `bench/lib/${module}` && load.test(text));
    });
    expect(unused).toEqual([]);
  });
});
