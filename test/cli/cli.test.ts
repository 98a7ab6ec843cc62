import { readFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { COMMANDS } from '../../src/cli/commands/index.js';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { ROOT, type CliRun, runCli } from '../support/cli.js';

function cli(
  args: readonly string[],
  opts: { readonly withDb?: boolean; readonly url?: string; readonly env?: Record<string, string> } = {},
): Promise<CliRun> {
  return runCli(args, { databaseUrl: opts.withDb === false ? undefined : (opts.url ?? db.url), env: opts.env });
}

let db: TestDatabase;
let client: SettleClient;
let emptyUrl: string;
const TENANT = 'cli-tenant';
const binding = { principal: 'cli-user', scopes: ['payouts:write'], generation: 1 };

async function deadLetter(tenant: string, key: string): Promise<void> {
  const dead = await client.claim({ tenant, key, request: { amount_cents: 5 }, binding, maxAttempts: 1 });
  if (dead.outcome !== 'acquired') throw new Error(`setup: ${dead.outcome}`);
  await client.fail(dead.attempt, { code: 'declined' }, { retryable: true });
}

async function completed(tenant: string, key: string): Promise<void> {
  const done = await client.claim({ tenant, key, request: { amount_cents: 7 }, binding });
  if (done.outcome !== 'acquired') throw new Error(`setup: ${done.outcome}`);
  await client.complete(done.attempt, { payout_id: `p-${key}` });
}

beforeAll(async () => {
  db = await createTestDatabase('cli');
  client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  await deadLetter(TENANT, 'dead-1');
  await completed(TENANT, 'done-1');
  // An empty database (never migrated) on the same server.
  const name = `${db.name}_empty`;
  const admin = new pg.Client({ connectionString: db.adminUrl });
  await admin.connect();
  await admin.query(`create database ${quoteIdent(name)} template template0`);
  await admin.end();
  emptyUrl = withDatabase(db.adminUrl, name);
});

afterAll(async () => {
  await client?.end();
  if (emptyUrl !== undefined) {
    const admin = new pg.Client({ connectionString: db.adminUrl });
    await admin.connect();
    await admin.query(`drop database if exists ${quoteIdent(new URL(emptyUrl).pathname.slice(1))} with (force)`);
    await admin.end();
  }
  await db?.drop();
});

// Each spawn costs ~2 s of tsx start-up on a shared 2-core machine: generous timeouts.
describe('pg-settle CLI', { timeout: 300_000 }, () => {
  it('migrate --json: the harness database is up to date', async () => {
    const run = await cli(['migrate', '--json']);
    expect(run.code).toBe(0);
    expect(run.json).toEqual({ ok: true, command: 'migrate', throwaway: false, applied: [], ownerMembers: [] });
  });

  it('stats --json: per-tenant counts', async () => {
    const run = await cli(['stats', '--json']);
    expect(run.code).toBe(0);
    const tenants = run.json.tenants as Record<string, unknown>[];
    expect(tenants.find((t) => t.tenant === TENANT)).toMatchObject({
      operations: 2,
      completed: 1,
      failed: 1,
      deadLettered: 1,
    });
  });

  it('inspect --json: record, attempts and audit trail; a missing key exits 1 and carries SE010', async () => {
    const run = await cli(['inspect', TENANT, 'done-1', '--json']);
    expect(run.code).toBe(0);
    expect(run.json).toMatchObject({
      ok: true,
      command: 'inspect',
      operation: { status: 'completed', settledAttempt: 1, result: { payout_id: 'p-done-1' } },
    });
    expect(run.json.attempts).toHaveLength(1);
    expect((run.json.audit as { event: string }[]).map((a) => a.event)).toEqual(['claim', 'complete']);
    const missing = await cli(['inspect', TENANT, 'nope', '--json']);
    expect(missing.code).toBe(1);
    expect(missing.json).toMatchObject({
      ok: false,
      exitCode: 1,
      error: { sqlstate: 'SE010', name: 'OperationNotFoundError' },
    });
    const text = await cli(['inspect', TENANT, 'nope']);
    expect(text.stderr).toContain('sqlstate: SE010 (OperationNotFoundError)');
  });

  it('dead-letters --json lists the dead letter; redrive re-opens it once, then SE011 exits 1', async () => {
    const list = await cli(['dead-letters', '--json']);
    expect(list.code).toBe(0);
    expect(list.json).toMatchObject({
      ok: true,
      count: 1,
      deadLetters: [
        { tenant: TENANT, key: 'dead-1', status: 'failed', reason: 'attempts_exhausted', attempt: 1, maxAttempts: 1 },
      ],
    });
    expect((await cli(['dead-letters'])).stdout).toMatch(/dead-1\s+failed\s+attempts_exhausted/);
    expect((await cli(['inspect', TENANT, 'dead-1'])).stdout).toMatch(/dead-lettered\s+\S+Z \(attempts_exhausted\)/);
    const redrive = await cli(['redrive', TENANT, 'dead-1', '--attempts', '2', '--reason', 'cli test', '--json']);
    expect(redrive.code).toBe(0);
    expect(redrive.json).toMatchObject({
      ok: true,
      command: 'redrive',
      operation: { status: 'pending', redriveCount: 1, maxAttempts: 3 },
    });
    const again = await cli(['redrive', TENANT, 'dead-1', '--json']);
    expect(again.code).toBe(1);
    expect(again.json).toMatchObject({
      ok: false,
      exitCode: 1,
      error: { sqlstate: 'SE011', name: 'NotDeadLetteredError' },
    });
    const text = await cli(['redrive', TENANT, 'dead-1']);
    expect(text.code).toBe(1);
    expect(text.stderr).toContain('sqlstate: SE011');
    expect(text.stderr).toContain('hint:');
  });

  it('redrive --all: dry run counts, no terminal without --yes refuses, --yes redrives with progress on stderr', async () => {
    const tenant = 'cli-bulk';
    for (const key of ['b1', 'b2', 'b3']) await deadLetter(tenant, key);
    const dry = await cli(['redrive', '--all', '--tenant', tenant, '--dry-run', '--json']);
    expect(dry.code).toBe(0);
    expect(dry.json).toEqual({ ok: true, command: 'redrive', dryRun: true, wouldRedrive: 3 });
    const refused = await cli(['redrive', '--all', '--tenant', tenant, '--json']);
    expect(refused.code).toBe(2);
    expect(refused.json).toMatchObject({ ok: false, exitCode: 2 });
    expect((refused.json.error as { message: string }).message).toContain('pass --yes');
    expect((await client.inspect({ tenant, key: 'b1' }))?.status).toBe('failed');
    const run = await cli(['redrive', '--all', '--tenant', tenant, '--yes', '--json'], {
      env: { PG_SETTLE_PROGRESS_EVERY_MS: '0' },
    });
    expect(run.code).toBe(0);
    expect(run.json).toEqual({ ok: true, command: 'redrive', dryRun: false, redriven: 3, skipped: 0 });
    expect(run.stderr).toMatch(/redrive 3\/3 dead letters \(100%\) {2}[\d.]+\/s {2}elapsed [\d.]+s {2}ETA/);
    expect((await client.inspect({ tenant, key: 'b3' }))?.status).toBe('pending');
    expect((await cli(['redrive', TENANT, 'dead-1', '--all'])).code).toBe(2);
    expect((await cli(['redrive', TENANT, 'dead-1', '--yes'])).code).toBe(2);
  });

  it('expire-leases --json', async () => {
    const expire = await cli(['expire-leases', '--json']);
    expect(expire.code).toBe(0);
    expect(expire.json).toMatchObject({ ok: true, command: 'expire-leases', expired: 0, deadLettered: 0, batches: 1 });
  });

  it('purge: --dry-run counts by status, no terminal without --yes refuses, --yes purges in batches with progress', async () => {
    const tenant = 'cli-purge';
    await completed(tenant, 'c1');
    await completed(tenant, 'c2');
    await deadLetter(tenant, 'd1');
    const dry = await cli(['purge', '--older-than', '0s', '--dry-run', '--json']);
    expect(dry.code).toBe(0);
    expect(dry.json).toMatchObject({ ok: true, command: 'purge', dryRun: true, olderThanMs: 0 });
    const would = dry.json.wouldPurge as { total: number; completed: number; failed: number; deadLettered: number };
    expect(would.completed).toBeGreaterThanOrEqual(3); // done-1, c1, c2
    expect(would.deadLettered).toBeGreaterThanOrEqual(1);
    expect(would.total).toBe(would.completed + would.failed);
    expect(await client.inspect({ tenant, key: 'c1' })).not.toBeNull();

    const dryText = await cli(['purge', '--older-than', '0s', '--dry-run']);
    expect(dryText.stdout).toMatch(
      /^dry run: would purge \d+ operations \(completed \d+, failed \d+; \d+ dead letters kept\)/,
    );

    const refused = await cli(['purge', '--older-than', '0s']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('stdin is not a terminal');
    expect(await client.inspect({ tenant, key: 'c1' })).not.toBeNull();

    const purge = await cli(['purge', '--older-than', '0s', '--yes', '--batch-size', '1', '--json'], {
      env: { PG_SETTLE_PROGRESS_EVERY_MS: '0' },
    });
    expect(purge.code).toBe(0);
    expect(purge.json).toMatchObject({
      ok: true,
      command: 'purge',
      dryRun: false,
      olderThanMs: 0,
      purged: would.total,
      batches: would.total + 1,
    });
    expect(purge.stderr).toMatch(new RegExp(`purge ${would.total}/${would.total} operations \\(100%\\)`));
    expect(await client.inspect({ tenant, key: 'c1' })).toBeNull();
    expect(await client.inspect({ tenant: TENANT, key: 'done-1' })).toBeNull();

    const nothing = await cli(['purge', '--older-than', '0s']);
    expect(nothing.code).toBe(0);
    expect(nothing.stdout).toContain('nothing to purge');
  });

  it('simulate --json: a tiny run is green, with the naive baseline side by side', async () => {
    const run = await cli([
      'simulate',
      '--operations',
      '30',
      '--workers',
      '4',
      '--seed',
      '3',
      '--write-to-database',
      '--json',
    ]);
    expect(run.code).toBe(0);
    expect(run.json).toMatchObject({
      throwaway: false,
      comparison: {
        naive: { operations: 30 },
        pgSettle: { doublePayouts: 0, downgradedOutcomes: 0, lostResults: 0, conflictingPayloadsAccepted: 0 },
      },
    });
    expect(run.json).toMatchObject({
      command: 'simulate',
      ok: true,
      seed: 3,
      operations: { issued: 30, completed: 30 },
    });
    expect((run.json.check as { invariants: unknown[] }).invariants).toHaveLength(9);
    expect(run.json.faults).toHaveLength(10);
    expect(run.json).toMatchObject({
      consumers: { feed: { payouts: 30, credited: 30, missing: 0, creditedTwice: 0 } },
    });
  });

  it('simulate never writes into a database it was pointed at unless asked', async () => {
    const refused = await cli(['simulate', '--operations', '5', '--json']);
    expect(refused.code).toBe(2);
    expect((refused.json.error as { message: string }).message).toContain('add --write-to-database');
    expect((await cli(['simulate', '--write-to-database', '--json'], { withDb: false })).code).toBe(2);
    // DATABASE_URL alone: a throwaway database of its own, said on stderr.
    const own = await cli(['simulate', '--operations', '5', '--workers', '2', '--skip-baseline', '--json'], {
      withDb: false,
      env: { DATABASE_URL: db.url },
    });
    expect(own.code).toBe(0);
    expect(own.json).toMatchObject({ throwaway: true, ok: true, comparison: null });
    expect(own.stderr).toContain('DATABASE_URL is set, but simulate runs in a throwaway database of its own');
    const { rows } = await client
      .getPool()
      .then((pool) =>
        pool.query(sql.unsafe`select count(*)::int as n from settle.operations where tenant like 'sim%'`),
      );
    expect(rows[0]).toMatchObject({ n: 30 }); // only the earlier, asked-for run wrote here
  });

  // Twelve runs of the CLI from source: minutes of headroom on a loaded machine.
  it('without --database-url or DATABASE_URL every command but simulate and dev exits 2 and starts nothing', {
    timeout: 360_000,
  }, async () => {
    const commands = [
      ['stats'],
      ['dead-letters'],
      ['inspect', 't', 'k'],
      ['expire-leases'],
      ['purge', '--older-than', '30d', '--yes'],
      ['redrive', 't', 'k'],
      ['redrive', '--all', '--yes'],
      ['migrate'],
      ['distribute'],
      ['feed'],
      ['resolve', 't', 'k', '--completed', '--result', '{}', '--reason', 'x', '--expected-attempt', '1', '--yes'],
      ['maintain', '--once'],
      ['schedule'],
      ['console'],
    ];
    expect(new Set(commands.map((c) => c[0]))).toEqual(
      new Set(COMMANDS.map((c) => c.name).filter((n) => n !== 'simulate' && n !== 'dev')),
    );
    for (const args of commands) {
      const run = await cli([...args, '--json'], { withDb: false });
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.json, args.join(' ')).toMatchObject({
        ok: false,
        exitCode: 2,
        error: { name: 'MissingDatabaseError' },
      });
      expect(run.stderr).not.toContain('throwaway');
    }
    const text = await cli(['dead-letters'], { withDb: false });
    expect(text.stdout).toBe('');
    expect(text.stderr).toContain('no database given: pass --database-url URL or set DATABASE_URL');
  });

  it('an unmigrated database: one typed error that says to run pg-settle migrate (exit 3)', async () => {
    for (const args of [
      ['stats'],
      ['inspect', 't', 'k'],
      ['purge', '--older-than', '1d', '--dry-run'],
      ['expire-leases'],
    ]) {
      const run = await cli([...args, '--json'], { url: emptyUrl });
      expect(run.code, args.join(' ')).toBe(3);
      expect(run.json, args.join(' ')).toMatchObject({
        ok: false,
        exitCode: 3,
        error: { name: 'SettleNotMigratedError' },
      });
      expect((run.json.error as { sqlstate: string }).sqlstate).toMatch(/^(42P01|3F000|42883)$/);
      expect((run.json.error as { message: string }).message).toContain('run `pg-settle migrate`');
    }
    const text = await cli(['stats'], { url: emptyUrl });
    expect(text.stderr).toContain('pg-settle is not installed in this database');
    expect(text.stderr).toContain('hint:     Run `pg-settle migrate');
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const run = await cli(['--version'], { withDb: false });
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`pg-settle ${version}\n`);
    // The CHANGELOG's newest release is this version, dated (a tag is cut from it).
    const changelog = readFileSync(path.join(ROOT, 'CHANGELOG.md'), 'utf8');
    expect(/^## \[(\S+)\] - (\S+)$/m.exec(changelog)?.slice(1)).toEqual([
      version,
      expect.stringMatching(/^\d{4}-\d{2}-\d{2}$/),
    ]);
  });

  it('a mistyped command or flag suggests the nearest', async () => {
    const stat = await cli(['stat'], { withDb: false });
    expect(stat.code).toBe(2);
    expect(stat.stderr).toContain('unknown command "stat" - did you mean `stats`?');
    expect((await cli(['dead-leters'], { withDb: false })).stderr).toContain('did you mean `dead-letters`?');
    expect((await cli(['frobnicate'], { withDb: false })).stderr).not.toContain('did you mean');
    expect((await cli(['purge', '--older-then', '1d'])).stderr).toContain('did you mean --older-than?');
  });

  it('usage errors exit 2: flags and arguments', async () => {
    expect((await cli(['stats', '--bogus'])).code).toBe(2);
    expect((await cli(['purge', '--json'])).json).toMatchObject({ ok: false, exitCode: 2 });
    expect((await cli(['purge', '--older-than', 'soon'])).code).toBe(2);
    expect((await cli(['inspect', 'only-tenant'])).code).toBe(2);
  });

  it('usage errors exit 2: simulator flags, unknown or missing command', async () => {
    expect((await cli(['simulate', '--fault-duplicate=2'])).code).toBe(2);
    expect((await cli(['frobnicate'], { withDb: false })).code).toBe(2);
    expect((await cli([], { withDb: false })).code).toBe(2);
  });

  it('--help exits 0, shows the usage, and gives every flag its default or range', async () => {
    const run = await cli(['redrive', '--help'], { withDb: false });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('Usage: pg-settle redrive <tenant> <key>');
    for (const command of COMMANDS) {
      // `dev` starts a server of its own and refuses --database-url (its help says so).
      const common = command.name === 'dev' ? ['json'] : ['database-url', 'json'];
      for (const flag of [...Object.keys(command.flags), ...common]) {
        const line = command.help.split('\n').findIndex((l) => new RegExp(`^\\s+--${flag}(=| |$)`).test(l));
        expect(line, `${command.name} --${flag} has a help line`).toBeGreaterThanOrEqual(0);
        // The flag's description, with its continuation lines, states a default or a range.
        const lines = command.help.split('\n');
        let text = lines[line] ?? '';
        for (let i = line + 1; i < lines.length && /^\s{20,}\S/.test(lines[i] ?? ''); i += 1) text += ` ${lines[i]}`;
        expect(text, `${command.name} --${flag}`).toMatch(/default|required|\d+-\d+|between/);
      }
    }
  });

  it('distribute on plain PostgreSQL exits 1 with SE031 (CitusUnavailableError) and changes nothing', async () => {
    const run = await cli(['distribute', '--json']);
    expect(run.code).toBe(1);
    expect(run.json).toMatchObject({ ok: false, exitCode: 1, error: { sqlstate: 'SE031' } });
    expect((await cli(['distribute'], { withDb: false })).code).toBe(2);
  });

  it('a bad database URL exits 3', async () => {
    const refused = await cli(['stats', '--json', '--database-url', 'postgres://postgres@127.0.0.1:1/nowhere'], {
      withDb: false,
    });
    expect(refused.code).toBe(3);
    expect(refused.json).toMatchObject({ ok: false, exitCode: 3, error: { name: 'SettleConnectionError' } });
    const garbage = await cli(['stats', '--database-url', 'not a url'], { withDb: false });
    expect(garbage.code).toBe(3);
  });
});
