import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { migrate } from '../../src/db/migrate.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import '../../src/testing/index.js';

// Issue 18 §11: the recommended deployment migrates as a non-superuser CREATEROLE deploy login
// (the database's owner). That login must not stay a member of settle_owner: as a member it could
// `set role settle_owner` and disable _100_guard_lattice, then rewrite a completed result, which
// protocol §10 says only a superuser can do.

const suffix = randomBytes(4).toString('hex');
const deploy = `deploy_${suffix}`;
const dbName = `settle_deploy_${suffix}`;
let url: string;
let dir: string;

async function asSuperuser<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: inject('adminUrl') });
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.end();
  }
}

async function asDeploy<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Non-superuser logins that are members of settle_owner, directly or through other roles. */
async function loginOwners(): Promise<string[]> {
  return asSuperuser(async (c) => (await c.query<{ rolname: string }>(
    `select r.rolname from pg_roles r
      where r.rolcanlogin and not r.rolsuper and pg_has_role(r.oid, 'settle_owner', 'MEMBER') order by 1`,
  )).rows.map((r) => r.rolname));
}

beforeAll(async () => {
  await asSuperuser(async (c) => {
    await c.query(`create role ${quoteIdent(deploy)} login createrole`);
    await c.query(`create database ${quoteIdent(dbName)} owner ${quoteIdent(deploy)} template template0 encoding 'UTF8'`);
  });
  const u = new URL(withDatabase(inject('adminUrl'), dbName));
  u.username = deploy;
  u.password = '';
  url = u.toString();
  dir = await mkdtemp(path.join(tmpdir(), 'settle-migrations-'));
  await cp(defaultMigrationsDir(), dir, { recursive: true });
});

afterAll(async () => {
  await asSuperuser(async (c) => {
    await c.query(`drop database if exists ${quoteIdent(dbName)} with (force)`);
    await c.query(`drop role if exists ${quoteIdent(deploy)}`);
  });
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

describe('migrate as a non-superuser CREATEROLE deploy login', () => {
  it('leaves no non-superuser login a member of settle_owner, and the deploy login cannot disable a guard', async () => {
    const { applied, ownerMembers } = await migrate(url, { dir });
    expect(applied).toContain('00013_grants.sql');
    expect(ownerMembers).toEqual([]);
    expect(await loginOwners()).not.toContain(deploy);
    await asDeploy(async (c) => {
      expect((await c.query(`select pg_has_role(current_user, 'settle_owner', 'MEMBER') as m`)).rows[0].m).toBe(false);
      await expect(c.query('set role settle_owner')).rejects.toMatchObject({ code: '42501' });
      await expect(c.query('alter table settle_private.operations disable trigger _100_guard_lattice')).rejects.toMatchObject({ code: '42501' });
    });
  });

  it('a later migration runs as the owner again and leaves the membership dropped again', async () => {
    const last = Math.max(...(await readdir(dir)).map((f) => Number.parseInt(f, 10)).filter(Number.isFinite));
    const later = `${String(last + 1).padStart(5, '0')}_later.sql`;
    await writeFile(path.join(dir, later),
      `set local role settle_owner;\ncreate function settle_private._later() returns int language sql immutable as $$ select 1 $$;\nreset role;\n`);
    const { applied, ownerMembers } = await migrate(url, { dir });
    expect(applied).toEqual([later]);
    expect(ownerMembers).toEqual([]);
    expect(await loginOwners()).not.toContain(deploy);
    const owner = await asSuperuser(async () => asDeploy(async (c) =>
      (await c.query(`select pg_get_userbyid(p.proowner) as owner from pg_proc p where p.proname = '_later'`)).rows[0].owner));
    expect(owner).toBe('settle_owner');
  });

  it('a login left a member by someone else is named with the REVOKE that drops it', async () => {
    const other = `stale_${suffix}`;
    await asSuperuser((c) => c.query(`create role ${quoteIdent(other)} login; grant settle_owner to ${quoteIdent(other)}`));
    try {
      const { ownerMembers } = await migrate(url, { dir });
      expect(ownerMembers).toContainEqual({ role: other, revoke: `REVOKE settle_owner FROM ${other};` });
    } finally {
      await asSuperuser((c) => c.query(`drop role ${quoteIdent(other)}`));
    }
  });
});
