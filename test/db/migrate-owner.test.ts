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

// The recommended deployment migrates as a non-superuser CREATEROLE deploy login (the database's
// owner). That login must not stay able to act as settle_owner: then it could `set role
// settle_owner` and disable _100_guard_lattice, then rewrite a completed result, which protocol §10
// says only a superuser can do. The roles exist already here (the template was migrated by a
// superuser): on PostgreSQL 16+ the login then needs ADMIN OPTION on settle_owner, as
// docs/operations.md says, and keeps that option (neither SET nor INHERIT) afterwards.

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

const pg16 = inject('serverVersionNum') >= 160000;
// On 15 every membership allows SET ROLE; on 16+ that is the SET option.
const CAN_ACT = `(pg_has_role(%s, 'settle_owner', 'USAGE') or pg_has_role(%s, 'settle_owner', '${pg16 ? 'SET' : 'MEMBER'}'))`;
const canAct = (who: string): string => CAN_ACT.replaceAll('%s', who);

/** Non-superuser logins able to act as settle_owner, directly or through other roles. */
async function loginOwners(): Promise<string[]> {
  return asSuperuser(async (c) =>
    (
      await c.query<{ rolname: string }>(
        `select r.rolname from pg_roles r where r.rolcanlogin and not r.rolsuper and ${canAct('r.oid')} order by 1`,
      )
    ).rows.map((r) => r.rolname),
  );
}

beforeAll(async () => {
  await asSuperuser(async (c) => {
    await c.query(`create role ${quoteIdent(deploy)} login createrole`);
    if (pg16) await c.query(`grant settle_owner to ${quoteIdent(deploy)} with admin true, inherit false, set false`);
    await c.query(
      `create database ${quoteIdent(dbName)} owner ${quoteIdent(deploy)} template template0 encoding 'UTF8'`,
    );
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
    expect(applied).toContain('00015_grants.sql');
    expect(ownerMembers).toEqual([]);
    expect(await loginOwners()).not.toContain(deploy);
    await asDeploy(async (c) => {
      expect((await c.query(`select ${canAct('current_user')} as m`)).rows[0].m).toBe(false);
      await expect(c.query('set role settle_owner')).rejects.toMatchObject({ code: '42501' });
      await expect(
        c.query('alter table settle_private.operations disable trigger _100_guard_lattice'),
      ).rejects.toMatchObject({ code: '42501' });
    });
  });

  it('a later migration runs as the owner again and leaves the membership dropped again', async () => {
    const last = Math.max(...(await readdir(dir)).map((f) => Number.parseInt(f, 10)).filter(Number.isFinite));
    const later = `${String(last + 1).padStart(5, '0')}_later.sql`;
    await writeFile(
      path.join(dir, later),
      `set local role settle_owner;\ncreate function settle_private._later() returns int language sql immutable as $$ select 1 $$;\nreset role;\n`,
    );
    const { applied, ownerMembers } = await migrate(url, { dir });
    expect(applied).toEqual([later]);
    expect(ownerMembers).toEqual([]);
    expect(await loginOwners()).not.toContain(deploy);
    const owner = await asSuperuser(async () =>
      asDeploy(
        async (c) =>
          (await c.query(`select pg_get_userbyid(p.proowner) as owner from pg_proc p where p.proname = '_later'`))
            .rows[0].owner,
      ),
    );
    expect(owner).toBe('settle_owner');
  });

  it('a CREATEROLE login with no grant on the existing roles: refused on 16+ with the grant that fixes it', async () => {
    const bare = `bare_${suffix}`;
    const bareDb = `settle_bare_${suffix}`;
    await asSuperuser(async (c) => {
      await c.query(`create role ${quoteIdent(bare)} login createrole`);
      await c.query(
        `create database ${quoteIdent(bareDb)} owner ${quoteIdent(bare)} template template0 encoding 'UTF8'`,
      );
    });
    try {
      const u = new URL(withDatabase(inject('adminUrl'), bareDb));
      u.username = bare;
      u.password = '';
      if (pg16) {
        await expect(migrate(u.toString(), { dir })).rejects.toMatchObject({
          name: 'MigrationError',
          code: '42501',
          hint: expect.stringContaining(`GRANT settle_owner TO "${bare}" WITH ADMIN TRUE, INHERIT FALSE, SET FALSE`),
        });
      } else {
        // PostgreSQL 15's CREATEROLE may grant any non-superuser role: the hole docs/operations.md names.
        expect((await migrate(u.toString(), { dir })).ownerMembers).toEqual([]);
      }
    } finally {
      await asSuperuser(async (c) => {
        await c.query(`drop database if exists ${quoteIdent(bareDb)} with (force)`);
        await c.query(`drop role ${quoteIdent(bare)}`);
      });
    }
  });

  it('a login left a member by someone else is named with the REVOKE that drops it', async () => {
    const other = `stale_${suffix}`;
    await asSuperuser((c) =>
      c.query(`create role ${quoteIdent(other)} login; grant settle_owner to ${quoteIdent(other)}`),
    );
    try {
      const { ownerMembers } = await migrate(url, { dir });
      expect(ownerMembers).toContainEqual({ role: other, revoke: `REVOKE settle_owner FROM ${other};` });
    } finally {
      await asSuperuser((c) => c.query(`drop role ${quoteIdent(other)}`));
    }
  });
});
