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
    const { port } = await citus.placementOf(op.key as string);
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
      ['get', () => app.query('select * from settle.get($1, $2)', [op.tenant, op.key])],
    ];
    for (const [fn, call] of calls) {
      const { commands } = await remoteCommandsOf(app, call);
      expect(commands, fn).toHaveLength(1);
      expect(commands[0]?.command, fn).toMatch(new RegExp(`^SELECT .* FROM settle\\.${fn}\\(`));
      expect(commands[0]?.node, fn).toBe(`settle_citus_app@127.0.0.1:${port}`);
    }
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({ status: 'completed', result: { ok: 1 } });
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
    const { port } = await citus.placementOf(op.key as string);
    await app.query('begin');
    const { value: result, commands } = await remoteCommandsOf(app, async () => {
      const ticket = await acquire(app, op);
      return complete(app, ticket, { same: 'transaction' });
    });
    await app.query('commit');
    expect(result).toMatchObject({ outcome: 'settled', status: 'completed' });
    expect(commands.length).toBeGreaterThan(2);
    expect(commands.every((c) => c.node === `settle_owner@127.0.0.1:${port}`)).toBe(true);
    expect(commands.some((c) => /FROM settle\.(claim|complete)\(/.test(c.command))).toBe(false);
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({ status: 'completed', settled_attempt: 1 });
    expect(await storedAttempts(admin, op.tenant as string, op.key as string)).toHaveLength(1);
  });
});
