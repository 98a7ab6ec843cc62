import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';

// Every public object documents its contract in the catalog (STYLE.md rule 6).
const db = useEngineDatabase('comments');

describe('catalog comments of the public API', () => {
  it('every function in schema settle has a COMMENT ON FUNCTION', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ fn: string; comment: string | null }>(
      `select p.oid::regprocedure::text as fn, obj_description(p.oid, 'pg_proc') as comment
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'settle' order by 1`,
    );
    expect(rows.length).toBeGreaterThanOrEqual(11);
    expect(rows.filter((r) => r.comment === null || r.comment.trim() === '').map((r) => r.fn)).toEqual([]);
  });

  it('every view in schema settle has a comment', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ view: string; comment: string | null }>(
      `select c.relname as view, obj_description(c.oid, 'pg_class') as comment
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'settle' and c.relkind in ('v', 'm') order by 1`,
    );
    expect(rows.map((r) => r.view)).toEqual(
      expect.arrayContaining(['attempts', 'audit_log', 'dead_letters', 'operations', 'settlements', 'stats']),
    );
    expect(rows.filter((r) => r.comment === null || r.comment.trim() === '').map((r) => r.view)).toEqual([]);
  });
});
