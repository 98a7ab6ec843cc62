import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// bench/ab/levers/ holds engine builds measured as bounds, each a
// patch of sql/migrations. A patch that no longer applies cannot reproduce its figure: each one
// is checked against the migrations as they are (git apply --check, nothing written).
const ROOT = path.resolve(import.meta.dirname, '../..');
const LEVERS = path.join(ROOT, 'bench/ab/levers');

describe('bench/ab/levers', () => {
  const patches = readdirSync(LEVERS).filter((file) => file.endsWith('.patch'));

  it('holds at least one patch', () => {
    expect(patches.length).toBeGreaterThan(0);
  });

  for (const patch of patches) {
    it(`${patch} applies to sql/migrations`, () => {
      expect(() =>
        execFileSync('git', ['apply', '--check', '-p2', '--directory=sql/migrations', path.join(LEVERS, patch)], {
          cwd: ROOT,
          stdio: 'pipe',
        }),
      ).not.toThrow();
    });
  }
});
