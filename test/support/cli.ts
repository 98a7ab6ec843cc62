import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// The real binary (node bin/pg-settle.js ...), from the TypeScript sources (the packaging test
// in .ci/run runs the compiled one from an installed tarball). stdin is a pipe, never a
// terminal: what cron and CI see. DATABASE_URL is removed from the environment, so a run reaches
// only the database its arguments (or `env`) name.
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/pg-settle.js');

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
  /** Each start-up costs ~2 s of tsx on a shared 2-core machine: 50 s unless told. */
  readonly timeoutMs?: number;
}

export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliRun> {
  const fullArgs = options.databaseUrl === undefined ? args : [...args, '--database-url', options.databaseUrl];
  const env: NodeJS.ProcessEnv = { ...process.env, PG_SETTLE_CLI_FROM_SOURCE: '1' };
  delete env.DATABASE_URL;
  Object.assign(env, options.env);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...fullArgs],
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
