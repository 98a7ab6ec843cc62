import pg from 'pg';
import { seedReplayKeys, startBenchServer } from './lib/database.js';
import { withPgClient } from '../src/db/with-pg-client.js';
import { scriptPath } from './lib/measure.js';
import { sampleWaitEvents } from './lib/wait-events.js';
import { locatePgbench, PGBENCH_MISSING_HINT, runPgbench, type PgbenchRunOptions } from './lib/pgbench.js';

/**
 * Where the time of one operation goes: `npx tsx bench/profile.ts [ops] [clients] [seconds]`.
 * For each script, on a fresh database after a CHECKPOINT and an unmeasured warm-up of ops/2:
 * N operations from one pgbench client (no contention), then WAL bytes and records per operation (pg_current_wal_lsn, pg_stat_wal), statements
 * executed per operation including those inside the engine's functions
 * (pg_stat_statements.track = all), and EXPLAIN (ANALYZE, BUFFERS, WAL) of every nested
 * statement of one claim and one complete (auto_explain, sent back as NOTICEs); and what the
 * backends wait on while `clients` pgbench clients run cycle and floor2 for `seconds`
 * (pg_stat_activity sampled every 10 ms, bench/lib/wait-events.ts).
 * Prints Markdown; docs/performance.md quotes it.
 */

const SCRIPTS = ['cycle', 'spec4', 'local', 'floor2', 'lww', 'stripe', 'replay'] as const;

interface StatementRow {
  query: string;
  calls: string;
  total_ms: string;
  wal_bytes: string;
  wal_records: string;
  shared_blks_hit: string;
  shared_blks_dirtied: string;
}

async function main(): Promise<void> {
  const ops = Number(process.argv[2] ?? 2000);
  const waitClients = Number(process.argv[3] ?? 8);
  const waitSeconds = Number(process.argv[4] ?? 8);
  const pgbench = locatePgbench();
  if (pgbench === undefined) throw new Error(PGBENCH_MISSING_HINT);
  const server = await startBenchServer(() => {});
  if (!server.hasPgStatStatements)
    console.log('> pg_stat_statements is not preloaded: statement counts are skipped.\n');
  try {
    console.log(`# Profile: ${ops} operations per script, 1 client, PostgreSQL ${server.serverVersion}\n`);
    console.log(
      '| script | WAL bytes/op | WAL records/op | full-page images/op | statements/op (incl. nested) | tps (1 client) |',
    );
    console.log('|---|---|---|---|---|---|');
    const details: string[] = [];
    for (const script of SCRIPTS) {
      const db = await server.createRunDatabase(`profile_${script}`);
      try {
        if (script === 'replay') await seedReplayKeys(db.url, ops);
        await withPgClient(db.url, async (c) => {
          await c.query(`alter database ${db.name} set pg_stat_statements.track = 'all'`);
          await c.query('checkpoint');
        });
        const options: Omit<PgbenchRunOptions, 'transactionsPerClient'> = {
          pgbench,
          url: db.url,
          script: scriptPath(`${script}.sql`),
          clients: 1,
          threads: 1,
          defines: script === 'replay' ? { replay_keys: ops } : {},
        };
        // Steady state: an unmeasured warm-up pays the full-page images of first touches after
        // the checkpoint; statement statistics are reset after it.
        await runPgbench({ ...options, transactionsPerClient: Math.max(1, Math.floor(ops / 2)) });
        if (server.hasPgStatStatements) await withPgClient(db.url, (c) => c.query('select pg_stat_statements_reset()'));
        const before = await walSnapshot(db.url);
        const run = await runPgbench({ ...options, transactionsPerClient: ops });
        const after = await walSnapshot(db.url);
        const statements = server.hasPgStatStatements ? await topStatements(db.url) : [];
        const perOp = (n: number): string => (n / ops).toFixed(1);
        const totalCalls = statements.reduce((sum, s) => sum + Number(s.calls), 0);
        console.log(
          `| ${script} | ${perOp(after.bytes - before.bytes)} | ${perOp(after.records - before.records)} | ${perOp(after.fpi - before.fpi)} | ` +
            `${server.hasPgStatStatements ? perOp(totalCalls) : '-'} | ${run.output.tps?.toFixed(0) ?? '-'} |`,
        );
        details.push(`\n## ${script}: statements per operation (pg_stat_statements, track = all)\n`);
        details.push('| calls/op | ms/op | WAL B/op | blocks dirtied/op | statement |', '|---|---|---|---|---|');
        for (const s of statements.slice(0, 25)) {
          details.push(
            `| ${perOp(Number(s.calls))} | ${(Number(s.total_ms) / ops).toFixed(3)} | ${perOp(Number(s.wal_bytes))} | ${perOp(Number(s.shared_blks_dirtied))} | \`${s.query.replace(/\s+/g, ' ').slice(0, 110).replaceAll('|', '\\|')}\` |`,
          );
        }
      } finally {
        await db.drop();
      }
    }
    console.log(details.join('\n'));
    console.log(await sampleWaitEvents(server, pgbench, waitClients, waitSeconds));
    console.log(await explainOneCycle(server));
  } finally {
    await server.stop();
  }
}

