import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { ackFeed, drainKeys, type FeedEventRow, readFeed, registerConsumer } from './support/feed.js';
import { newOperation } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, complete, reportUnknown } from './support/settle.js';

// Retention stored in the database and upkeep that runs itself. settle.run_upkeep is
// what pg_cron and `pg-settle maintain` call; several callers elect one runner per job by the
// job row's lock (SKIP LOCKED).
const db = useEngineDatabase('upkeep');
const loginRole = useLoginRoles(db);

interface RunRow {
  job: string;
  outcome: string;
  detail: Record<string, unknown> | null;
}

async function runUpkeep(client: pg.ClientBase, job: string | null = null, force = false): Promise<RunRow[]> {
  const { rows } = await client.query<RunRow>('select * from settle.run_upkeep(job => $1, force => $2)', [job, force]);
  return rows;
}

async function upkeep(client: pg.ClientBase) {
  const { rows } = await client.query(
    `select job, every::text, retention::text, last_ok, last_by, runs::int, failures::int, overdue, last_detail
       from settle.upkeep order by job`,
  );
  return rows;
}

describe('upkeep', () => {
  it('defaults: expire_leases and dead_letter_in_doubt every minute, purge every hour with a 7-day retention, trim_feed every minute; never ran yet', async () => {
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    // `overdue` is left out: a job that never ran is overdue once twice its interval plus a minute
    // has passed since the migration, which a long test run reaches (the last test checks it).
    expect(await upkeep(admin)).toEqual([
      expect.objectContaining({
        job: 'dead_letter_in_doubt',
        every: '00:01:00',
        retention: null,
        runs: 0,
        last_ok: null,
      }),
      expect.objectContaining({ job: 'expire_leases', every: '00:01:00', retention: null, runs: 0, last_ok: null }),
      expect.objectContaining({ job: 'purge', every: '01:00:00', retention: '7 days', runs: 0, last_ok: null }),
      expect.objectContaining({ job: 'trim_feed', every: '00:01:00', retention: null, runs: 0, last_ok: null }),
    ]);
  });

  it('runs what is due once, records it, says not_due after; a second caller is busy while one runs', async () => {
    const role = await loginRole('sweeper', ['settle_admin']);
    const one = await role.connect();
    const two = await role.connect();
    const superuser = await db.connect();
    const app = await db.app();

    // A lapsed lease for expire_leases to end.
    const ticket = await acquire(app, newOperation('lapsed', { lease: '1 second' }));
    await superuser.query(
      `update settle_private.operations set lease_expires_at = now() - interval '1 minute' where tenant = $1 and key = $2`,
      [ticket.tenant, ticket.key],
    );

    await one.query('begin');
    const first = await runUpkeep(one);
    expect(first.map((r) => [r.job, r.outcome])).toEqual([
      ['expire_leases', 'ran'],
      ['dead_letter_in_doubt', 'ran'],
      ['purge', 'ran'],
      ['trim_feed', 'ran'],
    ]);
    expect(first[0]?.detail).toMatchObject({ expired: 1 });
    expect(first[1]?.detail).toMatchObject({ dead_lettered: 0, in_doubt_after: '00:15:00' });
    expect(first[3]?.detail).toMatchObject({ trimmed: expect.any(Number) });
    // While `one` holds the job rows, another caller runs nothing and waits for nothing.
    expect((await runUpkeep(two)).map((r) => r.outcome)).toEqual(['busy', 'busy', 'busy', 'busy']);
    await one.query('commit');

    expect((await runUpkeep(two)).map((r) => r.outcome)).toEqual(['not_due', 'not_due', 'not_due', 'not_due']);
    expect((await runUpkeep(two, 'purge', true)).map((r) => r.outcome)).toEqual(['ran']);
    const jobs = await upkeep(two);
    expect(jobs).toEqual([
      expect.objectContaining({
        job: 'dead_letter_in_doubt',
        last_ok: true,
        last_by: role.name,
        runs: 1,
        overdue: false,
      }),
      expect.objectContaining({ job: 'expire_leases', last_ok: true, last_by: role.name, runs: 1, overdue: false }),
      expect.objectContaining({ job: 'purge', last_ok: true, last_by: role.name, runs: 2, overdue: false }),
      expect.objectContaining({ job: 'trim_feed', last_ok: true, last_by: role.name, runs: 1, overdue: false }),
    ]);
    expect(await sqlStateOf(runUpkeep(two, 'vacuum'))).toBe('SE008');
  });

  it('purges terminal operations older than the stored retention, never an unresolved one', async () => {
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    const superuser = await db.connect();
    const app = await db.app();
    const done = await acquire(app, newOperation('old-done'));
    await complete(app, done, { ok: 1 });
    const open = await acquire(app, newOperation('old-unknown', { max_attempts: 1 }));
    await reportUnknown(app, open);
    const recent = await acquire(app, newOperation('recent-done'));
    await complete(app, recent, { ok: 2 });
    await superuser.query(
      `update settle_private.operations set updated_at = now() - interval '8 days' where key = any($1::text[])`,
      [[done.key, open.key]],
    );

    // The test template lowers purge_min_retention to 0; a retention below the minimum is refused.
    await admin.query(`select settle.set_purge_min_retention(interval '1 day')`);
    expect(await sqlStateOf(admin.query(`select settle.set_retention(interval '1 hour')`))).toBe('SE014');
    expect((await admin.query(`select settle.set_retention(interval '7 days') as r`)).rows[0].r).toBeDefined();
    const [run] = await runUpkeep(admin, 'purge', true);
    expect(run).toMatchObject({ outcome: 'ran', detail: { purged: 1, retention: '7 days' } });
    const left = await superuser.query(`select key from settle.operations where key = any($1::text[]) order by key`, [
      [done.key, open.key, recent.key],
    ]);
    expect(left.rows.map((r) => r.key).sort()).toEqual([open.key, recent.key].sort());
    const log = await admin.query(
      `select event, detail from settle.admin_log where event = 'set_retention' order by log_id`,
    );
    expect(log.rows.at(-1)).toMatchObject({ event: 'set_retention', detail: { after: '7 days' } });
  });

  it('set_in_doubt_after stores the age and logs the change in settle.admin_log; bad input is SE008', async () => {
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    expect(await sqlStateOf(admin.query(`select settle.set_in_doubt_after(interval '0 seconds')`))).toBe('SE008');
    const { rows } = await admin.query(`select settle.set_in_doubt_after(interval '20 minutes')::text as r`);
    expect(rows[0].r).toBe('00:20:00');
    const log = await admin.query(
      `select event, detail from settle.admin_log where event = 'set_in_doubt_after' order by log_id`,
    );
    expect(log.rows.at(-1)).toMatchObject({ event: 'set_in_doubt_after', detail: { after: '00:20:00' } });
    await admin.query(`select settle.set_in_doubt_after(interval '15 minutes')`);
  });

  it('a job that never runs becomes overdue; settle_app may not run upkeep', async () => {
    const superuser = await db.connect();
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    await admin.query(`select settle.set_upkeep_interval(job => 'expire_leases', every => interval '1 second')`);
    // Backdate the last run (test-only, as superuser: no API call can).
    await superuser.query(
      `update settle_private.upkeep_jobs set last_finished_at = now() - interval '2 minutes', created_at = now() - interval '1 hour' where job = 'expire_leases'`,
    );
    const jobs = await upkeep(admin);
    expect(jobs.find((j) => j.job === 'expire_leases')).toMatchObject({ every: '00:00:01', overdue: true });
    const app = await db.app();
    expect(await sqlStateOf(runUpkeep(app))).toBe('42501');
    expect(
      await sqlStateOf(admin.query(`select settle.set_upkeep_interval(job => 'purge', every => interval '2 days')`)),
    ).toBe('SE008');
  });

  it('the trim_feed job races a slow consumer holding its batch: it never waits for it and never takes an unacknowledged outcome; purge neither; a dropped consumer releases it', async () => {
    const sweeperRole = await loginRole('sweeper', ['settle_admin']);
    const sweeper = await sweeperRole.connect(); // pg_cron, say
    const loop = await sweeperRole.connect(); // and a `pg-settle maintain` loop
    const consumerRole = await loginRole('ledger', ['settle_consumer']);
    const slowSession = await consumerRole.connect();
    const fastSession = await consumerRole.connect();
    const superuser = await db.connect();
    const app = await db.app();
    // Only this test's consumers hold events back.
    await sweeper.query(
      'select settle.drop_consumer(consumer) from (select distinct consumer from settle.feed_consumers) c',
    );
    const slow = uniqueKey('slow');
    const fast = uniqueKey('fast');
    await registerConsumer(sweeper, slow);
    await registerConsumer(sweeper, fast);
    const retained = async (keys: readonly string[]): Promise<number> =>
      (
        await superuser.query(`select count(*)::int as n from settle_private.feed_events where key = any($1::text[])`, [
          keys,
        ])
      ).rows[0].n;

    const keys: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const ticket = await acquire(app, newOperation('fed'));
      expect((await complete(app, ticket, { credited: i })).outcome).toBe('settled');
      keys.push(ticket.key);
    }
    // The fast consumer has them all (so they are below the horizon for the slow one too).
    await drainKeys(fastSession, fast, keys);

    // The slow consumer reads its batch the exactly-once way: read, apply, ack, commit, in one
    // transaction that holds its lane's row the whole time. Here it stops after the read.
    await slowSession.query('begin');
    const batch: FeedEventRow[] = await readFeed(slowSession, slow, 1000);
    expect(batch.map((e) => e.key)).toEqual(expect.arrayContaining(keys));

    // Meanwhile two upkeep callers run the feed trim and the purge (retention 0 here). Neither
    // waits for the consumer: a statement timeout would turn a wait into a failed run.
    await superuser.query(`select settle.set_purge_min_retention(interval '0')`);
    await superuser.query(`select settle.set_retention(older_than => interval '0')`);
    await sweeper.query(`set statement_timeout = '30s'`);
    await loop.query(`set statement_timeout = '30s'`);
    const [trim, purge] = await Promise.all([runUpkeep(sweeper, 'trim_feed', true), runUpkeep(loop, 'purge', true)]);
    expect(trim).toEqual([{ job: 'trim_feed', outcome: 'ran', detail: { trimmed: expect.any(Number) } }]);
    expect(purge).toEqual([expect.objectContaining({ job: 'purge', outcome: 'ran' })]);
    const purged = await superuser.query(
      `select count(*)::int as n from settle.operations where key = any($1::text[])`,
      [keys],
    );
    expect(purged.rows[0].n, 'the operations are purged').toBe(0);
    expect(await retained(keys), 'their outcomes stay in the feed for the slow consumer').toBe(3);

    // The slow consumer applies and acknowledges: now every consumer has them, the next trim
    // takes them.
    expect(await ackFeed(slowSession, batch)).toBe(true);
    await slowSession.query('commit');
    expect((await runUpkeep(sweeper, 'trim_feed', true))[0]).toMatchObject({ outcome: 'ran' });
    expect(await retained(keys)).toBe(0);

    // A consumer that stops holds its events back until it is dropped.
    const ticket = await acquire(app, newOperation('held'));
    await complete(app, ticket, { credited: 9 });
    await drainKeys(fastSession, fast, [ticket.key]);
    expect((await runUpkeep(sweeper, 'trim_feed', true))[0]).toMatchObject({ outcome: 'ran' });
    expect(await retained([ticket.key])).toBe(1);
    await sweeper.query('select settle.drop_consumer($1)', [slow]);
    expect((await runUpkeep(sweeper, 'trim_feed', true))[0]).toMatchObject({ outcome: 'ran' });
    expect(await retained([ticket.key])).toBe(0);

    // A reset that moves a lane back waits for a trim in progress (it would otherwise be handed
    // events the trim is deleting), then sees what is left.
    const resetterPid = await backendPid(superuser);
    await sweeper.query('begin');
    await runUpkeep(sweeper, 'trim_feed', true);
    const resetting = superuser.query(`select * from settle.reset_consumer(name => $1, to_time => '-infinity')`, [
      fast,
    ]);
    await waitUntilBlocked(await db.connect(), resetterPid); // a superuser sees every session's wait
    await sweeper.query('commit');
    const reset = await resetting;
    expect(reset.rows).toEqual([expect.objectContaining({ consumer: fast, applied: true })]);
    await superuser.query(`select settle.set_retention(older_than => interval '7 days')`);
  });
});
