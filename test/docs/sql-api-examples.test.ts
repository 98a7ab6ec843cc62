// The psql examples of docs/sql-api.md show what the functions really return: every
// `select * from settle.<fn>(...)` example prints exactly the columns the migrated function
// returns, in order (pg_proc), in expanded (\gx) and in aligned output alike. The examples are
// captured from docs/examples/sql-api-walkthrough.sql (its header says how); a function that
// gains a column (claim's `reason` and `dead_letter_reason`) makes this test fail until they
// are captured again.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

interface Example {
  readonly fn: string;
  readonly line: number;
  readonly columns: string[];
}

/** Every `select * from settle.<fn>(...)` of a ```sql block, with the column names its output shows. */
export function selectStarExamples(markdown: string): Example[] {
  const examples: Example[] = [];
  const lines = markdown.split('\n');
  let inSql = false;
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i] ?? '';
    if (line.startsWith('```')) {
      inSql = line === '```sql';
      continue;
    }
    const call = inSql ? /^select \* from settle\.([a-z_]+)\(.*\)(?: \\g(x))?;?$/.exec(line) : null;
    if (call === null) continue;
    const fn = call[1]!;
    const columns: string[] = [];
    if (call[2] === 'x') {
      for (let j = i + 1; j < lines.length; j += 1) {
        const next = lines[j] ?? '';
        if (next.startsWith('-[ RECORD 1 ]')) continue;
        const field = /^([a-z_]+)\s+\| /.exec(`${next} `);
        if (next.startsWith('-[ RECORD 2 ]') || field === null) break;
        columns.push(field[1]!);
      }
    } else {
      const header = lines[i + 1] ?? '';
      if (!/^[ a-z_|]+$/.test(header) || !header.includes('|')) continue; // an error, \gset, or no output shown
      columns.push(...header.split('|').map((c) => c.trim()));
    }
    if (columns.length > 0) examples.push({ fn, line: i + 1, columns });
  }
  return examples;
}

let db: TestDatabase;
let outputs: Map<string, string[]>;
beforeAll(async () => {
  db = await createTestDatabase('sql_api_examples');
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string; columns: string[] }>(`
      select p.proname as name,
             coalesce(
               (select array_agg(p.proargnames[i] order by i)
                  from generate_subscripts(p.proargmodes, 1) as i where p.proargmodes[i] in ('o', 't', 'b')),
               (select array_agg(a.attname::text order by a.attnum)
                  from pg_type t join pg_attribute a on a.attrelid = t.typrelid and a.attnum > 0 and not a.attisdropped
                 where t.oid = p.prorettype),
               array[p.proname::text]) as columns
        from pg_proc p
       where p.pronamespace = 'settle'::regnamespace`);
    outputs = new Map(rows.map((r) => [r.name, r.columns]));
  } finally {
    await client.end();
  }
});
afterAll(async () => {
  await db?.drop();
});

describe('docs/sql-api.md psql examples', () => {
  const examples = selectStarExamples(readFileSync('docs/sql-api.md', 'utf8'));

  it('finds the select * examples, claim among them', () => {
    expect(examples.length).toBeGreaterThan(10);
    expect(examples.filter((e) => e.fn === 'claim').length).toBeGreaterThanOrEqual(3);
  });

  it('each shows exactly the columns the function returns, in order', () => {
    const wrong = examples
      .filter((e) => JSON.stringify(e.columns) !== JSON.stringify(outputs.get(e.fn)))
      .map(
        (e) =>
          `line ${e.line} settle.${e.fn}: shows ${e.columns.join(',')}; returns ${outputs.get(e.fn)?.join(',') ?? '(no such function)'}`,
      );
    expect(wrong).toEqual([]);
  });

  it('the parser reads both psql layouts', () => {
    const doc = [
      '```sql',
      'select * from settle.f(a => 1) \\gx',
      '-[ RECORD 1 ]----+---',
      'outcome          | acquired',
      'dead_letter_reason | (null)',
      '```',
      '```sql',
      "select * from settle.g(x => 'y');",
      ' expired | dead_lettered',
      '---------+--------------',
      '       1 |             0',
      '```',
    ].join('\n');
    expect(selectStarExamples(doc)).toEqual([
      { fn: 'f', line: 2, columns: ['outcome', 'dead_letter_reason'] },
      { fn: 'g', line: 8, columns: ['expired', 'dead_lettered'] },
    ]);
  });
});
