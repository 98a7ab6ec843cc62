import { expect, it } from 'vitest';
import { newOperation } from '../engine/support/fixtures.js';
import { mustGetOperation, storedAttempts } from '../engine/support/inspect.js';
import { acquire, claim, complete, heartbeat, type Ticket } from '../engine/support/settle.js';
import { describeCitus, remoteCommandsOf, useCitus } from './support/cluster.js';

const citus = useCitus();

describeCitus('calls are delegated to the worker that holds the key', () => {
  it('claim, heartbeat, complete, a replaying claim and get each run as one call on that worker, and nowhere else', async () => {
    const app = await citus.coordinator('settle_citus_app');
    const admin = await citus.coordinator();
    const op = newOperation('delegated');
    const { node } = await citus.placementOf(op.key as string);
    let ticket: Ticket | undefined;
    const mustTicket = (): Ticket => {
      if (ticket === undefined) throw new Error('no ticket');
      return ticket;
    };
    const calls: [string, () => Promise<unknown>][] = [
      ['claim', async () => (ticket = await acquire(app, op))],
      ['heartbeat', () => heartbeat(app, mustTicket())],
      ['complete', () => complete(app, mustTicket(), { ok: 1 })],
      ['claim', () => claim(app, op)],
      [
        'get',
        () =>
          app.query(
            'select * from settle.get(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[], binding_generation => $6)',
            [op.tenant, op.key, JSON.stringify(op.request), op.principal, op.scopes, op.binding_generation],
          ),
      ],
    ];
    for (const [fn, call] of calls) {
      const { commands } = await remoteCommandsOf(app, call);
      expect(commands, fn).toHaveLength(1);
      // settle.claim is inlined into a call of its STRICT delegated entry settle._claim (distribute.sql step 4).
      expect(commands[0]?.command, fn).toMatch(
        new RegExp(`^SELECT .* FROM settle\\.${fn === 'claim' ? '_claim' : fn}\\(`),
      );
      expect(commands[0]?.node, fn).toBe(`settle_citus_app@${node}`);
    }
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({
      status: 'completed',
      result: { ok: 1 },
    });
  });

  it('the delegated call really ran on that worker: its rows are in the shard there and not on the other worker', async () => {
    const app = await citus.coordinator('settle_citus_app');
    const op = newOperation('on-worker');
    const ticket = await acquire(app, op);
    await complete(app, ticket, { where: 'worker' });
    const { worker, shardId } = await citus.placementOf(op.key as string);
    const holder = await citus.worker(worker);
    const other = await citus.worker(1 - worker);
    const q = (shard: number) => `select status from settle_private.operations_${shard} where tenant = $1 and key = $2`;
    expect((await holder.query(q(shardId), [op.tenant, op.key])).rows).toEqual([{ status: 'completed' }]);
    await expect(other.query(q(shardId), [op.tenant, op.key])).rejects.toMatchObject({ code: '42P01' });
  });

  it('inside BEGIN ... COMMIT (not delegated) the calls still work: the coordinator runs them as settle_owner, one statement per round trip', async () => {
    const app = await citus.coordinator('settle_citus_app');
    const admin = await citus.coordinator();
    const op = newOperation('in-transaction');
    const { node } = await citus.placementOf(op.key as string);
    await app.query('begin');
    const { value: result, commands } = await remoteCommandsOf(app, async () => {
      const ticket = await acquire(app, op);
      return complete(app, ticket, { same: 'transaction' });
    });
    await app.query('commit');
    expect(result).toMatchObject({ outcome: 'settled', status: 'completed' });
    expect(commands.length).toBeGreaterThan(2);
    expect(commands.every((c) => c.node === `settle_owner@${node}`)).toBe(true);
    expect(commands.some((c) => /FROM settle\.(_?claim|complete)\(/.test(c.command))).toBe(false);
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({
      status: 'completed',
      settled_attempt: 1,
    });
    expect(await storedAttempts(admin, op.tenant as string, op.key as string)).toHaveLength(1);
  });
});

describeCitus('the TypeScript client on the coordinator', () => {
  it('claim, complete and a replay through createSettleClient, as a settle_app login', async () => {
    const { createSettleClient } = await import('../../src/index.js');
    const admin = await citus.coordinator();
    const url = new URL(
      `postgresql://settle_citus_app@${admin.host}:${admin.port}/${admin.database ?? 'postgres'}`,
    ).toString();
    const client = createSettleClient({ connectionString: url, poolSize: 2 });
    try {
      const key = `ts-client-${Date.now()}`;
      const binding = { principal: 'svc-ts', scopes: ['payments:write'], generation: 1 };
      const claimed = await client.claim({ tenant: 'acme', key, request: { amount: '1.00' }, binding });
      expect(claimed.outcome).toBe('acquired');
      if (claimed.outcome !== 'acquired') return;
      expect(await client.complete(claimed.attempt, { charged: true })).toMatchObject({ outcome: 'settled' });
      expect(await client.claim({ tenant: 'acme', key, request: { amount: '1.00' }, binding })).toMatchObject({
        outcome: 'replay',
        result: { charged: true },
      });
      const { rows } = await admin.query<{ n: number }>(
        `select count(*)::int as n from settle.audit_log where tenant = 'acme' and key = $1`,
        [key],
      );
      expect(rows[0]?.n).toBe(2); // the claim and the complete, logged on the attempt row (a replay writes nothing)
    } finally {
      await client.end();
    }
  });
});
