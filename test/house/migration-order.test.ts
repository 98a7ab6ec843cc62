import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// sql/migrations reads in order (sql/README.md): a function is created before every file that
// calls it, a table's constraints are written where the table is created, and privileges are
// given in one place, the grants file. Reads the files only (no database): a regular expression
// over `create [or replace] function` names and `schema.name(` call sites is enough, once
// comments and string literals are blanked out.
//
// The grants rule, precisely:
//   * a file before the grants file has no GRANT statement and no REVOKE other than
//     `revoke ... from public`: taking PUBLIC's default privileges away right where an object is
//     created grants nothing, and keeps the object closed even before the grants file runs;
//   * the grants file comes after every file it grants on (the call check below sees its
//     `on function settle.x(` as a use of settle.x);
//   * a file after the grants file grants what it creates itself: once released, the grants
//     file is never edited again, so every later migration grants its own new objects
//     (00016_batch.sql is such a file);
//   * dynamic SQL counts too: a GRANT or REVOKE written as a string inside a DO block. The one
//     allowed is 00001's membership of the migrating user in settle_owner, which every later
//     file needs before it can `set local role settle_owner` (src/db/migrate.ts revokes it when
//     the migrations end).
const ROOT = path.resolve(import.meta.dirname, '../..');
const DIR = path.join(ROOT, 'sql/migrations');
const GRANTS_FILE = '00015_grants.sql';
const ALLOWED_DYNAMIC = [{ file: '00001_create_roles_and_schemas.sql', statement: 'grant settle_owner to %I' }];

interface Migration {
  readonly file: string;
  readonly text: string;
}

/** `text` with every `--` and block comment and every single-quoted literal replaced by a space. */
function blankCommentsAndStrings(text: string): string {
  return text.replace(/--[^\n]*|\/\*[\s\S]*?\*\/|'(?:[^']|'')*'/g, ' ');
}

/** `text` (comments and strings already blanked) without dollar-quoted bodies: top-level SQL only. */
function topLevel(code: string): string {
  return code.replace(/\$([a-z_]*)\$[\s\S]*?\$\1\$/gi, ' ');
}

/** Each function `schema.name` with the index of the first file that creates it. */
function definitions(files: readonly Migration[]): Map<string, number> {
  const created = new Map<string, number>();
  files.forEach(({ text }, index) => {
    const code = blankCommentsAndStrings(text);
    for (const match of code.matchAll(/\bcreate\s+(?:or\s+replace\s+)?function\s+(settle(?:_private)?\.\w+)/gi)) {
      const name = (match[1] ?? '').toLowerCase();
      if (!created.has(name)) created.set(name, index);
    }
  });
  return created;
}

/** `file: schema.name (created in later file)` for every call of a function before its file. */
function callsBeforeDefinition(files: readonly Migration[]): string[] {
  const created = definitions(files);
  return files.flatMap(({ file, text }, index) => {
    const code = blankCommentsAndStrings(text);
    const early = new Set<string>();
    for (const match of code.matchAll(/\b(settle(?:_private)?\.\w+)\s*\(/gi)) {
      const name = (match[1] ?? '').toLowerCase();
      const at = created.get(name);
      if (at !== undefined && at > index) early.add(`${file}: ${name} (created in ${files[at]?.file})`);
    }
    return [...early];
  });
}

/** Every privilege statement of a file outside the rule above. */
function misplacedPrivileges(files: readonly Migration[], grantsFile: string): string[] {
  const grantsAt = files.findIndex(({ file }) => file === grantsFile);
  if (grantsAt < 0) return [`no ${grantsFile}`];
  return files.flatMap(({ file, text }, index) => {
    if (index >= grantsAt) return [];
    const hits: string[] = [];
    const code = blankCommentsAndStrings(text);
    for (const statement of topLevel(code).split(';')) {
      const words = statement.trim().replace(/\s+/g, ' ').toLowerCase();
      const privilege = /^(grant|revoke)\b/.test(words) || /^alter default privileges\b.*\bgrant\b/.test(words);
      if (privilege && !/^revoke .* from public$/.test(words)) hits.push(`${file}: ${words.slice(0, 100)}`);
    }
    // Dynamic SQL: a string literal that is a GRANT or REVOKE statement.
    for (const match of text.replace(/--[^\n]*/g, ' ').matchAll(/'((?:grant|revoke)\s(?:[^']|'')*)'/gi)) {
      const statement = (match[1] ?? '').toLowerCase();
      if (!ALLOWED_DYNAMIC.some((allowed) => allowed.file === file && allowed.statement.toLowerCase() === statement)) {
        hits.push(`${file}: dynamic ${statement.slice(0, 100)}`);
      }
    }
    return hits;
  });
}

