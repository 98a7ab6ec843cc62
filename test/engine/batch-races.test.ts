import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { claimMany, claimManyOf, completeMany, completeManyOf, ticketsOf } from './support/batch.js';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { claim, complete, ticketOf, type ClaimArgs, type ClaimRow } from './support/settle.js';

// Batches racing batches and single calls over the same keys, each session a real settle_app
// login: released together behind a table lock, so every batch overlaps every other.
const db = useEngineDatabase('batch_races');
const loginRole = useLoginRoles(db);

async function deadlocks(): Promise<number> {
  const admin = await db.connect();
  const { rows } = await admin.query<{ n: string }>(
    'select deadlocks::text as n from pg_stat_database where datname = current_database()',
  );
  return Number(rows[0]?.n ?? 0);
}

/** Runs `work` on every session at once: each first queues behind an advisory lock the gate holds. */
async function releasedTogether<T>(
  sessions: readonly pg.Client[],
  work: (session: pg.Client, i: number) => Promise<T>,
): Promise<T[]> {
  const pids = await Promise.all(sessions.map(backendPid));
  const [gate, observer] = await Promise.all([db.connect(), db.connect()]);
  await gate.query('begin');
  await gate.query('select pg_advisory_xact_lock(31031)');
  const answers = Promise.all(
    sessions.map(async (session, i) => {
      // Every session's first statement waits for the gate; its work starts once the gate opens.
      await session.query('select pg_advisory_lock_shared(31031)');
      await session.query('select pg_advisory_unlock_shared(31031)');
      return work(session, i);
    }),
  );
  try {
    await waitUntilBlocked(observer, pids);
  } finally {
    await gate.query('rollback');
  }
  return answers;
}

/** `work` in one transaction of `session`. */
async function inTransaction<T>(session: pg.Client, work: () => Promise<T>): Promise<T> {
  await session.query('begin');
  try {
    const value = await work();
    await session.query('commit');
    return value;
  } catch (error) {
    await session.query('rollback').catch(() => {});
    throw error;
  }
}

async function appSessions(count: number): Promise<pg.Client[]> {
  const role = await loginRole('batch_app', ['settle_app']);
  return Promise.all(Array.from({ length: count }, () => role.connect()));
}

function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

