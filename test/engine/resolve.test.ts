import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { secondWaitsForFirst } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, complete, redrive, reportUnknown, type Ticket } from './support/settle.js';

// settle.resolve records the verified outcome of an operation that lost it. Callers
// are real login roles (session_user is what the audit records), racing on real connections;
// interleavings are ordered by row locks (secondWaitsForFirst), never by sleeping.
const db = useEngineDatabase('resolve');
const loginRole = useLoginRoles(db);

interface ResolveRow {
  outcome: 'resolved' | 'already_final';
  reason: string | null;
  status: string;
  status_before: string;
  attempt: number;
  settled_attempt: number | null;
  result: unknown;
  error: unknown;
}

interface ResolveArgs {
  readonly outcome: 'completed' | 'failed';
  readonly result?: unknown;
  readonly error?: unknown;
  readonly reason?: string | null;
  readonly evidence?: unknown;
  readonly fingerprint?: string;
  /** The attempt the evidence concerns (default: the operation's current attempt, read now). */
  readonly expectedAttempt?: number;
  readonly expectedStatus?: string;
}

async function resolve(
  client: pg.ClientBase,
  ticket: Pick<Ticket, 'tenant' | 'key' | 'fingerprint'>,
  args: ResolveArgs,
): Promise<ResolveRow> {
  const { rows } = await client.query<ResolveRow>(
    `select * from settle.resolve(tenant => $1, key => $2, fingerprint => $3, outcome => $4, reason => $5,
                                  result => $6::jsonb, error => $7::jsonb, evidence => $8::jsonb,
                                  expected_attempt => coalesce($9::integer, (select o.attempt from settle.inspect($1, $2) o), 1),
                                  expected_status => $10::settle.status)`,
    [
      ticket.tenant,
      ticket.key,
      args.fingerprint ?? ticket.fingerprint,
      args.outcome,
      args.reason === undefined ? 'TICKET-1: bank statement checked' : args.reason,
      args.result === undefined ? null : JSON.stringify(args.result),
      args.error === undefined ? null : JSON.stringify(args.error),
      args.evidence === undefined ? null : JSON.stringify(args.evidence),
      args.expectedAttempt ?? null,
      args.expectedStatus ?? null,
    ],
  );
  const row = rows[0];
  if (row === undefined) throw new Error('settle.resolve returned no row');
  return row;
}

async function reconcilerSession(): Promise<{ client: pg.Client; name: string }> {
  const role = await loginRole('reconciler', ['settle_reconciler']);
  return { client: await role.connect(), name: role.name };
}

/** An operation whose only attempt lost its response: unknown, dead-lettered needs_reconciliation. */
async function needsReconciliation(app: pg.ClientBase, prefix: string): Promise<Ticket> {
  const ticket = await acquire(app, newOperation(prefix, { max_attempts: 1 }));
  const answer = await reportUnknown(app, ticket);
  expect(answer).toMatchObject({
    outcome: 'recorded',
    status: 'unknown',
    dead_lettered: true,
    dead_letter_reason: 'needs_reconciliation',
  });
  return ticket;
}

async function state(client: pg.ClientBase, ticket: Pick<Ticket, 'tenant' | 'key'>) {
  const op = await client.query(`select * from settle.operations where tenant = $1 and key = $2`, [
    ticket.tenant,
    ticket.key,
  ]);
  const attempts = await client.query(`select * from settle.attempts where tenant = $1 and key = $2 order by attempt`, [
    ticket.tenant,
    ticket.key,
  ]);
  const audit = await client.query(
    `select * from settle.audit_log where tenant = $1 and key = $2 order by seq, audit_id`,
    [ticket.tenant, ticket.key],
  );
  return { op: op.rows[0] as Record<string, unknown>, attempts: attempts.rows, audit: audit.rows };
}

