import { describe, expect, it } from 'vitest';
import { asAdmin, useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, storedAttempts, storedOperation } from './support/inspect.js';
import { acquire, claim, complete } from './support/settle.js';

// settle.purge deletes every old terminal row of the database: it has a file (database) to itself.
const db = useEngineDatabase('purge');

describe('settle.purge', () => {
  it('deletes old terminal operations with their attempts and audit rows, leaves a tombstone; the key can be claimed again', async () => {
    const [app, maintenance, admin] = await Promise.all([db.app(), db.connect(), db.connect()]);
    const done = newOperation('purge-done');
    await complete(app, await acquire(app, done), { receipt: 'old' });
    const live = newOperation('purge-live');
    await acquire(app, live);
    const tenant = done.tenant as string;

    await asAdmin(maintenance);
    const { rows } = await maintenance.query<{ n: number }>(
      `select settle.purge(older_than => interval '0 seconds') as n`,
    );
    expect(rows[0]?.n).toBe(1);

    expect(await storedOperation(admin, tenant, done.key as string)).toBeUndefined();
    expect(await storedAttempts(admin, tenant, done.key as string)).toEqual([]);
    expect(await auditTrail(admin, tenant, done.key as string)).toEqual([
      expect.objectContaining({
        event: 'purge',
        outcome: 'purged',
        status_before: 'completed',
        status_after: null,
        detail: expect.objectContaining({ attempts: 1, audit_rows: 2 }),
      }),
    ]);
    expect(await storedOperation(admin, tenant, live.key as string)).toMatchObject({ status: 'running' });

    const again = await claim(app, { ...done, request: { something: 'new' } });
    expect(again).toMatchObject({ outcome: 'acquired', attempt: 1, result: null });
  });

  it('keeps terminal rows younger than older_than', async () => {
    const [app, maintenance, admin] = await Promise.all([db.app(), db.connect(), db.connect()]);
    const done = newOperation('purge-young');
    await complete(app, await acquire(app, done), { receipt: 'young' });
    await asAdmin(maintenance);
    const { rows } = await maintenance.query<{ n: number }>(
      `select settle.purge(older_than => interval '1 hour') as n`,
    );
    expect(rows[0]?.n).toBe(0);
    expect(await storedOperation(admin, done.tenant as string, done.key as string)).toMatchObject({
      status: 'completed',
    });
  });
});
