import type pg from 'pg';

/** JSON given as exact text (e.g. `{"a":10.50}`), sent to PostgreSQL without re-serialising. */
export class JsonText {
  constructor(readonly text: string) {}
}

type SqlType = 'text' | 'text[]' | 'jsonb' | 'bigint' | 'integer' | 'interval' | 'uuid' | 'boolean';

/** Parameter types of the API functions, by parameter name. */
const TYPES: Record<string, SqlType> = {
  tenant: 'text',
  key: 'text',
  request: 'jsonb',
  principal: 'text',
  scopes: 'text[]',
  binding_generation: 'bigint',
  lease: 'interval',
  worker: 'text',
  max_attempts: 'integer',
  rerun_after_unknown: 'boolean',
  attempt: 'integer',
  lease_token: 'uuid',
  fingerprint: 'text',
  result: 'jsonb',
  error: 'jsonb',
  retryable: 'boolean',
  additional_attempts: 'integer',
  reason: 'text',
  role: 'text',
  below_generation: 'bigint',
};

function sqlValue(type: SqlType, value: unknown): unknown {
  if (value === null) return null;
  if (type !== 'jsonb') return value;
  return value instanceof JsonText ? value.text : JSON.stringify(value);
}

/**
 * `select r.*, r.result::text as result_text from settle.<fn>(name => $1::type, ...) r`.
 * Arguments that are `undefined` are left out, so the function's defaults apply.
 */
export async function callNamed<R>(
  client: pg.ClientBase,
  fn: string,
  args: Readonly<Record<string, unknown>>,
  columns = 'r.*',
): Promise<R> {
  const names = Object.keys(args).filter((name) => args[name] !== undefined);
  const values: unknown[] = [];
  const list = names.map((name) => {
    const type = TYPES[name];
    if (type === undefined) throw new Error(`callNamed: no SQL type known for parameter ${name}`);
    values.push(sqlValue(type, args[name]));
    return `${name} => $${values.length}::${type}`;
  });
  const { rows } = await client.query(`select ${columns} from settle.${fn}(${list.join(', ')}) r`, values);
  if (rows.length !== 1) throw new Error(`settle.${fn} returned ${rows.length} rows, expected 1`);
  return rows[0] as R;
}
