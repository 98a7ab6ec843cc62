import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { checkCluster, type ClusterProblem } from './cluster-check.js';
import { packageSqlDir } from './migrations-dir.js';
import { withPgClient } from './with-pg-client.js';

/** What sql/citus/distribute.sql left distributed. */
export interface DistributeSummary {
  /** settle_private tables distributed by key (3 when done). */
  readonly tables: number;
  /** Functions of settle and settle_private known to Citus (propagated to every node). */
  readonly functions: number;
  /** Of those, the ones delegated by their `key` argument. */
  readonly delegated: number;
  /** Active primary worker nodes. */
  readonly workers: number;
  /**
   * What a node lacks for the engine's logins (pg_hba.conf rules, passwords, pg_dist_authinfo
   * entries): each is a call that would fail there. Empty when nothing is missing.
   */
  readonly problems: readonly ClusterProblem[];
  /** Step 12 (sql/citus/single-table.sql): whether the hot path runs as single-table statements. */
  readonly hotPath: HotPathSummary;
}

/**
 * What step 12 found and did. The hot path is rewritten into statements on one table each only
 * where every worker's Citus caches the local shard plan of such a statement (citusdata/citus#8824,
 * Citus 13.5.0; not 13.2.2): `localPlansCached` is the probe's answer (null: no worker could say).
 */
export interface HotPathSummary {
  /** 'auto' (the probe decides), or 'on' / 'off' forced (measurements only). */
  readonly mode: SingleTableMode;
  readonly localPlansCached: boolean | null;
  /** Each worker's answer, `host:port` first. */
  readonly probe: string;
  /** Functions whose hot path is now single-table statements (signatures). */
  readonly rewritten: readonly string[];
  /** Functions step 12 would rewrite but whose text it does not know (left as migrated). */
  readonly leftAsMigrated: readonly string[];
}

export type SingleTableMode = 'auto' | 'on' | 'off';

export interface DistributeOptions {
  /**
   * Step 12: 'auto' (default) rewrites the hot path only where the probe finds that Citus caches
   * local plans; 'on' / 'off' force it either way, for measurements (bench:citus --single-table).
   */
  readonly singleTableStatements?: SingleTableMode;
}

/** The text of sql/citus/distribute.sql. */
export async function distributeSql(): Promise<string> {
  return readFile(path.join(packageSqlDir('citus'), 'distribute.sql'), 'utf8');
}

/**
 * Runs sql/citus/distribute.sql on the Citus coordinator at `url` (a superuser connection to
 * the migrated database), in one transaction, then checks every node for what the engine's
 * logins need there (checkCluster). Idempotent. Without Citus it fails with SQLSTATE SE031
 * (CitusUnavailableError once mapped) and changes nothing.
 */
export async function distribute(url: string, options: DistributeOptions = {}): Promise<DistributeSummary> {
  const sql = await distributeSql();
  const step12 = await readFile(path.join(packageSqlDir('citus'), 'single-table.sql'), 'utf8');
  return withPgClient(url, async (client) => {
    const inTransaction = async (text: string, before?: string): Promise<Record<string, unknown>> => {
      await client.query('begin');
      try {
        if (before !== undefined) await client.query(before);
        const results = (await client.query(text)) as unknown as { rows: Record<string, unknown>[] }[];
        await client.query('commit');
        const last = results[results.length - 1]?.rows[0];
        if (last === undefined) throw new Error('no summary row');
        return last;
      } catch (error) {
        await client.query('rollback').catch(() => {});
        throw error;
      }
    };
    const last = await inTransaction(sql);
    // Step 12 in its own transaction: its probe reads the committed shards from each worker.
    const mode = options.singleTableStatements ?? 'auto';
    const step = (
      await inTransaction(
        step12,
        `select set_config('pg_settle.single_table_statements', '${mode === 'on' ? 'on' : mode === 'off' ? 'off' : 'auto'}', true)`,
      )
    ).step12 as {
      mode: SingleTableMode;
      cached: boolean | null;
      probe: string | null;
      rewritten: string[];
      left_as_migrated: string[];
    };
    return {
      tables: Number(last.tables),
      functions: Number(last.functions),
      delegated: Number(last.delegated),
      workers: Number(last.workers),
      problems: await checkCluster(client),
      hotPath: {
        mode: step.mode,
        localPlansCached: step.cached,
        probe: step.probe ?? '',
        rewritten: step.rewritten,
        leftAsMigrated: step.left_as_migrated,
      },
    };
  });
}