describe('settle.resolve', () => {
  it('completed: settles through an attempt epoch of its own, audited with session_user, reason and evidence; a late success is late', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const { client: reconciler, name } = await reconcilerSession();
    const ticket = await needsReconciliation(app, 'done');

    const answer = await resolve(reconciler, ticket, {
      outcome: 'completed',
      result: { charge: 'ch_1' },
      evidence: { bank_reference: 'ref-9' },
    });
    expect(answer).toMatchObject({
      outcome: 'resolved',
      status: 'completed',
      status_before: 'unknown',
      attempt: 2,
      settled_attempt: 2,
    });
    expect(answer.result).toEqual({ charge: 'ch_1' });

    const after = await state(superuser, ticket);
    expect(after.op).toMatchObject({
      status: 'completed',
      dead_lettered_at: null,
      dead_letter_reason: null,
      max_attempts: 2,
    });
    expect(after.attempts.map((a) => [a.attempt, a.worker, a.observation, a.settled])).toEqual([
      [1, 'worker-1', 'unknown', false],
      [2, `resolve:${name}`, 'completed', true],
    ]);
    const resolution = after.audit.find((row) => row.event === 'resolve');
    expect(resolution).toMatchObject({
      outcome: 'resolved',
      actor: name,
      status_before: 'unknown',
      status_after: 'completed',
    });
    expect(resolution.detail).toMatchObject({
      asserted: 'completed',
      reason: 'TICKET-1: bank statement checked',
      evidence: { bank_reference: 'ref-9' },
      dead_letter_reason: 'needs_reconciliation',
    });

    // The original attempt's success arrives after all: recorded, never a second settlement.
    expect(await complete(app, ticket, { charge: 'ch_1' })).toMatchObject({
      outcome: 'already_settled',
      reason: 'late_success',
    });
    const settled = (await state(superuser, ticket)).attempts.filter((a) => a.settled);
    expect(settled).toHaveLength(1);
  });

  it('failed: an audited assertion that no attempt took effect; a late success of the judged attempt stays a late answer', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const { client: reconciler } = await reconcilerSession();
    const ticket = await needsReconciliation(app, 'nothing');

    const answer = await resolve(reconciler, ticket, { outcome: 'failed', error: { code: 'declined_at_bank' } });
    expect(answer).toMatchObject({ outcome: 'resolved', status: 'failed', status_before: 'unknown', attempt: 1 });
    const after = await state(superuser, ticket);
    expect(after.op).toMatchObject({ status: 'failed', error: { code: 'declined_at_bank' }, dead_lettered_at: null });
    expect(after.attempts[0]).toMatchObject({ observation: 'failed', retryable: false });
    expect(after.attempts[0].error).toMatchObject({ code: 'resolved_failed', error: { code: 'declined_at_bank' } });
    expect(after.audit.find((row) => row.event === 'resolve').detail.attempts_judged).toEqual([
      { attempt: 1, observation: 'unknown' },
    ]);

    expect(await complete(app, ticket, { charge: 'late' })).toMatchObject({
      outcome: 'already_settled',
      reason: 'attempt_already_observed',
    });
    expect((await state(superuser, ticket)).op).toMatchObject({ status: 'failed', result: null });
    // The late success's payload is kept as evidence.
    const late = (await state(superuser, ticket)).audit.at(-1);
    expect(late).toMatchObject({ event: 'complete', outcome: 'already_settled' });
    expect(late.detail.presented.result).toEqual({ charge: 'late' });
  });

  it('a conflict is resolved failed only through the resolution: a superuser UPDATE to failed is refused by the guard', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const { client: reconciler } = await reconcilerSession();
    const args = newOperation('conflicted', { max_attempts: 1 });
    const ticket = await acquire(app, args);
    // A success presented under another request: the operation moves to conflict.
    const mismatched = { ...ticket, fingerprint: `v1:${'0'.repeat(64)}` };
    expect((await complete(app, mismatched, { other: true })).outcome).toBe('conflict');
    expect((await state(superuser, ticket)).op.status).toBe('conflict');

    expect(
      await sqlStateOf(
        superuser.query(
          `update settle_private.operations set status = 'failed', error = '{"by":"hand"}' where tenant = $1 and key = $2`,
          [ticket.tenant, ticket.key],
        ),
      ),
    ).toBe('SE021');

    expect(await resolve(reconciler, ticket, { outcome: 'failed', error: { code: 'no_charge' } })).toMatchObject({
      outcome: 'resolved',
      status: 'failed',
      status_before: 'conflict',
    });
  });

  it('refuses pending and running operations, a wrong fingerprint, a missing reason, and failed while a lease is held; already final changes nothing', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const { client: reconciler } = await reconcilerSession();

    const running = await acquire(app, newOperation('running'));
    expect(await sqlStateOf(resolve(reconciler, running, { outcome: 'completed', result: {} }))).toBe('SE050');
    await reportUnknown(app, running); // unknown, budget left: resolvable, not dead-lettered
    const pendingArgs = newOperation('pending', { max_attempts: 2 });
    const pending = await acquire(app, pendingArgs);
    await app.query(
      `select * from settle.fail(tenant => $1, key => $2, attempt => $3, lease_token => $4, fingerprint => $5,
      principal => $6, scopes => $7, binding_generation => 1, error => '{"x":1}', retryable => true)`,
      [
        pending.tenant,
        pending.key,
        pending.attempt,
        pending.lease_token,
        pending.fingerprint,
        pending.principal,
        pending.scopes,
      ],
    );
    expect((await state(superuser, pending)).op.status).toBe('pending');
    expect(await sqlStateOf(resolve(reconciler, pending, { outcome: 'failed', error: {} }))).toBe('SE050');

    const unknown = await needsReconciliation(app, 'refusals');
    expect(
      await sqlStateOf(
        resolve(reconciler, unknown, { outcome: 'completed', result: {}, fingerprint: `v1:${'1'.repeat(64)}` }),
      ),
    ).toBe('SE052');
    expect(await sqlStateOf(resolve(reconciler, unknown, { outcome: 'completed', result: {}, reason: '  ' }))).toBe(
      'SE008',
    );
    expect(await sqlStateOf(resolve(reconciler, unknown, { outcome: 'completed', result: {}, reason: null }))).toBe(
      'SE008',
    );
    expect(await sqlStateOf(resolve(reconciler, unknown, { outcome: 'completed' }))).toBe('SE005');
    expect(await sqlStateOf(resolve(reconciler, unknown, { outcome: 'failed' }))).toBe('SE006');
    expect(
      await sqlStateOf(resolve(reconciler, { ...unknown, key: 'never-claimed' }, { outcome: 'failed', error: {} })),
    ).toBe('SE010');

    // Redriven (status stays unknown) and claimed again: an attempt holds a lease.
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    await redrive(admin, { tenant: unknown.tenant, key: unknown.key });
    const args = newOperation('x');
    const again = await claim(app, { ...args, tenant: unknown.tenant, key: unknown.key, request: args.request });
    expect(again).toMatchObject({ outcome: 'acquired', status: 'unknown', attempt: 2 });
    expect(await sqlStateOf(resolve(reconciler, unknown, { outcome: 'failed', error: {} }))).toBe('SE051');
    // completed is allowed: the downstream says the effect happened; the live attempt is over.
    expect(await resolve(reconciler, unknown, { outcome: 'completed', result: { ok: 1 } })).toMatchObject({
      outcome: 'resolved',
      attempt: 3,
      settled_attempt: 3,
    });
    const after = await state(superuser, unknown);
    expect(after.op.in_flight).toBe(false);
    expect(after.attempts[1]).toMatchObject({ attempt: 2, end_reason: 'settled_elsewhere' });

    // Completed already: nothing changes, the assertion is kept.
    const repeat = await resolve(reconciler, unknown, { outcome: 'failed', error: { no: 1 } });
    expect(repeat).toMatchObject({ outcome: 'already_final', reason: 'differs', status: 'completed' });
    expect(await resolve(reconciler, unknown, { outcome: 'completed', result: { ok: 1 } })).toMatchObject({
      outcome: 'already_final',
      reason: 'matches',
    });
    expect(
      (await state(superuser, unknown)).audit.filter((row) => row.event === 'resolve').map((row) => row.outcome),
    ).toEqual(['resolved', 'already_final', 'already_final']);
  });

  it('settle_app may not resolve; a reconciler bound to other tenants gets SE013 and nothing is written', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const ticket = await needsReconciliation(app, 'access');
    const appRole = await (await loginRole('svc', ['settle_app'])).connect();
    expect(await sqlStateOf(resolve(appRole, ticket, { outcome: 'completed', result: {} }))).toBe('42501');

    const bound = await loginRole('globex_reconciler', ['settle_reconciler']);
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    await admin.query(`select settle.grant_tenant(role => $1, tenant => 'globex')`, [bound.name]);
    const boundClient = await bound.connect();
    expect(await sqlStateOf(resolve(boundClient, ticket, { outcome: 'completed', result: {} }))).toBe('SE013');
    expect(
      (
        await boundClient.query(`select * from settle.lease_reconciliation(holder => 'r1', batch_size => 1000)`)
      ).rows.filter((row) => row.tenant === ticket.tenant),
    ).toEqual([]);
    const after = await state(superuser, ticket);
    expect(after.op.status).toBe('unknown');
    expect(after.audit.some((row) => row.event === 'resolve')).toBe(false);

    // Bound to this tenant: allowed.
    await admin.query(`select settle.grant_tenant(role => $1, tenant => $2)`, [bound.name, ticket.tenant]);
    expect((await resolve(boundClient, ticket, { outcome: 'completed', result: {} })).outcome).toBe('resolved');
  });
});