/** `file: alter table t ...` for a constraint added, dropped or changed outside the file creating t. */
function constraintsElsewhere(files: readonly Migration[]): string[] {
  const tableFile = new Map<string, string>();
  for (const { file, text } of files) {
    for (const match of blankCommentsAndStrings(text).matchAll(/\bcreate\s+(?:unlogged\s+)?table\s+([\w.]+)/gi)) {
      tableFile.set((match[1] ?? '').toLowerCase(), file);
    }
  }
  return files.flatMap(({ file, text }) => {
    // Dynamic SQL included: the strings of a DO block are read as statements too.
    const code = text.replace(/--[^\n]*/g, ' ');
    return [
      ...code.matchAll(/\balter\s+table\s+(?:only\s+)?([\w.]+)[^;]*?\b(?:add|drop|alter|validate)\s+constraint\b/gi),
    ]
      .map((match) => (match[1] ?? '').toLowerCase())
      .filter((table) => tableFile.get(table) !== file)
      .map((table) => `${file}: a constraint of ${table} (created in ${tableFile.get(table) ?? 'no migration'})`);
  });
}

function readMigrations(): Migration[] {
  return readdirSync(DIR)
    .filter((file) => /^\d{5}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => ({ file, text: readFileSync(path.join(DIR, file), 'utf8') }));
}

describe('the checks find what they look for', () => {
  const sample: Migration[] = [
    {
      file: '00001_a.sql',
      text: [
        'create function settle_private._early() returns int language sql as $$ select settle_private._late() $$;',
        "-- settle_private._late() in a comment is not a call; 'settle.nothing(' in a string neither",
        "comment on function settle_private._early() is 'calls settle_private._late()';",
        'revoke all on function settle_private._early() from public;',
        'grant execute on function settle_private._early() to settle_app;',
        "do $$ begin execute 'grant settle_owner to bob'; end $$;",
        'create table settle_private.t (x int);',
      ].join('\n'),
    },
    {
      file: '00002_b.sql',
      text: [
        'create or replace function settle_private._late() returns int language sql as $$ select 1 $$;',
        'alter table settle_private.t add constraint x_positive check (x > 0);',
        "do $$ begin execute 'alter table settle_private.t drop constraint x_positive'; end $$;",
      ].join('\n'),
    },
    { file: '00003_grants.sql', text: 'grant execute on function settle_private._late() to settle_app;' },
    { file: '00004_c.sql', text: 'grant execute on function settle_private._c() to settle_app;' },
  ];

  it('a call of a function created in a later file, and only that', () => {
    expect(callsBeforeDefinition(sample)).toEqual(['00001_a.sql: settle_private._late (created in 00002_b.sql)']);
  });

  it('a grant or dynamic grant before the grants file; revoke from public and later files pass', () => {
    expect(misplacedPrivileges(sample, '00003_grants.sql')).toEqual([
      '00001_a.sql: grant execute on function settle_private._early() to settle_app',
      '00001_a.sql: dynamic grant settle_owner to bob',
    ]);
  });

  it('a constraint changed outside the file that creates its table, dynamic SQL included', () => {
    expect(constraintsElsewhere(sample)).toEqual([
      '00002_b.sql: a constraint of settle_private.t (created in 00001_a.sql)',
      '00002_b.sql: a constraint of settle_private.t (created in 00001_a.sql)',
    ]);
  });
});

describe('sql/migrations', () => {
  const files = readMigrations();

  it('creates every settle / settle_private function before the first file that calls it', () => {
    expect(files.length).toBeGreaterThan(10);
    expect(definitions(files).size).toBeGreaterThan(50);
    expect(callsBeforeDefinition(files)).toEqual([]);
  });

  it(`gives privileges only in ${GRANTS_FILE} and the files after it`, () => {
    expect(files.map(({ file }) => file)).toContain(GRANTS_FILE);
    expect(misplacedPrivileges(files, GRANTS_FILE)).toEqual([]);
  });

  it('writes every table constraint in the file that creates the table', () => {
    expect(constraintsElsewhere(files)).toEqual([]);
  });
});
