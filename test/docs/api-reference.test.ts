import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// The API reference (`npm run docs`, TypeDoc from the TSDoc of every export of the five entry
// points, typedoc.json) builds, and fails on an exported symbol without documentation:
// typedoc.json sets validation.notDocumented with treatValidationWarningsAsErrors, so this test
// (run by `npm test` in .ci/run) fails with the symbol's name.
const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

describe('API reference (TypeDoc)', () => {
  it('builds with every exported symbol documented', async () => {
    const out = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-api-'));
    try {
      const typedoc = path.join(ROOT, 'node_modules', 'typedoc', 'bin', 'typedoc');
      const result = await run(process.execPath, [typedoc, '--out', out], { cwd: ROOT, maxBuffer: 16 << 20 }).catch(
        (error: { stdout?: string; stderr?: string }) => ({
          stdout: error.stdout ?? '',
          stderr: error.stderr ?? '',
          failed: true,
        }),
      );
      const warnings = `${result.stdout}${result.stderr}`
        .split('\n')
        .filter((l) => /warning|error/i.test(l) && !/Found 0 errors and 0 warnings/.test(l));
      expect(warnings).toEqual([]);
      expect('failed' in result).toBe(false);
      const index = await readFile(path.join(out, 'index.html'), 'utf8');
      expect(index).toContain('pg-settle');
      const modules = await readFile(path.join(out, 'modules.html'), 'utf8').catch(() => index);
      for (const entry of ['index', 'testing', 'http/express', 'http/fastify', 'http/fetch'])
        expect(modules).toContain(entry);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  }, 600_000);
});
