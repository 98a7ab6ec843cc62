import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { roleUrl } from './harness/app-url.js';
import { waitForBackends } from './harness/backends.js';
import { check, describeViolations } from './harness/checker.js';
import { createClientDriver } from './harness/client-driver.js';
import type { Ticket } from './harness/driver.js';
import { readEngineState } from '../../src/checker/engine-state.js';
import { History, sqlState } from './harness/history.js';
import { recording } from './harness/recorder.js';
import { countCalls, ScenarioTally, SETTLE_CALLS } from './harness/scenario-tally.js';
import { createSqlDriver } from './harness/sql-driver.js';
import { expireLease } from '../../src/testing/clock.js';
import { useFaultSessions, useReliabilityDatabase } from './support/database.js';

// Races released all at once: every racer is parked behind a lock held by a superuser session
// (a table lock for new keys, the operation row for existing ones) until pg_stat_activity
// shows all of them waiting on it; then the lock is released.

const db = useReliabilityDatabase('faults_concurrency');
const TENANT = 'faults-race';
const BINDING = { principal: 'alice', scopes: ['pay'], generation: '1' };
const opened: { end(): Promise<void> }[] = [];
let tally = new ScenarioTally('faults-concurrency');
const sessions = useFaultSessions(db, opened, (failed) => tally.record(failed));

async function pgClient(applicationName: string, role = 'settle_app'): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: roleUrl(db.url, applicationName, role) });
  c.on('error', () => {});
  opened.push(c);
  await c.connect();
  // Each query of a racer is one API call (claim, complete, redrive).
  return countCalls(c, ['query'], () => (tally.operations += 1));
}

/** Holds `lockSql` in a transaction until the racers of `applicationName` all wait on it. */
type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

async function releaseWhenParked<T>(
  lockSql: string,
  params: unknown[],
  applicationName: string,
  racers: number,
  start: () => Promise<T>[],
): Promise<Settled<T>[]> {
  await sessions.locker.query('begin');
  await sessions.locker.query(lockSql, params);
  const settled = start().map((p) =>
    p.then(
      (value): Settled<T> => ({ ok: true, value }),
      (error: unknown): Settled<T> => ({ ok: false, error }),
    ),
  );
  await waitForBackends(sessions.admin, applicationName, { count: racers, waitEventType: 'Lock' });
  await sessions.locker.query('commit');
  tally.fault('racersReleasedAtOnce', racers);
  return Promise.all(settled);
}

const LOCK_TABLE = 'lock table settle_private.operations in share mode';
const LOCK_ROW = 'select 1 from settle_private.operations where tenant = $1 and key = $2 for update';

async function expectCheckerClean(history: History, key: string): Promise<void> {
  const state = await readEngineState(sessions.admin, { tenants: [TENANT] });
  const only = <T extends { key: string }>(rows: readonly T[]) => rows.filter((r) => r.key === key);
  const report = check(
    history.ops().filter((op) => op.key === key),
    { operations: only(state.operations), attempts: only(state.attempts), audit: only(state.audit) },
  );
  tally.violations += report.violations.length;
  expect(report.violations, describeViolations(report)).toEqual([]);
}

