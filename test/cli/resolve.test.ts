import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { type CliRun, runCli } from '../support/cli.js';

// `pg-settle resolve` (one key, and a file of verified outcomes), `maintain`,
// `schedule` and the upkeep part of `stats`, run as the real binary with stdin a pipe (as cron
// and CI run it), against a harness database.

function cli(args: readonly string[], extraEnv: Record<string, string> = {}): Promise<CliRun> {
  return runCli(args, { databaseUrl: db.url, env: extraEnv, timeoutMs: 60_000 });
}

// Each test starts the CLI several times from source: minutes of headroom on a loaded machine.
vi.setConfig({ testTimeout: 300_000 });

let db: TestDatabase;
let client: SettleClient;
let su: pg.Client;
let dir: string;
const TENANT = 'cli-resolve';
const binding = { principal: 'cli-user', scopes: ['payouts:write'], generation: 1 };

/** Unknown, dead-lettered needs_reconciliation: its only attempt lost the response. */
async function unknown(key: string): Promise<void> {
  const claim = await client.claim({ tenant: TENANT, key, request: { amount_cents: 5, key }, binding, maxAttempts: 1 });
  if (claim.outcome !== 'acquired') throw new Error(`setup: ${claim.outcome}`);
  await client.reportUnknown(claim.attempt);
}

async function statusOf(key: string): Promise<string | undefined> {
  const { rows } = await su.query<{ status: string }>(
    'select status::text from settle.operations where tenant = $1 and key = $2',
    [TENANT, key],
  );
  return rows[0]?.status;
}

beforeAll(async () => {
  db = await createTestDatabase('cli_resolve');
  client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-resolve-'));
});

afterAll(async () => {
  await client?.end();
  await su?.end();
  await db?.drop();
});

