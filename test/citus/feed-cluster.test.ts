import { expect, it } from 'vitest';
import { citusFeedLag } from '../../src/client/citus-feed.js';
import { createSettleClient } from '../../src/client/index.js';
import type { FeedEvent } from '../../src/client/types.js';
import { stopServer } from '../../src/dev-server/node-control.js';
import { sql } from 'slonik';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, complete, fail } from '../engine/support/settle.js';
import { runCli } from '../support/cli.js';
import { citusUrl, describeCitus, uniqueTenant, useCitus } from './support/cluster.js';

// The typed client's consumer on a Citus cluster (src/client/citus-feed.ts): given citusRouting,
// consume() reads every node's feed on that node. Keys settle across both workers (some failed,
// redriven and completed: two events of one key, in order); the consumer applies each batch to a
// ledger on the batch's node in the batch's transaction, and worker 0 is stopped and started
// again while a batch of its feed is applied. Every event must be applied exactly once, on the
// node of its key, in per-key order; `pg-settle stats` shows each node's lag before and after.
const citus = useCitus();
const CONSUMER = 'settle_citus_consumer';
const LEDGER = 'feed_cluster_ledger';

function nodeName(i: number): string {
  const u = new URL(citusUrl(i));
  return `${u.hostname}:${u.port}`;
}

interface StatsJson {
  readonly feedNodes: readonly {
    node: string;
    consumer: string | null;
    lagEvents: number | null;
    error: string | null;
  }[];
}