describe('settle.resolve racing', () => {
  async function sessions() {
    const { client: one } = await reconcilerSession();
    const two = await db.app();
    const observer = await db.connect();
    return { one, two, observer };
  }

  it('resolve completed first, the late success waits: exactly one settlement', async () => {
    const app = await db.app();
    const ticket = await needsReconciliation(app, 'race-rc');
    const s = await sessions();
    const [resolved, late] = await secondWaitsForFirst(
      s,
      (one) => resolve(one, ticket, { outcome: 'completed', result: { by: 'resolution' } }),
      (two) => complete(two, ticket, { by: 'worker' }),
    );
    expect(resolved.outcome).toBe('resolved');
    expect(late).toMatchObject({ outcome: 'already_settled', reason: 'late_success' });
    const after = await state(s.observer, ticket);
    expect(after.op.result).toEqual({ by: 'resolution' });
    expect(after.attempts.filter((a) => a.settled)).toHaveLength(1);
  });

  it('the late success first, resolve waits: already_final, the success is the one outcome', async () => {
    const app = await db.app();
    const ticket = await needsReconciliation(app, 'race-cr');
    const s = await sessions();
    const [late, resolved] = await secondWaitsForFirst(
      { one: s.two, two: s.one, observer: s.observer },
      (two) => complete(two, ticket, { by: 'worker' }),
      (one) => resolve(one, ticket, { outcome: 'failed', error: { none: true } }),
    );
    expect(late).toMatchObject({ outcome: 'settled', status: 'completed' });
    expect(resolved).toMatchObject({ outcome: 'already_final', reason: 'differs', status: 'completed' });
    const after = await state(s.observer, ticket);
    expect(after.op).toMatchObject({ status: 'completed', result: { by: 'worker' } });
    expect(after.attempts.filter((a) => a.settled)).toHaveLength(1);
  });

  it('resolve failed first, the late success waits: failed stays the one final outcome', async () => {
    const app = await db.app();
    const ticket = await needsReconciliation(app, 'race-rf');
    const s = await sessions();
    const [resolved, late] = await secondWaitsForFirst(
      s,
      (one) => resolve(one, ticket, { outcome: 'failed', error: { none: true } }),
      (two) => complete(two, ticket, { by: 'worker' }),
    );
    expect(resolved).toMatchObject({ outcome: 'resolved', status: 'failed' });
    expect(late).toMatchObject({ outcome: 'already_settled', reason: 'attempt_already_observed' });
    const after = await state(s.observer, ticket);
    expect(after.op).toMatchObject({ status: 'failed', result: null });
    expect(after.attempts.filter((a) => a.settled)).toHaveLength(0);
    const finals = after.audit.filter(
      (row) => ['completed', 'failed'].includes(row.status_after) && row.status_before !== row.status_after,
    );
    expect(finals).toHaveLength(1);
  });

  it('redrive first, resolve waits: resolves the redriven operation; resolve first, redrive waits: SE011', async () => {
    const app = await db.app();
    const admin = await (await loginRole('ops', ['settle_admin'])).connect();
    const observer = await db.connect();
    const { client: reconciler } = await reconcilerSession();

    const first = await needsReconciliation(app, 'race-redrive');
    const [redriven, resolved] = await secondWaitsForFirst(
      { one: admin, two: reconciler, observer },
      (one) => redrive(one, { tenant: first.tenant, key: first.key, reason: 'retry' }),
      (two) => resolve(two, first, { outcome: 'completed', result: { ok: true } }),
    );
    expect(redriven).toMatchObject({ status: 'unknown', redrive_count: 1 });
    expect(resolved).toMatchObject({ outcome: 'resolved', status: 'completed', status_before: 'unknown' });

    const second = await needsReconciliation(app, 'race-redrive');
    const [resolved2, refused] = await secondWaitsForFirst(
      { one: reconciler, two: admin, observer },
      (one) => resolve(one, second, { outcome: 'failed', error: { none: true } }),
      (two) => sqlStateOf(redrive(two, { tenant: second.tenant, key: second.key })),
    );
    expect(resolved2.status).toBe('failed');
    expect(refused).toBe('SE011');
  });
});

