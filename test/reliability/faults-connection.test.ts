import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { mapDatabaseError, SettleConnectionError, SettleTimeoutError } from '../../src/client/errors.js';
import type { AttemptHandle } from '../../src/client/types.js';
import { roleUrl } from './harness/app-url.js';
import { gate, waitForBackends } from './harness/backends.js';
import { classifyError } from './harness/history.js';
import { countCalls, ScenarioTally, SETTLE_CALLS } from './harness/scenario-tally.js';
import { expireLease } from '../../src/testing/clock.js';
import { useFaultSessions, useReliabilityDatabase } from './support/database.js';

// Connection-level faults around settle and claim, through the typed client: a backend
// terminated between `complete` and COMMIT, statement_timeout while blocked on the operation
// row, idle_in_transaction_session_timeout with the settlement uncommitted. Each must roll back
// completely, release the row lock, be reported as unknown/retryable (never `failed`), and the
// retry must settle exactly once.

const db = useReliabilityDatabase('faults_connection');
const TENANT = 'faults-conn';
const BINDING = { principal: 'alice', scopes: ['pay'], generation: 1 };
const clients: SettleClient[] = [];
let tally = new ScenarioTally('faults-connection');
const sessions = useFaultSessions(db, clients, (failed) => tally.record(failed));

function client(name: string, statementTimeoutMs?: number): SettleClient {
  const c = createSettleClient({
    connectionString: roleUrl(db.url, name),
    poolSize: 1,
    ...(statementTimeoutMs === undefined ? {} : { statementTimeoutMs }),
  });
  clients.push(c);
  return countCalls(c, SETTLE_CALLS, () => (tally.operations += 1));
}

const claimInput = (key: string) => ({ tenant: TENANT, key, request: { key, amount: 700 }, binding: BINDING });

async function acquire(c: SettleClient, key: string): Promise<AttemptHandle> {
  const o = await c.claim(claimInput(key));
  if (o.outcome !== 'acquired') throw new Error(`expected acquired, got ${o.outcome}`);
  return o.attempt;
}

async function stored(key: string) {
  const op = await sessions.admin.query(
    `select status::text, attempt, result, settled_attempt from settle_private.operations where tenant = $1 and key = $2`,
    [TENANT, key],
  );
  const settled = await sessions.admin.query(
    `select count(*)::int as n from settle.attempts where tenant = $1 and key = $2 and settled`,
    [TENANT, key],
  );
  const completes = await sessions.admin.query(
    `select count(*)::int as n from settle.audit_log where tenant = $1 and key = $2 and event = 'complete'`,
    [TENANT, key],
  );
  return { ...op.rows[0], settledAttempts: settled.rows[0].n as number, completeAudits: completes.rows[0].n as number };
}

/**
 * The error a rejected promise carries, mapped by the client; throws if it resolved. Call it
 * as soon as the promise exists, so the rejection is handled when it happens.
 */
async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return mapDatabaseError(error);
  }
  throw new Error('expected the call to fail');
}

function expectUnknownOutcome(error: Error, kind: typeof SettleConnectionError | typeof SettleTimeoutError): void {
  expect(error).toBeInstanceOf(kind);
  expect(classifyError(error)).toBe('info');
  expect(error.name).not.toMatch(/Failed|Input/);
}

async function retrySettlesOnce(c: SettleClient, handle: AttemptHandle, key: string): Promise<void> {
  expect(await c.complete(handle, { receipt: key })).toMatchObject({
    outcome: 'settled',
    settledAttempt: handle.attempt,
  });
  expect(await c.complete(handle, { receipt: key })).toMatchObject({ outcome: 'duplicate' });
  expect(await stored(key)).toMatchObject({ status: 'completed', settledAttempts: 1, result: { receipt: key } });
}

