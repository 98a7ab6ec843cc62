import type { DriverTypeParser, Interceptor, QueryContext, QueryResultRow } from 'slonik';
import { SettleRowValidationError } from './errors.js';
import { ROW_CHECKS } from './row-checks.js';

type StandardSchemaV1 = NonNullable<QueryContext['resultParser']>;

/** Rows the result-parser interceptor produced: the client does not validate them twice. */
const validatedRows = new WeakSet<object>();

/** Name of the slonik interceptor that validates every row against its zod schema; a pool you pass to createSettleClient() must not lack it. */
export const RESULT_PARSER_INTERCEPTOR = 'pg-settle/result-parser';

/**
 * Runs the Standard Schema of `sql.type(schema)` on every row (slonik 49 does not do it by
 * itself) and throws SettleRowValidationError on issues. Queries without a schema pass through.
 * Synchronous (`transformRow`): slonik runs `transformRowAsync` hooks through a task queue per
 * query, which costs more than validating the row.
 */
export function createResultParserInterceptor(): Interceptor {
  return {
    name: RESULT_PARSER_INTERCEPTOR,
    transformRow: (queryContext, query, row) => {
      const parser = queryContext.resultParser;
      if (parser === undefined) return row;
      const value = validateRow(parser, row, query.sql);
      if (typeof value === 'object' && value !== null) validatedRows.add(value);
      return value as QueryResultRow;
    },
  };
}

/**
 * The validated value of `row`, or SettleRowValidationError with every issue. Schemas must be
 * synchronous (every zod schema without async refinements is): a schema that answers with a
 * Promise is refused with SettleRowValidationError rather than let a row through unchecked.
 */
export function validateRow(schema: StandardSchemaV1, row: unknown, sqlText: string): unknown {
  // The rows of claim and complete: a hand-written check first (src/client/row-checks.ts), the
  // schema for anything it does not accept unchanged.
  const checked = ROW_CHECKS.get(schema)?.(row);
  if (checked !== undefined) return checked;
  const outcome = schema['~standard'].validate(row);
  if (outcome instanceof Promise) {
    void outcome.catch(() => {});
    throw new SettleRowValidationError(`row of "${summarize(sqlText)}": asynchronous row schemas are not supported`, [
      { path: [], message: 'the schema validated asynchronously' },
    ]);
  }
  if (outcome.issues !== undefined) {
    const issues = outcome.issues.map((issue) => ({
      path: (issue.path ?? []).map((segment) => (typeof segment === 'object' ? segment.key : segment)),
      message: issue.message,
    }));
    const first = issues[0];
    const where = first === undefined ? '' : ` at ${first.path.map(String).join('.') || '(row)'}: ${first.message}`;
    throw new SettleRowValidationError(`row of "${summarize(sqlText)}" failed validation${where}`, issues);
  }
  return outcome.value;
}

const summarize = (sqlText: string): string => sqlText.trim().slice(0, 80);

/** True when `row` came out of the result-parser interceptor (already validated). */
export function wasValidated(row: unknown): boolean {
  return typeof row === 'object' && row !== null && validatedRows.has(row);
}

/** The result-parser interceptor, the one interceptor a pool used by the client should carry. */
export function settleInterceptors(): Interceptor[] {
  return [createResultParserInterceptor()];
}

/**
 * Type parsers for a pool used by the client: int8 -> bigint (never a lossy number),
 * timestamptz -> Date, numeric -> string (exact), json/jsonb -> parsed JSON.
 */
export function settleTypeParsers(): DriverTypeParser[] {
  const parseJson = (value: string): unknown => JSON.parse(value);
  return [
    { name: 'int8', parse: (value: string) => BigInt(value) },
    { name: 'timestamptz', parse: parseTimestamptz },
    { name: 'numeric', parse: (value: string) => value },
    { name: 'json', parse: parseJson },
    { name: 'jsonb', parse: parseJson },
  ];
}

/**
 * PostgreSQL's ISO output ("2026-01-02 03:04:05.678901+00", "+05:30", "infinity"). Sub-millisecond
 * digits are dropped (Date has millisecond resolution); infinities become an invalid Date.
 */
function parseTimestamptz(value: string): Date {
  const iso = ISO_TIMESTAMPTZ.exec(value);
  if (iso !== null) return new Date(`${iso[1]}T${iso[2]}${iso[3]}${iso[4] ?? ':00'}`);
  if (value === 'infinity' || value === '-infinity') return new Date(Number.NaN);
  return new Date(
    value
      .replace(' ', 'T')
      .replace(/([+-]\d\d)$/, '$1:00')
      .replace(/([+-]\d\d)(\d\d)$/, '$1:$2'),
  );
}

/** "2026-01-02 03:04:05.678901+00" or "...+05:30": date, time, zone hours, zone minutes. */
const ISO_TIMESTAMPTZ = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d)(:\d\d)?$/;
