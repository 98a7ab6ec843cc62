import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { useLoginRoles } from './support/login-role.js';

// Every role reads every view docs/sql-api.md ("Roles and grants", column "may read") says it
// reads, as a real login (unbound, and bound to a tenant: the views filter by the binding through
// SECURITY DEFINER helpers the reader must be able to execute), and no other view. A view granted
// whose helper the role cannot execute answers 42501 on the first row: this test reads one.
const db = useEngineDatabase('view_grants');
const loginRole = useLoginRoles(db);

const ROLES = ['settle_app', 'settle_readonly', 'settle_admin', 'settle_consumer', 'settle_reconciler'] as const;

/** The "may read" cell of each role in docs/sql-api.md's roles table. */
function documentedReads(): Map<string, string> {
  const doc = readFileSync(new URL('../../docs/sql-api.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## Roles and grants'));
  const reads = new Map<string, string>();
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const role = /^`(settle_\w+)`$/.exec(cells[1] ?? '')?.[1];
    if (role !== undefined && !reads.has(role)) reads.set(role, cells[3] ?? '');
  }
  return reads;
}

/** The views a "may read" cell names: `all settle views`, a list, or `nothing`. */
function viewsOf(cell: string, all: readonly string[]): string[] {
  if (/^nothing\b/.test(cell)) return [];
  if (/^all `settle` views/.test(cell)) return [...all];
  const names = cell
    .replace(/`/g, '')
    .replace(/\bonly\b/g, '')
    .split(',')
    .map((s) => s.trim().replace(/^settle\./, ''));
  for (const n of names) expect(all, `docs/sql-api.md names a view settle.${n} that does not exist`).toContain(n);
  return names;
}

describe('every role reads the views it is documented to read', () => {
  it('role x view, unbound and tenant-bound logins: documented views answer, the others are 42501', async () => {
    const su = await db.connect();
    const views = (
      await su.query<{ v: string }>(`select viewname as v from pg_views where schemaname = 'settle' order by 1`)
    ).rows.map((r) => r.v);
    expect(views.length).toBeGreaterThan(5);
    const reads = documentedReads();
    const failures: string[] = [];
    for (const role of ROLES) {
      const cell = reads.get(role);
      expect(cell, `${role} is in the roles table of docs/sql-api.md`).toBeDefined();
      const allowed = new Set(viewsOf(cell as string, views));
      const unbound = await loginRole(role.replace('settle_', 'vg_'), [role]);
      const bound = await loginRole(role.replace('settle_', 'vgb_'), [role]);
      await su.query(`select settle.grant_tenant(role => $1, tenant => 'acme')`, [bound.name]);
      for (const login of [unbound, bound]) {
        const client = await login.connect();
        for (const view of views) {
          const state = await client.query(`select * from settle.${view} limit 1`).then(
            () => undefined,
            (error: { code?: string }) => error.code ?? 'no sqlstate',
          );
          const ok = state === undefined;
          if (allowed.has(view) && !ok)
            failures.push(`${login.name} (${role}) cannot read documented settle.${view}: ${state}`);
          if (!allowed.has(view) && state !== '42501')
            failures.push(`${login.name} (${role}) reads undocumented settle.${view} (${state ?? 'ok'})`);
        }
        await client.end();
      }
    }
    expect(failures).toEqual([]);
  });
});
