import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { claimMany, claimManyOf, completeMany, completeManyOf, ticketsOf } from './support/batch.js';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { claim, reportUnknown } from './support/settle.js';

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
            (select count(*)::int from settle_private.attempts a where a.tenant = $1 and a.key = k.key) as attempts,
            (select count(*)::int from settle_private.attempts a where a.tenant = $1 and a.key = k.key and a.settled) as settled,
            (select count(*)::int from settle_private.feed_events e where e.tenant = $1 and e.key = k.key) as feed,
            (select string_agg(l.seq::text || ':' || l.event || ':' || l.outcome, ',' order by l.seq)
               from settle.audit_log l where l.tenant = $1 and l.key = k.key) as seq
       from unnest($2::text[]) k(key) order by k.key`,
    [TENANT, keys],
  );
  return rows;
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

  it("leaves the caller's lock_timeout as it was", async () => {
    const session = await db.connect();
    await session.query('begin');
    await session.query("set local lock_timeout = '7s'");
    const args = claimManyOf([newOperation('lt-a'), newOperation('lt-b')]);
    await claimMany(session, args);
    const { rows } = await session.query<{ lock_timeout: string }>('show lock_timeout');
    await session.query('commit');
    expect(rows[0]?.lock_timeout).toBe('7s');
  });

  it('a key another session inserted and has not committed: the batch decides key by key, in order (committed: in_progress)', async () => {
    const app = await loginRole('setb_app', ['settle_app']);
    const [holder, batch, observer] = await Promise.all([app.connect(), app.connect(), db.connect()]);
    const ops = ['a', 'b', 'c'].map((k) => newOperation(`wait-${k}`));
    const middle = ops[1];
    if (middle === undefined) throw new Error('no op');
    const pid = await backendPid(batch);
    await holder.query('begin');
    expect((await claim(holder, middle)).outcome).toBe('acquired');
    const answer = claimMany(batch, claimManyOf(ops));
    answer.catch(() => {});
    await waitUntilBlocked(observer, pid);
    await holder.query('commit');
    const rows = await answer;
    expect(rows.map((r) => [r.key, r.outcome])).toEqual([
      [ops[0]?.key, 'acquired'],
      [middle.key, 'in_progress'],
      [ops[2]?.key, 'acquired'],
    ]);
    const { rows: settings } = await batch.query<{ lock_timeout: string }>('show lock_timeout');
    expect(settings[0]?.lock_timeout).toBe('0');
    for (const row of await trail(ops.map((o) => o.key)))
      expect(row).toMatchObject({ ops: 1, attempts: 1, seq: '1:claim:acquired' });
  });

  it('the same with the other session rolling back: the batch acquires the key, its lease measured after the wait', async () => {
    const app = await loginRole('setb_app2', ['settle_app']);
    const [holder, batch, observer] = await Promise.all([app.connect(), app.connect(), db.connect()]);
    const ops = ['a', 'b'].map((k) => newOperation(`rb-${k}`));
    const last = ops[1];
    if (last === undefined) throw new Error('no op');
    const pid = await backendPid(batch);
    await holder.query('begin');
    expect((await claim(holder, last)).outcome).toBe('acquired');
    const answer = claimMany(batch, claimManyOf(ops));
    answer.catch(() => {});
    await waitUntilBlocked(observer, pid);
    // Past the 5 ms a first claim may be measured from its start: the lease must start after this.
    await observer.query('select pg_sleep(0.05)');
    const { rows: clock } = await holder.query<{ at: Date }>('select clock_timestamp() as at');
    await holder.query('rollback');
    const rows = await answer;
    expect(rows.map((r) => r.outcome)).toEqual(['acquired', 'acquired']);
    const rolledBack = clock[0]?.at.getTime() ?? Number.NaN;
    const lease = rows[1]?.lease_expires_at;
    expect(lease).toBeInstanceOf(Date);
    expect((lease as Date).getTime()).toBeGreaterThanOrEqual(rolledBack + 30_000);
    for (const row of await trail(ops.map((o) => o.key)))
      expect(row).toMatchObject({ ops: 1, attempts: 1, seq: '1:claim:acquired' });
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
