import { SettleInputError } from '../../client/errors.js';
import { parseResolveInput, type ResolveInput } from '../../client/reconcile.js';
import type { Json } from '../../client/types.js';

/**
 * The file of `pg-settle resolve --file`: verified outcomes, one per row, as CSV (a header
 * `tenant,key,expected_attempt,outcome,result,error,reason,evidence[,expected_status][,fingerprint]`;
 * result, error and evidence as JSON text) or JSON (an array of objects with those fields). Every
 * row is checked before anything is applied; errors name the row (CSV: its line; JSON: its index).
 * expected_attempt is required and is never filled in at apply time: it is the attempt the
 * evidence concerns, written when the operation was read (a newer attempt is refused, SE053).
 */
export interface FileRow {
  /** 1-based line (CSV) or index (JSON) of the row. */
  readonly line: number;
  /** `line 4` or `row 3`, for messages. */
  readonly where: string;
  /** The resolution; fingerprint '' when the file gave none (read from the operation then). */
  readonly input: ResolveInput;
}

export interface ParsedFile {
  readonly rows: FileRow[];
  readonly errors: string[];
}

const COLUMNS = [
  'tenant',
  'key',
  'expected_attempt',
  'expected_status',
  'outcome',
  'result',
  'error',
  'reason',
  'evidence',
  'fingerprint',
] as const;
const REQUIRED = ['tenant', 'key', 'expected_attempt', 'outcome'] as const;
const STATUSES = ['pending', 'running', 'unknown', 'conflict', 'failed', 'completed'] as const;
/** A syntactically valid stand-in while a row without a fingerprint is checked. */
const PLACEHOLDER = `v1:${'0'.repeat(64)}`;

export function parseResolutionFile(text: string, path: string, defaultReason: string | undefined): ParsedFile {
  const trimmed = text.trimStart();
  const json = path.toLowerCase().endsWith('.json') || trimmed.startsWith('[');
  const records = json ? jsonRecords(trimmed) : csvRecords(text);
  if ('error' in records) return { rows: [], errors: [records.error] };
  const rows: FileRow[] = [];
  const errors: string[] = [];
  const seen = new Map<string, string>();
  for (const record of records.list) {
    if (record.problem !== undefined) {
      errors.push(`${record.where}: ${record.problem}`);
      continue;
    }
    const problems: string[] = [];
    const field = (name: string): unknown => record.values[name];
    const jsonField = (name: 'result' | 'error' | 'evidence'): Json | undefined => {
      const value = field(name);
      if (value === undefined || value === null || value === '') return undefined;
      if (!json && typeof value === 'string') {
        try {
          return JSON.parse(value) as Json;
        } catch (error) {
          problems.push(`${name} is not valid JSON (${(error as Error).message})`);
          return undefined;
        }
      }
      return value as Json;
    };
    for (const name of REQUIRED) {
      const value = field(name);
      if (name === 'expected_attempt' && typeof value === 'number') continue;
      if (typeof value !== 'string' || value.trim() === '') {
        problems.push(
          name === 'expected_attempt'
            ? 'expected_attempt is missing: the attempt your evidence concerns, as read with the operation (pg-settle inspect); it is never filled in at apply time'
            : `${name} is missing`,
        );
      }
    }
    const attemptValue = field('expected_attempt');
    const attemptText =
      typeof attemptValue === 'number'
        ? String(attemptValue)
        : typeof attemptValue === 'string'
          ? attemptValue.trim()
          : '';
    const expectedAttempt = /^[1-9][0-9]{0,9}$/.test(attemptText) ? Number(attemptText) : undefined;
    if (attemptText !== '' && (expectedAttempt === undefined || expectedAttempt > 2_147_483_647)) {
      problems.push(`expected_attempt must be a whole number >= 1 (got ${JSON.stringify(attemptValue)})`);
    }
    const statusValue = field('expected_status');
    const expectedStatus =
      typeof statusValue === 'string' && statusValue.trim() !== '' ? statusValue.trim() : undefined;
    if (expectedStatus !== undefined && !(STATUSES as readonly string[]).includes(expectedStatus)) {
      problems.push(`expected_status must be one of ${STATUSES.join(', ')} (got ${JSON.stringify(statusValue)})`);
    }
    const outcome = field('outcome');
    if (typeof outcome === 'string' && outcome !== '' && outcome !== 'completed' && outcome !== 'failed') {
      problems.push(`outcome must be completed or failed (got ${JSON.stringify(outcome)})`);
    }
    const result = jsonField('result');
    const error = jsonField('error');
    const evidence = jsonField('evidence');
    if (outcome === 'completed' && (result === undefined || error !== undefined))
      problems.push('a completed row needs a result and no error');
    if (outcome === 'failed' && (error === undefined || result !== undefined))
      problems.push('a failed row needs an error and no result');
    const reasonValue = field('reason');
    const reason = typeof reasonValue === 'string' && reasonValue.trim() !== '' ? reasonValue : defaultReason;
    if (reason === undefined || reason.trim() === '')
      problems.push('reason is missing (a column, or --reason for every row)');
    const fingerprintValue = field('fingerprint');
    const fingerprint = typeof fingerprintValue === 'string' ? fingerprintValue : '';
    const ref = `${String(field('tenant'))}\u0000${String(field('key'))}`;
    const earlier = seen.get(ref);
    if (earlier !== undefined) problems.push(`the same operation as ${earlier}`);
    seen.set(ref, record.where);
    if (problems.length === 0) {
      try {
        const input = parseResolveInput({
          tenant: field('tenant'),
          key: field('key'),
          outcome,
          reason,
          expectedAttempt,
          ...(expectedStatus === undefined ? {} : { expectedStatus }),
          fingerprint: fingerprint === '' ? PLACEHOLDER : fingerprint,
          ...(result === undefined ? {} : { result }),
          ...(error === undefined ? {} : { error }),
          ...(evidence === undefined ? {} : { evidence }),
        });
        rows.push({ line: record.line, where: record.where, input: { ...input, fingerprint } });
      } catch (failure) {
        problems.push(
          failure instanceof SettleInputError ? failure.message.replace(/^invalid resolution: /, '') : String(failure),
        );
      }
    }
    if (problems.length > 0) errors.push(`${record.where}: ${problems.join('; ')}`);
  }
  return { rows, errors };
}

