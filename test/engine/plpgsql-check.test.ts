import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';

// Static checks of every PL/pgSQL body with the plpgsql_check extension, when it is installed.
const db = useEngineDatabase('plpgsql_check');

interface Finding {
  fn: string;
  relid: string | null;
  level: string;
  message: string;
  lineno: number | null;
}

describe('plpgsql_check', () => {
  it('reports nothing for any PL/pgSQL function of settle and settle_private', async (ctx) => {
    const admin = await db.connect();
    const available = await admin.query(`select 1 from pg_available_extensions where name = 'plpgsql_check'`);
    ctx.skip(available.rowCount === 0, 'plpgsql_check is not available: postgresql-15-plpgsql-check not installed');
    await admin.query('create extension if not exists plpgsql_check');

    // Trigger functions are checked once per table they fire on (NEW/OLD need the row type).
    const { rows: targets } = await admin.query<{ oid: string; fn: string; relid: string }>(
      `select distinct p.oid::text as oid, p.oid::regprocedure::text as fn, coalesce(t.tgrelid, 0)::text as relid
         from pg_proc p
         join pg_namespace n on n.oid = p.pronamespace
         join pg_language l on l.oid = p.prolang
         left join pg_trigger t on t.tgfoid = p.oid and not t.tgisinternal
        where n.nspname in ('settle', 'settle_private') and l.lanname = 'plpgsql'
        order by 2, 3`,
    );
    expect(targets.length).toBeGreaterThan(5);
    expect(targets.filter((t) => t.fn.includes('tg_')).every((t) => t.relid !== '0')).toBe(true);

    const findings: Finding[] = [];
    for (const target of targets) {
      const { rows } = await admin.query<Omit<Finding, 'fn' | 'relid'>>(
        'select level, message, lineno from plpgsql_check_function_tb($1::oid, $2::oid)',
        [target.oid, target.relid],
      );
      findings.push(
        ...rows.map((row) => ({ fn: target.fn, relid: target.relid === '0' ? null : target.relid, ...row })),
      );
    }
    expect(findings).toEqual([]);
  });
});
