// The HTTP examples run as docs/http.md says ("Run the examples"): the admin's psql statements,
// then each documented `npx tsx examples/http/….ts` command as a settle_app login against a real,
// migrated database, and each documented `npx tsx examples/http/throwaway.ts …` command on a server
// of its own; docs/http.md embeds each file verbatim, and its install line names every
// package the examples import, at the major version pg-settle's package.json uses.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

const run = promisify(execFile);
const doc = readFileSync('docs/http.md', 'utf8');
const files = ['examples/http/express-app.ts', 'examples/http/fastify-app.ts', 'examples/http/hono-app.ts'];
const expectations: Record<string, unknown> = {
  'examples/http/express-app.ts': [
    expect.stringMatching(/^201 \/payments\/ch_\d+$/),
    '201 replayed=true',
    '422 application/problem+json',
    '422',
    '201',
    'charges=1',
  ],
  'examples/http/fastify-app.ts': ['201 201 replayed=true orders=1', '400', '200'],
  'examples/http/hono-app.ts': ['201 201 replayed=true orders=1', '422', '400', '200'],
};

/** The documented setup: the -c statements of the psql line under "Run the examples". */
const setupStatements = (): string[] => {
  const line = doc.split('\n').find((l) => l.startsWith('psql "$ADMIN_URL"'));
  if (line === undefined) throw new Error('docs/http.md has no psql setup line');
  return [...line.matchAll(/-c "([^"]+)"/g)].map((m) => m[1]!);
};
/** The documented command of each example (after its DATABASE_URL=… placeholder). */
const commandOf = (file: string): string => {
  const line = doc.split('\n').find((l) => l.startsWith('DATABASE_URL=') && l.endsWith(` npx tsx ${file}`));
  if (line === undefined) throw new Error(`docs/http.md documents no command for ${file}`);
  return line.slice(line.indexOf(' ') + 1);
};

let db: TestDatabase;
let login: string;
let deploy: string;
let loginUrl: string;
beforeAll(async () => {
  db = await createTestDatabase('http_examples');
  login = `shop_app_${randomBytes(4).toString('hex')}`; // roles are cluster-wide: a fresh name
  deploy = `deploy_${randomBytes(4).toString('hex')}`;
  // The statements run as the recommended admin: a CREATEROLE login that owns the database (not a
  // superuser, who may do what that login may not, e.g. create a schema for another role).
  const su = new pg.Client({ connectionString: db.url });
  await su.connect();
  try {
    await su.query(`create role ${deploy} login createrole`);
    await su.query(`alter database "${new URL(db.url).pathname.slice(1)}" owner to ${deploy}`);
  } finally {
    await su.end();
  }
  const adminUrl = new URL(db.url);
  adminUrl.username = deploy;
  adminUrl.password = '';
  const admin = new pg.Client({ connectionString: adminUrl.toString() });
  await admin.connect();
  try {
    for (const statement of setupStatements()) await admin.query(statement.replaceAll('shop_app', login));
  } finally {
    await admin.end();
  }
  const url = new URL(db.url);
  url.username = login;
  url.password = 'shop';
  loginUrl = url.toString();
});
afterAll(async () => {
  if (db !== undefined && login !== undefined) {
    const su = new pg.Client({ connectionString: db.url });
    await su.connect();
    await su
      .query(`drop schema if exists shop cascade; drop owned by ${login}; drop role if exists ${login}`)
      .catch(() => {});
    await su
      .query(
        `alter database "${new URL(db.url).pathname.slice(1)}" owner to current_user; drop owned by ${deploy}; drop role if exists ${deploy}`,
      )
      .catch(() => {});
    await su.end();
  }
  await db?.drop();
});

describe('HTTP examples', () => {
  it('the setup makes a settle_app login that may create in schema shop and not in public', () => {
    expect(setupStatements()).toEqual([
      "create role shop_app login password 'shop' in role settle_app",
      'create schema shop',
      'grant usage, create on schema shop to shop_app',
    ]);
  });

  it.each(files)('%s runs with its documented command as a settle_app login', { timeout: 120_000 }, async (file) => {
    const command = commandOf(file);
    expect(command).toBe(`npx tsx ${file}`);
    const { stdout } = await run('sh', ['-c', command], {
      env: { ...process.env, DATABASE_URL: loginUrl },
      timeout: 110_000,
    });
    expect(stdout.trim().split('\n')).toEqual(expectations[file]);
  });

  it.each(files)(
    '%s runs against a throwaway server with its documented command',
    { timeout: 300_000 },
    async (file) => {
      const name = file.replace('examples/http/', '').replace('.ts', '');
      const command = `npx tsx examples/http/throwaway.ts ${name}`;
      expect(doc.split('\n')).toContain(command);
      const env: NodeJS.ProcessEnv = { ...process.env };
      delete env.DATABASE_URL;
      const { stdout, stderr } = await run('sh', ['-c', command], { env, timeout: 290_000 });
      expect(stdout.trim().split('\n')).toEqual(expectations[file]);
      expect(stderr).toContain('example: starting a throwaway PostgreSQL');
    },
  );

  it('the Express example created its table in schema shop, owned by the login, not in public', async () => {
    const su = new pg.Client({ connectionString: db.url });
    await su.connect();
    try {
      const tables = await su.query<{ schema: string; owner: string }>(
        `select schemaname as schema, tableowner as owner from pg_tables where tablename = 'transfers'`,
      );
      expect(tables.rows).toEqual([{ schema: 'shop', owner: login }]);
    } finally {
      await su.end();
    }
  });

  it.each(files)('docs/http.md embeds %s verbatim', (file) => {
    const source = readFileSync(file, 'utf8');
    expect(doc).toContain(`<!-- example: ${file} -->\n\`\`\`ts\n${source}\`\`\`\n<!-- /example -->`);
  });

  it('the install line names every package the examples import, at the major version pg-settle uses', () => {
    const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as Record<
      string,
      Record<string, string> | undefined
    >;
    const versionOf = (name: string): string | undefined =>
      manifest.dependencies?.[name] ?? manifest.peerDependencies?.[name] ?? manifest.devDependencies?.[name];
    const install = doc
      .split('\n')
      .filter((l) => l.startsWith('npm install pg-settle'))
      .join(' ');
    for (const file of files) {
      const imports = [...readFileSync(file, 'utf8').matchAll(/^import .* from '([^'.][^']*)';$/gm)].map((m) => m[1]!);
      for (const name of imports.filter((i) => !i.startsWith('node:'))) {
        const major = /\d+/.exec(versionOf(name) ?? '')?.[0];
        expect(major, `${name} is a dependency of pg-settle`).toBeDefined();
        expect(install, `${file} imports ${name}`).toContain(` ${name}@${major}`);
      }
    }
  });
});
