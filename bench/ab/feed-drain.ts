// The settlement feed's drain rate: one consumer, one connection, read + ack in one transaction
// per batch (the exactly-once path of docs/feed.md), over a backlog of settlements written by
// the cycle (bench/sql/cycle-cpu-loop.sql, 3000 claim + complete per run). Reports events per
// second per batch size; compare with the cycle's throughput (bench/ab/migrations.sh).
//   npx tsx bench/ab/feed-drain.ts <connection url> [backlog runs, default 5] [batch sizes, default 100,500,1000]
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [url, runsArg = '5', sizesArg = '100,500,1000'] = process.argv.slice(2);
const loop = readFileSync(new URL('../sql/cycle-cpu-loop.sql', import.meta.url), 'utf8').replace(/^\\timing on$/m, '');
const client = new pg.Client({ connectionString: url });
await client.connect();
await client.query(`select * from settle.register_consumer(name => 'bench-drain', start_at => 'earliest')`);
for (let i = 0; i < Number(runsArg); i += 1) await client.query(loop);
const backlog = Number((await client.query(`select count(*) as n from settle_private.feed_events`)).rows[0].n);
for (const size of sizesArg.split(',').map(Number)) {
  await client.query(`select * from settle.reset_consumer(name => 'bench-drain', to_time => '-infinity')`);
  const started = process.hrtime.bigint();
  let events = 0;
  let batches = 0;
  for (;;) {
    await client.query('begin');
    const { rows } = await client.query(
      `select lane, lease_token, position_xid::text as position_xid, event_id from settle.read_feed(consumer => 'bench-drain', batch_size => $1)`,
      [size],
    );
    const last = rows[rows.length - 1];
    if (last !== undefined) {
      await client.query(
        `select settle.ack_feed(consumer => 'bench-drain', lane => $1, lease_token => $2, position_xid => $3::xid8, event_id => $4)`,
        [last.lane, last.lease_token, last.position_xid, last.event_id],
      );
    }
    await client.query('commit');
    if (last === undefined) break;
    events += rows.length;
    batches += 1;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(
    `batch_size=${size} backlog=${backlog} drained=${events} batches=${batches} seconds=${seconds.toFixed(2)} events_per_second=${(events / seconds).toFixed(0)}`,
  );
}
await client.end();
