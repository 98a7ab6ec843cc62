// docs/protocol.md is self-contained: it cites no document outside the repository (the design's
// source notes, internal issue numbers) and every file it names exists in the repository.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const doc = readFileSync('docs/protocol.md', 'utf8');

describe('docs/protocol.md', () => {
  it('cites no internal issue and no source note that is not in the repository', () => {
    const outside = [
      ...doc.matchAll(/issue (?:#)?\d+|\bseed(?:'s| file| document)\b|skill document|[\w-]+-skill\.md|\.txt\b/gi),
    ].map((m) => m[0]);
    expect(outside).toEqual([]);
  });

  it('every relative link and every repository path it names exists', () => {
    const links = [...doc.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
      .map((m) => m[1]!)
      .filter((l) => !/^[a-z]+:/.test(l));
    const paths = [...doc.matchAll(/`((?:src|test|docs|sql|bench|examples)\/[\w./-]+\.(?:ts|md|sql|mjs))`/g)].map(
      (m) => m[1]!,
    );
    expect(links.length + paths.length).toBeGreaterThan(5);
    const missing = [...links.map((l) => path.join('docs', l)), ...paths].filter((p) => !existsSync(p));
    expect(missing).toEqual([]);
  });
});
