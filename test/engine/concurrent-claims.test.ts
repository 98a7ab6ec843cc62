import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { asApp, useEngineDatabase, type EngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { mustGetOperation, storedAttempts } from './support/inspect.js';
import { claim, type ClaimArgs, type ClaimRow } from './support/settle.js';

const db = useEngineDatabase('concurrent_claims');
const SESSIONS = 64;

/**
 * Opens `count` app sessions, blocks them all behind an EXCLUSIVE
 * table lock held by an admin transaction (claim's INSERT needs ROW EXCLUSIVE), waits until
 * every one of them is queued on that lock, then releases them together.
 */
async function claimAllAtOnce(
  database: EngineDatabase,
  argsFor: (i: number) => ClaimArgs,
  count: number,
): Promise<ClaimRow[]> {
  const sessions: pg.Client[] = await Promise.all(Array.from({ length: count }, () => database.connect()));
  const pids = await Promise.all(sessions.map(async (session) => backendPid(await asApp(session))));
  const [gate, observer] = await Promise.all([database.connect(), database.connect()]);
  await gate.query('begin');
  await gate.query('lock table settle_private.operations in exclusive mode');
  const answers = Promise.all(sessions.map((session, i) => claim(session, argsFor(i))));
  try {
    await waitUntilBlocked(observer, pids);
  } finally {
    await gate.query('rollback');
  }
  return answers;
}

describe('concurrent claims of one new key', () => {
  it(`${SESSIONS} sessions released together: one acquired, ${SESSIONS - 1} in_progress, one operation, one attempt`, async () => {
    const op = newOperation('stampede');
    const answers = await claimAllAtOnce(db, () => op, SESSIONS);

    expect(answers).toHaveLength(SESSIONS);
    const outcomes = answers.map((a) => a.outcome);
    expect(outcomes.filter((o) => o === 'acquired')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'in_progress')).toHaveLength(SESSIONS - 1);
    for (const answer of answers) {
      expect(answer.status).toBe('running');
      expect(answer.attempt).toBe(1);
    }
    for (const waiting of answers.filter((a) => a.outcome === 'in_progress')) {
      expect(waiting.retry_after_ms).toBeGreaterThan(0);
      expect(waiting.lease_token).toBeNull();
    }

    const admin = await db.connect();
    const { rows } = await admin.query<{ n: number }>(
      'select count(*)::int as n from settle_private.operations where tenant = $1 and key = $2',
      [op.tenant, op.key],
    );
    expect(rows[0]?.n).toBe(1);
    expect(await storedAttempts(admin, op.tenant as string, op.key as string)).toHaveLength(1);
  });

  it('sessions with different requests race: exactly one reserves, all others conflict on request', async () => {
    const sessions = 16;
    const base = newOperation('fingerprints');
    const answers = await claimAllAtOnce(
      db,
      (i) => ({ ...base, request: { amount: `${i}.00`, to: 'acct-42' } }),
      sessions,
    );

    const winners = answers.flatMap((a, i) => (a.outcome === 'acquired' ? [i] : []));
    expect(winners).toHaveLength(1);
    const losers = answers.filter((a) => a.outcome !== 'acquired');
    expect(losers).toHaveLength(sessions - 1);
    for (const loser of losers) {
      expect(loser).toMatchObject({ outcome: 'conflict', conflict_on: ['request'], fingerprint: null, status: null });
    }

    const admin = await db.connect();
    const winner = answers[winners[0] as number];
    const stored = await mustGetOperation(admin, base.tenant as string, base.key as string);
    expect(stored.fingerprint).toBe(winner?.fingerprint);
    const { rows } = await admin.query<{ fp: string }>('select settle.fingerprint($1::jsonb) as fp', [
      JSON.stringify({ amount: `${winners[0]}.00`, to: 'acct-42' }),
    ]);
    expect(stored.fingerprint).toBe(rows[0]?.fp);
  });
});
