import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import {
  claimMany,
  claimManyOf,
  completeMany,
  completeManyOf,
  ticketsOf,
  type ClaimManyArgs,
} from './support/batch.js';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, heartbeat, type ClaimArgs, type Ticket } from './support/settle.js';

// The rule every batch meets: a batch is indistinguishable from its single calls made at one
// instant, the instant after every wait it made. Each test parks a batch behind another login's
// row lock or uncommitted insert (a barrier: the batch is seen waiting in pg_stat_activity), lets
// something commit during the wait (time passing, a revocation), releases the lock, and holds the
// answers to what the single calls at the end of the wait answer: every lease measured from then
// (losing at most a tenth of its length), access and the revocation floor judged then.
const db = useEngineDatabase('batch_waits');
const loginRole = useLoginRoles(db);

const LEASE_MS = 1_000;

interface Parked<T> {
  readonly answer: Promise<T>;
  readonly observer: pg.Client;
  /** Ends the holder's transaction (commit or rollback); resolves to the server clock just before. */
  release(how: 'commit' | 'rollback'): Promise<number>;
}

/**
 * `hold` runs in `holder`'s open transaction (taking a lock), then `batch` starts on `caller` and
 * is seen waiting behind it.
 */
async function parked<T>(
  holder: pg.Client,
  caller: pg.Client,
  hold: (holder: pg.Client) => Promise<unknown>,
  batch: (caller: pg.Client) => Promise<T>,
): Promise<Parked<T>> {
  const observer = await db.connect();
  const pid = await backendPid(caller);
  await holder.query('begin');
  await hold(holder);
  const answer = batch(caller);
  answer.catch(() => {});
  await waitUntilBlocked(observer, pid);
  return {
    answer,
    observer,
    async release(how) {
      const { rows } = await holder.query<{ at: Date }>('select clock_timestamp() as at');
      await holder.query(how);
      return (rows[0]?.at as Date).getTime();
    },
  };
}

/** Keeps the batch waiting for longer than its lease: what a slow holder does. */
async function outlastLease(observer: pg.Client): Promise<void> {
  await observer.query('select pg_sleep($1)', [(LEASE_MS * 1.3) / 1000]);
}

async function appLogins(prefix: string, count: number): Promise<pg.Client[]> {
  const role = await loginRole(prefix, ['settle_app']);
  return Promise.all(Array.from({ length: count }, () => role.connect()));
}

/** Operations of one binding that exist with a lapsed lease (claim, then the lease made to lapse). */
async function lapsed(app: pg.Client, ops: readonly ClaimArgs[]): Promise<void> {
  const admin = await db.connect();
  for (const op of ops) {
    await acquire(app, op);
    expect(await expireLease(admin, op.tenant as string, op.key as string)).toBe(true);
  }
}

const withLease = (args: ClaimManyArgs): ClaimManyArgs => ({ ...args, lease: `${LEASE_MS} milliseconds` });

function leasesOf(rows: readonly { outcome: string; lease_expires_at: Date | null }[]): number[] {
  return rows.map((r) => {
    expect(r.outcome).toBe('acquired');
    return (r.lease_expires_at as Date).getTime();
  });
}

describe('claim_many decided key by key', () => {
  it('a wait on a later key longer than the lease: every lease measured from the end of the wait, a retry answers in_progress', async () => {
    const [app, holder, batch, retry] = await appLogins('bw_lease', 4);
    const ops = ['a', 'b'].map((k) => newOperation(`kbk-lease-${k}`));
    await lapsed(app as pg.Client, ops);
    const p = await parked(
      holder as pg.Client,
      batch as pg.Client,
      (h) => claim(h, ops[1] as ClaimArgs), // takes the lapsed lease over: the row is locked
      (c) => claimMany(c, withLease(claimManyOf(ops))),
    );
    await outlastLease(p.observer);
    const released = await p.release('rollback');
    const rows = await p.answer;
    expect(rows.map((r) => [r.key, r.outcome, r.attempt])).toEqual(ops.map((o) => [o.key, 'acquired', 2]));
    for (const expires of leasesOf(rows)) expect(expires).toBeGreaterThanOrEqual(released + LEASE_MS * 0.9);
    // The batch's worker holds attempt 2 of the first key: nobody may open attempt 3 now.
    const again = await claim(retry as pg.Client, ops[0] as ClaimArgs);
    expect([again.outcome, again.attempt]).toEqual(['in_progress', 2]);
  });

  it('1,000 keys decided key by key with no other session: no lease loses more than a tenth of its length', async () => {
    const [app] = await appLogins('bw_many', 1);
    const ops = Array.from({ length: 1_000 }, (_, i) => newOperation(`kbk-many-${i}`));
    const admin = await db.connect();
    // The keys exist with lapsed leases, so every key is taken over by settle.claim.
    const args = claimManyOf(ops);
    expect((await claimMany(app as pg.Client, args)).every((r) => r.outcome === 'acquired')).toBe(true);
    await admin.query(
      `update settle_private.operations set lease_expires_at = now() - interval '1 second'
        where tenant = $1 and key = any ($2)`,
      [TENANT, args.keys],
    );
    const rows = await claimMany(app as pg.Client, withLease(args));
    const leases = leasesOf(rows);
    expect(Math.max(...leases) - Math.min(...leases)).toBeLessThanOrEqual(LEASE_MS / 10);
  });

  it('a binding revoked during the wait: every key refused, the key decided before the wait not taken over', async () => {
    const [app, holder, batch] = await appLogins('bw_rev', 3);
    const principal = `svc-bw-rev-${Date.now()}`;
    const ops = ['a', 'b'].map((k) => newOperation(`kbk-rev-${k}`, { principal }));
    await lapsed(app as pg.Client, ops);
    const p = await parked(
      holder as pg.Client,
      batch as pg.Client,
      (h) => claim(h, ops[1] as ClaimArgs),
      (c) => claimMany(c, claimManyOf(ops)),
    );
    await p.observer.query('select settle.revoke_binding($1, $2, 5)', [TENANT, principal]);
    await p.release('rollback');
    const rows = await p.answer;
    expect(rows.map((r) => [r.key, r.outcome, r.reason])).toEqual(
      ops.map((o) => [o.key, 'refused', 'binding_revoked']),
    );
    const { rows: attempts } = await p.observer.query<{ n: number }>(
      'select count(*)::int as n from settle.attempts where tenant = $1 and key = $2',
      [TENANT, ops[0]?.key],
    );
    expect(attempts[0]?.n).toBe(1);
  });
});

