import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// The real binary (node bin/pg-settle.js ...), from the TypeScript sources through tsx, or, with
// PG_SETTLE_TEST_CLI=dist, from the compiled dist/ (`npm run build`): .ci/run builds it once and
// sets that, since each start from the sources costs about 1 s of CPU against 0.4 s compiled, and
// the CLI tests start it hundreds of times per PostgreSQL version. The packaging test in .ci/run
// runs the compiled one from an installed tarball. stdin is a pipe, never a terminal: what cron
// and CI see. DATABASE_URL is removed from the environment, so a run reaches only the database
// its arguments (or `env`) name.
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CLI_BIN = path.join(ROOT, 'bin/pg-settle.js');

/** The environment a spawned CLI gets: this process's, with the source/compiled choice made. */
export function cliEnv(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const choice = process.env.PG_SETTLE_TEST_CLI ?? 'source';
  if (choice !== 'source' && choice !== 'dist') {
    throw new Error(`PG_SETTLE_TEST_CLI=${choice}: expected "source" or "dist"`);
  }
  if (choice === 'dist' && !existsSync(path.join(ROOT, 'dist/src/cli/main.js'))) {
    throw new Error('PG_SETTLE_TEST_CLI=dist but dist/ is not built: run `npm run build` first');
  }
  return { ...process.env, PG_SETTLE_CLI_FROM_SOURCE: choice === 'source' ? '1' : '0', ...extra };
}

export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** stdout parsed as one JSON object; empty when stdout is text. */
  readonly json: Record<string, unknown>;
}

export interface CliOptions {
  /** Appended as `--database-url <url>` when given. */
  readonly databaseUrl?: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Each start-up from the sources costs ~2 s of tsx on a busy 2-core machine: 50 s unless told. */
  readonly timeoutMs?: number;
}

export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliRun> {
  const fullArgs = options.databaseUrl === undefined ? args : [...args, '--database-url', options.databaseUrl];
  const env = cliEnv();
  delete env.DATABASE_URL;
  Object.assign(env, options.env);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_BIN, ...fullArgs],
      { cwd: ROOT, env, timeout: options.timeoutMs ?? 50_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
        let json: Record<string, unknown> = {};
        try {
          json = JSON.parse(stdout) as Record<string, unknown>;
        } catch {
          // text output: leave empty
        }
        resolve({ code, stdout, stderr, json });
      },
    );
  });
}
