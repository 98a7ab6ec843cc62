import { readFile } from 'node:fs/promises';
import type pg from 'pg';
import { scriptPath } from './measure.js';

/**
 * Runs a bench/scripts/*.sql pgbench script from Node on one connection, the way
 * `pgbench -M prepared` does: `\set x random(lo, hi)`, `:var` as untyped parameters of named
 * prepared statements, `\gset` copying the row's columns into variables (no row: an error, as
 * pgbench aborts). Each statement is its own autocommit transaction, as in the scripts. Used
 * by the cpu scenario to measure the server CPU of exactly the statements pgbench sends.
 */
interface SetCommand {
  readonly name: string;
  readonly lo: string;
  readonly hi: string;
}
interface Statement {
  readonly name: string;
  readonly text: string;
  readonly params: readonly string[];
  readonly gset: boolean;
}
export interface ParsedScript {
  readonly sets: readonly SetCommand[];
  readonly statements: readonly Statement[];
}

const VARIABLE = /(?<!:):([a-z_][a-z0-9_]*)/gi;

export function parseScript(source: string, prefix: string): ParsedScript {
  const sets: SetCommand[] = [];
  const statements: Statement[] = [];
  let buffer: string[] = [];
  const flush = (gset: boolean): void => {
    const sql = buffer.join('\n').trim().replace(/;$/, '');
    buffer = [];
    if (sql === '') return;
    const params: string[] = [];
    const text = sql.replace(VARIABLE, (_m, name: string) => {
      let index = params.indexOf(name);
      if (index < 0) index = params.push(name) - 1;
      return `$${index + 1}`;
    });
    statements.push({ name: `${prefix}_${statements.length}`, text, params, gset });
  };
  for (const raw of source.split('\n')) {
    const line = raw.replace(/--.*$/, '');
    const set = /^\\set\s+(\w+)\s+random\(\s*([^,]+?)\s*,\s*([^)]+?)\s*\)\s*$/.exec(line.trim());
    if (set !== null) {
      sets.push({ name: set[1] ?? '', lo: set[2] ?? '', hi: set[3] ?? '' });
      continue;
    }
    if (line.trim().startsWith('\\')) throw new Error(`unsupported pgbench meta-command: ${line.trim()}`);
    if (line.includes('\\gset')) {
      buffer.push(line.replace('\\gset', ''));
      flush(true);
    } else if (line.trimEnd().endsWith(';')) {
      buffer.push(line);
      flush(false);
    } else {
      buffer.push(line);
    }
  }
  flush(false);
  return { sets, statements };
}

/** A script of bench/scripts by name, or a generated one by absolute path (the ladder's steps). */
export async function loadScript(file: string): Promise<ParsedScript> {
  // Prepared statements are named after the file: the end of its path keeps the name within
  // PostgreSQL's 63 bytes and tells steps apart (bench/out/ladder/<step>/cycle.sql).
  return parseScript(await readFile(scriptPath(file), 'utf8'), file.replace(/\W+/g, '_').slice(-40));
}

const resolve = (value: string, vars: Map<string, string>): bigint =>
  BigInt(value.startsWith(':') ? (vars.get(value.slice(1)) ?? '0') : value);

function random(lo: bigint, hi: bigint): bigint {
  const span = hi - lo + 1n;
  return lo + BigInt(Math.floor(Math.random() * Number(span)));
}

/** Runs the script `transactions` times on `db`; `defines` are pgbench's -D variables. */
export async function runScript(
  db: pg.Client,
  script: ParsedScript,
  transactions: number,
  defines: Readonly<Record<string, string | number>> = {},
): Promise<void> {
  const vars = new Map<string, string>([
    ['client_id', '0'],
    ...Object.entries(defines).map(([k, v]): [string, string] => [k, String(v)]),
  ]);
  for (let i = 0; i < transactions; i++) {
    for (const set of script.sets) vars.set(set.name, random(resolve(set.lo, vars), resolve(set.hi, vars)).toString());
    for (const st of script.statements) {
      const values = st.params.map((p) => {
        const v = vars.get(p);
        if (v === undefined) throw new Error(`${st.name}: variable :${p} is not set`);
        return v;
      });
      const result = await db.query({ name: st.name, text: st.text, values });
      if (st.gset) {
        const row = result.rows[0] as Record<string, unknown> | undefined;
        if (row === undefined) throw new Error(`${st.name}: \\gset got no row (transaction ${i + 1})`);
        for (const [k, v] of Object.entries(row)) vars.set(k, v instanceof Date ? v.toISOString() : String(v));
      }
    }
  }
}
