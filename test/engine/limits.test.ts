import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { LIMITS } from '../../src/client/index.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { useEngineDatabase } from './support/database.js';

// The input limits are written once, in settle_private._limits() (sql/migrations/00003). The
// client's LIMITS (validation before any round trip) is held to them here.
const db = useEngineDatabase('limits');

const camel = (name: string): string => name.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());

async function engineLimits(): Promise<Record<string, number>> {
  const admin = await db.connect();
  const { rows } = await admin.query<{ limits: Record<string, number> }>('select settle_private._limits() as limits');
  return rows[0]?.limits ?? {};
}

describe('input limits live once', () => {
  it("the client's LIMITS equal the engine's settle_private._limits(), name for name", async () => {
    const engine = await engineLimits();
    expect(Object.keys(engine).length).toBeGreaterThan(10);
    expect(Object.fromEntries(Object.entries(engine).map(([name, value]) => [camel(name), value]))).toEqual({
      ...LIMITS,
    });
  });

  it('every settle_private._limit(name) in sql/migrations names a defined limit (an unknown name would be NULL)', async () => {
    const engine = await engineLimits();
    const dir = defaultMigrationsDir();
    const files = (await readdir(dir)).filter((f) => f.endsWith('.sql'));
    const used = new Set<string>();
    for (const file of files) {
      const text = await readFile(path.join(dir, file), 'utf8');
      for (const match of text.matchAll(/_limit\('([a-z_]+)'\)/g)) used.add(match[1] ?? '');
    }
    expect(used.size).toBeGreaterThan(5);
    expect([...used].filter((name) => !(name in engine))).toEqual([]);
  });

  it('a limit named by a literal is folded to a constant when the expression is planned (no cost per call)', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ 'QUERY PLAN': string }>(
      `explain (verbose, costs off) select settle_private._limit('key_bytes') + 0 as v`,
    );
    expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('Output: 255');
  });
});
