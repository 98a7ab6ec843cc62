import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The published package holds the product only: the client, the CLI, migrate and its SQL, the
// simulator behind `npm start`, the dev server, the `pg-settle/testing` helpers, the docs and
// what they link to (deploy/: the Grafana dashboard, alert rules, sql_exporter collector). The build runs
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
  for (const entry of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'bin', 'sql', 'docs', 'deploy']) {
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

describe('npm pack in a clone without node_modules', () => {
  it('prepack says to run npm ci first, instead of tsc: not found', { timeout: 120_000 }, async () => {
    const clone = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-clone-'));
    try {
      await cp(path.join(ROOT, 'package.json'), path.join(clone, 'package.json'));
      const failed = await execFileAsync('npm', ['run', 'prepack'], { cwd: clone }).then(
        () => ({ code: 0, stderr: '' }),
        (error: { code: number; stderr: string }) => error,
      );
      expect(failed.code).toBe(1);
      expect(failed.stderr).toContain('run npm ci first, then npm pack');
      expect(failed.stderr).not.toContain('tsc: not found');
    } finally {
      await rm(clone, { recursive: true, force: true });
    }
  });
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
      'deploy/grafana/pg-settle.dashboard.json',
      'deploy/prometheus/pg-settle.rules.yml',
      'deploy/sql_exporter/pg-settle.collector.yml',
      'deploy/sql_exporter/sql_exporter.yml',
    ]) {
      expect(files).toContain(expected);
    }
    expect(files.some((f) => f.startsWith('sql/migrations/'))).toBe(true);
  });

  it('lists no harness, test, bench, notes or fixture file', () => {
    expect(files.filter((f) => NOT_PRODUCT.test(f))).toEqual([]);
  });

  it('every relative link of a packaged Markdown file resolves inside the package', async () => {
    const shipped = new Set(files);
    const dead: string[] = [];
    let count = 0;
    for (const page of files.filter((f) => f.endsWith('.md'))) {
      // Links in prose only: a fenced block shows code, not links.
      const text = (await readFile(path.join(packDir, page), 'utf8')).replace(
        /^\s*```[^\n]*\n[\s\S]*?^\s*```\s*$/gm,
        '',
      );
      for (const match of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        const link = match[1] ?? '';
        if (/^[a-z]+:/.test(link)) continue;
        count += 1;
        const target = path.posix.normalize(path.posix.join(path.posix.dirname(page), link)).replace(/\/$/, '');
        if (!shipped.has(target) && !files.some((f) => f.startsWith(`${target}/`))) dead.push(`${page}: ${link}`);
      }
    }
    expect(count).toBeGreaterThan(100);
    expect(dead).toEqual([]);
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