interface FileRecord {
  readonly line: number;
  readonly where: string;
  readonly values: Record<string, unknown>;
  /** A row that could not be read into fields. */
  readonly problem?: string;
}

function jsonRecords(text: string): { list: FileRecord[] } | { error: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { error: `not valid JSON: ${(error as Error).message}` };
  }
  if (!Array.isArray(value)) return { error: 'a JSON file must hold an array of rows' };
  return {
    list: value.map((item, index) => ({
      line: index + 1,
      where: `row ${index + 1}`,
      values:
        typeof item === 'object' && item !== null && !Array.isArray(item) ? (item as Record<string, unknown>) : {},
    })),
  };
}

function csvRecords(text: string): { list: FileRecord[] } | { error: string } {
  const lines = parseCsv(text);
  if ('error' in lines) return lines;
  const [header, ...body] = lines.rows;
  if (header === undefined) return { list: [] };
  const names = header.fields.map((h) => h.trim());
  const unknown = names.filter((n) => !(COLUMNS as readonly string[]).includes(n));
  if (unknown.length > 0)
    return { error: `line ${header.line}: unknown column(s) ${unknown.join(', ')} (columns: ${COLUMNS.join(',')})` };
  for (const name of REQUIRED) {
    if (names.includes(name)) continue;
    const why =
      name === 'expected_attempt'
        ? " (the attempt each row's evidence concerns, as read with the operation: it is never filled in at apply time)"
        : '';
    return { error: `line ${header.line}: the header lacks the column ${name}${why}` };
  }
  const list: FileRecord[] = [];
  for (const row of body) {
    if (row.fields.length === 1 && row.fields[0]?.trim() === '') continue; // a blank line
    const values: Record<string, unknown> = {};
    if (row.fields.length !== names.length) {
      list.push({
        line: row.line,
        where: `line ${row.line}`,
        values: {},
        problem: `${row.fields.length} fields, the header has ${names.length}`,
      });
      continue;
    }
    names.forEach((name, i) => (values[name] = row.fields[i]));
    list.push({ line: row.line, where: `line ${row.line}`, values });
  }
  return { list };
}

/** RFC 4180 CSV: fields in double quotes may hold commas, newlines and doubled quotes. */
function parseCsv(text: string): { rows: { line: number; fields: string[] }[] } | { error: string } {
  const rows: { line: number; fields: string[] }[] = [];
  let fields: string[] = [];
  let field = '';
  let quoted = false;
  let line = 1;
  let rowLine = 1;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i += 1;
      } else if (c === '"') {
        quoted = false;
      } else {
        if (c === '\n') line += 1;
        field += c;
      }
    } else if (c === '"' && field === '') {
      quoted = true;
    } else if (c === ',') {
      fields.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i += 1;
      fields.push(field);
      rows.push({ line: rowLine, fields });
      fields = [];
      field = '';
      line += 1;
      rowLine = line;
    } else {
      field += c;
    }
  }
  if (quoted) return { error: `line ${rowLine}: a quoted field is not closed` };
  if (field !== '' || fields.length > 0) {
    fields.push(field);
    rows.push({ line: rowLine, fields });
  }
  return { rows };
}
