import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';

// The access verdict (tenant binding of the login role, then the revocation floor) is one
// expression, settle_private._access (00012). settle.claim (00007) writes it out inside its
// first statement, which also reads the operation row, and the observations (00009) inside the
// statement that reads the attempt after taking the row lock (issue 18 §2):
// Citus refuses the inlinable SQL function that would have kept it in one place
// (docs/performance.md). The copies must stay the same expression.

const COPIES = [
  { file: '00012_access.sql', fn: '_access' },
  { file: '00007_claim.sql', fn: 'claim' },
  { file: '00009_merge.sql', fn: '_observe' },
] as const;

/** The `case when exists (... tenant_bindings ...) ... end` of `fn` in `file`, normalized. */
async function accessExpression(file: string, fn: string): Promise<string> {
  const text = await readFile(path.join(defaultMigrationsDir(), file), 'utf8');
  const start = text.indexOf('case when exists (select 1 from settle_private.tenant_bindings b');
  expect(start, `${file} has the access expression`).toBeGreaterThan(0);
  expect(text.indexOf('case when exists (select 1 from settle_private.tenant_bindings b', start + 1), `${file} has one copy`).toBe(-1);
  const end = text.indexOf(' end', text.indexOf('binding_floors', start));
  return text
    .slice(start, end + ' end'.length)
    .replace(/--[^\n]*/g, '')
    .replaceAll(`${fn}.`, 'ARG.')
    .replace(/\s+/g, ' ');
}

describe('the access check', () => {
  it('is the same expression in settle_private._access, settle.claim and the observations', async () => {
    const [access, ...others] = await Promise.all(COPIES.map((c) => accessExpression(c.file, c.fn)));
    expect(access).toContain('ARG.tenant = any (b.tenants)');
    expect(access).toContain('f.principal = ARG.principal');
    for (const other of others) expect(other).toBe(access);
  });
});
