// The HTTP examples against an INSTALLED pg-settle: examples/http/express-app.ts,
// fastify-app.ts and hono-app.ts, their imports rewritten to 'pg-settle', 'pg-settle/express',
// 'pg-settle/fastify' and 'pg-settle/fetch', compiled with the app's TypeScript against the installed .d.ts, and run
// with Node as a settle_app login made the way docs/http.md ("Run the examples") makes it.
//
// For the packaging test: `await checkHttpApps({ app, adminUrl, check })` after the tarball is
// installed into `app` and the database migrated. Standalone (packs and installs by itself):
//   npx tsx test/package/http-apps.ts
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { snippetsOf } from './snippets.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const EXAMPLES = {
  'express-app': (lines: string[]) =>
    lines.length === 6 &&
    /^201 \/payments\/ch_\d+$/.test(lines[0] ?? '') &&
    lines.slice(1).join('|') === '201 replayed=true|422 application/problem+json|422|201|charges=1',
  'fastify-app': (lines: string[]) => lines.join('|') === '201 201 replayed=true orders=1|400|200',
  'hono-app': (lines: string[]) => lines.join('|') === '201 201 replayed=true orders=1|422|400|200',
} as const;

export interface HttpAppsOptions {
  /** The scratch app's directory: the tarball is installed there. */
  readonly app: string;
  /** A superuser URL of the migrated database. */
  readonly adminUrl: string;
  readonly check: (condition: boolean, message: string) => void;
}

export async function checkHttpApps({ app, adminUrl, check }: HttpAppsOptions): Promise<void> {
  const rootPackage = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
    devDependencies: Record<string, string>;
  };
  const needed = [
    'express',
    'fastify',
    'hono',
    '@hono/node-server',
    '@types/express',
    'typescript',
    '@types/node',
  ].filter((name) => !existsSync(path.join(app, 'node_modules', name, 'package.json')));
  if (needed.length > 0) {
    await run(
      'npm',
      [
        'install',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        ...needed.map((name) => `${name}@${rootPackage.devDependencies[name]}`),
      ],
      { cwd: app, maxBuffer: 64 << 20 },
    );
  }
  const dir = path.join(app, 'http-examples');
  await mkdir(dir, { recursive: true });
  for (const name of Object.keys(EXAMPLES)) {
    const source = await readFile(path.join(ROOT, 'examples', 'http', `${name}.ts`), 'utf8');
    const [snippet] = snippetsOf(`\`\`\`ts\n${source}\`\`\`\n`, `examples/http/${name}.ts`);
    if (snippet === undefined || snippet.source.includes('../src/'))
      throw new Error(`examples/http/${name}.ts: imports not rewritten`);
    await writeFile(path.join(dir, `${name}.ts`), snippet.source);
  }
  await writeFile(
    path.join(dir, 'tsconfig.json'),
    `${JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, types: ['node'], outDir: 'dist', rootDir: '.', skipLibCheck: false } }, null, 2)}\n`,
  );
  await run(process.execPath, [path.join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], {
    cwd: app,
  }).catch((error: { stdout?: string }) => {
    throw new Error(`tsc failed on the HTTP examples:\n${error.stdout ?? String(error)}`);
  });
  check(
    true,
    'the HTTP examples type-check against the installed pg-settle/express, pg-settle/fastify and pg-settle/fetch',
  );

  // The login and schema of docs/http.md, "Run the examples" (a fresh name: roles are cluster-wide).
  const doc = await readFile(path.join(ROOT, 'docs', 'http.md'), 'utf8');
  const setup = doc.split('\n').find((line) => line.startsWith('psql "$ADMIN_URL"')) ?? '';
  const login = `shop_app_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    for (const [, statement] of setup.matchAll(/-c "([^"]+)"/g))
      await admin.query(statement!.replaceAll('shop_app', login));
    const url = new URL(adminUrl);
    url.username = login;
    url.password = 'shop';
    for (const [name, expected] of Object.entries(EXAMPLES)) {
      const { stdout } = await run(process.execPath, [path.join(dir, 'dist', `${name}.js`)], {
        cwd: app,
        env: { ...process.env, DATABASE_URL: url.toString() },
      });
      const lines = stdout.trim().split('\n');
      check(expected(lines), `the installed ${name} example ran as a settle_app login: ${lines.join(' | ')}`);
    }
  } finally {
    await admin
      .query(`drop schema if exists shop cascade; drop owned by ${login}; drop role if exists ${login}`)
      .catch(() => {});
    await admin.end();
  }
}

// Standalone: pack, install into a scratch app, migrate a throwaway PostgreSQL, check.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { provisionPostgres } = await import('../../src/dev-server/provision.js');
  const check = (condition: boolean, message: string): void => {
    if (!condition) throw new Error(`http apps: ${message}`);
    console.log(`ok - ${message}`);
  };
  const work = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-http-'));
  const server = await provisionPostgres();
  try {
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], {
      cwd: ROOT,
      maxBuffer: 64 << 20,
    });
    const [report] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string }[];
    const app = path.join(work, 'app');
    await mkdir(app);
    await writeFile(
      path.join(app, 'package.json'),
      `${JSON.stringify({ name: 'scratch-http-app', private: true, type: 'module' }, null, 2)}\n`,
    );
    await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(work, report!.filename)], {
      cwd: app,
      maxBuffer: 64 << 20,
    });
    const dbName = `http_apps_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: server.adminUrl });
    await admin.connect();
    await admin.query(`create database ${dbName}`);
    await admin.end();
    const adminUrl = new URL(server.adminUrl);
    adminUrl.pathname = `/${dbName}`;
    await run(path.join(app, 'node_modules', '.bin', 'pg-settle'), ['migrate', '--database-url', adminUrl.toString()], {
      cwd: app,
    });
    await checkHttpApps({ app, adminUrl: adminUrl.toString(), check });
    console.log('http apps: all checks passed');
  } finally {
    await server.stop();
    await rm(work, { recursive: true, force: true });
  }
}
