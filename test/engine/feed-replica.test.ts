import { describe, expect, it } from 'vitest';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { registerConsumer } from './support/feed.js';

// The feed's consumers and their lanes are held for every writer, as the guards of the settlement
// tables are: under session_replication_role = replica (a logical-replication apply, a restore
// with triggers off) foreign keys do not fire, so the lanes of a dropped consumer went nowhere,
// trim_feed kept every event they pinned and the name could not be registered again (23505).
const db = useEngineDatabase('feed_replica');

async function lanesOf(name: string): Promise<number> {
  const su = await db.connect();
  const { rows } = await su.query<{ n: number }>(
    'select count(*)::int as n from settle_private.feed_lanes where consumer = $1',
    [name],
  );
  return rows[0]?.n ?? -1;
}

describe('feed consumers under session_replication_role = replica', () => {
  it('settle.drop_consumer takes the lanes with it; the name registers again', async () => {
    const su = await db.connect();
    const name = uniqueKey('replica-drop');
    await registerConsumer(su, name, { lanes: 4 });
    expect(await lanesOf(name)).toBe(4);
    await su.query('set session_replication_role = replica');
    expect((await su.query<{ d: boolean }>('select settle.drop_consumer($1) as d', [name])).rows[0]?.d).toBe(true);
    expect(await lanesOf(name)).toBe(0);
    await registerConsumer(su, name, { lanes: 2 });
    expect(await lanesOf(name)).toBe(2);
  });

  it("a DBA's DELETE of a consumer takes its lanes; a lane without its consumer is refused (23503)", async () => {
    const su = await db.connect();
    const name = uniqueKey('replica-dba');
    await registerConsumer(su, name, { lanes: 3 });
    await su.query('set session_replication_role = replica');
    await su.query('delete from settle_private.feed_consumers where name = $1', [name]);
    expect(await lanesOf(name)).toBe(0);
    expect(
      await sqlStateOf(
        su.query(
          `insert into settle_private.feed_lanes (consumer, lane, position_xid, position_id)
           values ($1, 0, '0'::xid8, 0)`,
          [uniqueKey('no-such-consumer')],
        ),
      ),
    ).toBe('23503');
  });
});
