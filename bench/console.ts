/**
 * What the console's reads cost the server as the data grows (the goal: the overview renders
 * within 1 s of server time at a million operations, and no read grows with the last hour's
 * traffic or the feed's backlog): a benchmark, not a timed test.
 *
 *   npx tsx bench/console.ts [--rows 1000000] [--recent 200000] [--steps 4] [--runs 15]
 *
 * Starts a throwaway PostgreSQL (or uses DATABASE_URL's server), makes two databases: one empty
 * (the baseline of the same run) and one with `--rows` operations from bench/lib/scale-rows.ts
 * (pending: a retry backlog, the worst case for the waiting counts, which share
 * operations_needing_attention_idx with it), the states the overview shows (unknown operations,
 * dead letters of both reasons) and a feed consumer `ledger` (4 lanes) that never consumes.
 * Then, in `--steps` steps, it settles `--recent` operations through settle.claim_many and
 * settle.complete_many (1,000 a transaction), spread over the last hour: each writes a feed event
 * the consumer has not acknowledged, so the last hour's traffic and the feed's backlog grow
 * together. After each step it starts the console in this process as the superuser, signs in,
 * and reads the overview and /live.json `--runs` times after two warm-up requests (the server's
 * own time, from Server-Timing), and settle.metrics 7 times (round trip). Prints one row per step,
 * the growth from the first step to the last, each read's own execution time at the last step
 * (EXPLAIN ANALYZE), and PASS/FAIL against 1,000 ms for the slowest overview.
 */
import pg from 'pg';
import { OVERVIEW_QUERIES } from '../src/console/overview-data.js';
import { startConsole } from '../src/console/server.js';
import { migrate } from '../src/db/migrate.js';
import { withDatabase } from '../src/db/database-url.js';
import { provisionPostgres } from '../src/dev-server/provision.js';
import { generateScaleRows } from './lib/scale-rows.js';

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const value = i < 0 ? undefined : Number(process.argv[i + 1]);
  return value === undefined || !Number.isFinite(value) ? fallback : value;
}

const rows = flag('rows', 1_000_000);
const recent = flag('recent', 200_000);
const steps = Math.max(1, flag('steps', 4));
const runs = flag('runs', 15);
const TARGET_MS = 1000;
const BATCH = 1000;
const log = (msg: string): void =>
  void process.stderr.write(`[console-bench] ${new Date().toISOString().slice(11, 19)} ${msg}\n`);

// The states the overview shows besides the traffic, through the API (as superuser).
const STUCK_WORK = `
do $$
declare
  c record;
begin
  for i in 1..500 loop
    select * into c from settle.claim(tenant => 'recent', key => 'unknown-' || i, request => '{}', principal => 'p', scopes => '{}',
                                      binding_generation => 1, max_attempts => 1);
    perform settle.report_unknown(tenant => 'recent', key => 'unknown-' || i, attempt => c.attempt, lease_token => c.lease_token,
                                  fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1);
  end loop;
  for i in 1..300 loop
    select * into c from settle.claim(tenant => 'recent', key => 'dead-' || i, request => '{}', principal => 'p', scopes => '{}',
                                      binding_generation => 1, max_attempts => 1);
    perform settle.fail(tenant => 'recent', key => 'dead-' || i, attempt => c.attempt, lease_token => c.lease_token,
                        fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1,
                        error => jsonb_build_object('code', (array['declined', 'timeout', 'invalid_account'])[1 + i % 3]),
                        retryable => true);
  end loop;
end $$;
`;

// One transaction: 1,000 new keys claimed and completed (each completion writes a feed event).
const SETTLE_BATCH = `
with c as (
  select * from settle.claim_many(tenant => 'recent', keys => $1::text[],
                                  requests => array_fill('{}'::jsonb, array[cardinality($1::text[])]), principal => 'p'))
select count(*)::int as n
  from settle.complete_many(tenant => 'recent', keys => (select array_agg(c.key order by c.ordinal) from c),
                            attempts => (select array_agg(c.attempt order by c.ordinal) from c),
                            lease_tokens => (select array_agg(c.lease_token order by c.ordinal) from c),
                            fingerprints => (select array_agg(c.fingerprint order by c.ordinal) from c),
                            principal => 'p', scopes => '{}', binding_generation => 0,
                            results => array_fill('{"ok": true}'::jsonb, array[cardinality($1::text[])]))`;

interface Times {
  readonly overview: number[];
  readonly live: number[];
}

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const slowest = (xs: readonly number[]): number => Math.max(...xs);

async function serverTimes(url: string, count: number): Promise<Times> {
  const running = await startConsole({ databaseUrl: url });
  try {
    const login = await fetch(running.loginUrl, { redirect: 'manual' });
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const time = async (path: string): Promise<number[]> => {
      const times: number[] = [];
      for (let i = 0; i < count + 2; i += 1) {
        const response = await fetch(`${running.url}${path}`, { headers: { cookie } });
        if (response.status !== 200) throw new Error(`${path} answered ${response.status}`);
        await response.text();
        const ms = Number(/app;dur=([\d.]+)/.exec(response.headers.get('server-timing') ?? '')?.[1]);
        if (i >= 2) times.push(ms);
      }
      return times;
    };
    return { overview: await time('/'), live: await time('/live.json') };
  } finally {
    await running.close();
  }
}

