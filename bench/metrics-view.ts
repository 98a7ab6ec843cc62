/**
 * What one scrape of settle.metrics costs on a large database (docs/observability.md, "Cost at
 * 10 million operations").
 *
 *   npx tsx bench/metrics-view.ts --rows 10000000 [--runs 7]
 *
 * Starts a throwaway PostgreSQL (or uses DATABASE_URL's server), migrates, loads `--rows`
 * operations with bench/lib/scale-rows.ts (each with its attempt and two audit rows), then puts a
 * few thousand operations in the states the view counts through the API itself (live and lapsed
 * leases, unknown, conflict, dead letters, claim conflicts, fenced reports), VACUUM ANALYZEs, and
 * prints EXPLAIN (ANALYZE, BUFFERS) of `select * from settle.metrics` (median of `--runs`), next
 * to one run of the full-scan settle.stats for contrast.
 */
import pg from 'pg';
import { migrate } from '../src/db/migrate.js';
import { withDatabase } from '../src/db/database-url.js';
import { provisionPostgres } from '../src/dev-server/provision.js';
import { generateScaleRows } from './lib/scale-rows.js';

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const value = i < 0 ? undefined : Number(process.argv[i + 1]);
  return value === undefined || !Number.isFinite(value) ? fallback : value;
}

const rows = flag('rows', 10_000_000);
const runs = flag('runs', 7);
const log = (msg: string): void =>
  void process.stderr.write(`[metrics-view] ${new Date().toISOString().slice(11, 19)} ${msg}\n`);

/** The states settle.metrics counts, produced by the API (as superuser, which may call it all). */
const INTERESTING_STATES = `
do $$
declare
  r record;
  c record;
begin
  for i in 1..1000 loop   -- live leases
    perform settle.claim(tenant => 'm', key => 'live-' || i, request => '{}', principal => 'p', scopes => '{}',
                         binding_generation => 1, lease => interval '1 hour');
  end loop;
  for i in 1..200 loop    -- leases that lapse below
    perform settle.claim(tenant => 'm', key => 'lapsed-' || i, request => '{}', principal => 'p', scopes => '{}',
                         binding_generation => 1, lease => interval '1 hour');
  end loop;
  for i in 1..500 loop    -- unknown: the caller lost the response
    select * into c from settle.claim(tenant => 'm', key => 'unknown-' || i, request => '{}', principal => 'p',
                                      scopes => '{}', binding_generation => 1);
    perform settle.report_unknown(tenant => 'm', key => 'unknown-' || i, attempt => c.attempt, lease_token => c.lease_token,
                                  fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1);
  end loop;
  for i in 1..300 loop    -- dead letters: the only attempt failed
    select * into c from settle.claim(tenant => 'm', key => 'dead-' || i, request => '{}', principal => 'p',
                                      scopes => '{}', binding_generation => 1, max_attempts => 1);
    perform settle.fail(tenant => 'm', key => 'dead-' || i, attempt => c.attempt, lease_token => c.lease_token,
                        fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1,
                        error => '{"code": "declined"}', retryable => true);
    -- and a claim of the same key with another request: a conflict
    perform settle.claim(tenant => 'm', key => 'dead-' || i, request => '{"other": true}', principal => 'p',
                         scopes => '{}', binding_generation => 1);
  end loop;
  for i in 1..100 loop    -- a report with a token that is not the attempt's: fenced
    perform settle.complete(tenant => 'm', key => 'live-' || i, attempt => 1,
                            lease_token => '00000000-0000-4000-8000-000000000000', fingerprint => c.fingerprint,
                            principal => 'p', scopes => '{}', binding_generation => 1, result => '"late"');
  end loop;
end $$;
update settle_private.operations set lease_expires_at = clock_timestamp() - interval '1 minute'
 where tenant = 'm' and key like 'lapsed-%';
`;

async function main(): Promise<void> {
  const server = await provisionPostgres({ log });
  const url = withDatabase(server.adminUrl, 'metrics_bench');
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  await admin.query('drop database if exists metrics_bench');
  await admin.query('create database metrics_bench');
  await admin.end();
  try {
    await migrate(url);
    const started = Date.now();
    await generateScaleRows(url, { rows, log });
    log(`${rows} operations loaded in ${Math.round((Date.now() - started) / 1000)} s`);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(INTERESTING_STATES);
      await client.query('vacuum (analyze) settle_private.operations, settle_private.audit_log');
      const sizes = await client.query<{ relation: string; rows: string; size: string }>(`
        select c.relname as relation, c.reltuples::bigint::text as rows, pg_size_pretty(pg_total_relation_size(c.oid)) as size
          from pg_class c where c.relnamespace = 'settle_private'::regnamespace and c.relkind = 'r' order by 1`);
      const explain = async (text: string): Promise<{ plan: string; ms: number }> => {
        const { rows: lines } = await client.query<{ 'QUERY PLAN': string }>(`explain (analyze, buffers) ${text}`);
        const plan = lines.map((l) => l['QUERY PLAN']).join('\n');
        return { plan, ms: Number(/Execution Time: ([\d.]+) ms/.exec(plan)?.[1] ?? NaN) };
      };
      const times: number[] = [];
      for (let i = 0; i < runs; i += 1) times.push((await explain('select * from settle.metrics')).ms);
      // The plan inside settle_private._metrics() (the view's function), as it runs there: jit off.
      const body =
        (
          await client.query<{ prosrc: string }>(
            "select prosrc from pg_proc where oid = 'settle_private._metrics()'::regprocedure",
          )
        ).rows[0]?.prosrc ?? '';
      await client.query('set jit = off');
      const inner = await explain(body);
      await client.query('reset jit');
      const withJit = await explain(body);
      const {
        rows: [metrics],
      } = await client.query('select * from settle.metrics');
      const statsStarted = performance.now();
      await client.query('select * from settle.stats');
      const statsMs = performance.now() - statsStarted;
      const sorted = [...times].sort((a, b) => a - b);
      const version = (await client.query<{ v: string }>('select version() as v')).rows[0]?.v ?? '';
      process.stdout.write(
        [
          `# settle.metrics at ${rows.toLocaleString('en')} operations`,
          '',
          `Command: npx tsx bench/metrics-view.ts --rows ${rows} --runs ${runs}`,
          `Server: ${version}`,
          '',
          ...sizes.rows.map((r) => `- ${r.relation}: ${Number(r.rows).toLocaleString('en')} rows, ${r.size}`),
          '',
          `settle.metrics execution time over ${runs} runs (EXPLAIN ANALYZE): median ${sorted[Math.floor(runs / 2)]} ms, min ${sorted[0]} ms, max ${sorted.at(-1)} ms`,
          `its query with jit off (as the function runs it): ${inner.ms} ms; the same query with the server's default jit settings: ${withJit.ms} ms`,
          `settle.stats (full scan, for contrast): ${Math.round(statsMs)} ms`,
          '',
          'Row:',
          '```',
          JSON.stringify(metrics, null, 2),
          '```',
          '',
          'Plan of the query inside settle_private._metrics() (jit off):',
          '```',
          inner.plan,
          '```',
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
