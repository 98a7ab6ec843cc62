import { randomBytes } from 'node:crypto';
import { createPool } from 'slonik';
import { expect, it } from 'vitest';
import { createSettleClient } from '../../src/client/index.js';
import { createCitusRouter } from '../../src/client/citus-routing.js';
import { citusUrl, describeCitus, uniqueTenant, useCitus } from './support/cluster.js';

const citus = useCitus();
const APP = 'settle_citus_app';

/** Each worker's node name as pg_dist_node has it ("host:port") -> its URL as the application login. */
async function workerUrls(): Promise<Record<string, string>> {
  const nodes: Record<string, string> = {};
  for (const i of citus.nodes) {
    if (i === 'coordinator') continue;
    const u = new URL(citusUrl(i));
    nodes[`${u.hostname}:${u.port}`] = citusUrl(i, APP);
  }
  return nodes;
}

/**
 * Per node (coordinator, then the workers): the calls of the typed client's own claim statement
 * (its text names make_interval(secs => ...); a delegated call reaches a worker as settle._claim
 * with literals instead) that node ran as a top-level statement, from pg_stat_statements.
 */
async function clientClaimsPerNode(): Promise<number[]> {
  const counts: number[] = [];
  for (const n of citus.nodes) {
    const c = await citus.node(n);
    const { rows } = await c.query<{ n: string }>(
      `select coalesce(sum(calls), 0) as n from pg_stat_statements
        where query ~ 'from settle\\.claim\\(' and query ~ 'make_interval\\(secs =>'`,
    );
    counts.push(Number(rows[0]?.n));
  }
  return counts;
}

const BINDING = { principal: 'routing-app', scopes: ['payments.write'], generation: 0 };

