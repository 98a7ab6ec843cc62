import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation } from './support/inspect.js';
import { supersededPair } from './support/scenarios.js';
import { acquire, complete, heartbeat, reportUnknown } from './support/settle.js';

const db = useEngineDatabase('heartbeat');

describe('settle.heartbeat', () => {
  it('extends the lease of the current attempt, by the database clock', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('extend', { lease: '5 seconds' }));
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    const answer = await heartbeat(app, ticket, '1 hour');
    expect(answer).toMatchObject({ outcome: 'extended', reason: null, status: 'running' });
    const after = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(after.lease_expires_at?.getTime()).toBe(answer.lease_expires_at?.getTime());
    expect((after.lease_expires_at?.getTime() ?? 0) - (before.lease_expires_at?.getTime() ?? 0)).toBeGreaterThan(
      3_500_000,
    );
    expect(after.lease_token).toBe(ticket.lease_token);
  });

  const fencings = [
    {
      reason: 'superseded',
      async setup(app: import('pg').ClientBase, admin: import('pg').ClientBase) {
        const [first] = await supersededPair(app, admin, newOperation('hb-superseded'));
        return { ticket: first, status: 'running' };
      },
    },
    {
      reason: 'invalid_token',
      async setup(app: import('pg').ClientBase) {
        const ticket = await acquire(app, newOperation('hb-token'));
        return { ticket: { ...ticket, lease_token: randomUUID() }, status: null };
      },
    },
    {
      reason: 'settled',
      async setup(app: import('pg').ClientBase) {
        const ticket = await acquire(app, newOperation('hb-settled'));
        await complete(app, ticket, { ok: true });
        return { ticket, status: 'completed' };
      },
    },
    {
      reason: 'lease_released',
      async setup(app: import('pg').ClientBase) {
        const ticket = await acquire(app, newOperation('hb-released'));
        await reportUnknown(app, ticket);
        return { ticket, status: 'unknown' };
      },
    },
  ] as const;

  for (const { reason, setup } of fencings) {
    it(`fences (${reason}) and changes nothing`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const { ticket, status } = await setup(app, admin);
      const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
      const answer = await heartbeat(app, ticket, '1 day');
      expect(answer).toEqual({ outcome: 'fenced', reason, status, lease_expires_at: null });
      expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
      expect((await auditTrail(admin, ticket.tenant, ticket.key)).at(-1)).toMatchObject({
        event: 'heartbeat',
        outcome: 'fenced',
        detail: { reason },
      });
    });
  }

  it('a wrong attempt number with the current token is fenced too', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('hb-attempt'));
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(await heartbeat(app, { ...ticket, attempt: 2 })).toMatchObject({
      outcome: 'fenced',
      reason: 'invalid_token',
      status: null,
    });
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
  });
});