describe('connection faults around settle and claim', () => {
  it('pg_terminate_backend between complete and COMMIT: nothing partial, connection error, the retry settles once', async () => {
    const key = 'terminate';
    tally = new ScenarioTally('faults-connection/terminate-before-commit');
    const c = client('reliability-terminated');
    const handle = await acquire(c, key);
    const hold = gate();
    const pool = await c.getPool();
    const tx = rejection(
      pool.transaction(async (t) => {
        expect(await c.complete(handle, { receipt: key }, { connection: t })).toMatchObject({ outcome: 'settled' });
        await hold.wait;
      }),
    );
    const [pid] = await waitForBackends(sessions.admin, 'reliability-terminated', {
      count: 1,
      state: 'idle in transaction',
    });
    await sessions.admin.query('select pg_terminate_backend($1)', [pid]);
    tally.fault('pg_terminate_backend');
    hold.open();
    expectUnknownOutcome(await tx, SettleConnectionError);

    expect(await stored(key)).toMatchObject({
      status: 'running',
      attempt: 1,
      result: null,
      settledAttempts: 0,
      completeAudits: 0,
    });
    await retrySettlesOnce(c, handle, key);
  });

  it('statement_timeout while complete waits for the row lock: rolled back, lock released, timeout reported, retry settles', async () => {
    const key = 'statement-timeout-settle';
    tally = new ScenarioTally('faults-connection/statement-timeout-settle');
    const c = client('reliability-timeout-settle', 1_000);
    const handle = await acquire(c, key);
    await sessions.locker.query('begin');
    await sessions.locker.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
      TENANT,
      key,
    ]);
    const error = rejection(c.complete(handle, { receipt: key }));
    await waitForBackends(sessions.admin, 'reliability-timeout-settle', { count: 1, waitEventType: 'Lock' }, 900).catch(
      () => {},
    );
    expectUnknownOutcome(await error, SettleTimeoutError);
    tally.fault('statement_timeout');
    await sessions.locker.query('rollback');

    expect(await stored(key)).toMatchObject({ status: 'running', attempt: 1, settledAttempts: 0, completeAudits: 0 });
    expect(await c.claim(claimInput(key))).toMatchObject({ outcome: 'in_progress', attempt: 1 });
    await retrySettlesOnce(c, handle, key);
  });

  it('statement_timeout while a takeover claim waits for the row lock: rolled back, next claim proceeds', async () => {
    const key = 'statement-timeout-claim';
    tally = new ScenarioTally('faults-connection/statement-timeout-claim');
    const c = client('reliability-timeout-claim', 1_000);
    await acquire(c, key);
    // A lapsed lease: the next claim must lock the row to take over (live-lease answers are lock-free).
    await expireLease(sessions.admin, TENANT, key);
    tally.fault('leaseExpired');
    await sessions.locker.query('begin');
    await sessions.locker.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
      TENANT,
      key,
    ]);
    const error = rejection(c.claim(claimInput(key)));
    await waitForBackends(sessions.admin, 'reliability-timeout-claim', { count: 1, waitEventType: 'Lock' }, 900).catch(
      () => {},
    );
    expectUnknownOutcome(await error, SettleTimeoutError);
    tally.fault('statement_timeout');
    await sessions.locker.query('rollback');

    const claims = await sessions.admin.query(
      `select count(*)::int as n from settle.audit_log where tenant = $1 and key = $2 and event in ('claim', 'expire')`,
      [TENANT, key],
    );
    expect(claims.rows[0].n).toBe(1);
    expect(await stored(key)).toMatchObject({ status: 'running', attempt: 1 });
    const retried = await acquire(c, key);
    expect(retried.attempt).toBe(2);
    await retrySettlesOnce(c, retried, key);
  });

  it('idle_in_transaction_session_timeout with the settlement uncommitted: session ended, lock released, retry settles once', async () => {
    const key = 'idle-settle';
    tally = new ScenarioTally('faults-connection/idle-timeout-settle');
    const c = client('reliability-idle-settle');
    const other = client('reliability-idle-other');
    const handle = await acquire(c, key);
    const hold = gate();
    const tx = rejection(
      (await c.getPool()).transaction(async (t) => {
        await t.query(sql.unsafe`set local idle_in_transaction_session_timeout = '300ms'`);
        expect(await c.complete(handle, { receipt: key }, { connection: t })).toMatchObject({ outcome: 'settled' });
        await hold.wait;
      }),
    );
    await waitForBackends(sessions.admin, 'reliability-idle-settle', { count: 1, state: 'idle in transaction' });
    await waitForBackends(sessions.admin, 'reliability-idle-settle', { count: 0 });
    tally.fault('idle_in_transaction_session_timeout');
    hold.open();
    expectUnknownOutcome(await tx, SettleConnectionError);

    expect(await stored(key)).toMatchObject({ status: 'running', settledAttempts: 0, completeAudits: 0 });
    expect(await other.claim(claimInput(key))).toMatchObject({ outcome: 'in_progress', attempt: 1 });
    await retrySettlesOnce(c, handle, key);
  });

  it('idle_in_transaction_session_timeout inside claim: the reservation never existed, the next claim acquires attempt 1', async () => {
    const key = 'idle-claim';
    tally = new ScenarioTally('faults-connection/idle-timeout-claim');
    const c = client('reliability-idle-claim');
    const other = client('reliability-idle-claim-2');
    const hold = gate();
    const tx = rejection(
      (await c.getPool()).transaction(async (t) => {
        await t.query(sql.unsafe`set local idle_in_transaction_session_timeout = '300ms'`);
        expect(await c.claim(claimInput(key), { connection: t })).toMatchObject({ outcome: 'acquired' });
        await hold.wait;
      }),
    );
    await waitForBackends(sessions.admin, 'reliability-idle-claim', { count: 1, state: 'idle in transaction' });
    await waitForBackends(sessions.admin, 'reliability-idle-claim', { count: 0 });
    tally.fault('idle_in_transaction_session_timeout');
    hold.open();
    expectUnknownOutcome(await tx, SettleConnectionError);

    expect(
      (
        await sessions.admin.query(
          'select count(*)::int as n from settle_private.operations where tenant = $1 and key = $2',
          [TENANT, key],
        )
      ).rows[0].n,
    ).toBe(0);
    const handle = await acquire(other, key);
    expect(handle.attempt).toBe(1);
    await retrySettlesOnce(other, handle, key);
  });
});