describeCitus('citusRouting: the typed client sends each keyed call to the node that holds its key', () => {
  it("the client's shard map puts 400 keys (ASCII and multi-byte, 1-160 bytes) on the node Citus puts them", async () => {
    const pool = await createPool(citusUrl('coordinator', APP));
    const router = createCitusRouter(
      { nodes: {} },
      async () => pool,
      () => Promise.reject(new Error('no node pools here')),
    );
    try {
      const alphabet = ['a', 'Z', '0', '-', 'é', 'ß', '€', '中', '😀'];
      const keys = Array.from({ length: 400 }, (_, i) => {
        const length = 1 + (i % 40);
        return i % 2 === 0
          ? randomBytes(length).toString('base64url').slice(0, length)
          : Array.from({ length }, (_, j) => alphabet[(i * 7 + j * 3) % alphabet.length]).join('');
      });
      const admin = await citus.coordinator();
      const { rows } = await admin.query<{ key: string; node: string }>(
        `select k as key, p.nodename || ':' || p.nodeport as node
           from unnest($1::text[]) k
           join pg_dist_shard_placement p on p.shardid = get_shard_id_for_distribution_column('settle_private.operations', k)`,
        [keys],
      );
      expect(rows).toHaveLength(keys.length);
      for (const r of rows) expect(await router.nodeFor(r.key), r.key).toBe(r.node);
      // Keys land on both workers.
      expect(new Set(rows.map((r) => r.node)).size).toBe(citus.nodes.length - 1);
    } finally {
      await router.end();
      await pool.end();
    }
  });

  it("run() through a routed client: each claim runs on its key's node, none through the coordinator; a node not listed or not reachable goes through it", async () => {
    const admin = await citus.coordinator();
    await admin.query('create extension if not exists pg_stat_statements');
    const tenant = uniqueTenant('routing');
    const nodes = await workerUrls();
    const errors: Error[] = [];
    const client = createSettleClient({
      connectionString: citusUrl('coordinator', APP),
      citusRouting: { nodes, onError: (e) => errors.push(e) },
    });
    const keys = Array.from({ length: 12 }, (_, i) => `routing-${i}-${randomBytes(3).toString('hex')}`);
    const expected = [0, ...citus.nodes.filter((n) => n !== 'coordinator').map(() => 0)];
    for (const key of keys) expected[1 + (await citus.placementOf(key)).worker]! += 1;
    const before = await clientClaimsPerNode();
    try {
      for (const key of keys) {
        const outcome = await client.run({ tenant, key, request: { key }, binding: BINDING }, async () => ({
          done: key,
        }));
        expect(outcome, key).toMatchObject({ outcome: 'completed', result: { done: key } });
      }
    } finally {
      await client.end();
    }
    expect(errors).toEqual([]);
    const after = await clientClaimsPerNode();
    expect(
      after.map((n, i) => n - (before[i] ?? 0)),
      'claims run per node: coordinator, workers',
    ).toEqual(expected);

    // Worker 1 not listed, worker 0 listed at a port nothing listens on: every call still
    // settles (through the coordinator, which delegates it), and the unreachable node is reported.
    const [first] = Object.keys(nodes);
    const fallback = createSettleClient({
      connectionString: citusUrl('coordinator', APP),
      citusRouting: {
        nodes: { [first as string]: 'postgresql://settle_citus_app@127.0.0.1:1/postgres' },
        onError: (e) => errors.push(e),
      },
    });
    const before2 = await clientClaimsPerNode();
    try {
      for (const key of keys) {
        const outcome = await fallback.run(
          { tenant, key: `${key}-fallback`, request: { key }, binding: BINDING },
          async () => ({ done: key }),
        );
        expect(outcome, key).toMatchObject({ outcome: 'completed', result: { done: key } });
        // A settled key replays through the routed path as well.
        expect(
          await fallback.get({ tenant, key: `${key}-fallback`, request: { key }, binding: BINDING }),
        ).toMatchObject({ status: 'completed' });
      }
    } finally {
      await fallback.end();
    }
    const after2 = await clientClaimsPerNode();
    expect(
      after2.map((n, i) => n - (before2[i] ?? 0)),
      'every claim through the coordinator',
    ).toEqual([keys.length, ...expected.slice(1).map(() => 0)]);
    expect(errors.length, 'the unreachable node reported').toBeGreaterThan(0);
    expect(errors.length, 'and not retried at every call').toBeLessThan(keys.length);
  });

  it('routed and delegated calls racing on the same keys: each effect runs once and every caller gets its result', async () => {
    const tenant = uniqueTenant('routing-race');
    const routedClient = createSettleClient({
      connectionString: citusUrl('coordinator', APP),
      poolSize: 4,
      citusRouting: { nodes: await workerUrls() },
    });
    const viaCoordinator = createSettleClient({ connectionString: citusUrl('coordinator', APP), poolSize: 4 });
    const keys = Array.from({ length: 6 }, (_, i) => `race-${i}-${randomBytes(3).toString('hex')}`);
    const effects = new Map<string, number>();
    try {
      // Per key 4 racers through each client: the routed ones run the call on the key's worker
      // itself, the others reach it delegated by the coordinator; one row lock decides.
      const outcomes = await Promise.all(
        keys.flatMap((key) =>
          Array.from({ length: 8 }, (_, i) =>
            (i % 2 === 0 ? routedClient : viaCoordinator)
              .run({ tenant, key, request: { key }, binding: BINDING, waitForMs: 60_000 }, async () => {
                effects.set(key, (effects.get(key) ?? 0) + 1);
                return { effect: key, by: i };
              })
              .then((outcome) => ({ key, outcome })),
          ),
        ),
      );
      for (const key of keys) {
        expect(effects.get(key), key).toBe(1);
        const mine = outcomes.filter((o) => o.key === key).map((o) => o.outcome);
        // One caller ran the effect; the seven others got its stored result as a replay.
        expect(mine.map((o) => o.outcome).sort(), key).toEqual([
          'completed',
          ...Array.from({ length: 7 }, () => 'replay'),
        ]);
        const results = mine.map((o) => ('result' in o ? JSON.stringify(o.result) : null));
        expect(new Set(results).size, key).toBe(1);
        expect(mine[0], key).toMatchObject({ result: { effect: key } });
      }
    } finally {
      await Promise.all([routedClient.end(), viaCoordinator.end()]);
    }
  });
});
