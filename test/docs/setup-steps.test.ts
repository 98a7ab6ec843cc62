import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withDatabase } from '../../src/db/database-url.js';
import { DEBIAN_PG_BIN_DIR, startLocalCluster } from '../../src/dev-server/local-cluster.js';
import { provisionPostgres, TEST_PG_BIN_ENV } from '../../src/dev-server/provision.js';
import { cliEnv } from '../support/cli.js';
import { fencedBlocks } from './markdown.js';

// Every setup step of the docs, as written, in order, on a fresh cluster (no pg-settle role exists
// yet, as on a first deployment), each run as the login its marker names: the superuser only where
// the docs say superuser. A step is a ```sql or ```sh block right after an HTML comment
// `<!-- setup step N, as LOGIN -->` in README.md, docs/operations.md or docs/http.md; steps run in
// the order of N. SQL runs through psql (each statement on its own, as a reader's psql would);
// shell lines run through bash with `pg-settle` on PATH (for `npx pg-settle`) and the docs' host
// `db.internal` pointed at the test cluster. Then each login is held to what the docs say it may
// do and to what it must not: on every supported PostgreSQL version (PG_SETTLE_TEST_PG_BIN).

const ROOT = path.resolve(import.meta.dirname, '../..');
const PAGES = ['README.md', 'docs/operations.md', 'docs/http.md'];
const BIN = path.join(ROOT, 'bin/pg-settle.js');
const PSQL = ['/usr/bin/psql', '/usr/lib/postgresql/15/bin/psql'].find((p) => existsSync(p));
const execFileAsync = promisify(execFile);

interface Step {
  readonly id: string;
  readonly login: string;
  readonly lang: string;
  readonly body: string;
  readonly where: string;
}

/** The blocks right after a `<!-- setup step ID, as LOGIN -->` line, with their markers. */
function setupSteps(): Step[] {
  const steps: Step[] = [];
  for (const page of PAGES) {
    const text = readFileSync(path.join(ROOT, page), 'utf8');
    const lines = text.split('\n');
    const blocks = fencedBlocks(text);
    lines.forEach((line, index) => {
      const marker = /^<!-- setup step (\S+), as (\S+) -->$/.exec(line);
      if (marker === null) return;
      const block = blocks.find((b) => b.line === index + 2);
      if (block === undefined)
        throw new Error(`${page}:${index + 1}: a setup step marker not right above a fenced block`);
      steps.push({
        id: marker[1] ?? '',
        login: marker[2] ?? '',
        lang: block.lang,
        body: block.body,
        where: `${page}:${block.line}`,
      });
    });
  }
  return steps;
}

const steps = setupSteps();
/** The steps of a first deployment, in order; `existing-roles` is for a cluster whose roles exist. */
const ordered = steps.filter((s) => /^\d+$/.test(s.id)).sort((a, b) => Number(a.id) - Number(b.id));
const existingRoles = steps.find((s) => s.id === 'existing-roles');

let server: { adminUrl: string; stop(): Promise<void> };
let versionNum = 0;
let dir: string;
const transcript: string[] = [];

/** A fresh cluster: from PG_SETTLE_TEST_PG_BIN, else Debian's 15, else what provisioning finds. */
async function freshCluster(): Promise<{ adminUrl: string; stop(): Promise<void> }> {
  const binDir = process.env[TEST_PG_BIN_ENV];
  if ((binDir === undefined || binDir === '') && existsSync(path.join(DEBIAN_PG_BIN_DIR, 'initdb'))) {
    return startLocalCluster({ binDir: DEBIAN_PG_BIN_DIR, libDirs: ['/usr/lib/postgresql/15/lib'], log: () => {} });
  }
  return provisionPostgres();
}

/** The cluster's URL for `login` (trust auth) and database `db`. */
function urlFor(login: string, db: string): string {
  const url = new URL(withDatabase(server.adminUrl, db));
  if (login !== 'superuser') {
    url.username = login;
    url.password = '';
  }
  return url.toString();
}

async function databaseExists(name: string): Promise<boolean> {
  return asLogin(
    'superuser',
    async (c) => (await c.query('select 1 from pg_database where datname = $1', [name])).rowCount === 1,
    'postgres',
  );
}