async function walSnapshot(url: string): Promise<{ bytes: number; records: number; fpi: number }> {
  return withPgClient(url, async (c) => {
    const row = (
      await c.query<{ lsn: string; records: string; fpi: string }>(
        `select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint::text as lsn, wal_records::text as records, wal_fpi::text as fpi from pg_stat_wal`,
      )
    ).rows[0];
    return { bytes: Number(row?.lsn ?? 0), records: Number(row?.records ?? 0), fpi: Number(row?.fpi ?? 0) };
  });
}

async function topStatements(url: string): Promise<StatementRow[]> {
  return withPgClient(
    url,
    async (c) =>
      (
        await c.query<StatementRow>(
          `select query, calls::text, total_exec_time::text as total_ms, wal_bytes::text, wal_records::text,
                shared_blks_hit::text, shared_blks_dirtied::text
           from pg_stat_statements
          where dbid = (select oid from pg_database where datname = current_database())
            and query !~* '^\\s*(alter database|checkpoint|select pg_wal_lsn_diff)'
          order by calls desc, total_exec_time desc`,
        )
      ).rows,
  );
}

/** EXPLAIN (ANALYZE, BUFFERS, WAL) of every statement inside one claim and one complete. */
async function explainOneCycle(server: Awaited<ReturnType<typeof startBenchServer>>): Promise<string> {
  const db = await server.createRunDatabase('profile_explain');
  const client = new pg.Client({ connectionString: db.url });
  const notices: string[] = [];
  client.on('notice', (n) => notices.push(n.message ?? ''));
  await client.connect();
  try {
    // Warm the plan caches and catalog so the plans shown are the steady-state ones.
    for (let i = 0; i < 20; i++) await cycleOnce(client, `warm-${i}`);
    await client.query(`load 'auto_explain'`);
    for (const setting of [
      'auto_explain.log_min_duration = 0',
      'auto_explain.log_analyze = on',
      'auto_explain.log_buffers = on',
      'auto_explain.log_wal = on',
      'auto_explain.log_timing = on',
      'auto_explain.log_nested_statements = on',
      'auto_explain.log_level = notice',
      'auto_explain.log_format = text',
    ]) {
      await client.query(`set ${setting}`);
    }
    await cycleOnce(client, 'explained');
    return `\n## One claim + complete, every nested statement (auto_explain: ANALYZE, BUFFERS, WAL)\n\n\`\`\`\n${notices
      .map((n) => n.replace(/^duration: /, '-- duration: '))
      .join('\n\n')}\n\`\`\`\n`;
  } finally {
    await client.end();
    await db.drop();
  }
}

async function cycleOnce(client: pg.Client, key: string): Promise<void> {
  const claim = (
    await client.query<{ attempt: number; lease_token: string; fingerprint: string }>(
      `select attempt, lease_token, fingerprint from settle.claim('bench', $1, '{"amount": 1, "currency": "EUR"}', 'bench-app', array['payments.write'])`,
      [key],
    )
  ).rows[0];
  if (claim === undefined) throw new Error('claim returned no row');
  await client.query(
    `select outcome from settle.complete('bench', $1, $2, $3, $4, 'bench-app', array['payments.write'], 0, '{"charge": "ch"}')`,
    [key, claim.attempt, claim.lease_token, claim.fingerprint],
  );
}

await main();
