import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';

// The CLI as a child process (node --import tsx src/cli/main.ts ...) against a harness database.
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const MAIN = path.join(ROOT, 'src/cli/main.ts');

interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly json: Record<string, unknown>;
}

function cli(args: readonly string[], opts: { readonly withDb?: boolean } = {}): Promise<CliRun> {
  const fullArgs = opts.withDb === false ? args : [...args, '--database-url', db.url];
  const env = { ...process.env };
  delete env.DATABASE_URL;
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', MAIN, ...fullArgs], { cwd: ROOT, env, timeout: 50_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : -1;
      let json: Record<string, unknown> = {};
      try {
        json = JSON.parse(stdout) as Record<string, unknown>;
      } catch {
        // not JSON (text output): leave empty
      }
      resolve({ code, stdout, stderr, json });
    });
  });
}

let db: TestDatabase;
let client: SettleClient;
const TENANT = 'cli-tenant';
const binding = { principal: 'cli-user', scopes: ['payouts:write'], generation: 1 };

beforeAll(async () => {
  db = await createTestDatabase('cli');
  client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  // A dead letter: one attempt allowed, and it failed (retryable).
  const dead = await client.claim({ tenant: TENANT, key: 'dead-1', request: { amount_cents: 5 }, binding, maxAttempts: 1 });
  if (dead.outcome !== 'acquired') throw new Error(`setup: ${dead.outcome}`);
  await client.fail(dead.attempt, { code: 'declined' }, { retryable: true });
  // A completed operation, for inspect and purge.
  const done = await client.claim({ tenant: TENANT, key: 'done-1', request: { amount_cents: 7 }, binding });
  if (done.outcome !== 'acquired') throw new Error(`setup: ${done.outcome}`);
  await client.complete(done.attempt, { payout_id: 'p-1' });
});

afterAll(async () => {
  await client?.end();
  await db?.drop();
});

// Each spawn costs ~2 s of tsx start-up on a shared 2-core machine: generous timeouts.
describe('pg-settle CLI', { timeout: 120_000 }, () => {
  it('migrate --json: the harness database is up to date', async () => {
    const run = await cli(['migrate', '--json']);
    expect(run.code).toBe(0);
    expect(run.json).toEqual({ ok: true, command: 'migrate', throwaway: false, applied: [] });
  });

  it('stats --json: per-tenant counts', async () => {
    const run = await cli(['stats', '--json']);
    expect(run.code).toBe(0);
    const tenants = run.json.tenants as Record<string, unknown>[];
    expect(tenants.find((t) => t.tenant === TENANT)).toMatchObject({ operations: 2, completed: 1, failed: 1, deadLettered: 1 });
  });

  it('inspect --json: record, attempts and audit trail; a missing key exits 1', async () => {
    const run = await cli(['inspect', TENANT, 'done-1', '--json']);
    expect(run.code).toBe(0);
    expect(run.json).toMatchObject({ ok: true, command: 'inspect', operation: { status: 'completed', settledAttempt: 1, result: { payout_id: 'p-1' } } });
    expect(run.json.attempts).toHaveLength(1);
    expect((run.json.audit as { event: string }[]).map((a) => a.event)).toEqual(['claim', 'complete']);
    const missing = await cli(['inspect', TENANT, 'nope', '--json']);
    expect(missing.code).toBe(1);
    expect(missing.json).toMatchObject({ ok: false, exitCode: 1 });
  });

  it('dead-letters --json lists the dead letter; redrive re-opens it once, then SE011 exits 1', async () => {
    const list = await cli(['dead-letters', '--json']);
    expect(list.code).toBe(0);
    expect(list.json).toMatchObject({ ok: true, count: 1, deadLetters: [{ tenant: TENANT, key: 'dead-1', attempt: 1, maxAttempts: 1 }] });
    const redrive = await cli(['redrive', TENANT, 'dead-1', '--attempts', '2', '--reason', 'cli test', '--json']);
    expect(redrive.code).toBe(0);
    expect(redrive.json).toMatchObject({ ok: true, command: 'redrive', operation: { status: 'pending', redriveCount: 1, maxAttempts: 3 } });
    const again = await cli(['redrive', TENANT, 'dead-1', '--json']);
    expect(again.code).toBe(1);
    expect(again.json).toMatchObject({ ok: false, exitCode: 1, error: { sqlstate: 'SE011', name: 'NotDeadLetteredError' } });
    const text = await cli(['redrive', TENANT, 'dead-1']);
    expect(text.code).toBe(1);
    expect(text.stderr).toContain('sqlstate: SE011');
    expect(text.stderr).toContain('hint:');
  });

  it('expire-leases --json and purge --older-than --json', async () => {
    const expire = await cli(['expire-leases', '--json']);
    expect(expire.code).toBe(0);
    expect(expire.json).toMatchObject({ ok: true, command: 'expire-leases', expired: 0, deadLettered: 0, batches: 1 });
    const purge = await cli(['purge', '--older-than', '0s', '--json']);
    expect(purge.code).toBe(0);
    expect(purge.json).toMatchObject({ ok: true, command: 'purge', olderThanMs: 0, batches: 1 });
    expect(purge.json.purged).toBeGreaterThanOrEqual(1);
    expect(await client.get({ tenant: TENANT, key: 'done-1' })).toBeNull();
  });

  it('simulate --json: a tiny run is green', async () => {
    const run = await cli(['simulate', '--operations', '30', '--workers', '4', '--seed', '3', '--json']);
    expect(run.code).toBe(0);
    expect(run.json).toMatchObject({ command: 'simulate', ok: true, seed: 3, operations: { issued: 30, completed: 30 } });
    expect((run.json.check as { invariants: unknown[] }).invariants).toHaveLength(7);
    expect(run.json.faults).toHaveLength(8);
  });

  it('usage errors exit 2: flags and arguments', async () => {
    expect((await cli(['stats', '--bogus'])).code).toBe(2);
    expect((await cli(['purge', '--json'])).json).toMatchObject({ ok: false, exitCode: 2 });
    expect((await cli(['purge', '--older-than', 'soon'])).code).toBe(2);
    expect((await cli(['inspect', 'only-tenant'])).code).toBe(2);
  });

  it('usage errors exit 2: simulator flags, unknown or missing command', async () => {
    expect((await cli(['simulate', '--fault-duplicate=2'])).code).toBe(2);
    expect((await cli(['frobnicate'], { withDb: false })).code).toBe(2);
    expect((await cli([], { withDb: false })).code).toBe(2);
  });

  it('--help exits 0 and shows the usage', async () => {
    const run = await cli(['redrive', '--help'], { withDb: false });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('Usage: pg-settle redrive <tenant> <key>');
  });

  it('a bad database URL exits 3', async () => {
    const refused = await cli(['stats', '--json', '--database-url', 'postgres://postgres@127.0.0.1:1/nowhere'], { withDb: false });
    expect(refused.code).toBe(3);
    expect(refused.json).toMatchObject({ ok: false, exitCode: 3, error: { name: 'SettleConnectionError' } });
    const garbage = await cli(['stats', '--database-url', 'not a url'], { withDb: false });
    expect(garbage.code).toBe(3);
  });
});
