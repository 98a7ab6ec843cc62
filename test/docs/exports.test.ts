import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { fencedBlocks } from './markdown.js';

// Every name the docs say an entry point of the package exports is exported by it, and every
// entry point they name is one package.json "exports" lists (anything else is
// ERR_PACKAGE_PATH_NOT_EXPORTED for an application). The docs say so in code, `import { a, type
// B } from 'pg-settle/fetch'` and `import('pg-settle').C` in any fenced block, and in prose:
// "`d(...)` (from `pg-settle`)", "`e` (exported by `pg-settle`, `pg-settle/express`)". The
// names are looked up in the TypeScript exports of each entry point's source (what the built
// declarations export); test/docs/snippets.test.ts compiles the blocks that import the package.
const ROOT = path.resolve(import.meta.dirname, '../..');
const PAGES = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

interface Claim {
  readonly page: string;
  readonly line: number;
  readonly entry: string;
  readonly name: string;
}

const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  exports: Record<string, { types: string; import: string }>;
};

/** 'pg-settle' or 'pg-settle/<sub>' -> its source file, from package.json "exports" (types). */
const ENTRY_SOURCES = new Map(
  Object.entries(manifest.exports).map(([subpath, target]) => [
    `pg-settle${subpath.slice(1)}`,
    path.join(ROOT, target.types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '.ts')),
  ]),
);

/** An example's import of this repository's source, as the application imports it (test/package/snippets.ts). */
function entryOf(specifier: string): string {
  const source = /^(?:\.\.\/)+src\/(index|http\/express|http\/fastify|http\/fetch|testing\/index)\.js$/.exec(specifier);
  if (source === null) return specifier;
  return `pg-settle${{ index: '', 'http/express': '/express', 'http/fastify': '/fastify', 'http/fetch': '/fetch', 'testing/index': '/testing' }[source[1] as 'index'] ?? ''}`;
}

const lineAt = (text: string, index: number): number => text.slice(0, index).split('\n').length;

function claimsOf(page: string): { claims: Claim[]; entries: { entry: string; line: number }[] } {
  const text = readFileSync(path.join(ROOT, page), 'utf8');
  const claims: Claim[] = [];
  for (const block of fencedBlocks(text)) {
    const imports = /import\s+(?:type\s+)?\{([^}]*)\}\s*from\s*'(pg-settle(?:\/[\w-]+)?|(?:\.\.\/)+src\/[^']+)'/g;
    for (const match of block.body.matchAll(imports)) {
      const line = block.line + lineAt(block.body, match.index);
      for (const item of (match[1] ?? '').split(',')) {
        const name = item
          .trim()
          .replace(/^type\s+/, '')
          .split(/\s+as\s+/)[0]
          ?.trim();
        if (name) claims.push({ page, line, entry: entryOf(match[2] ?? ''), name });
      }
    }
    for (const match of block.body.matchAll(/import\('(pg-settle(?:\/[\w-]+)?)'\)\.(\w+)/g))
      claims.push({
        page,
        line: block.line + lineAt(block.body, match.index),
        entry: match[1] ?? '',
        name: match[2] ?? '',
      });
  }
  const prose = text.replace(/^\s*```[^\n]*\n[\s\S]*?^\s*```\s*$/gm, (block) => block.replace(/[^\n]/g, ' '));
  for (const match of prose.matchAll(/`([A-Za-z_$][\w$]*)[^`]*`\s+\(from\s+`(pg-settle[^`]*)`\)/g))
    claims.push({ page, line: lineAt(prose, match.index), entry: match[2] ?? '', name: match[1] ?? '' });
  for (const match of prose.matchAll(
    /`([A-Za-z_$][\w$]*)[^`]*`\)?\s+\(exported\s+by\s+((?:`pg-settle[^`]*`(?:,\s*)?)+)\)/g,
  )) {
    for (const entry of (match[2] ?? '').matchAll(/`(pg-settle[^`]*)`/g))
      claims.push({ page, line: lineAt(prose, match.index), entry: entry[1] ?? '', name: match[1] ?? '' });
  }
  const entries = [...text.matchAll(/[`'"](pg-settle\/[\w-]+)[`'"]/g)].map((m) => ({
    entry: m[1] ?? '',
    line: lineAt(text, m.index),
  }));
  return { claims, entries };
}

/** The names each entry point's source exports (values and types alike). */
function exportedNames(): Map<string, Set<string>> {
  const config = ts.getParsedCommandLineOfConfigFile(
    path.join(ROOT, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  );
  if (config === undefined) throw new Error('tsconfig.json did not parse');
  const program = ts.createProgram([...ENTRY_SOURCES.values()], { ...config.options, noEmit: true });
  const checker = program.getTypeChecker();
  const names = new Map<string, Set<string>>();
  for (const [entry, file] of ENTRY_SOURCES) {
    const source = program.getSourceFile(file);
    if (source === undefined) throw new Error(`${entry}: no source file ${file}`);
    const symbol = checker.getSymbolAtLocation(source);
    names.set(entry, new Set(symbol === undefined ? [] : checker.getExportsOfModule(symbol).map((s) => s.name)));
  }
  return names;
}

describe('names the docs import from the package', () => {
  const found = PAGES.map(claimsOf);
  const claims = found.flatMap((f) => f.claims);
  const where = (c: { page: string; line: number }) => `${c.page}:${c.line}`;

  it('finds the claims: code imports of the entry points, and the prose ones', () => {
    expect(claims.length).toBeGreaterThan(30);
    for (const entry of ['pg-settle', 'pg-settle/express', 'pg-settle/fastify', 'pg-settle/fetch'])
      expect(
        claims.some((c) => c.entry === entry),
        entry,
      ).toBe(true);
    expect(claims).toContainEqual(expect.objectContaining({ name: 'storedResponseOf', entry: 'pg-settle' }));
    expect(claims).toContainEqual(expect.objectContaining({ name: 'byKeyPrefix', entry: 'pg-settle/express' }));
  });

  it('every entry point the docs name is in package.json "exports"', () => {
    const named = [...claims, ...found.flatMap((f, i) => f.entries.map((e) => ({ ...e, page: PAGES[i] ?? '' })))];
    const unknown = named.filter((c) => !ENTRY_SOURCES.has(c.entry)).map((c) => `${where(c)} ${c.entry}`);
    expect(unknown).toEqual([]);
  });

  it('every name is exported by the entry point the docs import it from', { timeout: 120_000 }, () => {
    const names = exportedNames();
    const missing = claims
      .filter((c) => names.get(c.entry)?.has(c.name) !== true)
      .map((c) => `${where(c)}: ${c.name} from '${c.entry}'`);
    expect(missing).toEqual([]);
  });
});