describe('pg-settle resolve <tenant> <key>', () => {
  it('shows the operation and its attempts, needs --yes off a terminal, --dry-run changes nothing, then resolves', async () => {
    await unknown('one');
    const dry = await cli([
      'resolve',
      TENANT,
      'one',
      '--expected-attempt',
      '1',
      '--completed',
      '--result',
      '{"payout_id":"p-1"}',
      '--reason',
      'INC-1: bank says paid',
      '--dry-run',
    ]);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toContain('status');
    expect(dry.stdout).toContain('attempts');
    expect(dry.stdout).toContain('dry run: would resolve');
    expect(await statusOf('one')).toBe('unknown');

    const noTerminal = await cli([
      'resolve',
      TENANT,
      'one',
      '--expected-attempt',
      '1',
      '--completed',
      '--result',
      '{"payout_id":"p-1"}',
      '--reason',
      'INC-1',
    ]);
    expect(noTerminal.code).toBe(2);
    expect(noTerminal.stderr).toContain('--yes');
    expect(await statusOf('one')).toBe('unknown');

    const missingReason = await cli([
      'resolve',
      TENANT,
      'one',
      '--expected-attempt',
      '1',
      '--completed',
      '--result',
      '{}',
      '--yes',
    ]);
    expect(missingReason.code).toBe(2);
    const both = await cli([
      'resolve',
      TENANT,
      'one',
      '--expected-attempt',
      '1',
      '--completed',
      '--failed',
      '--result',
      '{}',
      '--reason',
      'x',
      '--yes',
    ]);
    expect(both.code).toBe(2);

    const done = await cli([
      'resolve',
      TENANT,
      'one',
      '--expected-attempt',
      '1',
      '--completed',
      '--result',
      '{"payout_id":"p-1"}',
      '--reason',
      'INC-1: bank says paid',
      '--evidence',
      '{"bank_ref":"r1"}',
      '--yes',
      '--json',
    ]);
    expect(done.code).toBe(0);
    expect(done.json).toMatchObject({
      ok: true,
      command: 'resolve',
      outcome: 'resolved',
      status: 'completed',
      statusBefore: 'unknown',
    });
    expect(await statusOf('one')).toBe('completed');

    const again = await cli([
      'resolve',
      TENANT,
      'one',
      '--expected-attempt',
      '1',
      '--failed',
      '--error',
      '{"code":"x"}',
      '--reason',
      'INC-1',
      '--yes',
    ]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('already final (completed)');
  });

  it('needs --expected-attempt (the attempt the evidence concerns); a verdict read for an older attempt is refused, SE053', async () => {
    // Attempt 1 lost its response; the operator checks the downstream (nothing), then the client
    // retries: attempt 2 runs and loses its response too. The verdict read for attempt 1 must not
    // judge attempt 2.
    const first = await client.claim({
      tenant: TENANT,
      key: 'stale',
      request: { amount_cents: 7 },
      binding,
      maxAttempts: 3,
    });
    if (first.outcome !== 'acquired') throw new Error('setup');
    await client.reportUnknown(first.attempt);
    const second = await client.claim({
      tenant: TENANT,
      key: 'stale',
      request: { amount_cents: 7 },
      binding,
      maxAttempts: 3,
    });
    if (second.outcome !== 'acquired') throw new Error('setup');
    await client.reportUnknown(second.attempt);

    const missing = await cli([
      'resolve',
      TENANT,
      'stale',
      '--failed',
      '--error',
      '{"code":"none"}',
      '--reason',
      'INC-7',
      '--yes',
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--expected-attempt N is required');

    const dry = await cli([
      'resolve',
      TENANT,
      'stale',
      '--expected-attempt',
      '1',
      '--failed',
      '--error',
      '{"code":"none"}',
      '--reason',
      'INC-7',
      '--dry-run',
    ]);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toContain('would be refused (SE053)');

    const stale = await cli([
      'resolve',
      TENANT,
      'stale',
      '--expected-attempt',
      '1',
      '--failed',
      '--error',
      '{"code":"none"}',
      '--reason',
      'INC-7',
      '--yes',
    ]);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain('SE053');
    expect(await statusOf('stale')).toBe('unknown');

    const checked = await cli([
      'resolve',
      TENANT,
      'stale',
      '--expected-attempt',
      '2',
      '--expected-status',
      'unknown',
      '--completed',
      '--result',
      '{"payout_id":"p-7"}',
      '--reason',
      'INC-7: attempt 2 paid',
      '--yes',
    ]);
    expect(checked.code).toBe(0);
    expect(await statusOf('stale')).toBe('completed');
  });

  it('refused by the engine (a running operation): exit 1 with the SQLSTATE', async () => {
    const claim = await client.claim({ tenant: TENANT, key: 'running', request: { amount_cents: 1 }, binding });
    expect(claim.outcome).toBe('acquired');
    const refused = await cli([
      'resolve',
      TENANT,
      'running',
      '--expected-attempt',
      '1',
      '--failed',
      '--error',
      '{"code":"x"}',
      '--reason',
      'INC-2',
      '--yes',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('SE050');
  });
});

describe('a key of the HTTP middleware stored behind keyPrefix', () => {
  it("the client's key alone: not found, the hint names the stored key and --key-prefix; with --key-prefix: inspect and resolve", async () => {
    // What a route with keyPrefix 'http:' stores for the client's Idempotency-Key `refund-9`.
    await unknown('http:refund-9');
    const bare = await cli([
      'resolve',
      TENANT,
      'refund-9',
      '--expected-attempt',
      '1',
      '--failed',
      '--error',
      '{"code":"no_refund"}',
      '--reason',
      'INC-2',
      '--yes',
      '--json',
    ]);
    expect(bare.code).toBe(1);
    expect(bare.json).toMatchObject({ ok: false, error: { name: 'OperationNotFoundError', sqlstate: 'SE010' } });
    const hint = (bare.json.error as { hint: string }).hint;
    expect(hint).toContain('http:refund-9');
    expect(hint).toContain('--key-prefix');

    const shown = await cli(['inspect', TENANT, 'refund-9', '--key-prefix', 'http:', '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json).toMatchObject({ operation: { key: 'http:refund-9', status: 'unknown', attempt: 1 } });

    const resolved = await cli([
      'resolve',
      TENANT,
      'refund-9',
      '--key-prefix',
      'http:',
      '--expected-attempt',
      '1',
      '--failed',
      '--error',
      '{"code":"no_refund"}',
      '--reason',
      'INC-2: no refund at the PSP',
      '--yes',
      '--json',
    ]);
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(resolved.json).toMatchObject({ ok: true, outcome: 'resolved', status: 'failed' });
    expect(await statusOf('http:refund-9')).toBe('failed');

    // A wrong prefix: not found, and the hint says which stored key was looked up.
    const wrong = await cli(['inspect', TENANT, 'refund-9', '--key-prefix', 'api:', '--json']);
    expect(wrong.code).toBe(1);
    expect((wrong.json.error as { hint: string }).hint).toContain('api:refund-9');
    const bad = await cli(['inspect', TENANT, 'refund-9', '--key-prefix', 'has space']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--key-prefix must be 1-64 visible ASCII characters');
  });

  it('--file with --key-prefix: every row is the client key behind the prefix', async () => {
    await unknown('http:refund-10');
    const file = path.join(dir, 'prefixed.csv');
    await writeFile(
      file,
      'tenant,key,expected_attempt,outcome,result,error,reason,evidence\n' +
        `${TENANT},refund-10,1,failed,,"{""code"":""no_refund""}",INC-3,\n`,
    );
    const run = await cli(['resolve', '--file', file, '--key-prefix', 'http:', '--yes', '--json']);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.json).toMatchObject({ ok: true, resolved: 1, refused: 0 });
    expect(await statusOf('http:refund-10')).toBe('failed');
  });
});

describe('pg-settle resolve --file', () => {
  it('a file with bad rows: every bad row named with its line, nothing applied (exit 2)', async () => {
    await unknown('bulk-bad-1');
    await unknown('bulk-bad-2');
    const file = path.join(dir, 'bad.csv');
    await writeFile(
      file,
      [
        'tenant,key,expected_attempt,outcome,result,error,reason',
        `${TENANT},bulk-bad-1,1,completed,"{""payout_id"":""p""}",,INC-3`,
        `${TENANT},bulk-bad-2,1,completed,{not json},,INC-3`,
        `${TENANT},bulk-bad-2,1,maybe,,,INC-3`,
        `${TENANT},bulk-bad-1,1,failed,,,INC-3`,
        `${TENANT},only,three`,
        `${TENANT},bulk-bad-3,,completed,"{""payout_id"":""p""}",,INC-3`,
      ].join('\n'),
    );
    const run = await cli(['resolve', '--file', file, '--yes', '--json']);
    expect(run.code).toBe(2);
    expect(run.json).toMatchObject({ ok: false, applied: 0, command: 'resolve' });
    const errors = run.json.errors as string[];
    expect(errors).toHaveLength(5);
    expect(errors[0]).toMatch(/^line 3: result is not valid JSON/);
    expect(errors[1]).toMatch(/^line 4: outcome must be completed or failed/);
    expect(errors[2]).toMatch(/^line 5: a failed row needs an error and no result; the same operation as line 2/);
    expect(errors[3]).toMatch(/^line 6: 3 fields, the header has 7/);
    expect(errors[4]).toMatch(/^line 7: expected_attempt is missing: .* never filled in at apply time/);
    // A file without the column is refused as a whole, saying why.
    const old = path.join(dir, 'no-epoch.csv');
    await writeFile(
      old,
      ['tenant,key,outcome,result,error,reason', `${TENANT},bulk-bad-1,failed,,"{}",INC-3`].join('\n'),
    );
    const noEpoch = await cli(['resolve', '--file', old, '--yes', '--json']);
    expect(noEpoch.code).toBe(2);
    expect((noEpoch.json.errors as string[])[0]).toMatch(
      /lacks the column expected_attempt \(the attempt each row's evidence concerns/,
    );
    expect(await statusOf('bulk-bad-1')).toBe('unknown');
    expect(await statusOf('bulk-bad-2')).toBe('unknown');
  });

  it('rows the engine refuses: nothing committed unless --skip-refused; the summary counts resolved, skipped, refused', async () => {
    await unknown('bulk-1');
    await unknown('bulk-2');
    await unknown('bulk-3');
    const settled = await client.claim({ tenant: TENANT, key: 'bulk-done', request: { amount_cents: 2 }, binding });
    if (settled.outcome !== 'acquired') throw new Error('setup');
    await client.complete(settled.attempt, { payout_id: 'p-done' });
    const claim = await client.claim({ tenant: TENANT, key: 'bulk-running', request: { amount_cents: 1 }, binding });
    expect(claim.outcome).toBe('acquired');
    const file = path.join(dir, 'outcomes.json');
    await writeFile(
      file,
      JSON.stringify([
        {
          tenant: TENANT,
          expected_attempt: 1,
          key: 'bulk-1',
          outcome: 'completed',
          result: { payout_id: 'p-b1' },
          evidence: { bank_ref: 'b1' },
        },
        {
          tenant: TENANT,
          expected_attempt: 1,
          key: 'bulk-2',
          outcome: 'failed',
          error: { code: 'no_payout' },
          reason: 'INC-4: statement shows nothing',
        },
        {
          tenant: TENANT,
          expected_attempt: 1,
          key: 'bulk-done',
          outcome: 'completed',
          result: { payout_id: 'p-done' },
        },
        { tenant: TENANT, expected_attempt: 1, key: 'bulk-running', outcome: 'failed', error: { code: 'x' } },
      ]),
    );
    const dry = await cli(['resolve', '--file', file, '--reason', 'INC-4', '--dry-run', '--json']);
    expect(dry.json).toMatchObject({
      ok: true,
      dryRun: true,
      rows: 4,
      byStatus: { unknown: 2, completed: 1, running: 1 },
    });

    const refused = await cli(['resolve', '--file', file, '--reason', 'INC-4', '--yes', '--json']);
    expect(refused.code).toBe(1);
    expect(refused.json).toMatchObject({ ok: false, committed: false, resolved: 0, skipped: 1, refused: 1 });
    expect((refused.json.refusedRows as { key: string; error: string }[])[0]).toMatchObject({
      key: 'bulk-running',
      error: expect.stringMatching(/^SE050 /),
    });
    expect(await statusOf('bulk-1')).toBe('unknown');
    expect(await statusOf('bulk-2')).toBe('unknown');

    const partial = await cli(['resolve', '--file', file, '--reason', 'INC-4', '--yes', '--skip-refused'], {
      PG_SETTLE_PROGRESS_EVERY_MS: '0',
    });
    expect(partial.code).toBe(1);
    expect(partial.stdout).toContain('resolved 2, skipped 1 (already final), refused 1');
    expect(partial.stderr).toContain('resolve 4/4 operations');
    expect(await statusOf('bulk-1')).toBe('completed');
    expect(await statusOf('bulk-2')).toBe('failed');
    expect(await statusOf('bulk-3')).toBe('unknown');
    const { rows } = await su.query(
      `select key, detail->>'reason' as reason from settle.audit_log where tenant = $1 and key in ('bulk-1', 'bulk-2') and event = 'resolve' order by key`,
      [TENANT],
    );
    expect(rows).toEqual([
      { key: 'bulk-1', reason: 'INC-4' },
      { key: 'bulk-2', reason: 'INC-4: statement shows nothing' },
    ]);
  });
});

describe('upkeep from the CLI', () => {
  it('maintain --once runs the due jobs; stats shows the last run; schedule without pg_cron exits 1 naming maintain', async () => {
    const before = await cli(['stats']);
    expect(before.code).toBe(0);
    expect(before.stdout).toContain('upkeep job');

    const once = await cli(['maintain', '--once', '--json']);
    expect(once.code).toBe(0);
    const lines = once.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { job: string; outcome: string });
    expect(lines.map((l) => [l.job, l.outcome])).toEqual([
      ['expire_leases', 'ran'],
      ['dead_letter_in_doubt', 'ran'],
      ['purge', 'ran'],
      ['trim_feed', 'ran'],
    ]);
    const again = await cli(['maintain', '--once']);
    expect(again.stdout).toContain('not_due');

    const stats = await cli(['stats', '--json']);
    const upkeep = stats.json.upkeep as { job: string; runs: number; lastOk: boolean; overdue: boolean }[];
    expect(upkeep.map((j) => [j.job, j.runs, j.lastOk, j.overdue])).toEqual([
      ['dead_letter_in_doubt', 1, true, false],
      ['expire_leases', 1, true, false],
      ['purge', 1, true, false],
      ['trim_feed', 1, true, false],
    ]);

    // Overdue: the last run is long ago (test-only backdating, as superuser).
    await su.query(
      `update settle_private.upkeep_jobs set last_finished_at = now() - interval '1 day' where job = 'expire_leases'`,
    );
    const warned = await cli(['stats']);
    expect(warned.stdout).toMatch(/WARNING: upkeep job expire_leases is overdue/);

    const hasCron = (await su.query(`select 1 from pg_extension where extname = 'pg_cron'`)).rowCount === 1;
    if (!hasCron) {
      const schedule = await cli(['schedule']);
      expect(schedule.code).toBe(1);
      expect(schedule.stderr).toContain('pg_cron is not installed');
      expect(schedule.stderr).toContain('pg-settle maintain');
    }
  });
});