describe('isolation levels', () => {
  for (const level of ['repeatable read', 'serializable']) {
    it(`callers at ${level} racing on one new key: 40001 retried transparently, never a failure, exactly one acquired`, async () => {
      const key = `iso-${level.replace(' ', '-')}`;
      const app = `reliability-iso-${level.replace(' ', '-')}`;
      tally = new ScenarioTally(`faults-concurrency/${key}`);
      const retries: string[] = [];
      const history = new History();
      const racers = 6;
      const drivers = Array.from({ length: racers }, (_, p) => {
        const client: SettleClient = createSettleClient({
          connectionString: roleUrl(db.url, app, 'settle_app', { default_transaction_isolation: level }),
          poolSize: 1,
          retry: { maxRetries: 10, baseDelayMs: 5 },
          onRetry: (e) => retries.push(sqlState(e.error) ?? e.error.name),
        });
        opened.push(client);
        return recording(
          createClientDriver(countCalls(client, SETTLE_CALLS, () => (tally.operations += 1))),
          history,
          p,
        );
      });
      // Open each pool's connection first, so all racers are parked on the lock, not connecting.
      await Promise.all(drivers.map((d) => d.get({ tenant: TENANT, key: 'warm-up', request: {}, binding: BINDING })));
      const results = await releaseWhenParked(LOCK_TABLE, [], app, racers, () =>
        drivers.map((d) => d.claim({ tenant: TENANT, key, request: { key }, binding: BINDING })),
      );
      const outcomes = results.map((r) =>
        r.ok && r.value.type === 'ok' ? r.value.answer.outcome : `error:${JSON.stringify(r)}`,
      );
      expect(outcomes.filter((o) => o === 'acquired')).toHaveLength(1);
      expect(outcomes.filter((o) => o === 'in_progress')).toHaveLength(racers - 1);
      tally.details.retried40001 = retries.length;
      expect(retries.length).toBeGreaterThan(0);
      expect(new Set(retries)).toEqual(new Set(['40001']));
      expect(history.ops().filter((op) => op.type !== 'ok')).toEqual([]);
      await expectCheckerClean(history, key);
    });
  }
});

describe('one key, many fingerprints', () => {
  it('N concurrent first claims with N different requests: one reservation, N-1 conflicts disclosing nothing, fingerprint fixed', async () => {
    const key = 'fingerprints';
    tally = new ScenarioTally('faults-concurrency/n-fingerprints');
    const app = 'reliability-fingerprints';
    const racers = 8;
    const history = new History();
    const drivers = await Promise.all(
      Array.from({ length: racers }, async (_, p) => recording(createSqlDriver(await pgClient(app)), history, p)),
    );
    const results = await releaseWhenParked(LOCK_TABLE, [], app, racers, () =>
      drivers.map((d, i) => d.claim({ tenant: TENANT, key, request: { key, amount: i }, binding: BINDING })),
    );
    const answers = results.map((r) => {
      if (!r.ok || r.value.type !== 'ok') throw new Error(`claim failed: ${JSON.stringify(r)}`);
      return r.value.answer;
    });
    const winners = answers.filter((a) => a.outcome === 'acquired');
    expect(winners).toHaveLength(1);
    for (const loser of answers.filter((a) => a.outcome !== 'acquired')) {
      expect(loser).toMatchObject({
        outcome: 'conflict',
        conflictOn: ['request'],
        status: null,
        result: null,
        error: null,
        fingerprint: null,
        attempt: null,
        leaseToken: null,
      });
    }
    const stored = async () =>
      (
        await sessions.admin.query(
          'select fingerprint, request from settle_private.operations where tenant = $1 and key = $2',
          [TENANT, key],
        )
      ).rows[0];
    const reservation = await stored();
    expect(reservation.fingerprint).toBe(winners[0]?.fingerprint);
    // The losers insist: still conflicts, and the reservation does not move.
    await Promise.all(
      drivers.map((d, i) => d.claim({ tenant: TENANT, key, request: { key, amount: i + racers }, binding: BINDING })),
    );
    expect(await stored()).toEqual(reservation);
    await expectCheckerClean(history, key);
  });
});