async function asLogin<T>(login: string, fn: (c: pg.Client) => Promise<T>, db = 'payments'): Promise<T> {
  const client = new pg.Client({ connectionString: urlFor(login, db) });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Runs one step as written; resolves to its output, rejects naming the step when it fails. */
async function runStep(step: Step, rename: (text: string) => string = (t) => t): Promise<string> {
  const body = rename(step.body);
  const db = (await databaseExists('payments')) ? 'payments' : 'postgres';
  const env = cliEnv({ PATH: `${dir}/bin:${process.env.PATH ?? ''}`, ADMIN_URL: urlFor(step.login, db) });
  delete env.DATABASE_URL;
  try {
    if (step.lang === 'sql') {
      if (PSQL === undefined) throw new Error('no psql client (Debian postgresql-client-15) to run the SQL steps with');
      const file = path.join(dir, `step-${step.id}.sql`);
      await writeFile(file, `${body}\n`);
      const { stdout, stderr } = await execFileAsync(
        PSQL,
        ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', urlFor(step.login, db), '-f', file],
        { env },
      );
      return `${stdout}${stderr}`;
    }
    if (step.lang === 'sh') {
      const cluster = new URL(server.adminUrl);
      const script = body
        .replaceAll('npx pg-settle', 'pg-settle')
        .replaceAll('@db.internal/', `@${cluster.hostname}:${cluster.port}/`);
      const { stdout, stderr } = await execFileAsync('/bin/bash', ['-euo', 'pipefail', '-c', script], {
        env,
        cwd: dir,
        timeout: 240_000,
      });
      return `${stdout}${stderr}`;
    }
    throw new Error(`a setup step in ${step.lang}: only sql and sh run`);
  } catch (error) {
    const e = error as Error & { stdout?: string; stderr?: string };
    throw new Error(
      `setup step ${step.id} (${step.where}, as ${step.login}) failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`,
      { cause: error },
    );
  }
}

/** The JSON document `pg-settle ... --json` printed last in a step's output. */
function jsonOf(output: string): unknown {
  const start = output.lastIndexOf('\n{\n');
  return JSON.parse(output.slice(start === -1 ? 0 : start + 1));
}

const BINDING = `principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 1`;

/** claim then complete as a settle_app login; resolves to the complete's outcome. */
async function claimAndComplete(c: pg.Client, tenant: string, key: string): Promise<string> {
  const claimed = await c.query<{ outcome: string; attempt: number; lease_token: string; fingerprint: string }>(
    `select outcome, attempt, lease_token, fingerprint from settle.claim(tenant => $1, key => $2, request => '{"amount": 1250}', ${BINDING})`,
    [tenant, key],
  );
  const row = claimed.rows[0];
  if (row?.outcome !== 'acquired') throw new Error(`claim of ${key} answered ${row?.outcome}`);
  const done = await c.query<{ outcome: string }>(
    `select outcome from settle.complete(tenant => $1, key => $2, attempt => $3, lease_token => $4, fingerprint => $5,
       ${BINDING}, result => '{"payment_id": "pay_1"}')`,
    [tenant, key, row.attempt, row.lease_token, row.fingerprint],
  );
  return done.rows[0]?.outcome ?? '';
}

/** The SQLSTATE a statement fails with (undefined when it succeeds). */
async function sqlstateOf(c: pg.Client, sql: string): Promise<string | undefined> {
  try {
    await c.query(sql);
    return undefined;
  } catch (error) {
    return (error as { code?: string }).code;
  }
}

const CLAIM = `select settle.claim(tenant => 'acme', key => 'not-mine', request => '{}', ${BINDING})`;
const SERVICE_LOGINS = [
  'checkout_service',
  'acme_checkout',
  'settle_sweeper',
  'ops_oncall',
  'grafana',
  'ledger_feed',
  'payouts_reconciler',
  'shop_app',
];

beforeAll(async () => {
  server = await freshCluster();
  versionNum = await asLogin(
    'superuser',
    async (c) => Number((await c.query(`select current_setting('server_version_num') as n`)).rows[0].n),
    'postgres',
  );
  dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-setup-'));
  await mkdir(path.join(dir, 'bin'));
  await writeFile(path.join(dir, 'bin', 'pg-settle'), `#!/bin/sh\nexec "${process.execPath}" "${BIN}" "$@"\n`);
  await chmod(path.join(dir, 'bin', 'pg-settle'), 0o755);
  // The steps in order, once: every check below reads the cluster they left.
  for (const step of ordered) transcript.push(`== step ${step.id} (${step.where})\n${await runStep(step)}`);
}, 600_000);

afterAll(async () => {
  await server?.stop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

describe('the setup steps of the docs, as written, on a fresh cluster', () => {
  it('finds the steps: numbered 1..n without gaps, sql or sh, each as a named login', () => {
    expect(ordered.map((s) => s.id)).toEqual(ordered.map((_, i) => String(i + 1)));
    expect(ordered.length).toBeGreaterThanOrEqual(8);
    for (const step of steps) expect(['sql', 'sh'], step.where).toContain(step.lang);
    expect(new Set(steps.map((s) => s.login))).toEqual(new Set(['superuser', 'deploy', 'ops_oncall']));
    expect(existingRoles, 'the step for a cluster whose roles exist').toBeDefined();
  });

  it('migrated as the CREATEROLE deploy login, which then cannot act as settle_owner', async () => {
    const migrated = transcript.find((t) => t.includes('00001_create_roles_and_schemas.sql')) ?? transcript.join('\n');
    expect(jsonOf(migrated)).toMatchObject({ ok: true, command: 'migrate', ownerMembers: [] });
    expect(transcript.join('\n')).not.toMatch(/warning:/i);
    await asLogin('deploy', async (c) => {
      expect(await sqlstateOf(c, 'set role settle_owner')).toBe('42501');
      expect(await sqlstateOf(c, 'alter table settle_private.operations disable trigger _100_guard_lattice')).toBe(
        '42501',
      );
      expect(await sqlstateOf(c, 'select * from settle_private.operations')).toBe('42501');
    });
    // docs/operations.md's check, as written: no login can act as settle_owner.
    const ops = readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8');
    const check = fencedBlocks(ops).find((b) =>
      b.body.startsWith('-- as superuser: the logins that can act as settle_owner (expected: none)'),
    );
    expect(check).toBeDefined();
    expect((await asLogin('superuser', (c) => c.query(check?.body ?? ''))).rows).toEqual([]);
  });

  it('settle_app logins claim and complete, a bound one only for its tenant, and none reads or writes a table', async () => {
    await asLogin('checkout_service', async (c) => {
      expect(await claimAndComplete(c, 'acme', 'order-1')).toBe('settled');
      expect(await claimAndComplete(c, 'globex', 'order-1')).toBe('settled');
      expect(await sqlstateOf(c, 'select * from settle.operations')).toBe('42501');
      expect(await sqlstateOf(c, `select settle.redrive(tenant => 'acme', key => 'order-1')`)).toBe('42501');
      expect(await sqlstateOf(c, `select settle.purge(older_than => '30 days')`)).toBe('42501');
    });
    await asLogin('acme_checkout', async (c) => {
      expect(await claimAndComplete(c, 'acme', 'order-2')).toBe('settled');
      expect(await sqlstateOf(c, CLAIM.replace("'acme'", "'globex'"))).toBe('SE013');
    });
    await asLogin('shop_app', async (c) => {
      expect(await claimAndComplete(c, 'acme', 'order-3')).toBe('settled');
      await c.query('create table shop.orders (id int primary key)');
      expect(await sqlstateOf(c, 'create table public.orders (id int primary key)')).toBe('42501');
    });
  });

  it('settle_readonly reads the views and cannot write or call the API that writes', async () => {
    await asLogin('grafana', async (c) => {
      const { rows } = await c.query(`select key from settle.operations where tenant = 'acme' order by key`);
      expect(rows.map((r) => r.key)).toEqual(['order-1', 'order-2', 'order-3']);
      expect(await sqlstateOf(c, CLAIM)).toBe('42501');
      expect(await sqlstateOf(c, `delete from settle.operations`)).toBe('42501');
      expect(await sqlstateOf(c, `update settle_private.operations set key = key`)).toBe('42501');
      expect(await sqlstateOf(c, `select settle.expire_leases()`)).toBe('42501');
    });
  });

  it('settle_admin logins sweep, purge and register consumers; settle_consumer reads and acks the feed only', async () => {
    await asLogin('settle_sweeper', async (c) => {
      await c.query('select * from settle.expire_leases()');
      await c.query(`select settle.purge(older_than => '30 days')`);
      expect(await sqlstateOf(c, CLAIM)).toBe('42501');
    });
    await asLogin('ops_oncall', async (c) => {
      await c.query(`select * from settle.register_consumer(name => 'ledger', start_at => 'earliest')`);
      const { rows } = await c.query(
        `select detail->>'role' as role from settle.admin_log where event = 'grant_tenant'`,
      );
      expect(rows).toEqual([{ role: 'acme_checkout' }]);
      expect(await sqlstateOf(c, 'select * from settle_private.operations')).toBe('42501');
    });
    await asLogin('ledger_feed', async (c) => {
      const events = await c.query<{
        key: string;
        lane: number;
        lease_token: string;
        position_xid: string;
        event_id: string;
      }>(`select key, lane, lease_token, position_xid, event_id from settle.read_feed(consumer => 'ledger')`);
      expect(events.rows.length).toBeGreaterThan(0);
      const last = events.rows.at(-1);
      const acked = await c.query(
        `select settle.ack_feed(consumer => 'ledger', lane => $1, lease_token => $2, position_xid => $3, event_id => $4) as ok`,
        [last?.lane, last?.lease_token, last?.position_xid, last?.event_id],
      );
      expect(acked.rows[0].ok).toBe(true);
      expect(await sqlstateOf(c, CLAIM)).toBe('42501');
      expect(await sqlstateOf(c, 'select * from settle.operations')).toBe('42501');
    });
  });

  it('settle_reconciler leases and reads what needs reconciliation and cannot claim', async () => {
    await asLogin('payouts_reconciler', async (c) => {
      await c.query(`select * from settle.lease_reconciliation(holder => 'reconciler-1')`);
      await c.query(`select count(*) from settle.dead_letters`);
      expect(await sqlstateOf(c, CLAIM)).toBe('42501');
      expect(await sqlstateOf(c, `select settle.purge(older_than => '30 days')`)).toBe('42501');
    });
  });

  it('no login holds a privilege on a private table or can maintain one (VACUUM, ANALYZE, LOCK, REINDEX, MAINTAIN)', async () => {
    const logins = ['deploy', ...SERVICE_LOGINS];
    const privileges = [
      'SELECT',
      'INSERT',
      'UPDATE',
      'DELETE',
      'TRUNCATE',
      'REFERENCES',
      'TRIGGER',
      ...(versionNum >= 170000 ? ['MAINTAIN'] : []),
    ];
    const held = await asLogin(
      'superuser',
      async (c) =>
        (
          await c.query(
            `select l as login, c.relname, p as privilege
         from unnest($1::text[]) l, unnest($2::text[]) p, pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'settle_private' and c.relkind in ('r', 'p', 'm')
          and has_table_privilege(l, c.oid, p)`,
            [logins, privileges],
          )
        ).rows,
    );
    expect(held).toEqual([]);
    if (versionNum >= 170000) {
      // PostgreSQL 17's predefined role that may VACUUM, ANALYZE, REFRESH, LOCK, REINDEX anything.
      const maintainers = await asLogin(
        'superuser',
        async (c) =>
          (await c.query(`select l from unnest($1::text[]) l where pg_has_role(l, 'pg_maintain', 'MEMBER')`, [logins]))
            .rows,
      );
      expect(maintainers).toEqual([]);
    }
    await asLogin('checkout_service', async (c) => {
      // The private schema is closed to it: naming a table fails before any privilege is asked.
      for (const statement of [
        'vacuum settle_private.operations',
        'analyze settle_private.operations',
        'begin; lock table settle_private.operations in access share mode',
        'reindex table settle_private.operations',
        'cluster settle_private.operations',
      ]) {
        expect(await sqlstateOf(c, statement), statement).toBe('42501');
        await c.query('rollback');
      }
      // A database-wide VACUUM and ANALYZE skip every private table (they would use MAINTAIN on 17+).
      const notices: string[] = [];
      c.on('notice', (n) => notices.push(n.message ?? ''));
      await c.query('vacuum (analyze)');
      const skipped = notices.filter((n) => /skipping/.test(n) && /"operations"/.test(n));
      expect(skipped.length, notices.join('\n')).toBeGreaterThan(0);
    });
  });

  it('a second database of the cluster, migrated by another CREATEROLE login: the existing-roles step is what 16+ needs', async () => {
    const first = ordered[0];
    const migrateStep = ordered.find((s) => s.lang === 'sh' && s.body.includes('pg-settle migrate --database-url'));
    if (first === undefined || migrateStep === undefined || existingRoles === undefined)
      throw new Error('steps missing');
    const rename = (text: string): string =>
      text.replaceAll('deploy', 'deploy_two').replaceAll('payments', 'payments_two');
    const asTwo = (step: Step): Step => ({ ...step, login: step.login === 'deploy' ? 'deploy_two' : step.login });
    await runStep(asTwo(first), rename);
    if (versionNum >= 160000) {
      await expect(runStep(asTwo(migrateStep), rename)).rejects.toThrow(
        /GRANT settle_owner TO "deploy_two" WITH ADMIN TRUE, INHERIT FALSE, SET FALSE/,
      );
      await runStep(asTwo(existingRoles), rename);
    }
    expect(jsonOf(await runStep(asTwo(migrateStep), rename))).toMatchObject({
      ok: true,
      applied: [],
      ownerMembers: [],
    });
    await asLogin(
      'deploy_two',
      async (c) => expect(await sqlstateOf(c, 'set role settle_owner')).toBe('42501'),
      'payments_two',
    );
  });
});
