import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The published package holds the product only: the client, the CLI, migrate and its SQL, the
// simulator behind `npm start`, the dev server and the `pg-settle/testing` helpers. The build runs
// into a temporary copy so the checkout's own dist/ (which bin/pg-settle.js prefers) is untouched.
const execFileAsync = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
// Nor a lab notebook: benchmark notes and test fixtures stay in the repository.
const NOT_PRODUCT =
  /(^|\/)(test|tests|bench|reliability|harness|notes|fixtures)(\/|$)|\.test\.[cm]?[jt]s$|\.tsbuildinfo$/;

let packDir: string;
let files: string[];

beforeAll(async () => {
  packDir = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-pack-'));
  for (const entry of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'bin', 'sql', 'docs']) {
    await cp(path.join(ROOT, entry), path.join(packDir, entry), { recursive: true });
  }
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  await execFileAsync(
    process.execPath,
    [tsc, '-p', path.join(ROOT, 'tsconfig.build.json'), '--outDir', path.join(packDir, 'dist')],
    { cwd: ROOT },
  );
  const { stdout } = await execFileAsync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: packDir });
  const [report] = JSON.parse(stdout) as { files: { path: string }[] }[];
  files = (report?.files ?? []).map((f) => f.path).sort();
}, 300_000);

afterAll(async () => {
  if (packDir !== undefined) await rm(packDir, { recursive: true, force: true });
});

describe('npm pack --dry-run', () => {
  it('lists the product: client, CLI, migrate, SQL, testing helpers', () => {
    for (const expected of [
      'bin/pg-settle.js',
      'dist/src/index.js',
      'dist/src/testing/index.js',
      'dist/src/cli/main.js',
      'dist/src/db/migrate.js',
      'package.json',
      'LICENSE',
      'docs/client.md',
    ]) {
      expect(files).toContain(expected);
    }
    expect(files.some((f) => f.startsWith('sql/migrations/'))).toBe(true);
  });

  it('lists no harness, test, bench, notes or fixture file', () => {
    expect(files.filter((f) => NOT_PRODUCT.test(f))).toEqual([]);
  });

  it('names its license (with the LICENSE text) and its repository, so a registry page links back', async () => {
    const manifest = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
      license?: string;
      repository?: { type?: string; url?: string };
    };
    expect(manifest.license).toBe('Apache-2.0');
    expect(await readFile(path.join(ROOT, 'LICENSE'), 'utf8')).toMatch(/Apache License\s+Version 2\.0/);
    expect(manifest.repository).toMatchObject({
      type: 'git',
      url: expect.stringMatching(/^git\+https:\/\/github\.com\/[\w-]+\/[\w-]+\.git$/),
    });
  });
});
