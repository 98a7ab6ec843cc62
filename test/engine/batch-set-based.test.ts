import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  type ClaimManyArgs,
  type ClaimManyRow,
  claimMany,
  claimManyOf,
  completeMany,
  completeManyOf,
  ticketsOf,
} from './support/batch.js';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { type ClaimArgs, claim, reportUnknown } from './support/settle.js';

// The set-based paths of the batches (00016: settle_private._claim_new_keys and
// _complete_holders): when each is taken, that it writes what the key-by-key path writes, and
// that every way out of it (a key another session inserted, a wait, an attempt that already
// reported) leaves nothing behind and answers as the single calls would.
const db = useEngineDatabase('batch_set_based');
const loginRole = useLoginRoles(db);

/** Calls of settle_private functions in the current transaction of `session` (track_functions = pl). */
async function calls(session: pg.ClientBase): Promise<Record<string, number>> {
  const { rows } = await session.query<{ funcname: string; calls: string }>(
    `select funcname, calls::text from pg_stat_xact_user_functions where schemaname = 'settle_private'
        and funcname in ('_claim_new_keys', '_complete_holders')`,
  );
  return Object.fromEntries(rows.map((r) => [r.funcname, Number(r.calls)]));
}

async function trail(
  keys: readonly (string | null)[],
): Promise<{ key: string; ops: number; attempts: number; settled: number; feed: number; seq: string }[]> {
  const admin = await db.connect();
  const { rows } = await admin.query(
    `select k.key,
            (select count(*)::int from settle_private.operations o where o.tenant = $1 and o.key = k.key) as ops,
            (select count(*)::int from settle.attempts a where a.tenant = $1 and a.key = k.key) as attempts,
            (select count(*)::int from settle.attempts a where a.tenant = $1 and a.key = k.key and a.settled) as settled,
            (select count(*)::int from settle_private.feed_events e where e.tenant = $1 and e.key = k.key) as feed,
            (select string_agg(l.seq::text || ':' || l.event || ':' || l.outcome, ',' order by l.seq)
               from settle.audit_log l where l.tenant = $1 and l.key = k.key) as seq
       from unnest($2::text[]) k(key) order by k.key`,
    [TENANT, keys],
  );
  return rows;
}

/**
 * A batch of `ops` blocked behind another login's uncommitted first claim of `ops[held]`: the
 * holder's transaction is open, the batch's call is waiting on it (a barrier, not a sleep).
 */
async function batchWaitingBehind(
  roleName: string,
  ops: readonly ClaimArgs[],
  held: number,
  lease?: string,
): Promise<{ holder: pg.Client; batch: pg.Client; observer: pg.Client; answer: Promise<ClaimManyRow[]> }> {
  const app = await loginRole(roleName, ['settle_app']);
  const [holder, batch, observer] = await Promise.all([app.connect(), app.connect(), db.connect()]);
  const key = ops[held];
  if (key === undefined) throw new Error('no op');
  const pid = await backendPid(batch);
  await holder.query('begin');
  expect((await claim(holder, key)).outcome).toBe('acquired');
  const args = claimManyOf(ops);
  const answer = claimMany(batch, lease === undefined ? args : { ...args, lease });
  answer.catch(() => {});
  await waitUntilBlocked(observer, pid);
  return { holder, batch, observer, answer };
}

