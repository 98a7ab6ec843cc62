import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { renderTable } from './output.js';
import { viewQuery } from './queries.js';

const upkeepRow = z.object({
  job: z.string(),
  every: z.string(),
  retention: z.string().nullable(),
  last_started_at: z.date().nullable(),
  last_finished_at: z.date().nullable(),
  last_ok: z.boolean().nullable(),
  last_error: z.string().nullable(),
  last_by: z.string().nullable(),
  runs: z.coerce.number(),
  failures: z.coerce.number(),
  next_due_at: z.date().nullable(),
  overdue: z.boolean(),
});

/** One upkeep job as `pg-settle stats` shows it (settle.upkeep). */
export interface UpkeepJob {
  readonly job: string;
  readonly every: string;
  readonly retention: string | null;
  readonly lastFinishedAt: Date | null;
  readonly lastOk: boolean | null;
  readonly lastError: string | null;
  readonly lastBy: string | null;
  readonly runs: number;
  readonly failures: number;
  readonly nextDueAt: Date | null;
  readonly overdue: boolean;
}

export async function upkeepJobs(pool: DatabasePool): Promise<UpkeepJob[]> {
  const rows = await viewQuery(pool, (p) =>
    p.any(sql.type(upkeepRow)`
      select job, every::text as every, retention::text as retention, last_started_at, last_finished_at, last_ok,
             last_error, last_by, runs, failures, next_due_at, overdue
        from settle.upkeep order by job`),
  );
  return rows.map((r) => ({
    job: r.job,
    every: r.every,
    retention: r.retention,
    lastFinishedAt: r.last_finished_at,
    lastOk: r.last_ok,
    lastError: r.last_error,
    lastBy: r.last_by,
    runs: r.runs,
    failures: r.failures,
    nextDueAt: r.next_due_at,
    overdue: r.overdue,
  }));
}

/** The upkeep table of `pg-settle stats`, then one WARNING line per overdue or failing job. */
export function renderUpkeep(jobs: readonly UpkeepJob[]): string {
  const table = renderTable(
    ['upkeep job', 'every', 'retention', 'last run', 'ok', 'by', 'runs', 'failures', 'next due'],
    jobs.map((j) => [
      j.job,
      j.every,
      j.retention,
      j.lastFinishedAt ?? 'never',
      j.lastOk,
      j.lastBy,
      j.runs,
      j.failures,
      j.nextDueAt,
    ]),
  );
  const warnings = jobs.flatMap((j) => [
    ...(j.overdue
      ? [
          `WARNING: upkeep job ${j.job} is overdue (${j.lastFinishedAt === null ? 'it never ran' : `last run ${j.lastFinishedAt.toISOString()}`}, due every ${j.every}): schedule it (pg-settle schedule) or run pg-settle maintain`,
        ]
      : []),
    ...(j.lastOk === false ? [`WARNING: the last run of ${j.job} failed: ${j.lastError ?? 'unknown error'}`] : []),
  ]);
  return [table, ...warnings].join('\n');
}