describe('batches racing over the same keys', () => {
  it('6 logins, each claim_many + complete_many of 40 shared keys in its own order, one transaction each: no deadlock, one acquired and one settlement per key', async () => {
    const before = await deadlocks();
    for (let round = 0; round < 3; round++) {
      const keys = Array.from({ length: 40 }, (_, i) => newOperation(`race${round}-${i}`, { request: { n: i } }));
      const sessions = await appSessions(6);
      const orders = sessions.map((_, i) =>
        i === 0 ? keys : i === 1 ? [...keys].reverse() : shuffled(keys, 7919 * (round + 1) + i),
      );
      const answers = await releasedTogether(sessions, (session, i) =>
        inTransaction(session, async () => {
          const args = claimManyOf(orders[i] ?? []);
          const claimed = await claimMany(session, args);
          const tickets = ticketsOf(args, claimed);
          const done =
            tickets.length === 0
              ? []
              : await completeMany(
                  session,
                  completeManyOf(
                    tickets,
                    tickets.map(() => ({ by: i })),
                  ),
                );
          return { claimed, done };
        }),
      );
      const acquired = answers.flatMap((a) => a.claimed.filter((r) => r.outcome === 'acquired').map((r) => r.key));
      expect(acquired.sort()).toEqual(keys.map((k) => k.key).sort());
      const others = answers.flatMap((a) => a.claimed.filter((r) => r.outcome !== 'acquired').map((r) => r.outcome));
      // A loser waited for the winner's whole transaction (claim and complete): it sees replay.
      expect(new Set(others)).toEqual(new Set(['replay']));
      expect(answers.flatMap((a) => a.done.map((r) => r.outcome)).every((o) => o === 'settled')).toBe(true);

      const admin = await db.connect();
      const { rows } = await admin.query<{ key: string; attempts: number; settled: number; feed: number }>(
        `select o.key, (select count(*)::int from settle.attempts a where a.tenant = o.tenant and a.key = o.key) as attempts,
                (select count(*)::int from settle.attempts a where a.tenant = o.tenant and a.key = o.key and a.settled) as settled,
                (select count(*)::int from settle_private.feed_events e where e.tenant = o.tenant and e.key = o.key) as feed
           from settle_private.operations o where o.tenant = $1 and o.key = any ($2) order by o.key`,
        [TENANT, keys.map((k) => k.key)],
      );
      expect(rows).toHaveLength(40);
      for (const row of rows) expect(row).toMatchObject({ attempts: 1, settled: 1, feed: 1 });
    }
    expect(await deadlocks()).toBe(before);
  });

  it('complete_many racing with the same tickets in opposite orders: one settled per key, every other answer duplicate', async () => {
    const before = await deadlocks();
    const keys = Array.from({ length: 30 }, (_, i) => newOperation(`tickets-${i}`));
    const [first] = await appSessions(1);
    if (first === undefined) throw new Error('no session');
    const args = claimManyOf(keys);
    const tickets = ticketsOf(args, await claimMany(first, args));
    expect(tickets).toHaveLength(30);
    const sessions = await appSessions(4);
    const answers = await releasedTogether(sessions, (session, i) =>
      inTransaction(session, () => {
        const order = i % 2 === 0 ? tickets : [...tickets].reverse();
        return completeMany(
          session,
          completeManyOf(
            order,
            order.map((t) => ({ key: t.key })),
          ),
        );
      }),
    );
    const byKey = new Map<string, string[]>();
    for (const row of answers.flat()) byKey.set(row.key, [...(byKey.get(row.key) ?? []), row.outcome]);
    expect(byKey.size).toBe(30);
    for (const outcomes of byKey.values())
      expect(outcomes.sort()).toEqual(['duplicate', 'duplicate', 'duplicate', 'settled']);
    expect(await deadlocks()).toBe(before);
  });

  it('a batch and single calls on the same keys: one acquired per key, one effect, the others in_progress or replay', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => newOperation(`mixed-${i}`));
    const sessions = await appSessions(5);
    const answers = await releasedTogether(
      sessions,
      async (session, i): Promise<{ key: string; outcome: string }[]> => {
        if (i === 0) {
          // The batch claims and completes in one transaction (its locks held until the end).
          return inTransaction(session, async () => {
            const args = claimManyOf([...keys].reverse());
            const rows = await claimMany(session, args);
            const tickets = ticketsOf(args, rows);
            if (tickets.length > 0)
              await completeMany(
                session,
                completeManyOf(
                  tickets,
                  tickets.map(() => 'batch'),
                ),
              );
            return rows.map((r) => ({ key: r.key, outcome: r.outcome }));
          });
        }
        // Each single caller claims every key, one autocommitted call at a time, in its own order.
        const out: { key: string; outcome: string }[] = [];
        for (const op of shuffled(keys, i * 31)) {
          const row: ClaimRow = await claim(session, op);
          if (row.outcome === 'acquired') await complete(session, ticketOf(op, row), 'single');
          out.push({ key: op.key as string, outcome: row.outcome });
        }
        return out;
      },
    );
    const all = answers.flat();
    for (const op of keys) {
      const outcomes = all.filter((a) => a.key === op.key).map((a) => a.outcome);
      expect(outcomes).toHaveLength(5);
      expect(outcomes.filter((o) => o === 'acquired')).toHaveLength(1);
      expect(outcomes.every((o) => ['acquired', 'in_progress', 'replay'].includes(o))).toBe(true);
    }
    const admin = await db.connect();
    const { rows } = await admin.query<{ n: number }>(
      'select count(*)::int as n from settle.attempts where tenant = $1 and key = any ($2) and settled',
      [TENANT, keys.map((k) => k.key)],
    );
    expect(rows[0]?.n).toBe(20);
  });
});

describe('tenant binding and revocation floors', () => {
  it('a login bound to another tenant is refused (SE013) before anything is written', async () => {
    const role = await loginRole('batch_bound', ['settle_app']);
    const admin = await db.connect();
    await admin.query('select settle.grant_tenant($1, $2)', [role.name, 'globex']);
    const session = await role.connect();
    const keys = [newOperation('bound-1'), newOperation('bound-2')];
    expect(await sqlStateOf(claimMany(session, claimManyOf(keys)))).toBe('SE013');
    const { rows } = await admin.query<{ n: number }>(
      'select count(*)::int as n from settle_private.operations where key = any ($1)',
      [keys.map((k) => k.key)],
    );
    expect(rows[0]?.n).toBe(0);
    // Its own tenant works.
    const own = keys.map((k): ClaimArgs => ({ ...k, tenant: 'globex' }));
    expect((await claimMany(session, claimManyOf(own))).map((r) => r.outcome)).toEqual(['acquired', 'acquired']);
  });

  it('a revoked binding generation is refused per key, as settle.claim refuses it; a completion under it is fenced', async () => {
    const [session] = await appSessions(1);
    if (session === undefined) throw new Error('no session');
    const principal = `svc-rev-${Date.now()}`;
    const keys = [newOperation('rev-1', { principal }), newOperation('rev-2', { principal })];
    const args = claimManyOf(keys);
    const tickets = ticketsOf(args, await claimMany(session, args));
    const admin = await db.connect();
    await admin.query('select settle.revoke_binding($1, $2, 5)', [TENANT, principal]);
    expect((await claimMany(session, args)).map((r) => [r.outcome, r.reason])).toEqual([
      ['refused', 'binding_revoked'],
      ['refused', 'binding_revoked'],
    ]);
    expect((await completeMany(session, completeManyOf(tickets, [1, 2]))).map((r) => [r.outcome, r.reason])).toEqual([
      ['fenced', 'binding_revoked'],
      ['fenced', 'binding_revoked'],
    ]);
  });
});
