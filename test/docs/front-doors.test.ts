import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fencedBlocks } from './markdown.js';

// What a newcomer meets first stays true: sql/README.md lists every migration there is, the docs
// index links every page of docs/, the reading order is written in one place, and the SQL API
// reference keeps its sections apart. Reads files only (no database).
const ROOT = path.resolve(import.meta.dirname, '../..');
const read = (file: string): string => readFileSync(path.join(ROOT, file), 'utf8');

/** The relative link targets of a Markdown text, without their #anchor. */
function relativeLinks(markdown: string): string[] {
  return [...markdown.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => (match[1] ?? '').replace(/#.*$/, ''))
    .filter((target) => target !== '' && !/^[a-z]+:/.test(target));
}

describe('sql/README.md', () => {
  const readme = read('sql/README.md');
  const rows = [...readme.matchAll(/^\| `(\d{5}_[a-z0-9_]+\.sql)` \| (.*) \|$/gm)].map((match) => ({
    file: match[1] ?? '',
    holds: match[2] ?? '',
  }));
  const migrations = readdirSync(path.join(ROOT, 'sql/migrations'))
    .filter((file) => file.endsWith('.sql'))
    .sort();

  it('lists every file of sql/migrations, in order, and nothing else', () => {
    expect(migrations.length).toBeGreaterThan(10);
    expect(rows.map((row) => row.file)).toEqual(migrations);
    for (const row of rows) expect(row.holds.trim(), row.file).not.toBe('');
  });

  it('says which migrations grant privileges: exactly those with a GRANT statement', () => {
    const granting = migrations.filter((file) => /^\s*grant\s/im.test(read(`sql/migrations/${file}`)));
    expect(granting.length).toBeGreaterThan(0);
    expect(rows.filter((row) => /\bgrants?\b/i.test(row.holds)).map((row) => row.file)).toEqual(granting);
  });
});

describe('docs/README.md, the index', () => {
  const index = read('docs/README.md');

  it('links every page of docs/', () => {
    const linked = new Set(relativeLinks(index).map((target) => path.normalize(path.join('docs', target))));
    const pages = readdirSync(path.join(ROOT, 'docs'))
      .filter((file) => file.endsWith('.md') && file !== 'README.md')
      .map((file) => path.join('docs', file));
    expect(pages.length).toBeGreaterThan(10);
    expect(pages.filter((page) => !linked.has(page))).toEqual([]);
  });

  it('has no dead relative link', () => {
    expect(relativeLinks(index).filter((target) => !existsSync(path.join(ROOT, 'docs', target)))).toEqual([]);
  });

  it('holds the reading order, and README.md points to it instead of repeating it', () => {
    expect(index).toMatch(/^## Reading order/m);
    expect(read('README.md')).toContain('](docs/README.md)');
    const others = [
      'README.md',
      ...readdirSync(path.join(ROOT, 'docs'))
        .filter((f) => f.endsWith('.md') && f !== 'README.md')
        .map((f) => `docs/${f}`),
    ];
    expect(others.filter((file) => /reading order|read in this order/i.test(read(file)))).toEqual([]);
  });
});

describe('docs/sql-api.md structure', () => {
  const doc = read('docs/sql-api.md');

  it('closes every fenced block before the next heading', () => {
    let open: number | undefined;
    const inside: string[] = [];
    doc.split('\n').forEach((line, i) => {
      if (/^\s*```/.test(line)) open = open === undefined ? i + 1 : undefined;
      else if (open !== undefined && /^#{1,4} /.test(line))
        inside.push(`line ${i + 1}: ${line} (block opened at line ${open})`);
    });
    expect(inside).toEqual([]);
    expect(open, 'a fenced block is never closed').toBeUndefined();
    expect(fencedBlocks(doc).length).toBeGreaterThan(20);
  });

  it('gives each function one section with its signature, and its index links every section', () => {
    const sections = doc.split(/^## /m).slice(1);
    const functions = sections.filter((section) => section.startsWith('settle.'));
    expect(functions.length).toBeGreaterThan(20);
    const indexLine = doc.slice(doc.indexOf('- Functions:'), doc.indexOf('- [Result types]'));
    for (const section of functions) {
      const name = /^settle\.([a-z_]+)/.exec(section)?.[1] ?? '';
      expect(section, `settle.${name}: its signature`).toMatch(new RegExp(`^settle\\.${name}\\(.*\\) RETURNS `, 'm'));
      const others = [...section.matchAll(/^settle\.([a-z_]+)\(.*\) RETURNS /gm)].map((m) => m[1]);
      expect(others, `settle.${name}: no other function's signature in its section`).toEqual([name]);
      expect(indexLine, `settle.${name}: in the index`).toContain(`(#settle${name})`);
    }
  });
});
