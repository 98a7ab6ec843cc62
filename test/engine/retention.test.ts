import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { sqlStateOf } from './support/errors.js';

// settle.purge refuses a retention shorter than a minimum stored in the database
// (default 24 hours); settle_admin may lower it explicitly. A database migrated here, without
// the test template's lowering (src/testing/global-setup.ts).
let db: TestDatabase;
const open: pg.Client[] = [];
beforeAll(async () => {
  db = await createTestDatabase('retention', { template: 'template0' });
  await migrate(db.url);
});
afterAll(async () => {
  await Promise.all(open.map((c) => c.end().catch(() => {})));
  await db?.drop();
});

async function as(role: 'settle_admin' | 'settle_app' | null): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: db.url });
  c.on('error', () => {});
  await c.connect();
  open.push(c);
  if (role !== null) await c.query(`set role ${role}`);
  return c;
}

describe('minimum retention of settle.purge', () => {
  it('defaults to 24 hours: a shorter older_than is refused with SE014, a longer one purges', async () => {
    const admin = await as('settle_admin');
    const error = await admin.query(`select settle.purge(older_than => interval '23 hours')`).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'SE014',
      detail: expect.stringContaining('"purge_min_retention": "24:00:00"'),
    });
    expect((await admin.query(`select settle.purge(older_than => interval '24 hours') as n`)).rows[0]).toEqual({
      n: 0,
    });
  });

  it('settle_admin lowers it explicitly (logged in settle.admin_log); settle_app cannot', async () => {
    const app = await as('settle_app');
    expect(await sqlStateOf(app.query(`select settle.set_purge_min_retention(interval '0')`))).toBe('42501');
    const admin = await as('settle_admin');
    expect(await sqlStateOf(admin.query(`select settle.set_purge_min_retention(interval '-1 hour')`))).toBe('SE008');
    expect(await sqlStateOf(admin.query(`select settle.set_purge_min_retention(interval '1 month')`))).toBe('SE008');
    expect((await admin.query(`select settle.set_purge_min_retention(interval '1 hour')::text as v`)).rows[0]).toEqual({
      v: '01:00:00',
    });
    expect((await admin.query(`select settle.purge(older_than => interval '2 hours') as n`)).rows[0]).toEqual({ n: 0 });
    expect(await sqlStateOf(admin.query(`select settle.purge(older_than => interval '30 minutes')`))).toBe('SE014');
    const { rows } = await admin.query(
      `select event, detail from settle.admin_log where event = 'set_purge_min_retention'`,
    );
    expect(rows).toContainEqual({
      event: 'set_purge_min_retention',
      detail: { before: '24:00:00', after: '01:00:00' },
    });
  });
});