describe('settle.resolve: the evidence has an epoch (expected_attempt, SE053)', () => {
  // Attempt 1 reports unknown; the reconciler reads the operation (attempt 1, unknown) and checks
  // the downstream: no charge. The client retries: attempt 2 charges and reports unknown. The
  // verdict read for attempt 1 must not judge attempt 2 (it was accepted, and attempt 2's
  // success then answered attempt_already_observed: the operation ended failed after a charge).
  it('a client retry racing the verdict: the retry holds the row, the verdict waits and is refused; attempt 2 still settles', async () => {
    const app = await db.app();
    const observer = await db.connect();
    const { client: reconciler } = await reconcilerSession();
    const args = newOperation('epoch', { max_attempts: 3 });
    const first = await acquire(app, args);
    expect(await reportUnknown(app, first)).toMatchObject({ outcome: 'recorded', status: 'unknown' });
    const read = (
      await reconciler.query(`select attempt, status::text as status from settle.inspect(tenant => $1, key => $2)`, [
        first.tenant,
        first.key,
      ])
    ).rows[0] as { attempt: number; status: string };
    expect(read).toEqual({ attempt: 1, status: 'unknown' });

    // The retry (settle_app) claims attempt 2 and, in the same transaction, charges and loses the
    // response; the verdict arrives meanwhile and queues behind the retry's row lock.
    const retry = await db.app();
    let second: Ticket | undefined;
    const [, refused] = await secondWaitsForFirst(
      { one: retry, two: reconciler, observer },
      async (one) => {
        second = await acquire(one, args);
        expect(second.attempt).toBe(2);
        return reportUnknown(one, second);
      },
      (two) =>
        sqlStateOf(
          resolve(two, first, {
            outcome: 'failed',
            error: { none: true },
            expectedAttempt: read.attempt,
            expectedStatus: read.status,
          }),
        ),
    );
    expect(refused).toBe('SE053');
    if (second === undefined) throw new Error('no second attempt');
    // Nothing was judged: attempt 2's success settles the operation.
    expect(await complete(app, second, { charge: 'ch_2' })).toMatchObject({
      outcome: 'settled',
      status: 'completed',
      settled_attempt: 2,
    });
    const after = await state(observer, first);
    expect(after.op).toMatchObject({ status: 'completed', result: { charge: 'ch_2' } });
    expect(after.audit.filter((row) => row.event === 'resolve')).toEqual([]);
  });

  it('the verdict first, the retry waits: the verdict judges attempt 1 only, and the retry is answered failed', async () => {
    const app = await db.app();
    const observer = await db.connect();
    const { client: reconciler } = await reconcilerSession();
    const args = newOperation('epoch-first', { max_attempts: 3 });
    const first = await acquire(app, args);
    await reportUnknown(app, first);
    const retry = await db.app();
    const [resolved, claimed] = await secondWaitsForFirst(
      { one: reconciler, two: retry, observer },
      (one) =>
        resolve(one, first, {
          outcome: 'failed',
          error: { none: true },
          expectedAttempt: 1,
          expectedStatus: 'unknown',
        }),
      (two) => claim(two, args),
    );
    expect(resolved).toMatchObject({ outcome: 'resolved', status: 'failed', attempt: 1 });
    expect(claimed).toMatchObject({ outcome: 'failed', status: 'failed' });
    expect((await state(observer, first)).attempts.map((a) => a.attempt)).toEqual([1]);
  });

  it('another status than the one read (unknown became conflict) is refused; expected_attempt is required; a repeat after completion is already_final', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const { client: reconciler } = await reconcilerSession();
    const ticket = await acquire(app, newOperation('epoch-status', { max_attempts: 1 }));
    await reportUnknown(app, ticket);
    // A mismatched success of attempt 1 (its own token, another binding generation): conflict.
    expect(
      await complete(app, { ...ticket, binding_generation: (ticket.binding_generation ?? 1) + 1 }, { other: true }),
    ).toMatchObject({ outcome: 'conflict' });
    expect(
      await sqlStateOf(
        resolve(reconciler, ticket, { outcome: 'failed', error: {}, expectedAttempt: 1, expectedStatus: 'unknown' }),
      ),
    ).toBe('SE053');
    expect(
      await sqlStateOf(
        reconciler.query(
          `select settle.resolve(tenant => $1, key => $2, fingerprint => $3, expected_attempt => null, outcome => 'failed', error => '{}', reason => 'x')`,
          [ticket.tenant, ticket.key, ticket.fingerprint],
        ),
      ),
    ).toBe('SE008');
    const done = await resolve(reconciler, ticket, {
      outcome: 'completed',
      result: { ok: 1 },
      expectedAttempt: 1,
      expectedStatus: 'conflict',
    });
    expect(done).toMatchObject({ outcome: 'resolved', status: 'completed', attempt: 2 });
    // Applying the same verdict again (its precondition is now stale) changes nothing and is no error.
    expect(
      await resolve(reconciler, ticket, {
        outcome: 'completed',
        result: { ok: 1 },
        expectedAttempt: 1,
        expectedStatus: 'conflict',
      }),
    ).toMatchObject({ outcome: 'already_final', reason: 'matches' });
    const audit = (await state(superuser, ticket)).audit.filter((row) => row.event === 'resolve');
    expect(audit[0]?.detail).toMatchObject({ expected_attempt: 1, expected_status: 'conflict' });
  });
});

