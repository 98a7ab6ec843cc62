/**
 * What a scrape of settle.metrics and settle.feed_consumers costs when a feed consumer falls
 * behind, as a ratio to the same scrape with an empty feed (docs/feed.md, "Cost").
 *
 *   npx tsx bench/feed-lag.ts [--events 50000] [--lanes 64] [--runs 9]
 *
 * Starts a throwaway PostgreSQL (or uses DATABASE_URL's server), migrates, registers one consumer
 * with `--lanes` lanes at `earliest`, times both scrapes (median of `--runs`, EXPLAIN ANALYZE's
 * execution time), then writes `--events` unread events and times them again. The lag is read
 * per key slot through an index (at most 1,000 entries per slot), so the ratio stays bounded
 * whatever the backlog; the retained-events gauge still counts up to 1,000,000.
 */
import pg from 'pg';
import { withDatabase } from '../src/db/database-url.js';
import { migrate } from '../src/db/migrate.js';
import { provisionPostgres } from '../src/dev-server/provision.js';

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const value = i < 0 ? undefined : Number(process.argv[i + 1]);
  return value === undefined || !Number.isFinite(value) ? fallback : value;
}

const events = flag('events', 50_000);
const lanes = flag('lanes', 64);
const runs = flag('runs', 9);
const log = (msg: string): void =>
  void process.stderr.write(`[feed-lag] ${new Date().toISOString().slice(11, 19)} ${msg}\n`);

async function median(client: pg.Client, query: string): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`explain (analyze) ${query}`);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    times.push(Number(/Execution Time: ([\d.]+) ms/.exec(plan)?.[1] ?? NaN));
  }
  return [...times].sort((a, b) => a - b)[Math.floor(runs / 2)] as number;
}

async function main(): Promise<void> {
  const server = await provisionPostgres({ log });
  const url = withDatabase(server.adminUrl, 'feed_lag_bench');
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  await admin.query('drop database if exists feed_lag_bench');
  await admin.query('create database feed_lag_bench');
  await admin.end();
  try {
    await migrate(url);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(
        `select * from settle.register_consumer(name => 'bench', lanes => $1, start_at => 'earliest')`,
        [lanes],
      );
      const scrapes = ['select * from settle.metrics', 'select * from settle.feed_consumers'];
      const empty: number[] = [];
      for (const q of scrapes) empty.push(await median(client, q));
      await client.query(
        `insert into settle_private.feed_events (tenant, key, position_xid, xid, lane_hash, status, status_before, attempt,
                                                 result, redrive_count, occurred_at)
         select 'acme', 'k' || i, pg_current_xact_id(), pg_current_xact_id(), hashtext('k' || i), 'completed', 'running', 1,
                '{"amount": "10.00"}'::jsonb, 0, now()
           from generate_series(1, $1::int) i`,
        [events],
      );
      await client.query('vacuum (analyze) settle_private.feed_events');
      const backlog: number[] = [];
      for (const q of scrapes) backlog.push(await median(client, q));
      const version = (await client.query<{ v: string }>('select version() as v')).rows[0]?.v ?? '';
      process.stdout.write(
        [
          `# feed scrapes with ${events.toLocaleString('en')} unread events, one ${lanes}-lane consumer`,
          '',
          `Command: npx tsx bench/feed-lag.ts --events ${events} --lanes ${lanes} --runs ${runs}`,
          `Server: ${version}`,
          '',
          '| scrape | empty feed (ms) | backlog (ms) | ratio |',
          '|---|---|---|---|',
          ...scrapes.map(
            (q, i) =>
              `| \`${q}\` | ${empty[i]} | ${backlog[i]} | ${((backlog[i] as number) / (empty[i] as number)).toFixed(1)} |`,
          ),
          '',
        ].join('\n'),
      );
    } finally {
      await client.end();
    }
  } finally {
    await server.stop();
  }
}

await main();
