import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { quoteIdent, withDatabase } from '../src/db/database-url.js';
import { migrate } from '../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../src/testing/index.js';

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const created: TestDatabase[] = [];
afterAll(async () => {
  await Promise.all(created.map((db) => db.drop()));
});

describe('provisioned server', () => {
  it('is PostgreSQL 15 and reachable through the provided admin URL', async () => {
    const row = await withClient(
      inject('adminUrl'),
      async (c) =>
        (
          await c.query<{ version: string; db: string; su: boolean }>(
            "select version(), current_database() as db, current_setting('is_superuser') = 'on' as su",
          )
        ).rows[0],
    );
    expect(row?.version).toMatch(/^PostgreSQL 15\./);
    expect(row?.db).toBe('postgres');
    expect(row?.su).toBe(true);
  });

  it('keeps the template sealed (no connections allowed, marked as template)', async () => {
    const row = await withClient(
      inject('adminUrl'),
      async (c) =>
        (
          await c.query<{ datistemplate: boolean; datallowconn: boolean }>(
            'select datistemplate, datallowconn from pg_database where datname = $1',
            [inject('templateDb')],
          )
        ).rows[0],
    );
    expect(row).toEqual({ datistemplate: true, datallowconn: false });
  });
});

describe('migrate()', () => {
  let migrationsDir: string;
  let fresh: TestDatabase;

  beforeAll(async () => {
    // Throwaway migrations so this test does not depend on the engine's SQL.
    migrationsDir = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-migrations-'));
    await writeFile(
      path.join(migrationsDir, '00001_create_things.sql'),
      'create table things (id bigint generated always as identity primary key, label text not null);\n',
    );
    await writeFile(
      path.join(migrationsDir, '00002_slow_seed.sql'),
      // Slow enough that the second migrate() really waits on the advisory lock.
      "select pg_sleep(0.3);\ninsert into things (label) values ('seeded');\n",
    );
    fresh = await createTestDatabase('fresh_migrate', { template: 'template0' });
    created.push(fresh);
  });

  afterAll(async () => {
    await rm(migrationsDir, { recursive: true, force: true });
  });

  it('two concurrent runs on one fresh database both succeed, applying each file once', async () => {
    const clientA = new pg.Client({ connectionString: fresh.url });
    await clientA.connect();
    try {
      const [viaClient, viaUrl] = await Promise.all([
        migrate(clientA, { dir: migrationsDir }),
        migrate(fresh.url, { dir: migrationsDir }),
      ]);
      const all = [...viaClient.applied, ...viaUrl.applied].sort();
      expect(all).toEqual(['00001_create_things.sql', '00002_slow_seed.sql', '0_create-migrations-table.sql']);
    } finally {
      await clientA.end();
    }

    const rows = await withClient(fresh.url, async (c) => ({
      migrations: (await c.query<{ id: number; name: string }>('select id, name from migrations order by id')).rows,
      things: (await c.query<{ label: string }>('select label from things')).rows,
    }));
    expect(rows.migrations).toEqual([
      { id: 0, name: 'create-migrations-table' },
      { id: 1, name: 'create_things' },
      { id: 2, name: 'slow_seed' },
    ]);
    expect(rows.things).toEqual([{ label: 'seeded' }]);

    expect((await migrate(fresh.url, { dir: migrationsDir })).applied).toEqual([]);
  });

  it('the template database is fully migrated (sql/migrations, or PG_SETTLE_MIGRATIONS_DIR)', async () => {
    const db = await createTestDatabase('template_check');
    created.push(db);
    const dir = process.env.PG_SETTLE_MIGRATIONS_DIR;
    expect((await migrate(db.url, dir === undefined ? {} : { dir })).applied).toEqual([]);
  });
});

describe('createTestDatabase()', () => {
  it('gives parallel callers separate, isolated databases cloned from the template', async () => {
    const [a, b] = await Promise.all([createTestDatabase('iso_a'), createTestDatabase('iso_b')]);
    created.push(a, b);
    expect(a.name).not.toBe(b.name);
    expect(a.url).toBe(withDatabase(a.adminUrl, a.name));

    await withClient(a.url, (c) => c.query('create table only_in_a (id int)'));
    const visible = async (url: string): Promise<boolean> =>
      withClient(
        url,
        async (c) =>
          (await c.query<{ t: string | null }>("select to_regclass('only_in_a')::text as t")).rows[0]?.t != null,
      );
    expect(await visible(a.url)).toBe(true);
    expect(await visible(b.url)).toBe(false);

    // Both carry the template's migrations.
    const migrated = await withClient(
      b.url,
      async (c) => (await c.query('select count(*)::int as n from migrations')).rows[0],
    );
    expect(migrated).toEqual({ n: expect.any(Number) });
  });

  it('drop() removes the database even with open connections, and is idempotent', async () => {
    const db = await createTestDatabase('drop_me');
    const lingering = new pg.Client({ connectionString: db.url });
    lingering.on('error', () => {});
    await lingering.connect();
    await db.drop();
    await db.drop();
    const exists = await withClient(
      db.adminUrl,
      async (c) => (await c.query('select 1 from pg_database where datname = $1', [db.name])).rowCount,
    );
    expect(exists).toBe(0);
    await lingering.end().catch(() => {});
    expect(quoteIdent(db.name)).toBe(`"${db.name}"`);
  });

  it('many parallel clones all succeed (clone contention is serialized)', async () => {
    const dbs = await Promise.all(Array.from({ length: 6 }, (_, i) => createTestDatabase(`burst_${i}`)));
    created.push(...dbs);
    expect(new Set(dbs.map((d) => d.name)).size).toBe(6);
  });
});
