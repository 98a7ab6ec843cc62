import type pg from 'pg';
import { beforeAll, expect, it } from 'vitest';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, complete, fail, type Ticket } from '../engine/support/settle.js';
import { describeCitus, uniqueTenant, useCitus } from './support/cluster.js';

// The settlement feed on Citus is per node (docs/scale-out.md, "The settlement
// feed on Citus"): the trigger writes each final outcome into the feed of the worker that holds
// the key, in the settling transaction; a consumer reads each worker's feed on that worker, with
// that node's horizon and positions. Here keys settle across both workers through the
// coordinator (delegated calls, and calls inside BEGIN ... COMMIT, which Citus does not
// delegate) while two processes per worker read, apply and acknowledge in one transaction, one
// of them rolling back every third batch (a consumer killed mid-batch): every final outcome must
// be applied exactly once, on the worker that holds its key.
const citus = useCitus();
const CONSUMER_LOGIN = 'settle_citus_consumer';

interface FeedRow {
  lane: number;
  lease_token: string;
  event_id: string;
  position_xid: string;
  tenant: string;
  key: string;
  status: string;
  status_before: string;
}

interface Applied {
  readonly worker: number;
  readonly eventId: string;
  readonly tenant: string;
  readonly key: string;
  readonly status: string;
}

