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
export async function distribute(url: string): Promise<DistributeSummary> {
  const sql = await distributeSql();
  return withPgClient(url, async (client) => {
    await client.query('begin');
    try {
      const results = (await client.query(sql)) as unknown as { rows: Record<string, unknown>[] }[];
      await client.query('commit');
      const last = results[results.length - 1]?.rows[0];
      if (last === undefined) throw new Error('distribute.sql returned no summary row');
      return {
        tables: Number(last.tables),
        functions: Number(last.functions),
        delegated: Number(last.delegated),
        workers: Number(last.workers),
        problems: await checkCluster(client),
      };
    } catch (error) {
      await client.query('rollback').catch(() => {});
      throw error;
    }
  });
}
