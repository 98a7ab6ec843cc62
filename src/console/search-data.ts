import { z } from 'zod';
import type { ConsoleDatabase } from './database.js';

// Lists of operations, paged by a keyset cursor (never OFFSET: a later page costs what the first
// costs). With a status or a dead-letter reason, the order is (updated_at, tenant, key); with only
// a tenant, the primary key (tenant, key). The cursor is the last row's sort key, as text.
// Measured limit: through the public views, a status filter is not an index condition (the
// planner sorts the matching rows; bench/console.ts), so a status list costs in proportion to the
// operations of that status, not to the page.

export const STATUSES = ['pending', 'running', 'unknown', 'conflict', 'failed', 'completed'] as const;
export const REASONS = ['attempts_exhausted', 'needs_reconciliation'] as const;
export const PAGE_SIZE = 50;

export interface SearchQuery {
  readonly tenant?: string;
  readonly status?: (typeof STATUSES)[number];
  readonly reason?: (typeof REASONS)[number];
  /** With a reason: only dead letters of this error code (dead-letter-data.ts). */
  readonly code?: string;
  /** Only operations last changed more than this many minutes ago. */
  readonly olderThanMinutes?: number;
  readonly cursor?: string;
}

const listRow = z.object({
  tenant: z.string(),
  key: z.string(),
  status: z.string(),
  attempt: z.number(),
  max_attempts: z.number(),
  updated_at: z.date(),
  cursor_at: z.string(),
  dead_letter_reason: z.string().nullable(),
  dead_lettered_at: z.date().nullable(),
});
export type ListRow = z.output<typeof listRow>;

export interface SearchPage {
  readonly rows: readonly ListRow[];
  /** The cursor of the next page, or null on the last page. */
  readonly next: string | null;
  /** Every operation the filters match, counted up to COUNT_CAP + 1 (more: COUNT_CAP+). */
  readonly total: number;
}

/** A list's total is counted up to here (its first COUNT_CAP + 1 in the list's own order). */
export const COUNT_CAP = 10_000;

/** Thrown for a cursor the console did not write. */
export class BadCursorError extends Error {}

interface Cursor {
  readonly at?: string;
  readonly tenant: string;
  readonly key: string;
}

export function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify(cursor), 'utf8').toString('base64url');
}

// What the console writes into a cursor's `at`: PostgreSQL's text of a timestamptz.
const CURSOR_TIME = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?[+-]\d{2}(:\d{2}){0,2}$/;
const NO_NUL = (s: string) => !s.includes('\u0000');

/** Whether the date and time of `text` (yyyy-mm-dd hh:mm:ss...) exist on the calendar. */
function calendarTime(text: string): boolean {
  const [y, mo, d, h, mi, se] = [0, 5, 8, 11, 14, 17].map((at, i) => Number(text.slice(at, at + (i === 0 ? 4 : 2))));
  const t = new Date(Date.UTC(y ?? 0, (mo ?? 0) - 1, d ?? 0, h ?? 0, mi ?? 0, se ?? 0));
  return (
    t.getUTCFullYear() === y &&
    t.getUTCMonth() === (mo ?? 0) - 1 &&
    t.getUTCDate() === d &&
    t.getUTCHours() === h &&
    t.getUTCMinutes() === mi &&
    t.getUTCSeconds() === se
  );
}

function decodeCursor(text: string): Cursor {
  try {
    const value = z
      .object({
        at: z.string().regex(CURSOR_TIME).optional(),
        tenant: z.string().refine(NO_NUL),
        key: z.string().refine(NO_NUL),
      })
      .parse(JSON.parse(Buffer.from(text, 'base64url').toString('utf8')));
    if (value.at !== undefined && !calendarTime(value.at)) throw new Error('not a time');
    return value;
  } catch {
    throw new BadCursorError('not a cursor of this page (reload the list from its first page)');
  }
}

export async function searchOperations(db: ConsoleDatabase, query: SearchQuery): Promise<SearchPage> {
  const values: unknown[] = [];
  const where: string[] = [];
  const param = (value: unknown): string => {
    values.push(value);
    return `$${values.length}`;
  };
  const byAge = query.status !== undefined || query.reason !== undefined;
  if (query.tenant !== undefined) where.push(`o.tenant = ${param(query.tenant)}`);
  if (query.status !== undefined) where.push(`o.status = ${param(query.status)}::settle.status`);
  if (query.reason !== undefined) {
    where.push(`o.dead_lettered_at is not null and o.dead_letter_reason = ${param(query.reason)}`);
    // The statuses of the reason's dead letters as a range (overview-data.ts: a list, or
    // `= 'failed'`, let the planner read far more than the dead letters).
    if (query.status === undefined)
      where.push(
        query.reason === 'attempts_exhausted'
          ? `o.status between 'failed' and 'failed'`
          : `o.status between 'unknown' and 'conflict'`,
      );
    if (query.code !== undefined)
      where.push(`coalesce(o.error->>'code', left(o.error::text, 80)) = ${param(query.code)}`);
  }
  if (query.olderThanMinutes !== undefined)
    where.push(`o.updated_at < statement_timestamp() - make_interval(mins => ${param(query.olderThanMinutes)})`);
  // The filters without the cursor: what the total counts.
  const filters = [...where];
  const filterValues = [...values];
  if (query.cursor !== undefined) {
    const c = decodeCursor(query.cursor);
    if (byAge) {
      if (c.at === undefined) throw new BadCursorError('not a cursor of this list');
      where.push(
        `(o.updated_at, o.tenant, o.key) > (${param(c.at)}::timestamptz, ${param(c.tenant)}, ${param(c.key)})`,
      );
    } else {
      where.push(`(o.tenant, o.key) > (${param(c.tenant)}, ${param(c.key)})`);
    }
  }
  const order = byAge ? 'o.updated_at, o.tenant, o.key' : 'o.tenant, o.key';
  const match = (terms: readonly string[]) => (terms.length === 0 ? 'true' : terms.join(' and '));
  const [rows, counted] = await Promise.all([
    db.rows(
      listRow,
      `select o.tenant, o.key, o.status::text as status, o.attempt, o.max_attempts, o.updated_at, o.updated_at::text as cursor_at,
            o.dead_letter_reason, o.dead_lettered_at
       from settle.operations o
      where ${match(where)}
      order by ${order}
      limit ${PAGE_SIZE + 1}`,
      values,
    ),
    db.rows(
      z.object({ n: z.number() }),
      `select count(*)::int as n from (select 1 from settle.operations o where ${match(filters)}
                                        order by ${order} limit ${COUNT_CAP + 1}) x`,
      filterValues,
    ),
  ]);
  const page = rows.slice(0, PAGE_SIZE);
  const last = page.at(-1);
  const next =
    rows.length > PAGE_SIZE && last !== undefined
      ? encodeCursor(
          byAge ? { at: last.cursor_at, tenant: last.tenant, key: last.key } : { tenant: last.tenant, key: last.key },
        )
      : null;
  return { rows: page, next, total: counted[0]?.n ?? 0 };
}
