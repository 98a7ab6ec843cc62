import { z } from 'zod';
import type { ConsoleDatabase } from './database.js';

// Dead letters grouped by reason and error code (what on-call asks after an outage: which
// failures, how many), and the keys of one group for a bulk redrive. Every read is a range of
// operations_needing_attention_idx in (status, updated_at) order, at most GROUPED dead letters a
// reason, oldest first: a backlog larger than that is grouped over its oldest GROUPED and says so.

/** Dead letters of a reason read for the groups. */
export const GROUPED = 10_000;
/** Dead letters one bulk redrive re-opens at most (oldest first); the next run takes the rest. */
export const BULK_LIMIT = 1000;

/** The statuses of each reason's dead letters (row rule dead_letter_reason_fits_status), as ranges. */
const RANGE = {
  attempts_exhausted: `d.status between 'failed' and 'failed'`,
  needs_reconciliation: `d.status between 'unknown' and 'conflict'`,
} as const;
export type DeadLetterReason = keyof typeof RANGE;
export const DEAD_LETTER_REASONS = Object.keys(RANGE) as DeadLetterReason[];

/** A dead letter's error code: `code` of its error, else its error as text (80 characters); null: no error. */
const CODE = `coalesce(d.error->>'code', left(d.error::text, 80))`;

const groupRow = z.object({
  reason: z.string(),
  code: z.string().nullable(),
  n: z.number(),
  oldest: z.date(),
  newest: z.date(),
  read: z.number(),
});
export type DeadLetterGroup = z.output<typeof groupRow>;

/** The groups of one tenant's (or every visible tenant's) dead letters, largest first. */
export async function deadLetterGroups(db: ConsoleDatabase, tenant: string | null): Promise<DeadLetterGroup[]> {
  const reads = DEAD_LETTER_REASONS.map(
    (reason) => `
select '${reason}' as reason, x.code, count(*)::int as n, min(x.dead_lettered_at) as oldest, max(x.dead_lettered_at) as newest,
       (sum(count(*)) over ())::int as read
  from (select ${CODE} as code, d.dead_lettered_at from settle.dead_letters d
         where ${RANGE[reason]} and ($1::text is null or d.tenant = $1)
         order by d.status, d.updated_at limit ${GROUPED}) x
 group by x.code`,
  );
  return db.rows(groupRow, `${reads.join('\nunion all')}\norder by 3 desc, 2 nulls first`, [tenant]);
}

export interface GroupSelection {
  readonly reason: DeadLetterReason;
  /** The error code; null: dead letters without an error. */
  readonly code: string | null;
  readonly tenant: string | null;
}

const keyRow = z.object({ tenant: z.string(), key: z.string() });

/** How many dead letters the group holds (counted up to GROUPED + 1), and its oldest `limit` keys. */
export async function groupKeys(
  db: ConsoleDatabase,
  g: GroupSelection,
  limit: number,
): Promise<{ total: number; keys: { tenant: string; key: string }[] }> {
  const where = `${RANGE[g.reason]} and ($1::text is null or d.tenant = $1) and ${CODE} is not distinct from $2::text`;
  const [counted, keys] = await Promise.all([
    db.rows(
      z.object({ n: z.number() }),
      `select count(*)::int as n from (select 1 from settle.dead_letters d where ${where}
                                        order by d.status, d.updated_at limit ${GROUPED + 1}) x`,
      [g.tenant, g.code],
    ),
    db.rows(
      keyRow,
      `select d.tenant, d.key from settle.dead_letters d where ${where}
        order by d.status, d.updated_at, d.tenant, d.key limit $3`,
      [g.tenant, g.code, limit],
    ),
  ]);
  return { total: counted[0]?.n ?? 0, keys };
}
