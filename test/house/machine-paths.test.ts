import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

// No committed file names a path of somebody's machine (a home directory, a workspace): it means
// nothing on a fresh clone or in the published package. Scratch paths under /tmp and system
// paths (/usr/lib/postgresql/15/bin) are fine. Reads every file `git ls-files` lists.
const ROOT = path.resolve(import.meta.dirname, '../..');
const SELF = path.relative(ROOT, import.meta.filename);
const MACHINE_PATH = /(?<![\w.~-])(?:\/(?:work|home|Users|root|mnt)\/[\w.-]|[A-Za-z]:\\(?:Users|work)\\)/;

/** `file:line: text` for every line of `text` that names a machine path. */
function machinePaths(file: string, text: string): string[] {
  return text
    .split('\n')
    .flatMap((line, i) => (MACHINE_PATH.test(line) ? [`${file}:${i + 1}: ${line.trim().slice(0, 160)}`] : []));
}

describe('absolute machine paths', () => {
  it('the pattern finds home and workspace paths, not /tmp, system paths or URLs', () => {
    const sample = [
      'see /work/shared/SCALE-OUT.md',
      'cp ~/x /home/alice/y',
      'C:\\Users\\bob\\pg',
      'mktemp -d /tmp/settle-ab.XXXXXX',
      '/usr/lib/postgresql/15/bin/postgres',
      'https://github.com/pg-settle/pg-settle/blob/main/examples/README.md',
      'node_modules/.bin/home/x',
    ].join('\n');
    expect(machinePaths('sample', sample).map((hit) => hit.split(':')[1])).toEqual(['1', '2', '3']);
  });

  it('no tracked file names one', () => {
    const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' })
      .split('\0')
      .filter((file) => file !== '' && file !== SELF);
    expect(files.length).toBeGreaterThan(100);
    const hits = files.flatMap((file) => {
      const full = path.join(ROOT, file);
      if (!existsSync(full)) return [];
      const bytes = readFileSync(full);
      return bytes.includes(0) ? [] : machinePaths(file, bytes.toString('utf8'));
    });
    expect(hits).toEqual([]);
  });
});
