import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { secondWaitsForFirst } from './support/barrier.js';
import { asAdmin, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { storedOperation } from './support/inspect.js';
import { fingerprintOf, supersededPair } from './support/scenarios.js';
import { acquire, complete, fail, heartbeat, reportUnknown, type Ticket } from './support/settle.js';

// The audit keeps the evidence. Every refused, fenced or conflicting observation is
// audited with what it presented (bounded in size, readable only by settle_readonly and
// settle_admin); a call on a purged key leaves an audit row; purge keeps dead letters and unknown
// operations.
const db = useEngineDatabase('evidence');

interface AuditDetail {
  reason?: string;
  conflict_on?: string[];
  presented?: Record<string, unknown>;
}

async function lastAudit(
  tenant: string,
  key: string,
): Promise<{ event: string; outcome: string; detail: AuditDetail }> {
  const admin = await db.connect();
  const { rows } = await admin.query(
    'select event, outcome, detail from settle.audit_log where tenant = $1 and key = $2 order by audit_id desc limit 1',
    [tenant, key],
  );
  return rows[0] as { event: string; outcome: string; detail: AuditDetail };
}

describe('refused, fenced and conflicting observations keep what they presented', () => {
  it('a fenced fail of a superseded attempt keeps its error', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const [first] = await supersededPair(app, admin, newOperation('ev-fenced'));
    expect(await fail(app, first, { code: 'card_declined', detail: 'late' }, true)).toMatchObject({
      outcome: 'fenced',
      reason: 'superseded',
    });
    expect(await lastAudit(first.tenant, first.key)).toMatchObject({
      event: 'fail',
      outcome: 'fenced',
      detail: {
        reason: 'superseded',
        presented: {
          error: { code: 'card_declined', detail: 'late' },
          fingerprint: first.fingerprint,
          principal: first.principal,
        },
      },
    });
  });

  it('a conflicting success keeps its result, fingerprint and binding', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('ev-conflict'));
    const other = await fingerprintOf(admin, { amount: '5.00', to: 'elsewhere' });
    await complete(app, { ...ticket, fingerprint: other, binding_generation: 4 }, { payment_id: 'pay_other' });
    expect(await lastAudit(ticket.tenant, ticket.key)).toMatchObject({
      event: 'complete',
      outcome: 'conflict',
      detail: {
        conflict_on: ['request', 'binding_generation'],
        presented: { fingerprint: other, binding_generation: 4, result: { payment_id: 'pay_other' } },
      },
    });
  });

  it('an invalid token keeps what it presented; an oversized payload is kept as size and hash', async () => {
    const app = await db.app();
    const ticket = await acquire(app, newOperation('ev-token'));
    const forged: Ticket = { ...ticket, lease_token: '00000000-0000-4000-8000-000000000000' };
    const big = { blob: 'x'.repeat(20_000) };
    expect(await fail(app, forged, big, true)).toMatchObject({ outcome: 'fenced', reason: 'invalid_token' });
    const audit = await lastAudit(ticket.tenant, ticket.key);
    expect(audit).toMatchObject({ event: 'fail', outcome: 'fenced', detail: { reason: 'invalid_token' } });
    expect(audit.detail.presented?.error_truncated).toMatchObject({
      bytes: expect.any(Number),
      sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(JSON.stringify(audit.detail).length).toBeLessThan(10_000);
  });

  it('settle_app reads no audit row', async () => {
    const app = await db.app();
    expect(await sqlStateOf(app.query('select * from settle.audit_log limit 1'))).toBe('42501');
  });
});

describe('purged keys', () => {
  it('a straggler after a purge: fenced (nothing disclosed) and an audit row next to the tombstone', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('ev-purged');
    const ticket = await acquire(app, op);
    await complete(app, ticket, { receipt: 'done' });
    const maintenance = await db.connect();
    await asAdmin(maintenance);
    await maintenance.query(`select settle.purge(older_than => interval '0')`);
    expect(await storedOperation(admin, ticket.tenant, ticket.key)).toBeUndefined();

    expect(await complete(app, ticket, { receipt: 'again' })).toMatchObject({
      outcome: 'fenced',
      reason: 'invalid_token',
      status: null,
    });
    expect(await lastAudit(ticket.tenant, ticket.key)).toMatchObject({
      event: 'complete',
      outcome: 'fenced',
      detail: { reason: 'operation_purged', presented: { result: { receipt: 'again' } } },
    });
    expect(await heartbeat(app, ticket)).toMatchObject({ outcome: 'fenced', reason: 'invalid_token' });
    expect(await lastAudit(ticket.tenant, ticket.key)).toMatchObject({
      event: 'heartbeat',
      outcome: 'fenced',
      detail: { reason: 'operation_purged' },
    });
  });

  it('a late success racing the purge of its operation: queued behind the purge, then fenced and audited', async () => {
    const [one, two, observer] = await Promise.all([db.connect(), db.app(), db.connect()]);
    const app = await db.app();
    const ticket = await acquire(app, newOperation('ev-purge-race'));
    await complete(app, ticket, { receipt: 'first' });
    await asAdmin(one);
    const [purged, late] = await secondWaitsForFirst(
      { one, two, observer },
      (c) => c.query(`select settle.purge(older_than => interval '0') as n`),
      (c) => complete(c, ticket, { receipt: 'straggler' }),
    );
    expect(purged.rows[0]?.n).toBeGreaterThanOrEqual(1);
    expect(late).toMatchObject({ outcome: 'fenced', reason: 'invalid_token' });
    expect(await lastAudit(ticket.tenant, ticket.key)).toMatchObject({
      outcome: 'fenced',
      detail: { reason: 'operation_purged' },
    });
  });

  it('purge never deletes a dead letter (either reason) or an unknown operation', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const unknownLetter = newOperation('ev-keep-unknown', { max_attempts: 1 });
    await reportUnknown(app, await acquire(app, unknownLetter));
    const failedLetter = newOperation('ev-keep-failed', { max_attempts: 1 });
    await fail(app, await acquire(app, failedLetter), { code: 'down' }, true);
    const plainUnknown = newOperation('ev-keep-plain-unknown', { max_attempts: 3 });
    await reportUnknown(app, await acquire(app, plainUnknown));
    const lapsed = newOperation('ev-keep-lapsed', { max_attempts: 3 });
    await acquire(app, lapsed);
    await expireLease(admin, lapsed.tenant as string, lapsed.key as string);
    const maintenance = await db.connect();
    await asAdmin(maintenance);
    await maintenance.query(`select settle.purge(older_than => interval '0', batch_size => 100000)`);
    for (const op of [unknownLetter, failedLetter, plainUnknown, lapsed]) {
      expect(await storedOperation(admin, op.tenant as string, op.key as string), op.key as string).toBeDefined();
    }
  });
});