describe('claim_many of new keys (set-based)', () => {
  /** 1,000 new keys behind another login's uncommitted first claim of the last one in key order. */
  async function parkedNewKeys(prefix: string, principal?: string) {
    const [holder, batch] = await appLogins(prefix, 2);
    const ops = Array.from({ length: 1_000 }, (_, i) =>
      newOperation(`${prefix}-${String(i).padStart(4, '0')}`, principal === undefined ? {} : { principal }),
    );
    const p = await parked(
      holder as pg.Client,
      batch as pg.Client,
      (h) => claim(h, ops[ops.length - 1] as ClaimArgs),
      (c) => claimMany(c, withLease(claimManyOf(ops))),
    );
    return { ops, ...p };
  }

  it('a wait shorter than the batch allowed itself before: the leases are measured from the end of the wait', async () => {
    const p = await parkedNewKeys('sb_lease');
    await p.observer.query('select pg_sleep(0.3)');
    const released = await p.release('rollback');
    const rows = await p.answer;
    for (const expires of leasesOf(rows)) expect(expires).toBeGreaterThanOrEqual(released + LEASE_MS * 0.9);
  });

  it('a binding revoked during a short wait: every key refused, as settle.claim answers after its wait', async () => {
    const principal = `svc-sb-rev-${Date.now()}`;
    const p = await parkedNewKeys('sb_rev', principal);
    await p.observer.query('select settle.revoke_binding($1, $2, 5)', [TENANT, principal]);
    await p.release('rollback');
    const rows = await p.answer;
    expect(new Set(rows.map((r) => `${r.outcome}/${r.reason}`))).toEqual(new Set(['refused/binding_revoked']));
  });
});

describe('complete_many after a wait', () => {
  /**
   * Two lease holders of `prefix`'s login, completed by one batch while another session of the
   * login heartbeats the second key in an open transaction (holding its row lock). `duplicate`
   * lists the first key twice, which sends the batch key by key from the start.
   */
  async function parkedCompletes(
    prefix: string,
    opts: { principal?: string; duplicate?: boolean; tenants?: readonly string[] } = {},
  ) {
    const role = await loginRole(prefix, ['settle_app']);
    const admin = await db.connect();
    for (const tenant of opts.tenants ?? [])
      await admin.query('select settle.grant_tenant($1, $2)', [role.name, tenant]);
    const [app, holder, batch] = await Promise.all([role.connect(), role.connect(), role.connect()]);
    const ops = ['a', 'b'].map((k) =>
      newOperation(`${prefix}-${k}`, opts.principal === undefined ? {} : { principal: opts.principal }),
    );
    const args = claimManyOf(ops);
    const tickets = ticketsOf(args, await claimMany(app, args));
    expect(tickets).toHaveLength(2);
    const listed: Ticket[] = opts.duplicate ? [tickets[0] as Ticket, ...tickets] : tickets;
    const p = await parked(
      holder,
      batch,
      (h) => heartbeat(h, tickets[1] as Ticket),
      (c) =>
        completeMany(
          c,
          completeManyOf(
            listed,
            listed.map((t) => ({ paid: t.key })),
          ),
        ),
    );
    return { role, ops, ...p };
  }

  async function settlements(observer: pg.Client, ops: readonly ClaimArgs[]): Promise<number> {
    const { rows } = await observer.query<{ n: number }>(
      'select count(*)::int as n from settle.attempts where tenant = $1 and key = any ($2) and settled',
      [TENANT, ops.map((o) => o.key)],
    );
    return rows[0]?.n ?? -1;
  }

  for (const duplicate of [false, true]) {
    const path = duplicate ? 'key by key' : 'set-based';
    it(`${path}: a binding revoked during the wait settles nothing, every key fenced binding_revoked`, async () => {
      const principal = `svc-cm-rev-${duplicate}-${Date.now()}`;
      const p = await parkedCompletes(`cm_rev_${duplicate ? 'k' : 's'}`, { principal, duplicate });
      await p.observer.query('select settle.revoke_binding($1, $2, 5)', [TENANT, principal]);
      await p.release('commit');
      const rows = await p.answer;
      expect(new Set(rows.map((r) => `${r.outcome}/${r.reason}`))).toEqual(new Set(['fenced/binding_revoked']));
      expect(await settlements(p.observer, p.ops)).toBe(0);
    });

    it(`${path}: the tenant revoked from the login during the wait: SE013, nothing settled`, async () => {
      const p = await parkedCompletes(`cm_ten_${duplicate ? 'k' : 's'}`, { duplicate, tenants: [TENANT, 'globex'] });
      await p.observer.query('select settle.revoke_tenant($1, $2)', [p.role.name, TENANT]);
      await p.release('commit');
      expect(await sqlStateOf(p.answer)).toBe('SE013');
      expect(await settlements(p.observer, p.ops)).toBe(0);
    });
  }
});
