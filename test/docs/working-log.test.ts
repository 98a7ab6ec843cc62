import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// The docs say what is, with method and current figures; the history of how it got there lives
// in git. A docs page names no working session ("the seventh session measured ...") and no
// command of the tools that fetched sources while it was written (`fetch github:owner/repo`).
const ROOT = path.resolve(import.meta.dirname, '../..');
const PAGES = [
  'README.md',
  'CHANGELOG.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

const WORKING_LOG: readonly RegExp[] = [
  /\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|this|last|previous|next|earlier)\s+session\b/gi,
  /\bfetch\s+github:/gi,
];

describe('docs are not a working log', () => {
  it.each(PAGES)('%s names no working session and no source-fetching command', (page) => {
    const text = readFileSync(path.join(ROOT, page), 'utf8');
    const found: string[] = [];
    for (const pattern of WORKING_LOG) {
      for (const match of text.matchAll(pattern))
        found.push(`line ${text.slice(0, match.index).split('\n').length}: ${match[0].replace(/\s+/g, ' ')}`);
    }
    expect(found).toEqual([]);
  });
});