async function createDatabase(adminUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`drop database if exists ${name}`);
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = withDatabase(adminUrl, name);
  await migrate(url);
  return url;
}

async function settleRecent(client: pg.Client, from: number, count: number): Promise<void> {
  for (let at = from; at < from + count; at += BATCH) {
    const keys = Array.from({ length: Math.min(BATCH, from + count - at) }, (_, i) => `done-${at + i}`);
    await client.query(SETTLE_BATCH, [keys]);
  }
  // Spread over the last hour, so the chart has sixty minutes to draw.
  await client
    .query(
      `update settle_private.operations set updated_at = clock_timestamp() - (random() * interval '59 minutes')
        where tenant = 'recent' and key like 'done-%' and updated_at > clock_timestamp() - interval '10 minutes'
          and status = 'completed'`,
    )
    .catch((error: unknown) => log(`recent work stays where it is: ${(error as Error).message}`));
  await client.query(
    'vacuum (analyze) settle_private.operations, settle_private.audit_log, settle_private.feed_events',
  );
}

async function metricsTimes(client: pg.Client): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < 7; i += 1) {
    const t = performance.now();
    await client.query('select * from settle.metrics');
    times.push(performance.now() - t);
  }
  return times;
}

async function explainEach(client: pg.Client): Promise<string[]> {
  // Each read's own execution time (EXPLAIN ANALYZE, median of 3): the database's share, apart
  // from a loaded machine's scheduling. With jit off, as the console's connections.
  await client.query('set jit = off');
  const lines: string[] = [];
  for (const [name, text] of Object.entries(OVERVIEW_QUERIES)) {
    const ms: number[] = [];
    for (let i = 0; i < 3; i += 1) {
      const { rows: plan } = await client.query<{ 'QUERY PLAN': string }>(`explain (analyze) ${text}`);
      ms.push(Number(/Execution Time: ([\d.]+) ms/.exec(plan.map((l) => l['QUERY PLAN']).join('\n'))?.[1] ?? NaN));
    }
    lines.push(`| ${name} | ${median(ms).toFixed(2)} |`);
  }
  await client.query('reset jit');
  return lines;
}

async function main(): Promise<void> {
  const server = await provisionPostgres({ log });
  try {
    const emptyUrl = await createDatabase(server.adminUrl, 'console_bench_empty');
    const url = await createDatabase(server.adminUrl, 'console_bench');
    const loadStarted = Date.now();
    await generateScaleRows(url, { rows, log });
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(`select settle.register_consumer(name => 'ledger', lanes => 4, start_at => 'earliest')`);
      await client.query(STUCK_WORK);
      log(`${rows} operations and the stuck work loaded in ${Math.round((Date.now() - loadStarted) / 1000)} s`);
      const empty = await serverTimes(emptyUrl, runs);
      const table: string[] = [];
      const overviews: number[] = [];
      let explained: string[] = [];
      let worst = 0;
      for (let step = 1; step <= steps; step += 1) {
        const from = Math.round(((step - 1) * recent) / steps);
        const to = Math.round((step * recent) / steps);
        const started = Date.now();
        await settleRecent(client, from, to - from);
        log(
          `step ${step}: ${to} settled in the last hour (this step's ${to - from} in ${Math.round((Date.now() - started) / 1000)} s)`,
        );
        const counts = (
          await client.query<{ ops: string; retained: string }>(
            `select (select count(*) from settle_private.operations)::text as ops,
                    (select count(*) from settle_private.feed_events)::text as retained`,
          )
        ).rows[0];
        const times = await serverTimes(url, runs);
        const metrics = await metricsTimes(client);
        overviews.push(median(times.overview));
        table.push(
          `| ${Number(counts?.ops).toLocaleString('en')} | ${to.toLocaleString('en')} | ${Number(counts?.retained).toLocaleString('en')} | ${median(times.overview).toFixed(1)} | ${slowest(times.overview).toFixed(1)} | ${median(times.live).toFixed(1)} | ${median(metrics).toFixed(1)} |`,
        );
        worst = Math.max(worst, slowest(times.overview));
        if (step === steps) explained = await explainEach(client);
      }
      const version = (await client.query<{ v: string }>('select version() as v')).rows[0]?.v ?? '';
      const last = overviews.at(-1) ?? Number.NaN;
      process.stdout.write(
        [
          `# The console's reads as the data grows`,
          '',
          `Command: npx tsx bench/console.ts --rows ${rows} --recent ${recent} --steps ${steps} --runs ${runs}`,
          `Server: ${version}`,
          '',
          `empty database (baseline, same run): overview median ${median(empty.overview).toFixed(1)} ms, /live.json ${median(empty.live).toFixed(1)} ms`,
          '',
          '| operations | settled in the last hour | feed events unacknowledged | overview median ms | overview slowest ms | /live.json median ms | settle.metrics median ms |',
          '|---|---|---|---|---|---|---|',
          ...table,
          '',
          `growth of the overview's median, first step to last: ${(last / (overviews[0] ?? Number.NaN)).toFixed(2)}x for ${steps}x the traffic`,
          `target: the slowest overview of ${runs} under ${TARGET_MS} ms server time at every step: ${worst < TARGET_MS ? 'PASS' : 'FAIL'} (slowest ${worst.toFixed(1)} ms)`,
          '',
          '| read (last step) | execution ms (EXPLAIN ANALYZE, median of 3) |',
          '|---|---|',
          ...explained,
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