describe('settle.resolve and the settlement feed', () => {
  it('each resolution enters the feed once, like any final outcome; a late success after a failed resolution adds nothing', async () => {
    const app = await db.app();
    const superuser = await db.connect();
    const { client: reconciler } = await reconcilerSession();
    const done = await needsReconciliation(app, 'feed-done');
    const none = await needsReconciliation(app, 'feed-none');
    await resolve(reconciler, done, { outcome: 'completed', result: { charge: 'ch_feed' } });
    await resolve(reconciler, none, { outcome: 'failed', error: { code: 'no_charge' } });
    expect((await complete(app, none, { charge: 'late' })).outcome).toBe('already_settled');
    expect((await complete(app, done, { charge: 'ch_feed' })).outcome).toBe('already_settled');
    const { rows } = await superuser.query(
      `select key, status::text, status_before::text, attempt, result, error from settle_private.feed_events
        where tenant = $1 and key = any($2::text[]) order by key, event_id`,
      [done.tenant, [done.key, none.key]],
    );
    expect(rows).toEqual(
      [
        {
          key: done.key,
          status: 'completed',
          status_before: 'unknown',
          attempt: 2,
          result: { charge: 'ch_feed' },
          error: null,
        },
        {
          key: none.key,
          status: 'failed',
          status_before: 'unknown',
          attempt: 1,
          result: null,
          error: { code: 'no_charge' },
        },
      ].sort((a, b) => (a.key < b.key ? -1 : 1)),
    );
  });
});
