import { expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { newOperation } from '../engine/support/fixtures.js';
import { storedAttempts, storedOperation } from '../engine/support/inspect.js';
import { acquire, complete } from '../engine/support/settle.js';
import { describeCitus, remoteCommandsOf, useCitus } from './support/cluster.js';

// Maintenance through the coordinator, as a settle_admin login: a lock-free candidate scan over
// every shard, then one delegated, locked and re-checked step per key on the worker holding it.
const citus = useCitus();

describeCitus('maintenance on a coordinator and two workers', () => {
  it('expire_leases ends lapsed leases on both workers; each key is handled on its worker', async () => {
    const [app, admin, ops] = await Promise.all([
      citus.coordinator('settle_citus_app'),
      citus.coordinator(),
      citus.coordinator('settle_citus_admin'),
    ]);
    const tickets = [];
    const nodes = new Set<string>();
    // Keys until both workers hold some (hashing decides where a key lives).
    for (let i = 0; tickets.length < 4 || nodes.size < 2; i++) {
      if (i > 40) throw new Error('40 random keys all hashed to one worker');
      const t = await acquire(app, newOperation(`sweep-${i}`));
      expect(await expireLease(admin, t.tenant, t.key)).toBe(true);
      nodes.add((await citus.placementOf(t.key)).node);
      tickets.push(t);
    }
    expect(nodes.size, 'the keys live on both workers').toBe(2);
    const { value, commands } = await remoteCommandsOf(
      ops,
      async () => (await ops.query('select * from settle.expire_leases(100000)')).rows[0],
    );
    expect(Number(value.expired)).toBeGreaterThanOrEqual(tickets.length);
    for (const t of tickets) {
      expect(await storedOperation(admin, t.tenant, t.key)).toMatchObject({ status: 'pending', lease_token: null });
      expect((await storedAttempts(admin, t.tenant, t.key))[0]).toMatchObject({ end_reason: 'lease_expired' });
      const node = (await citus.placementOf(t.key)).node;
      const sent = commands.filter((c) => c.command.includes('_expire_key') && c.command.includes(t.key));
      expect(sent.map((c) => c.node)).toEqual([`settle_owner@${node}`]);
    }
    const { rows } = await admin.query(
      `select event, outcome from settle.audit_log where tenant = $1 and key = $2 and event = 'expire'`,
      [tickets[0]?.tenant, tickets[0]?.key],
    );
    expect(rows).toEqual([{ event: 'expire', outcome: 'expired' }]);
  });

  it('purge deletes on the workers (the delete guard admits the delegated step) and leaves a tombstone', async () => {
    const [app, admin, ops] = await Promise.all([
      citus.coordinator('settle_citus_app'),
      citus.coordinator(),
      citus.coordinator('settle_citus_admin'),
    ]);
    const done = [];
    for (let i = 0; i < 4; i++) {
      const t = await acquire(app, newOperation(`purge-${i}`));
      await complete(app, t, { i });
      done.push(t);
    }
    let purged = 0;
    for (;;) {
      const n = Number((await ops.query<{ n: number }>(`select settle.purge(interval '0', 1000) as n`)).rows[0]?.n);
      purged += n;
      if (n < 1000) break;
    }
    expect(purged).toBeGreaterThanOrEqual(done.length);
    for (const t of done) {
      expect(await storedOperation(admin, t.tenant, t.key)).toBeUndefined();
      expect(await storedAttempts(admin, t.tenant, t.key)).toEqual([]);
      const { rows } = await admin.query(
        `select event, outcome from settle_private.audit_log where tenant = $1 and key = $2`,
        [t.tenant, t.key],
      );
      expect(rows).toEqual([{ event: 'purge', outcome: 'purged' }]);
    }
  });

  it('a settle_admin login reads every view through the coordinator (the shard queries run as the caller)', async () => {
    for (const role of ['settle_citus_admin', 'settle_citus_readonly'] as const) {
      const reader = await citus.coordinator(role);
      for (const view of ['operations', 'attempts', 'audit_log', 'dead_letters', 'settlements', 'stats']) {
        await expect(reader.query(`select * from settle.${view} limit 5`), `${role} ${view}`).resolves.toBeDefined();
      }
      // ... but cannot write, and never sees a lease token.
      await expect(reader.query(`select lease_token from settle_private.operations limit 1`)).rejects.toMatchObject({
        code: '42501',
      });
      await expect(
        reader.query(`update settle_private.operations set max_attempts = max_attempts where false`),
      ).rejects.toMatchObject({ code: '42501' });
    }
  });
});
