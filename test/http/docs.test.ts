// docs/http.md against the code: the problem table lists every type in PROBLEMS with its status,
// and nothing else; every option of RouteOptions/IdempotencyOptions has a row in the options table.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PROBLEMS } from '../../src/http/core/problem.js';

const doc = readFileSync('docs/http.md', 'utf8');

/** The rows of the first markdown table after `heading`, as arrays of trimmed cells. */
function tableAfter(heading: string): string[][] {
  const start = doc.indexOf(`\n${heading}\n`);
  if (start === -1) throw new Error(`docs/http.md has no ${heading}`);
  const lines = doc.slice(start).split('\n');
  const first = lines.findIndex((line) => line.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .split(/(?<!\\)\|/)
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
  }
  return rows;
}

describe('docs/http.md', () => {
  it('the problem table lists every type in PROBLEMS with its status, and only those', () => {
    const rows = tableAfter('## Problem types');
    const documented = Object.fromEntries(rows.map(([type, status]) => [type!.replaceAll('`', ''), Number(status)]));
    const coded = Object.fromEntries(Object.entries(PROBLEMS).map(([name, { status }]) => [name, status]));
    expect(documented).toEqual(coded);
  });

  it('the options table lists every option of RouteOptions and IdempotencyOptions', () => {
    const source = readFileSync('src/http/core/options.ts', 'utf8');
    const block = (name: string): string =>
      source.slice(
        source.indexOf(`export interface ${name}`),
        source.indexOf('\n}\n', source.indexOf(`export interface ${name}`)),
      );
    const options = [
      ...`${block('RouteOptions')}${block('IdempotencyOptions')}`.matchAll(/^ {2}readonly (\w+)\??:/gm),
    ].map((m) => m[1]!);
    expect(options).toContain('fingerprintTarget');
    expect(options).toContain('settle');
    const documented = tableAfter('## Options').map(([name]) => name!.replace(/`/g, '').replace(/\(.*$/, ''));
    expect(options.filter((name) => !documented.includes(name))).toEqual([]);
  });
});
