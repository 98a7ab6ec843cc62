import { randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { createSettleClient, SettleConnectionError, type SettleClient } from '../../src/client/index.js';
import { distribute } from '../../src/db/distribute.js';
import { stopServer } from '../../src/dev-server/node-control.js';
import { citusUrl, describeCitus, uniqueTenant, useCitus } from './support/cluster.js';

// citusRouting when a node is missing (docs/scale-out.md, "Routing keys to their node"): the
// coordinator stopped while the workers answer (routed calls go on with the last shard map read);
// a worker stopped mid-run (its keys fail with a typed connection error, no other node can answer
// for them; the other worker's keys go on; after it is back each key settles once). Effects are
// counted by the test, rows by the database.
const citus = useCitus();
const APP = 'settle_citus_app';
const BINDING = { principal: 'routing-app', scopes: ['payments.write'], generation: 0 };

function nodeName(i: number): string {
  const u = new URL(citusUrl(i));
  return `${u.hostname}:${u.port}`;
}

function workerUrls(): Record<string, string> {
  const nodes: Record<string, string> = {};
  for (const i of citus.nodes) if (i !== 'coordinator') nodes[nodeName(i)] = citusUrl(i, APP);
  return nodes;
}

/**
 * The attempts each of `keys` opened (its operation's current attempt epoch: every attempt
 * 1..N), read through the coordinator as the superuser.
 */
async function attemptsPerKey(tenant: string, keys: readonly string[]): Promise<Map<string, number>> {
  const c = await citus.coordinator();
  const { rows } = await c.query<{ key: string; n: number }>(
    `select o.key, o.attempt as n from settle_private.operations o where o.tenant = $1 and o.key = any($2)`,
    [tenant, keys],
  );
  return new Map(rows.map((r) => [r.key, r.n]));
}

describeCitus('citusRouting when a node is missing', () => {
  it('the coordinator stopped: calls routed to the workers settle with the last shard map read; after it is back, each key settled once', async () => {
    const tenant = uniqueTenant('nocoord');
    const errors: Error[] = [];
    const client: SettleClient = createSettleClient({
      connectionString: citusUrl('coordinator', APP),
      poolSize: 2,
      citusRouting: { nodes: workerUrls(), refreshMs: 200, onError: (e) => errors.push(e) },
    });
    const effects = new Map<string, number>();
    const keys = Array.from({ length: 8 }, (_, i) => `nocoord-${i}-${randomBytes(3).toString('hex')}`);
    const run = (key: string) =>
      client.run({ tenant, key, request: { key }, binding: BINDING }, async () => {
        effects.set(key, (effects.get(key) ?? 0) + 1);
        return { done: key };
      });
    let stopped: Awaited<ReturnType<typeof stopServer>> | undefined;
    try {
      // The map is read while the coordinator answers.
      expect(await run(keys[0] as string)).toMatchObject({ outcome: 'completed' });
      stopped = await stopServer(citusUrl('coordinator'));
      // The map is stale by now (refreshMs 200): reading it again fails and is reported; the last map serves.
      await new Promise((resolve) => setTimeout(resolve, 300));
      for (const key of keys.slice(1))
        expect(await run(key), key).toMatchObject({ outcome: 'completed', result: { done: key } });
      // A settled key replays from its worker.
      expect(await run(keys[1] as string)).toMatchObject({ outcome: 'replay' });
      expect(errors.length, 'the failed map read reported').toBeGreaterThan(0);
    } finally {
      await stopped?.start();
      await client.end();
    }
    expect([...effects.values()]).toEqual(keys.map(() => 1));
    const attempts = await attemptsPerKey(tenant, keys);
    expect(keys.map((k) => attempts.get(k))).toEqual(keys.map(() => 1));
  });

  it("a worker stopped mid-run: its keys fail with SettleConnectionError, the other worker's keys settle; after it is back each key settles once", async () => {
    const tenant = uniqueTenant('noworker');
    const client = createSettleClient({
      connectionString: citusUrl('coordinator', APP),
      poolSize: 2,
      citusRouting: { nodes: workerUrls(), refreshMs: 60_000 },
    });
    const effects = new Map<string, number>();
    const keys = Array.from({ length: 12 }, (_, i) => `noworker-${i}-${randomBytes(3).toString('hex')}`);
    const onWorker = new Map<string, number>();
    for (const key of keys) onWorker.set(key, (await citus.placementOf(key)).worker);
    expect(new Set(onWorker.values()).size).toBe(2);
    const run = (key: string) =>
      client.run({ tenant, key, request: { key }, binding: BINDING }, async () => {
        effects.set(key, (effects.get(key) ?? 0) + 1);
        return { done: key };
      });
    const failed: string[] = [];
    let stopped: Awaited<ReturnType<typeof stopServer>> | undefined;
    try {
      for (const [i, key] of keys.entries()) {
        if (i === 4) stopped = await stopServer(citusUrl(0));
        if (stopped !== undefined && onWorker.get(key) === 0) {
          // Neither the worker (down) nor the coordinator (which would delegate to it) can answer.
          const error = await run(key).then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(error, key).toBeInstanceOf(SettleConnectionError);
          expect(effects.get(key) ?? 0, `${key}: no effect without a claim`).toBe(0);
          failed.push(key);
        } else {
          expect(await run(key), key).toMatchObject({ outcome: 'completed' });
        }
      }
    } finally {
      await stopped?.start();
    }
    expect(failed.length, 'some keys were on the stopped worker').toBeGreaterThan(0);
    try {
      // Back: the failed keys settle now, once; the settled ones replay.
      for (const key of keys) {
        const outcome = await run(key);
        expect(outcome.outcome, key).toBe(failed.includes(key) ? 'completed' : 'replay');
      }
    } finally {
      await client.end();
    }
    expect(keys.map((k) => effects.get(k))).toEqual(keys.map(() => 1));
    const attempts = await attemptsPerKey(tenant, keys);
    expect(keys.map((k) => attempts.get(k))).toEqual(keys.map(() => 1));
  });

  it('a shard moved during a run (citus_move_shard_placement): calls on its keys racing the move each settle once, on the map before and after', async () => {
    const tenant = uniqueTenant('moved');
    const su = await citus.coordinator();
    // Keys of one shard: the shard of the first key, and more keys until 8 share it.
    const first = `moved-0-${randomBytes(3).toString('hex')}`;
    const { shardId, worker: from } = await citus.placementOf(first);
    const keys = [first];
    for (let i = 1; keys.length < 8 && i < 5_000; i++) {
      const key = `moved-${i}-${randomBytes(3).toString('hex')}`;
      const { rows } = await su.query<{ id: string }>(
        `select get_shard_id_for_distribution_column('settle_private.operations', $1::text) as id`,
        [key],
      );
      if (Number(rows[0]?.id) === shardId) keys.push(key);
    }
    expect(keys).toHaveLength(8);
    const to = 1 - from;
    const [fromHost, fromPort] = nodeName(from).split(':') as [string, string];
    const [toHost, toPort] = nodeName(to).split(':') as [string, string];
    const client = createSettleClient({
      connectionString: citusUrl('coordinator', APP),
      poolSize: 4,
      citusRouting: { nodes: workerUrls(), refreshMs: 500 },
    });
    const effects = new Map<string, number>();
    const run = (key: string) =>
      client.run({ tenant, key, request: { key }, binding: BINDING, waitForMs: 60_000 }, async () => {
        effects.set(key, (effects.get(key) ?? 0) + 1);
        return { done: key };
      });
    try {
      // The map is read with the shard on `from`; half the keys settle before the move.
      for (const key of keys.slice(0, 4)) expect(await run(key)).toMatchObject({ outcome: 'completed' });
      const move = su.query(
        `select citus_move_shard_placement($1, $2, $3::int, $4, $5::int, shard_transfer_mode => 'block_writes')`,
        [shardId, fromHost, fromPort, toHost, toPort],
      );
      // The other half and replays of the first half race the move (routed by the old map).
      const racing = await Promise.all(keys.map((key) => run(key)));
      await move;
      expect(racing.map((o) => o.outcome)).toEqual([
        ...keys.slice(0, 4).map(() => 'replay'),
        ...keys.slice(4).map(() => 'completed'),
      ]);
      expect((await citus.placementOf(first)).worker, 'the shard moved').toBe(to);
      // After the move (the map read again), every key replays from its new node.
      await new Promise((resolve) => setTimeout(resolve, 600));
      for (const key of keys) expect(await run(key), key).toMatchObject({ outcome: 'replay', result: { done: key } });
    } finally {
      await client.end();
      // Back where it was, and distribute again as after every move (scale-out.md).
      if ((await citus.placementOf(first)).worker !== from) {
        await su.query(
          `select citus_move_shard_placement($1, $2, $3::int, $4, $5::int, shard_transfer_mode => 'block_writes')`,
          [shardId, toHost, toPort, fromHost, fromPort],
        );
      }
      await distribute(citusUrl('coordinator'));
    }
    expect(keys.map((k) => effects.get(k))).toEqual(keys.map(() => 1));
    const attempts = await attemptsPerKey(tenant, keys);
    expect(keys.map((k) => attempts.get(k))).toEqual(keys.map(() => 1));
  });
});
