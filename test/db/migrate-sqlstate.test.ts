import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DatabaseEncodingError, mapDatabaseError } from '../../src/client/index.js';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { migrate, MigrationError } from '../../src/db/migrate.js';
import '../../src/testing/index.js';

async function asAdmin(sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: inject('adminUrl') });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

describe('migrate() keeps the SQLSTATE of the statement that failed', () => {
  const name = `settle_sql_ascii_${randomUUID().slice(0, 8)}`;
  let url: string;
  beforeAll(async () => {
    await asAdmin(
      `create database ${quoteIdent(name)} template template0 encoding 'SQL_ASCII' lc_collate 'C' lc_ctype 'C'`,
    );
    url = withDatabase(inject('adminUrl'), name);
  });
  afterAll(async () => {
    await asAdmin(`drop database if exists ${quoteIdent(name)} with (force)`);
  });

  it('SE030 on a SQL_ASCII database maps to DatabaseEncodingError, with detail and hint', async () => {
    const error = await migrate(url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MigrationError);
    expect(error).toMatchObject({ code: 'SE030', hint: "Create the database with ENCODING 'UTF8'." });
    expect((error as MigrationError).message).toContain('pg-settle requires a UTF8 database');
    expect((error as MigrationError).cause).toMatchObject({ code: 'SE030' });

    const mapped = mapDatabaseError(error);
    expect(mapped).toBeInstanceOf(DatabaseEncodingError);
    expect(mapped).toMatchObject({ code: 'SE030', sqlstate: 'SE030', detail: { encoding: 'SQL_ASCII' } });
  });

  it('a given client gets the same error, and nothing was applied', async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const error = await migrate(client).catch((e: unknown) => e);
      expect(mapDatabaseError(error)).toBeInstanceOf(DatabaseEncodingError);
      const { rows } = await client.query<{ n: number }>(
        `select count(*)::int as n from pg_namespace where nspname in ('settle', 'settle_private')`,
      );
      expect(rows[0]?.n).toBe(0);
    } finally {
      await client.end();
    }
  });
});
