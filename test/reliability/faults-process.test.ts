import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { roleUrl } from './harness/app-url.js';
import { check, describeViolations } from './harness/checker.js';
import { ChildWorker } from './harness/child-worker.js';
import type { SettleDriver, Ticket } from './harness/driver.js';
import { readEngineState } from '../../src/checker/engine-state.js';
import { countCalls, ScenarioTally, SETTLE_CALLS } from './harness/scenario-tally.js';
import { createSqlDriver } from './harness/sql-driver.js';
import { WORKER_BINDING, workerRequest } from './harness/worker-protocol.js';
import { expireLease } from '../../src/testing/clock.js';
import { useReliabilityDatabase } from './support/database.js';

// Real worker processes (node + tsx, the typed client, their own connection) crashed with
// SIGKILL or frozen with SIGSTOP while they hold a lease.

const db = useReliabilityDatabase('faults_process');
const TENANT = 'faults-process';
let app: pg.Client;
let admin: pg.Client;
let driver: SettleDriver;
const workers: ChildWorker[] = [];
let tally = new ScenarioTally('faults-process');

beforeAll(async () => {
  app = new pg.Client({ connectionString: roleUrl(db.url, 'reliability-parent') });
  await app.connect();
  admin = await db.connect();
  driver = countCalls(createSqlDriver(app), SETTLE_CALLS, () => (tally.operations += 1));
});
afterEach(async ({ task }) => {
  tally.record(task.result?.state === 'fail');
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});
afterAll(async () => {
  await app?.end();
});

function spawnWorker(key: string): ChildWorker {
  const worker = new ChildWorker(db.url, TENANT, key);
  workers.push(worker);
  return countCalls(worker, ['claimed', 'send'], () => (tally.operations += 1));
}

async function takeOver(key: string): Promise<Ticket> {
  const answer = await driver.claim({ tenant: TENANT, key, request: workerRequest(key), binding: WORKER_BINDING });
  expect(answer).toMatchObject({ outcome: 'acquired', attempt: 2 });
  return answer.ticket!;
}

async function record(key: string) {
  const { rows } = await admin.query(
    `select status::text, attempt, lease_expires_at, result::text, settled_attempt, updated_at
       from settle_private.operations where tenant = $1 and key = $2`,
    [TENANT, key],
  );
  return rows[0];
}

async function expectCleanState(key: string): Promise<void> {
  const state = await readEngineState(admin, { tenants: [TENANT] });
  const report = check([], {
    ...state,
    operations: state.operations.filter((o) => o.key === key),
    attempts: state.attempts.filter((a) => a.key === key),
    audit: state.audit.filter((a) => a.key === key),
  });
  tally.violations += report.violations.length;
  expect(report.violations, describeViolations(report)).toEqual([]);
}

describe('worker process faults', () => {
  it('SIGKILL after claim, before settle: after lease expiry attempt 2 acquires and settles exactly once', async () => {
    const key = 'sigkill';
    tally = new ScenarioTally('faults-process/sigkill');
    const worker = spawnWorker(key);
    expect(await worker.claimed()).toMatchObject({ outcome: 'acquired', attempt: 1 });
    worker.signal('SIGKILL');
    tally.fault('sigkill');
    await worker.gone();

    // Until the lease lapses the crashed attempt still owns the operation.
    expect(
      await driver.claim({ tenant: TENANT, key, request: workerRequest(key), binding: WORKER_BINDING }),
    ).toMatchObject({ outcome: 'in_progress', attempt: 1 });
    expect(await expireLease(admin, TENANT, key)).toBe(true);
    tally.fault('leaseExpired');
    const t2 = await takeOver(key);
    expect(await driver.complete(t2, { receipt: 'after-crash' })).toMatchObject({
      outcome: 'settled',
      settledAttempt: 2,
    });

    const attempts = await admin.query(
      `select attempt, end_reason, settled from settle.attempts where tenant = $1 and key = $2 order by attempt`,
      [TENANT, key],
    );
    expect(attempts.rows).toEqual([
      { attempt: 1, end_reason: 'lease_expired', settled: false },
      { attempt: 2, end_reason: 'observed', settled: true },
    ]);
    const audit = await admin.query(
      `select event, outcome, attempt from settle.audit_log where tenant = $1 and key = $2 order by seq, audit_id`,
      [TENANT, key],
    );
    expect(audit.rows).toEqual(
      expect.arrayContaining([
        { event: 'claim', outcome: 'acquired', attempt: 1 },
        { event: 'expire', outcome: 'expired', attempt: 1 },
        { event: 'claim', outcome: 'acquired', attempt: 2 },
        { event: 'complete', outcome: 'settled', attempt: 2 },
      ]),
    );
    await expectCleanState(key);
  });

  it('SIGSTOP past the lease, SIGCONT after attempt 2 acquired: heartbeat and weaker observations fenced, record unchanged', async () => {
    const key = 'sigstop';
    tally = new ScenarioTally('faults-process/sigstop');
    const worker = spawnWorker(key);
    expect(await worker.claimed()).toMatchObject({ outcome: 'acquired', attempt: 1 });
    expect(await worker.send({ op: 'heartbeat' })).toMatchObject({ outcome: 'extended' });
    worker.signal('SIGSTOP');
    tally.fault('sigstop');
    expect(await expireLease(admin, TENANT, key)).toBe(true);
    tally.fault('leaseExpired');
    const t2 = await takeOver(key);
    const before = await record(key);
    worker.signal('SIGCONT');

    expect(await worker.send({ op: 'heartbeat' })).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
    expect(await worker.send({ op: 'fail' })).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
    expect(await worker.send({ op: 'unknown' })).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
    expect(await record(key)).toEqual(before);

    // Attempt 2 settles; the paused worker's real success afterwards is a late success only.
    expect(await driver.complete(t2, { receipt: 'attempt-2' })).toMatchObject({
      outcome: 'settled',
      settledAttempt: 2,
    });
    const settled = await record(key);
    expect(await worker.send({ op: 'complete', result: { receipt: 'attempt-1' } })).toMatchObject({
      outcome: 'already_settled',
      reason: 'late_success',
      settledAttempt: 2,
    });
    expect(await worker.send({ op: 'heartbeat' })).toMatchObject({ outcome: 'fenced', reason: 'settled' });
    expect({ ...(await record(key)), updated_at: null }).toEqual({ ...settled, updated_at: null });
    expect((await record(key))?.result).toBe('{"receipt": "attempt-2"}');
    await expectCleanState(key);
  });
});