describeCitus('the settlement feed on a coordinator and two workers', () => {
  beforeAll(async () => {
    const su = await citus.coordinator();
    await su.query(`do $$ begin
        if not exists (select 1 from pg_roles where rolname = '${CONSUMER_LOGIN}') then
          create role ${CONSUMER_LOGIN} login in role settle_consumer;
        end if;
      end $$`);
  });

  it('every final outcome settled across the workers is applied exactly once by consumers reading each worker', async () => {
    const tenant = uniqueTenant('feed');
    const consumer = `citus-ledger-${tenant}`;
    // Registered on every node (each node's feed has its own positions), as an admin login.
    for (const node of citus.nodes) {
      const admin = await citus.node(node, 'settle_citus_admin');
      const { rows } = await admin.query(
        `select * from settle.register_consumer(name => $1, tenants => $2, lanes => 2)`,
        [consumer, [tenant]],
      );
      expect(rows[0]).toMatchObject({ consumer, lanes: 2, created: true });
    }

    const expected = new Map<string, string>(); // key -> final status
    let producing = true;
    const applied: Applied[] = [];
    let rolledBack = 0;

    const consume = async (worker: number, id: number): Promise<void> => {
      const c = await citus.node(worker, CONSUMER_LOGIN);
      let batches = 0;
      let idle = 0;
      const deadline = Date.now() + 180_000;
      for (;;) {
        if (Date.now() > deadline) throw new Error(`consumer ${worker}/${id}: not drained after 180 s`);
        await c.query('begin');
        const { rows } = await c.query<FeedRow>(`select * from settle.read_feed(consumer => $1, batch_size => 5)`, [
          consumer,
        ]);
        if (rows.length === 0) {
          await c.query('commit');
          const seen = applied.filter((a) => a.worker === worker).length;
          const mine = [...expected.keys()].filter((k) => placements.get(k) === worker).length;
          if (!producing && seen >= mine) idle++;
          if (idle > 3) return;
          await new Promise((r) => setTimeout(r, 20));
          continue;
        }
        idle = 0;
        const last = rows[rows.length - 1] as FeedRow;
        const done = await c.query<{ done: boolean }>(
          `select settle.ack_feed(consumer => $1, lane => $2, lease_token => $3, position_xid => $4::xid8, event_id => $5) as done`,
          [consumer, last.lane, last.lease_token, last.position_xid, last.event_id],
        );
        expect(done.rows[0]?.done).toBe(true);
        batches++;
        if (id === 0 && batches % 3 === 0) {
          // Killed mid-batch: nothing applied, the position does not move; the batch comes again.
          await c.query('rollback');
          rolledBack++;
          continue;
        }
        await c.query('commit');
        for (const r of rows)
          applied.push({ worker, eventId: r.event_id, tenant: r.tenant, key: r.key, status: r.status });
      }
    };

    const placements = new Map<string, number>();
    const produce = async (id: number): Promise<void> => {
      const app = await citus.coordinator('settle_citus_app');
      for (let i = 0; i < 16; i++) {
        const args = newOperation(`feed-${id}-${i}`, { tenant, max_attempts: 1 });
        const inTransaction = i % 5 === 4;
        if (inTransaction) await app.query('begin');
        const ticket: Ticket = await acquire(app, args);
        placements.set(ticket.key, (await citus.placementOf(ticket.key)).worker);
        if (i % 4 === 3) {
          await fail(app, ticket, { code: 'declined' }, false);
          expected.set(ticket.key, 'failed');
        } else {
          await complete(app, ticket, { n: i });
          expected.set(ticket.key, 'completed');
        }
        if (inTransaction) await app.query('commit');
      }
    };

    const consumers = [0, 1].flatMap((w) => [consume(w, 0), consume(w, 1)]);
    await Promise.all([produce(0), produce(1)]);
    producing = false;
    await Promise.all(consumers);

    expect(new Set(placements.values()).size, 'the keys live on both workers').toBe(2);
    expect(rolledBack, 'some batches were rolled back and delivered again').toBeGreaterThan(0);
    // Exactly once: one applied event per key, with its final status, read on its worker.
    const byKey = new Map<string, Applied[]>();
    for (const a of applied) byKey.set(a.key, [...(byKey.get(a.key) ?? []), a]);
    expect([...byKey.keys()].sort()).toEqual([...expected.keys()].sort());
    for (const [key, status] of expected) {
      const events = byKey.get(key) ?? [];
      expect(
        events.map((e) => ({ tenant: e.tenant, status: e.status, worker: e.worker })),
        key,
      ).toEqual([{ tenant, status, worker: placements.get(key) }]);
    }
    // Delivery ids are unique across the nodes (each node's identity range starts at its group id * 2^48).
    expect(new Set(applied.map((a) => a.eventId)).size).toBe(applied.length);
    expect(new Set(applied.map((a) => BigInt(a.eventId) >> 48n)).size).toBe(2);
  });

  it("per-key order on the key's worker: a failure, its redrive and the late completion are two events, in order", async () => {
    const tenant = uniqueTenant('feedorder');
    const consumer = `citus-order-${tenant}`;
    const app = await citus.coordinator('settle_citus_app');
    const admin = await citus.coordinator('settle_citus_admin');
    const ticket = await acquire(app, newOperation('feed-order', { tenant, max_attempts: 1 }));
    const { worker } = await citus.placementOf(ticket.key);
    const onWorker = await citus.node(worker, 'settle_citus_admin');
    await onWorker.query(`select * from settle.register_consumer(name => $1, tenants => $2, start_at => 'earliest')`, [
      consumer,
      [tenant],
    ]);
    await fail(app, ticket, { code: 'timeout' }, true); // the last attempt: dead-lettered attempts_exhausted
    await admin.query(`select * from settle.redrive(tenant => $1, key => $2, reason => 'retry after the outage')`, [
      tenant,
      ticket.key,
    ]);
    const again = await acquire(app, { ...newOperation('x', { tenant }), key: ticket.key, max_attempts: 1 });
    await complete(app, again, { ok: true });

    const reader = await citus.node(worker, CONSUMER_LOGIN);
    const seen: FeedRow[] = [];
    const deadline = Date.now() + 60_000;
    while (seen.length < 2 && Date.now() < deadline) {
      const { rows } = await reader.query<FeedRow>(`select * from settle.read_feed(consumer => $1, batch_size => 10)`, [
        consumer,
      ]);
      const last = rows[rows.length - 1];
      if (last === undefined) continue;
      await reader.query(`select settle.ack_feed($1, $2, $3, $4::xid8, $5)`, [
        consumer,
        last.lane,
        last.lease_token,
        last.position_xid,
        last.event_id,
      ]);
      seen.push(...rows);
    }
    expect(seen.map((r) => [r.key, r.status, r.status_before])).toEqual([
      [ticket.key, 'failed', 'running'],
      [ticket.key, 'completed', 'running'],
    ]);
    // The other worker's feed has nothing of this tenant.
    const other = await citus.node(1 - worker, 'settle_citus_admin');
    await other.query(`select * from settle.register_consumer(name => $1, tenants => $2, start_at => 'earliest')`, [
      consumer,
      [tenant],
    ]);
    const otherReader: pg.Client = await citus.node(1 - worker, CONSUMER_LOGIN);
    expect((await otherReader.query(`select * from settle.read_feed(consumer => $1)`, [consumer])).rows).toEqual([]);
  });
});
