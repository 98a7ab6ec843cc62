import type pg from 'pg';

/**
 * Hostile and malformed inputs for the settle API, and the probes that prove nothing was
 * stored or disclosed. Used by test/reliability/hostile-input.test.ts.
 */

/** A malformed tenant or key, and the SQLSTATE the engine must answer (SE001 tenant, SE002 key). */
export interface HostileName {
  readonly label: string;
  readonly field: 'tenant' | 'key';
  readonly value: string | null;
  readonly sqlstate: 'SE001' | 'SE002';
}

const LIMIT_BYTES = { tenant: 64, key: 255 } as const;
const CODE = { tenant: 'SE001', key: 'SE002' } as const;

export const HOSTILE_NAMES: readonly HostileName[] = (['tenant', 'key'] as const).flatMap((field) => {
  const max = LIMIT_BYTES[field];
  const cases: [string, string | null][] = [
    ['NULL', null],
    ['empty', ''],
    ['whitespace only', ' \t '],
    ['Unicode whitespace only (em space)', '\u2003\u2003'],
    ['Unicode whitespace only (no-break space)', '\u00a0\u00a0'],
    ['invisible formatting only (zero-width space, BOM)', '\u200b\ufeff'],
    [`over-long (${max + 1} ASCII bytes)`, 'k'.repeat(max + 1)],
    [`over-long in bytes, not characters (${Math.floor(max / 2) + 1} x 2-byte é)`, 'é'.repeat(Math.floor(max / 2) + 1)],
    ['a control character', 'a\u0007b'],
    ['a newline', 'a\nb'],
    ['not NFC (e + combining acute)', 'cafe\u0301'],
  ];
  return cases.map(([label, value]) => ({ label: `${field}: ${label}`, field, value, sqlstate: CODE[field] }));
});

/** What an SQL error carries to the caller: everything that could disclose something. */
export interface SqlError {
  readonly code: string;
  readonly message: string;
  readonly detail: string | undefined;
  readonly hint: string | undefined;
}

/** The error a promise rejects with; throws if it resolves or fails without an SQLSTATE. */
export async function sqlErrorOf(promise: Promise<unknown>): Promise<SqlError> {
  try {
    await promise;
  } catch (error) {
    const e = error as { code?: unknown; message?: unknown; detail?: unknown; hint?: unknown };
    if (typeof e.code !== 'string') throw error;
    return {
      code: e.code,
      message: String(e.message),
      detail: typeof e.detail === 'string' ? e.detail : undefined,
      hint: typeof e.hint === 'string' ? e.hint : undefined,
    };
  }
  throw new Error('expected an SQL error, but the statement succeeded');
}

export interface StoredCounts {
  readonly operations: number;
  readonly attempts: number;
  readonly audit: number;
}

/** Row counts of the private tables (superuser connection). */
export async function storedCounts(admin: pg.ClientBase): Promise<StoredCounts> {
  const { rows } = await admin.query<StoredCounts>(
    `select (select count(*)::int from settle_private.operations) as operations,
            (select count(*)::int from settle.attempts) as attempts,
            (select count(*)::int from settle_private.audit_log) as audit`,
  );
  const counts = rows[0];
  if (counts === undefined) throw new Error('storedCounts: no row');
  return counts;
}

/** Peak resident memory (VmHWM, KiB) of a backend process, read from /proc (same host only). */
export async function backendPeakKiB(pid: number): Promise<number | undefined> {
  const { readFile } = await import('node:fs/promises');
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const match = /^VmHWM:\s+(\d+) kB/m.exec(status);
  return match?.[1] === undefined ? undefined : Number(match[1]);
}

export interface CatalogExposure {
  /** Functions in settle / settle_private that PUBLIC may execute (explicitly or by default ACL). */
  readonly publicExecutable: string[];
  /** Tables, views and sequences of settle / settle_private on which settle_app holds any privilege (direct or inherited). */
  readonly appRelationPrivileges: string[];
  /** Column-level privileges settle_app holds there. */
  readonly appColumnPrivileges: string[];
  /** Relations PUBLIC holds any privilege on. */
  readonly publicRelationPrivileges: string[];
  /** Schemas of the engine where settle_app or PUBLIC may CREATE. */
  readonly createOnSchemas: string[];
}

/** Reads the grants of the engine's schemas from the catalog. */
export async function catalogExposure(admin: pg.ClientBase): Promise<CatalogExposure> {
  const list = async (sql: string): Promise<string[]> =>
    (await admin.query<{ name: string }>(sql)).rows.map((r) => r.name);
  return {
    publicExecutable: await list(`
      select p.oid::regprocedure::text as name
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        cross join lateral aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
       where n.nspname in ('settle', 'settle_private') and a.grantee = 0 and a.privilege_type = 'EXECUTE'
       order by 1`),
    appRelationPrivileges: await list(`
      select c.oid::regclass::text || ': ' || priv as name
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        cross join unnest(array['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) priv
       where n.nspname in ('settle', 'settle_private') and c.relkind in ('r', 'p', 'v', 'm', 'f')
         and has_table_privilege('settle_app', c.oid, priv)
      union all
      select c.oid::regclass::text || ': ' || priv
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        cross join unnest(array['USAGE', 'SELECT', 'UPDATE']) priv
       where n.nspname in ('settle', 'settle_private') and c.relkind = 'S'
         and has_sequence_privilege('settle_app', c.oid, priv)
       order by 1`),
    appColumnPrivileges: await list(`
      select c.oid::regclass::text || ': ' || priv as name
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        cross join unnest(array['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) priv
       where n.nspname in ('settle', 'settle_private') and c.relkind in ('r', 'p', 'v', 'm', 'f')
         and has_any_column_privilege('settle_app', c.oid, priv)
       order by 1`),
    publicRelationPrivileges: await list(`
      select c.oid::regclass::text || ': ' || a.privilege_type as name
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        cross join lateral aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
       where n.nspname in ('settle', 'settle_private') and a.grantee = 0
       order by 1`),
    createOnSchemas: await list(`
      select n.nspname || ': ' || who as name
        from pg_namespace n cross join unnest(array['settle_app', 'public']) who
       where n.nspname in ('settle', 'settle_private')
         and case when who = 'public'
                  then exists (select 1 from aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
                                where a.grantee = 0 and a.privilege_type = 'CREATE')
                  else has_schema_privilege(who, n.oid, 'CREATE') end
       order by 1`),
  };
}
