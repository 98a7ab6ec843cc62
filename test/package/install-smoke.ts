// The packaging test (.ci/run): `npm pack` this checkout (the prepare script builds dist/),
// install the tarball into a scratch app, type-check the app with the package's own .d.ts,
// migrate a real PostgreSQL with the installed `pg-settle` binary, run the app against it, and
// read the result back with the installed CLI. The app is the README's "Use it in your app"
// program, verbatim. Usage: npx tsx test/package/install-smoke.ts
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile, mkdir, copyFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { provisionPostgres } from '../../src/dev-server/provision.js';

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

const source = await readFile(APP_SOURCE, 'utf8');
const readme = await readFile(path.join(ROOT, 'README.md'), 'utf8');
check(readme.includes(`\`\`\`ts\n${source}\`\`\``), 'README.md embeds test/package/app/main.ts verbatim');

const rootPackage = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
  devDependencies: Record<string, string>;
};
const work = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-install-'));
const server = await provisionPostgres();
try {
  const tarball = await step('npm pack (prepare builds dist/)', async () => {
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: ROOT, maxBuffer: 64 << 20 });
    const [report] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
    if (report === undefined) throw new Error('npm pack printed no report');
    check(report.files.some((f) => f.path === 'dist/src/index.js'), 'the tarball holds dist/src/index.js');
    return path.join(work, report.filename);
  });

  const app = path.join(work, 'app');
  await mkdir(app);
  await writeFile(path.join(app, 'package.json'), `${JSON.stringify({ name: 'scratch-app', private: true, type: 'module' }, null, 2)}\n`);
  await writeFile(
    path.join(app, 'tsconfig.json'),
    `${JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, types: ['node'], outDir: 'dist', skipLibCheck: false } }, null, 2)}\n`,
  );
  await copyFile(APP_SOURCE, path.join(app, 'main.ts'));

  await step('npm install the tarball into a scratch app', async () => {
    const pins = ['typescript', '@types/node'].map((name) => `${name}@${rootPackage.devDependencies[name]}`);
    const { stderr } = await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball, ...pins], { cwd: app, maxBuffer: 64 << 20 });
    const major = Number(process.versions.node.split('.')[0]);
    const ebadengine = stderr.split('\n').filter((line) => line.includes('EBADENGINE'));
    if (major >= 24) check(ebadengine.length === 0, `no EBADENGINE warning on Node ${process.versions.node}`);
    else console.log(`note - Node ${process.versions.node} is below the supported >=24: ${ebadengine.length} EBADENGINE lines`);
  });

  await step('type-check and compile the app against the package\'s .d.ts', async () => {
    await run(process.execPath, [path.join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], { cwd: app });
    check(true, 'tsc -p (strict, NodeNext, skipLibCheck false) passes');
  });

  const bin = path.join(app, 'node_modules', '.bin', 'pg-settle');
  const env = { ...process.env, DATABASE_URL: server.adminUrl };
  await step('installed pg-settle migrate, app, stats', async () => {
    const version = await run(bin, ['--version'], { cwd: app, env });
    check(/^pg-settle \d+\.\d+\.\d+/.test(version.stdout), `installed binary answers ${version.stdout.trim()}`);
    const migrated = await run(bin, ['migrate', '--json'], { cwd: app, env });
    check((JSON.parse(migrated.stdout) as { ok: boolean }).ok, 'pg-settle migrate (compiled CLI from the tarball) applied the migrations');
    const result = await run(process.execPath, [path.join(app, 'dist', 'main.js')], { cwd: app, env });
    check(result.stdout.trim() === JSON.stringify({ first: 'completed', second: 'replay', charges: 1 }), `the app ran once and replayed: ${result.stdout.trim()}`);
    check(result.stderr === '', 'the app printed nothing on stderr');
    const stats = await run(bin, ['stats', '--json'], { cwd: app, env });
    const tenants = (JSON.parse(stats.stdout) as { tenants: { tenant: string; completed: number }[] }).tenants;
    check(tenants.some((t) => t.tenant === 'acme' && t.completed === 1), 'pg-settle stats sees the completed operation');
  });
} finally {
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
console.log('install smoke: all checks passed');