describe('set-based batches', () => {
  it('a batch of new keys is claimed and completed set-based, writing what the single calls write', async () => {
    const session = await db.connect();
    const ops = Array.from({ length: 25 }, (_, i) => newOperation(`setb-${i}`, { request: { n: i } }));
    await session.query('begin');
    await session.query("set local track_functions = 'pl'");
    const args = claimManyOf(ops);
    const claimed = await claimMany(session, args);
    const tickets = ticketsOf(args, claimed);
    const done = await completeMany(
      session,
      completeManyOf(
        tickets,
        tickets.map((t) => ({ paid: t.key })),
      ),
    );
    expect(await calls(session)).toEqual({ _claim_new_keys: 1, _complete_holders: 1 });
    await session.query('commit');

    expect(claimed.map((r) => [r.ordinal, r.key, r.outcome, r.status, r.attempt])).toEqual(
      ops.map((o, i) => [i + 1, o.key, 'acquired', 'running', 1]),
    );
    expect(new Set(claimed.map((r) => r.lease_token)).size).toBe(25);
    expect(done.map((r) => [r.ordinal, r.outcome, r.reason, r.status, r.settled_attempt])).toEqual(
      ops.map((_, i) => [i + 1, 'settled', 'current_attempt', 'completed', 1]),
    );
    for (const row of await trail(ops.map((o) => o.key))) {
      expect(row).toMatchObject({
        ops: 1,
        attempts: 1,
        settled: 1,
        feed: 1,
        seq: '1:claim:acquired,2:complete:settled',
      });
    }
  });

  it("the caller's lock_timeout holds for a wait behind another session's insert: 55P03, nothing written", async () => {
    const app = await loginRole('setb_lt', ['settle_app']);
    const [holder, batch] = await Promise.all([app.connect(), app.connect()]);
    const ops = [newOperation('lt-a'), newOperation('lt-b')];
    const second = ops[1];
    if (second === undefined) throw new Error('no op');
    await holder.query('begin');
    expect((await claim(holder, second)).outcome).toBe('acquired');
    await batch.query('begin');
    await batch.query("set local lock_timeout = '200ms'");
    expect(await sqlStateOf(claimMany(batch, claimManyOf(ops)))).toBe('55P03');
    await batch.query('rollback');
    await holder.query('commit');
    const [first, held] = await trail(ops.map((o) => o.key));
    expect(first).toMatchObject({ ops: 0, attempts: 0 });
    expect(held).toMatchObject({ ops: 1, attempts: 1, seq: '1:claim:acquired' });
  });

  it('logins racing batches of new keys into the same tables: every key acquired once, no batch fails', async () => {
    // Concurrent inserts wait for the table's extension lock; a batch must never take that for a
    // wait behind another session's key (a lock_timeout did: a second wait of the statement was
    // then reported as a cancel, 57014, or the batch fell back to key by key).
    const app = await loginRole('setb_race', ['settle_app']);
    const sessions = await Promise.all([1, 2, 3, 4].map(() => app.connect()));
    for (let round = 0; round < 3; round += 1) {
      const batches = sessions.map((_, s) =>
        claimManyOf(Array.from({ length: 100 }, (_, i) => newOperation(`race-${round}-${s}-${i}`))),
      );
      const answers = await Promise.all(sessions.map((session, s) => claimMany(session, batches[s] as ClaimManyArgs)));
      for (const rows of answers) expect(rows.map((r) => r.outcome)).toEqual(rows.map(() => 'acquired'));
      const keys = batches.flatMap((b) => b.keys ?? []);
      const counts = await trail(keys);
      expect(counts.filter((c) => c.ops !== 1 || c.attempts !== 1 || c.seq !== '1:claim:acquired')).toEqual([]);
    }
  });

  it('a key another session inserted and has not committed: the batch decides key by key, in order (committed: in_progress)', async () => {
    const ops = ['a', 'b', 'c'].map((k) => newOperation(`wait-${k}`));
    const { holder, batch, answer } = await batchWaitingBehind('setb_app', ops, 1);
    await holder.query('commit');
    const rows = await answer;
    expect(rows.map((r) => [r.key, r.outcome])).toEqual([
      [ops[0]?.key, 'acquired'],
      [ops[1]?.key, 'in_progress'],
      [ops[2]?.key, 'acquired'],
    ]);
    const { rows: settings } = await batch.query<{ lock_timeout: string }>('show lock_timeout');
    expect(settings[0]?.lock_timeout).toBe('0');
    for (const row of await trail(ops.map((o) => o.key)))
      expect(row).toMatchObject({ ops: 1, attempts: 1, seq: '1:claim:acquired' });
  });

  it('the same with the other session rolling back: the batch acquires the key, its lease measured after the wait', async () => {
    const ops = ['a', 'b'].map((k) => newOperation(`rb-${k}`));
    const { holder, observer, answer } = await batchWaitingBehind('setb_app2', ops, 1, '2 seconds');
    // Past a tenth of the lease a batch's leases are measured again from the insert's return:
    // the lease must start after this.
    await observer.query('select pg_sleep(0.25)');
    const { rows: clock } = await holder.query<{ at: Date }>('select clock_timestamp() as at');
    await holder.query('rollback');
    const rows = await answer;
    expect(rows.map((r) => r.outcome)).toEqual(['acquired', 'acquired']);
    const rolledBack = clock[0]?.at.getTime() ?? Number.NaN;
    const lease = rows[1]?.lease_expires_at;
    expect(lease).toBeInstanceOf(Date);
    expect((lease as Date).getTime()).toBeGreaterThanOrEqual(rolledBack + 2_000);
    for (const row of await trail(ops.map((o) => o.key)))
      expect(row).toMatchObject({ ops: 1, attempts: 1, seq: '1:claim:acquired' });
  });

  it('a binding revoked while the batch waited behind a key: every key refused, as settle.claim answers after the wait', async () => {
    const principal = `svc-wait-rev-${Date.now()}`;
    const ops = ['a', 'b'].map((k) => newOperation(`wrev-${k}`, { principal }));
    const { holder, observer, answer } = await batchWaitingBehind('setb_app3', ops, 1);
    await observer.query('select settle.revoke_binding($1, $2, 5)', [TENANT, principal]);
    await holder.query('rollback');
    const rows = await answer;
    expect(rows.map((r) => [r.key, r.outcome, r.reason])).toEqual(
      ops.map((o) => [o.key, 'refused', 'binding_revoked']),
    );
  });

  it('a batch with a key that already exists is claimed key by key (no set-based attempt)', async () => {
    const session = await db.connect();
    const ops = [newOperation('exists-a'), newOperation('exists-b')];
    const first = ops[0];
    if (first === undefined) throw new Error('no op');
    await claim(session, first);
    await session.query('begin');
    await session.query("set local track_functions = 'pl'");
    const rows = await claimMany(session, claimManyOf(ops));
    expect(await calls(session)).toEqual({});
    await session.query('commit');
    expect(rows.map((r) => r.outcome)).toEqual(['in_progress', 'acquired']);
  });

  it('complete_many with one attempt that already reported: the set-based try rolls back, every key answers as its single complete', async () => {
    const session = await db.connect();
    const ops = Array.from({ length: 4 }, (_, i) => newOperation(`reported-${i}`));
    const args = claimManyOf(ops);
    const tickets = ticketsOf(args, await claimMany(session, args));
    const third = tickets[2];
    if (third === undefined) throw new Error('no ticket');
    expect((await reportUnknown(session, third)).outcome).toBe('recorded');
    await session.query('begin');
    const done = await completeMany(
      session,
      completeManyOf(
        tickets,
        tickets.map(() => ({ ok: true })),
      ),
    );
    await session.query('commit');
    // The one that reported unknown released its lease: its success still settles, as only the
    // single complete answers it (lease_released); the set-based try left nothing behind.
    expect(done.map((r) => [r.outcome, r.reason])).toEqual([
      ['settled', 'current_attempt'],
      ['settled', 'current_attempt'],
      ['settled', 'lease_released'],
      ['settled', 'current_attempt'],
    ]);
    for (const row of await trail(ops.map((o) => o.key)))
      expect(row).toMatchObject({ ops: 1, attempts: 1, settled: 1, feed: 1 });
  });
});
