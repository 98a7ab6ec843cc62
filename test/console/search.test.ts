import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openConsoleDatabase, type ConsoleDatabase } from '../../src/console/database.js';
import { BadCursorError, PAGE_SIZE, searchOperations, type SearchQuery } from '../../src/console/search-data.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';

// The console's lists page by a keyset cursor: every row once, in order, across pages.

let db: TestDatabase;
let su: pg.Client;
let consoleDb: ConsoleDatabase;

beforeAll(async () => {
  db = await createTestDatabase('console_search');
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  // 130 unknown operations of two tenants, some sharing an updated_at (the cursor's tie-break).
  await su.query(`
    do $$
    declare c record;
    begin
      for i in 1..130 loop
        select * into c from settle.claim(tenant => case when i % 2 = 0 then 'even' else 'odd' end, key => 'k-' || lpad(i::text, 3, '0'),
                                          request => '{}', principal => 'p', scopes => '{}', binding_generation => 1, max_attempts => 1);
        perform settle.report_unknown(tenant => case when i % 2 = 0 then 'even' else 'odd' end, key => 'k-' || lpad(i::text, 3, '0'),
                                      attempt => c.attempt, lease_token => c.lease_token, fingerprint => c.fingerprint, principal => 'p',
                                      scopes => '{}', binding_generation => 1);
      end loop;
    end $$`);
  await su.query(
    `update settle_private.operations set updated_at = date_trunc('second', updated_at) where key <= 'k-040'`,
  );
  consoleDb = openConsoleDatabase(db.url);
});

afterAll(async () => {
  await consoleDb?.end();
  await su?.end();
  await db?.drop();
});

async function all(query: SearchQuery): Promise<string[]> {
  const seen: string[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 10; pages += 1) {
    const page = await searchOperations(consoleDb, { ...query, ...(cursor === undefined ? {} : { cursor }) });
    expect(page.rows.length).toBeLessThanOrEqual(PAGE_SIZE);
    seen.push(...page.rows.map((r) => `${r.tenant}/${r.key}`));
    if (page.next === null) return seen;
    cursor = page.next;
  }
  throw new Error('more than 10 pages');
}

describe('console search', () => {
  it('pages every unknown operation once, oldest first, across pages', async () => {
    const seen = await all({ status: 'unknown' });
    expect(seen).toHaveLength(130);
    expect(new Set(seen).size).toBe(130);
    const { rows } = await su.query<{ id: string }>(
      `select tenant || '/' || key as id from settle.operations where status = 'unknown' order by updated_at, tenant, key`,
    );
    expect(seen).toEqual(rows.map((r) => r.id));
    // Every page says how many match in all, the first as the later ones.
    const first = await searchOperations(consoleDb, { status: 'unknown' });
    expect(first.total).toBe(130);
    expect((await searchOperations(consoleDb, { status: 'unknown', cursor: first.next ?? '' })).total).toBe(130);
    expect((await searchOperations(consoleDb, { reason: 'needs_reconciliation', code: 'declined' })).total).toBe(0);
  });

  it('by tenant (primary-key order), by dead-letter reason, and by age', async () => {
    expect(await all({ tenant: 'even' })).toHaveLength(65);
    expect(await all({ reason: 'needs_reconciliation', tenant: 'odd' })).toHaveLength(65);
    expect(await all({ reason: 'attempts_exhausted' })).toHaveLength(0);
    expect(await all({ status: 'unknown', olderThanMinutes: 60 })).toHaveLength(0);
  });

  it('refuses a cursor it did not write', async () => {
    await expect(searchOperations(consoleDb, { status: 'unknown', cursor: 'not-a-cursor' })).rejects.toBeInstanceOf(
      BadCursorError,
    );
    const byKey = (await searchOperations(consoleDb, { tenant: 'even' })).next ?? '';
    await expect(searchOperations(consoleDb, { status: 'unknown', cursor: byKey })).rejects.toBeInstanceOf(
      BadCursorError,
    );
  });
});
