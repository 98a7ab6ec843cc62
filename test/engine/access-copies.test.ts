import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';

// The access verdict (tenant binding of the login role, then the revocation floor) is one
// expression, settle_private._access (00007). settle.claim (00008) writes it out inside its
// first statement, which also reads the operation row, and the observations (00010) inside the
// statement that reads the attempt after taking the row lock:
// Citus refuses the inlinable SQL function that would have kept it in one place
// (docs/performance.md). The copies must stay the same expression.

const COPIES = [
  { file: '00007_access.sql', fns: ['_access'] },
  { file: '00008_claim.sql', fns: ['claim'] },
  // _observe's read after the row lock, and settle.complete's settling success (its own copy
  // of that read, in the statement that writes the settlement).
  { file: '00010_merge.sql', fns: ['_observe', 'complete'] },
] as const;

const START = 'case when exists (select 1 from settle_private.tenant_bindings b';

/** Every `case when exists (... tenant_bindings ...) ... end` in `file`, in order, normalized. */
async function accessExpressions(file: string, fns: readonly string[]): Promise<string[]> {
  const text = await readFile(path.join(defaultMigrationsDir(), file), 'utf8');
  const copies: string[] = [];
  for (let start = text.indexOf(START); start >= 0; start = text.indexOf(START, start + 1)) {
    const fn = fns[copies.length] ?? '?';
    const end = text.indexOf(' end', text.indexOf('binding_floors', start));
    copies.push(
      text
        .slice(start, end + ' end'.length)
        .replace(/--[^\n]*/g, '')
        .replaceAll(`${fn}.`, 'ARG.')
        .replace(/\s+/g, ' '),
    );
  }
  expect(copies.length, `${file} has one copy in each of ${fns.join(', ')}`).toBe(fns.length);
  return copies;
}

describe('the access check', () => {
  it('is the same expression in settle_private._access, settle.claim, the observations and settle.complete', async () => {
    const [access, ...others] = (await Promise.all(COPIES.map((c) => accessExpressions(c.file, c.fns)))).flat();
    expect(access).toContain('ARG.tenant = any (b.tenants)');
    expect(access).toContain('f.principal = ARG.principal');
    for (const other of others) expect(other).toBe(access);
  });
});
