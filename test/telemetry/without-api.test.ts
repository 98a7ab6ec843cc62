import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/database.js';

// @opentelemetry/api is an optional peer dependency: without it the client loads, runs, and
// records nothing (the no-op hooks). A child process whose module resolution refuses every
// @opentelemetry/* package stands in for an application that did not install it.
const execFileAsync = promisify(execFile);
const here = import.meta.dirname;

const db = useTestDatabase('telemetry_without_api');

describe('without @opentelemetry/api', () => {
  it('the client imports, runs an effect, and uses the no-op telemetry', async () => {
    const { stdout } = await execFileAsync(
      process.execPath,
      [
        '--require',
        path.join(here, 'without-api.cjs'),
        '--import',
        'tsx',
        path.join(here, 'without-api-main.ts'),
        db.url,
      ],
      { cwd: path.resolve(here, '../..'), timeout: 60_000 },
    );
    expect(JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}')).toEqual({
      outcome: 'completed',
      apiMissing: true,
      noop: true,
    });
  }, 90_000);
});
