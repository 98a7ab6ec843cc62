// Runs the pgTAP suite (test/pgtap/*.sql) with pg_prove against a fresh migrated database, the
// way a DBA would run it against their own installation (docs/sql-api.md, "Checking an
// installation with pgTAP"). Skips only when pg_prove or the pgtap extension is not installed.
import { execFile } from 'node:child_process';
import { access, readdir } from 'node:fs/promises';
import { constants } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { databaseOf } from '../src/db/database-url.js';
import { useTestDatabase } from './support/database.js';

const pgtapDir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'pgtap');
const PG_PROVE_TIMEOUT_MS = 120_000;

interface ProcessResult {
  readonly exitCode: number | string | null;
  readonly output: string;
}

const db = useTestDatabase('pgtap');

describe('pgTAP suite (pg_prove test/pgtap/*.sql)', () => {
  it('passes against a freshly migrated database and leaves nothing behind', async (ctx) => {
    const pgProve = await findOnPath('pg_prove');
    ctx.skip(pgProve === undefined, 'pg_prove is not on PATH: libtap-parser-sourcehandler-pgtap-perl not installed');
    ctx.skip(
      !(await pgtapAvailable(db.url)),
      'the pgtap extension is not available: postgresql-15-pgtap not installed',
    );

    const scripts = (await readdir(pgtapDir)).filter((f) => f.endsWith('.sql')).sort();
    expect(scripts.length).toBeGreaterThanOrEqual(4);

    const { args, env } = pgProveConnection(db.url);
    const result = await run(pgProve ?? 'pg_prove', [...args, ...scripts.map((f) => path.join(pgtapDir, f))], env);
    expect(result.exitCode, result.output).toBe(0);
    expect(result.output, result.output).toContain('All tests successful');

    // Every script runs in a transaction that it rolls back.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const left = await client.query<{ operations: number; pgtap: number }>(`
        select (select count(*)::int from settle.operations) as operations,
               (select count(*)::int from pg_extension where extname = 'pgtap') as pgtap`);
      expect(left.rows[0]).toEqual({ operations: 0, pgtap: 0 });
    } finally {
      await client.end();
    }
  });
});

/** pg_prove's connection options (-h -p -U -d) and environment (PGPASSWORD) for a postgres:// URL. */
function pgProveConnection(url: string): { args: string[]; env: NodeJS.ProcessEnv } {
  const parsed = new URL(url);
  // A Unix-socket URL names its directory as ?host=/dir; a TCP URL as its hostname.
  const host = parsed.searchParams.get('host') ?? decodeURIComponent(parsed.hostname);
  const args = ['--dbname', databaseOf(url)];
  if (host !== '') args.push('--host', host);
  if (parsed.port !== '') args.push('--port', parsed.port);
  if (parsed.username !== '') args.push('--username', decodeURIComponent(parsed.username));
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (parsed.password !== '') env.PGPASSWORD = decodeURIComponent(parsed.password);
  const sslmode = parsed.searchParams.get('sslmode');
  if (sslmode !== null) env.PGSSLMODE = sslmode;
  return { args, env };
}

async function pgtapAvailable(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const found = await client.query(`select 1 from pg_available_extensions where name = 'pgtap'`);
    return found.rowCount !== 0;
  } finally {
    await client.end();
  }
}

/** The executable's full path from PATH, or undefined. */
async function findOnPath(name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir === '') continue;
    const candidate = path.join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

/** Runs a program to completion; resolves with its exit code and combined output, never rejects. */
function run(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<ProcessResult> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { env, timeout: PG_PROVE_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const exitCode = error === null ? 0 : (error.code ?? error.signal ?? null);
        const output = [`$ ${file} ${args.join(' ')}`, stdout, stderr, error?.message ?? ''].join('\n');
        resolve({ exitCode, output });
      },
    );
  });
}
