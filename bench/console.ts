/**
 * What the console's overview costs the server at 1 million operations (the goal: it renders
 * within 1 s of server time): a benchmark, not a timed test.
 *
 *   npx tsx bench/console.ts [--rows 1000000] [--runs 15]
 *
 * Starts a throwaway PostgreSQL (or uses DATABASE_URL's server), makes two databases: one empty
 * (the baseline of the same run) and one with `--rows` operations from bench/lib/scale-rows.ts plus
 * recent work the overview draws (10,000 settlements spread over the last hour, unknown
 * operations, dead letters of both reasons, a feed consumer with a backlog). Starts the console
 * in this process as the superuser, signs in, and requests the overview `--runs` times after two
 * warm-up requests, reading the server's own time from its Server-Timing header. Prints the
 * median and the slowest, the ratio to the empty database, and PASS/FAIL against 1,000 ms.
 * The million operations of bench/lib/scale-rows.ts are pending (a retry backlog): the worst case for
 * the overview's counts, which share operations_needing_attention_idx with them.
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
const runs = flag('runs', 15);
const TARGET_MS = 1000;
const log = (msg: string): void =>
  void process.stderr.write(`[console-bench] ${new Date().toISOString().slice(11, 19)} ${msg}\n`);

// The states the overview shows, through the API (as superuser), then spread over the last hour.
const RECENT_WORK = `
do $$
declare
  c record;
begin
  for i in 1..10000 loop
    select * into c from settle.claim(tenant => 'recent', key => 'done-' || i, request => '{}', principal => 'p', scopes => '{}', binding_generation => 1);
    perform settle.complete(tenant => 'recent', key => 'done-' || i, attempt => c.attempt, lease_token => c.lease_token,
                            fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1, result => '{"ok": true}');
  end loop;
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
                        error => '{"code": "declined"}', retryable => true);
  end loop;
end $$;
`;

async function overviewTimes(url: string, count: number): Promise<number[]> {
  const running = await startConsole({ databaseUrl: url });
  try {
    const login = await fetch(running.loginUrl, { redirect: 'manual' });
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const times: number[] = [];
    for (let i = 0; i < count + 2; i += 1) {
      const response = await fetch(`${running.url}/`, { headers: { cookie } });
      if (response.status !== 200) throw new Error(`overview answered ${response.status}`);
      await response.text();
      const ms = Number(/app;dur=([\d.]+)/.exec(response.headers.get('server-timing') ?? '')?.[1]);
      if (i >= 2) times.push(ms);
    }
    return times.sort((a, b) => a - b);
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
      await client.query(RECENT_WORK);
      // Spread the recent settlements over the hour, so the chart has sixty bars to draw.
      await client
        .query(`update settle_private.operations set updated_at = clock_timestamp() - (random() * interval '59 minutes')
                           where tenant = 'recent' and key like 'done-%'`)
        .catch((error: unknown) => log(`recent work stays at one minute: ${(error as Error).message}`));
      await client.query(
        'vacuum (analyze) settle_private.operations, settle_private.audit_log, settle_private.feed_events',
      );
      log(`${rows} operations and the recent work loaded in ${Math.round((Date.now() - loadStarted) / 1000)} s`);
      const count =
        (await client.query<{ n: string }>('select count(*)::text as n from settle_private.operations')).rows[0]?.n ??
        '?';
      const median = (xs: number[]): number => xs[Math.floor(xs.length / 2)] ?? NaN;
      const empty = await overviewTimes(emptyUrl, runs);
      const full = await overviewTimes(url, runs);
      // The overview's largest read, alone, for the report: settle.metrics (round trip, ms).
      const metricsTimes: number[] = [];
      for (let i = 0; i < 7; i += 1) {
        const t = performance.now();
        await client.query('select * from settle.metrics');
        metricsTimes.push(performance.now() - t);
      }
      metricsTimes.sort((a, b) => a - b);
      // Each read's own execution time (EXPLAIN ANALYZE, median of 3): the database's share,
      // apart from a loaded machine's scheduling. With jit off, as the console's connections.
      await client.query('set jit = off');
      const explained: string[] = [];
      for (const [name, text] of Object.entries(OVERVIEW_QUERIES)) {
        const ms: number[] = [];
        for (let i = 0; i < 3; i += 1) {
          const { rows: plan } = await client.query<{ 'QUERY PLAN': string }>(`explain (analyze) ${text}`);
          ms.push(Number(/Execution Time: ([\d.]+) ms/.exec(plan.map((l) => l['QUERY PLAN']).join('\n'))?.[1] ?? NaN));
        }
        explained.push(`| ${name} | ${median(ms.sort((a, b) => a - b)).toFixed(2)} |`);
      }
      const version = (await client.query<{ v: string }>('select version() as v')).rows[0]?.v ?? '';
      process.stdout.write(
        [
          `# The console's overview at ${Number(count).toLocaleString('en')} operations`,
          '',
          `Command: npx tsx bench/console.ts --rows ${rows} --runs ${runs}`,
          `Server: ${version}`,
          '',
          `| database | median ms | slowest ms |`,
          `|---|---|---|`,
          `| empty (baseline, same run) | ${median(empty).toFixed(1)} | ${empty.at(-1)?.toFixed(1)} |`,
          `| ${Number(count).toLocaleString('en')} operations | ${median(full).toFixed(1)} | ${full.at(-1)?.toFixed(1)} |`,
          '',
          `ratio (median, loaded / empty): ${(median(full) / median(empty)).toFixed(2)}x`,
          `settle.metrics alone (one of the overview's reads, 7 round trips): median ${median(metricsTimes).toFixed(1)} ms`,
          `target: the slowest of ${runs} under ${TARGET_MS} ms server time: ${(full.at(-1) ?? Infinity) < TARGET_MS ? 'PASS' : 'FAIL'}`,
          '',
          '| read (loaded database) | execution ms (EXPLAIN ANALYZE, median of 3) |',
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