describeCitus("the typed client consumes every node's feed of a Citus cluster", () => {
  it("each event once across the cluster, in per-key order, through a worker restart mid-batch; stats shows each node's lag", async () => {
    const su = await citus.coordinator();
    await su.query(`do $$ begin
        if not exists (select 1 from pg_roles where rolname = '${CONSUMER}') then
          create role ${CONSUMER} login in role settle_consumer;
        end if;
      end $$`);
    const workers = citus.nodes.filter((n): n is number => n !== 'coordinator');
    for (const w of workers) {
      // A plain table on each worker: the consumer's effect, written in the batch's transaction.
      const c = await citus.worker(w);
      await c.query(
        `create table if not exists ${LEDGER} (consumer text, node text, event_id bigint, key text, status text, applied_at timestamptz default clock_timestamp())`,
      );
      await c.query(`grant select, insert on ${LEDGER} to ${CONSUMER}`);
    }
    const tenant = uniqueTenant('cfeed');
    const consumer = `cluster-${tenant}`;
    for (const w of workers) {
      const admin = await citus.node(w, 'settle_citus_admin');
      await admin.query(
        `select * from settle.register_consumer(name => $1, tenants => $2, lanes => 2, start_at => 'earliest')`,
        [consumer, [tenant]],
      );
    }

    // Settle keys through the coordinator: every 4th fails for good, is redriven and completes.
    const app = await citus.coordinator('settle_citus_app');
    const admin = await citus.coordinator('settle_citus_admin');
    const expected = new Map<string, string[]>(); // key -> statuses in order
    const placement = new Map<string, number>();
    for (let i = 0; i < 24; i++) {
      const op = newOperation(`cfeed-${i}`, { tenant, max_attempts: 1 });
      const ticket = await acquire(app, op);
      placement.set(ticket.key, (await citus.placementOf(ticket.key)).worker);
      if (i % 4 === 3) {
        await fail(app, ticket, { code: 'declined' }, true);
        await admin.query(`select * from settle.redrive(tenant => $1, key => $2, reason => 'test')`, [
          tenant,
          ticket.key,
        ]);
        const again = await acquire(app, { ...op, max_attempts: 1 });
        await complete(app, again, { n: i });
        expected.set(ticket.key, ['failed', 'completed']);
      } else {
        await complete(app, ticket, { n: i });
        expected.set(ticket.key, ['completed']);
      }
    }
    const total = [...expected.values()].reduce((n, s) => n + s.length, 0);
    expect(new Set(placement.values()).size, 'keys on both workers').toBe(2);

    // Before consuming: each worker's lag is its share of the events.
    const stats = async (): Promise<StatsJson> => {
      const run = await runCli(['stats', '--json'], { databaseUrl: citusUrl('coordinator'), timeoutMs: 120_000 });
      expect(run.code, `${run.stderr}${run.stdout}`).toBe(0);
      return JSON.parse(run.stdout) as StatsJson;
    };
    const before = await stats();
    for (const w of workers) {
      const share = [...expected].filter(([key]) => placement.get(key) === w).reduce((n, [, s]) => n + s.length, 0);
      expect(
        before.feedNodes.find((r) => r.node === nodeName(w) && r.consumer === consumer)?.lagEvents,
        `lag on worker ${w}`,
      ).toBe(share);
    }

    const nodes: Record<string, string> = {};
    for (const w of workers) nodes[nodeName(w)] = citusUrl(w, CONSUMER);
    const client = createSettleClient({
      connectionString: citusUrl('coordinator', CONSUMER),
      poolSize: 2,
      citusRouting: { nodes },
    });
    const stop = new AbortController();
    const errors: Error[] = [];
    let restarted: Promise<void> | undefined;
    const restartNode = nodeName(0);
    const consuming = client.consume(
      consumer,
      async (events: readonly FeedEvent[], context) => {
        const connection = context.connection;
        if (connection === null || context.node === undefined) throw new Error('transaction mode on a node expected');
        for (const e of events) {
          await connection.query(sql.unsafe`insert into ${sql.identifier([LEDGER])} (consumer, node, event_id, key, status)
            values (${consumer}, ${context.node}, ${String(e.eventId)}, ${e.key}, ${e.status})`);
        }
        if (context.node === restartNode && restarted === undefined) {
          // Worker 0 goes away with this batch applied but not acknowledged, and comes back.
          restarted = (async () => {
            const stopped = await stopServer(citusUrl(0));
            await stopped.start();
          })();
          await restarted;
        }
      },
      { batchSize: 3, signal: stop.signal, errorBackoffMs: 100, maxIdleMs: 200, onError: (e) => errors.push(e) },
    );

    const applied = async (): Promise<{ node: string; event_id: string; key: string; status: string }[]> => {
      const rows = [];
      for (const w of workers) {
        const c = await citus.worker(w);
        rows.push(
          ...(
            await c.query(
              `select node, event_id::text, key, status from ${LEDGER} where consumer = $1 order by applied_at`,
              [consumer],
            )
          ).rows,
        );
        await c.end();
      }
      return rows;
    };
    const deadline = Date.now() + 180_000;
    for (;;) {
      const rows = await applied().catch(() => []);
      if (rows.length >= total && restarted !== undefined) break;
      if (Date.now() > deadline)
        throw new Error(
          `only ${rows.length} of ${total} events applied after 180 s; errors: ${errors.map((e) => e.message).join('; ')}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await restarted;
    stop.abort();
    const summary = await consuming;
    await client.end();

    expect(errors.length, 'the restart failed the batch in flight at least once').toBeGreaterThan(0);
    const rows = await applied();
    // Exactly once across the cluster: each event id once, on its key's node, statuses in order.
    expect(rows).toHaveLength(total);
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(total);
    for (const [key, statuses] of expected) {
      const mine = rows.filter((r) => r.key === key);
      expect(
        mine.map((r) => r.status),
        key,
      ).toEqual(statuses);
      expect(new Set(mine.map((r) => r.node)), key).toEqual(new Set([nodeName(placement.get(key) as number)]));
    }
    expect(summary.events).toBe(total);

    // After consuming: no lag on any node.
    const after = await stats();
    for (const w of workers) {
      expect(
        after.feedNodes.find((r) => r.node === nodeName(w) && r.consumer === consumer)?.lagEvents,
        `lag on worker ${w}`,
      ).toBe(0);
    }
    expect(after.feedNodes.every((r) => r.error === null)).toBe(true);
    // The same through the library function, as the consumer login.
    const { createPool } = await import('slonik');
    const pool = await createPool(citusUrl('coordinator'));
    try {
      const lag = await citusFeedLag(pool);
      expect(lag.filter((r) => r.consumer === consumer).map((r) => r.lagEvents)).toEqual([0, 0]);
    } finally {
      await pool.end();
    }
  });
});
