import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { mapDatabaseError, notMigratedError } from '../client/errors.js';

// Read-only counts the operator commands show before they act (dry runs, confirmations,
// progress totals). They read the public views only (settle_readonly or settle_admin).

const purgeableRow = z.object({ completed: z.number(), failed: z.number(), dead_lettered: z.number() });

/** What `purge --older-than` would delete now, by status (the same predicate as settle.purge). */
export interface PurgeCounts {
  readonly total: number;
  readonly completed: number;
  readonly failed: number;
  /** Dead letters past the cutoff that settle.purge keeps (never purged while dead-lettered). */
  readonly deadLettered: number;
}

export async function countPurgeable(pool: DatabasePool, olderThanMs: number): Promise<PurgeCounts> {
  const row = await pool.one(sql.type(purgeableRow)`
    select count(*) filter (where o.status = 'completed' and o.dead_lettered_at is null)::int as completed,
           count(*) filter (where o.status = 'failed' and o.dead_lettered_at is null)::int as failed,
           count(*) filter (where o.dead_lettered_at is not null)::int as dead_lettered
      from settle.operations o
     where (o.status in ('completed', 'failed') or o.dead_lettered_at is not null)
       and o.updated_at < clock_timestamp() - make_interval(secs => ${olderThanMs}::float8 / 1000)`);
  return {
    total: row.completed + row.failed,
    completed: row.completed,
    failed: row.failed,
    deadLettered: row.dead_lettered,
  };
}

/** Leases that lapsed by the database clock and are not yet ended (what expire-leases ends). */
export async function countLapsedLeases(pool: DatabasePool): Promise<number> {
  return pool.oneFirst(sql.type(z.object({ lapsed: z.number() }))`
    select coalesce(sum(s.lapsed_leases), 0)::int as lapsed from settle.stats s`);
}

/**
 * The dead letters a bulk redrive would re-open, oldest first (optionally of one tenant): only
 * those where every attempt failed (reason attempts_exhausted). One that needs reconciliation
 * (an attempt may have taken effect) is redriven one key at a time, after checking downstream.
 */
export async function deadLetterKeys(
  pool: DatabasePool,
  tenant: string | undefined,
  limit: number,
): Promise<{ tenant: string; key: string }[]> {
  const rows = await pool.any(sql.type(z.object({ tenant: z.string(), key: z.string() }))`
    select d.tenant, d.key from settle.dead_letters d
     where d.reason = 'attempts_exhausted'
       and ${tenant === undefined ? sql.fragment`true` : sql.fragment`d.tenant = ${tenant}`}
     order by d.dead_lettered_at, d.tenant, d.key
     limit ${limit}`);
  return rows.map((r) => ({ tenant: r.tenant, key: r.key }));
}

/** Runs one of the reads above on the client's pool, with the client's error mapping. */
export async function viewQuery<T>(pool: DatabasePool, read: (pool: DatabasePool) => Promise<T>): Promise<T> {
  try {
    return await read(pool);
  } catch (raw) {
    const mapped = mapDatabaseError(raw);
    throw notMigratedError(mapped) ?? mapped;
  }
}