describe('dead-letter redrive', () => {
  async function deadLetter(key: string, app: pg.Client): Promise<Ticket> {
    const driver = createSqlDriver(app);
    const first = await driver.claim({ tenant: TENANT, key, request: { key }, binding: BINDING, maxAttempts: 1 });
    await expireLease(sessions.admin, TENANT, key);
    tally.fault('leaseExpired');
    // The lapsed lease may have run the effect: a needs_reconciliation dead letter.
    expect(await driver.claim({ tenant: TENANT, key, request: { key }, binding: BINDING })).toMatchObject({
      outcome: 'unknown',
      deadLettered: true,
    });
    return first.ticket!;
  }

  async function redrive(operator: pg.Client, key: string, request: unknown = { key }) {
    return operator.query(
      'select redrive_count, status::text from settle.redrive(tenant => $1, key => $2, additional_attempts => 1, request => $3::jsonb, reason => $4)',
      [TENANT, key, JSON.stringify(request), 'reliability'],
    );
  }

  const settledAttempts = async (key: string) =>
    (
      await sessions.admin.query('select attempt from settle.attempts where tenant = $1 and key = $2 and settled', [
        TENANT,
        key,
      ])
    ).rows;

  it('a redrive racing the late success of the original attempt: exactly one settlement, whichever wins', async () => {
    const key = 'redrive-vs-late-success';
    tally = new ScenarioTally('faults-concurrency/redrive-vs-late-success');
    const lateApp = await pgClient('reliability-redrive-race');
    const operator = await pgClient('reliability-redrive-race', 'settle_admin');
    const t1 = await deadLetter(key, lateApp);
    const [redriven, late] = await releaseWhenParked(LOCK_ROW, [TENANT, key], 'reliability-redrive-race', 2, () => {
      const calls: Promise<unknown>[] = [
        redrive(operator, key),
        createSqlDriver(lateApp).complete(t1, { receipt: 'late' }),
      ];
      return calls;
    });
    expect(late).toMatchObject({ ok: true, value: { outcome: 'settled', settledAttempt: 1 } });
    if (!redriven?.ok) expect(sqlState(redriven?.error)).toBe('SE011');
    expect(await settledAttempts(key)).toEqual([{ attempt: 1 }]);
    expect(
      await createSqlDriver(lateApp).claim({ tenant: TENANT, key, request: { key }, binding: BINDING }),
    ).toMatchObject({ outcome: 'replay', result: { receipt: 'late' } });
  });

  it('a redrive with a modified payload is refused (SE012) and the dead letter stays as it was', async () => {
    const key = 'redrive-modified';
    tally = new ScenarioTally('faults-concurrency/redrive-modified-payload');
    const operator = await pgClient('reliability-redrive-modified', 'settle_admin');
    await deadLetter(key, await pgClient('reliability-redrive-modified-app'));
    const before = (
      await sessions.admin.query('select * from settle_private.operations where tenant = $1 and key = $2', [
        TENANT,
        key,
      ])
    ).rows[0];
    tally.fault('modifiedPayloadRedrive');
    await expect(redrive(operator, key, { key, amount: 1 })).rejects.toMatchObject({ code: 'SE012' });
    expect(
      (
        await sessions.admin.query('select * from settle_private.operations where tenant = $1 and key = $2', [
          TENANT,
          key,
        ])
      ).rows[0],
    ).toEqual(before);
  });

  it('several operators redriving at once: exactly one re-opens, the others get SE011', async () => {
    const key = 'redrive-many';
    tally = new ScenarioTally('faults-concurrency/concurrent-redrives');
    const app = 'reliability-operators';
    const operators = await Promise.all(Array.from({ length: 4 }, () => pgClient(app, 'settle_admin')));
    await deadLetter(key, await pgClient('reliability-operators-app'));
    const results = await releaseWhenParked(LOCK_ROW, [TENANT, key], app, operators.length, () =>
      operators.map((o) => redrive(o, key)),
    );
    expect(results.filter((r) => r.ok)).toHaveLength(1);
    expect(results.filter((r) => !r.ok).map((r) => (r.ok ? null : sqlState(r.error)))).toEqual([
      'SE011',
      'SE011',
      'SE011',
    ]);
    const op = (
      await sessions.admin.query(
        'select status::text, redrive_count, attempt, max_attempts from settle_private.operations where tenant = $1 and key = $2',
        [TENANT, key],
      )
    ).rows[0];
    // Redrive never lowers a needs_reconciliation dead letter below unknown.
    expect(op).toEqual({ status: 'unknown', redrive_count: 1, attempt: 1, max_attempts: 2 });
    const audit = await sessions.admin.query(
      `select count(*)::int as n from settle_private.audit_log where tenant = $1 and key = $2 and event = 'redrive'`,
      [TENANT, key],
    );
    expect(audit.rows[0].n).toBe(1);
  });
});
