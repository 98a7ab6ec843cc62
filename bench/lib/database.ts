import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { migrate } from '../../src/db/migrate.js';
import { provisionPostgres, type ProvisionedPostgres } from '../../src/dev-server/provision.js';
import { withPgClient } from '../../src/db/with-pg-client.js';

/** bench/ (this module is in bench/lib): scripts/, sql/ and out/ are found from here. */
export const BENCH_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TEMPLATE = 'settle_bench_template';

/** Settings reported with every result: what a durable-write benchmark depends on. */
export const BENCH_SETTINGS = [
  'shared_buffers',
  'wal_buffers',
  'synchronous_commit',
  'fsync',
  'full_page_writes',
  'wal_level',
  'wal_compression',
  'commit_delay',
  'checkpoint_timeout',
  'max_wal_size',
  'checkpoint_completion_target',
  'wal_sync_method',
  'max_connections',
];

export interface BenchServer {
  readonly provisioned: ProvisionedPostgres;
  readonly adminUrl: string;
  readonly serverVersion: string;
  readonly hasPgStatStatements: boolean;
  /** Server settings that shape a durable-write benchmark (shared_buffers, WAL, checkpoints). */
  readonly settings: Readonly<Record<string, string>>;
  /** A fresh database cloned from the migrated template (engine + bench baselines). */
  createRunDatabase(name: string): Promise<RunDatabase>;
  stop(): Promise<void>;
}

export interface RunDatabase {
  readonly name: string;
  /** Superuser connection string to the run database. */
  readonly url: string;
  drop(): Promise<void>;
}

/**
 * Provisions PostgreSQL the way the tests do (DATABASE_URL, else a throwaway local cluster),
 * then builds one template database: engine migrations + bench/sql/baselines.sql.
 */
export async function startBenchServer(log: (msg: string) => void): Promise<BenchServer> {
  const provisioned = await provisionPostgres({ log });
  try {
    const adminUrl = provisioned.adminUrl;
    const { serverVersion, hasPgStatStatements, settings } = await withPgClient(adminUrl, async (admin) => {
      await admin.query(`drop database if exists ${quoteIdent(TEMPLATE)} with (force)`);
      await admin.query(`create database ${quoteIdent(TEMPLATE)} template template0`);
      const version = await admin.query<{ server_version: string }>('show server_version');
      const preload = await admin.query<{ shared_preload_libraries: string }>('show shared_preload_libraries');
      const shown = await admin.query<{ name: string; setting: string }>(
        `select name, current_setting(name) as setting from pg_settings where name = any($1::text[]) order by name`,
        [BENCH_SETTINGS],
      );
      return {
        settings: Object.fromEntries(shown.rows.map((r) => [r.name, r.setting])),
        serverVersion: version.rows[0]?.server_version ?? 'unknown',
        hasPgStatStatements: (preload.rows[0]?.shared_preload_libraries ?? '').includes('pg_stat_statements'),
      };
    });
    const templateUrl = withDatabase(adminUrl, TEMPLATE);
    await migrate(templateUrl, { log });
    const baselines = await readFile(path.join(BENCH_DIR, 'sql', 'baselines.sql'), 'utf8');
    await withPgClient(templateUrl, async (db) => {
      await db.query(baselines);
      if (hasPgStatStatements) await db.query('create extension if not exists pg_stat_statements');
    });
    let serial = 0;
    return {
      provisioned,
      adminUrl,
      serverVersion,
      hasPgStatStatements,
      settings,
      stop: () => provisioned.stop(),
      createRunDatabase: async (hint) => {
        const name = `bench_${++serial}_${hint.replace(/[^a-z0-9]+/gi, '_').toLowerCase()}`.slice(0, 63);
        await withPgClient(adminUrl, async (admin) => {
          await admin.query(`drop database if exists ${quoteIdent(name)} with (force)`);
          await admin.query(`create database ${quoteIdent(name)} template ${quoteIdent(TEMPLATE)}`);
        });
        return {
          name,
          url: withDatabase(adminUrl, name),
          drop: () =>
            withPgClient(
              adminUrl,
              async (admin) => void (await admin.query(`drop database if exists ${quoteIdent(name)} with (force)`)),
            ),
        };
      },
    };
  } catch (error) {
    await provisioned.stop();
    throw error;
  }
}

export interface ServerCounters {
  readonly walLsn: string;
  readonly deadlocks: number;
  readonly rollbacks: number;
  /** Full-page images written so far (pg_stat_wal, cluster-wide). */
  readonly walFpi: number;
  /** Checkpoints started so far, timed + requested (pg_stat_bgwriter, cluster-wide). */
  readonly checkpoints: number;
}

/** WAL position, full-page images, checkpoints and this database's deadlock/rollback counters. */
export async function readServerCounters(url: string): Promise<ServerCounters> {
  return withPgClient(url, async (db) => {
    // Statistics are cached per transaction; a fresh connection reads current values.
    const row = (
      await db.query<{ lsn: string; deadlocks: string; rollbacks: string; fpi: string; checkpoints: string }>(
        `select pg_current_wal_lsn()::text as lsn, d.deadlocks::text, d.xact_rollback::text as rollbacks,
                (select wal_fpi from pg_stat_wal)::text as fpi,
                (select checkpoints_timed + checkpoints_req from pg_stat_bgwriter)::text as checkpoints
           from pg_stat_database d where d.datname = current_database()`,
      )
    ).rows[0];
    if (row === undefined) throw new Error('pg_stat_database has no row for the run database');
    return {
      walLsn: row.lsn,
      deadlocks: Number(row.deadlocks),
      rollbacks: Number(row.rollbacks),
      walFpi: Number(row.fpi),
      checkpoints: Number(row.checkpoints),
    };
  });
}

export async function walBytesBetween(url: string, from: string, to: string): Promise<number> {
  return withPgClient(url, async (db) => {
    const row = (
      await db.query<{ bytes: string }>('select pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint::text as bytes', [
        from,
        to,
      ])
    ).rows[0];
    return Number(row?.bytes ?? 0);
  });
}

/**
 * CHECKPOINT before each run (then an unmeasured warm-up, see measure.ts), so no run inherits
 * another's dirty buffers or pays for its checkpoint.
 */
export async function checkpoint(url: string): Promise<void> {
  await withPgClient(url, async (db) => void (await db.query('checkpoint')));
}

/**
 * Completes keys `replay-1` .. `replay-<keys>` of tenant `bench` in one statement (claim and
 * complete through the API), for the `replay` scenario and the profile's replay script.
 */
export async function seedReplayKeys(url: string, keys: number): Promise<void> {
  await withPgClient(url, (c) =>
    c.query(
      `select count(*) from generate_series(1, $1::int) i,
         lateral settle.claim('bench', 'replay-' || i, jsonb_build_object('amount', i, 'currency', 'EUR'), 'bench-app',
                              array['payments.write'], 0, interval '30 seconds', 'setup', 5) c,
         lateral settle.complete('bench', 'replay-' || i, c.attempt, c.lease_token, c.fingerprint, 'bench-app',
                                 array['payments.write'], 0, jsonb_build_object('charge', 'ch-' || i)) r`,
      [keys],
    ),
  );
}
