import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createReconciler, createSettleClient, type SettleClient } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { CLI_BIN, cliEnv } from '../support/cli.js';
import { fencedBlocks } from './markdown.js';

// docs/operations.md, "Needs reconciliation": every path of the runbook, run as
// written. Each `pg-settle` line of its sh blocks runs through a shell (the doc's quoting) with
// `pg-settle` on PATH, DATABASE_URL set to an on-call login (settle_admin) and a terminal on
// stdin answering `y` to the confirmation (`script` gives it a pseudo-terminal), in a directory
// holding the `outcomes.csv` the doc names. Its ts block (the automatic path) runs with the
// client's createReconciler and a stand-in for the payment provider. The SQL blocks of the
// section run in test/docs/operations.test.ts.
const ROOT = path.resolve(import.meta.dirname, '../..');
const doc = readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8');
const SCRIPT = '/usr/bin/script';

vi.setConfig({ testTimeout: 600_000, hookTimeout: 120_000 });

/** The lines of docs/operations.md from `### Needs reconciliation` to the next heading of its level. */
function section(): { text: string } {
  const start = doc.indexOf('\n### Needs reconciliation\n');
  const end = doc.indexOf('\n### ', start + 1);
  return { text: doc.slice(start + 1, end === -1 ? undefined : end) };
}

const blocks = fencedBlocks(section().text);
const commands = blocks
  .filter((b) => b.lang === 'sh')
  .flatMap((b) => b.body.split('\n'))
  .map((l) => l.trim())
  .filter((l) => l.startsWith('pg-settle '));
const reconcilerBlock = blocks.find((b) => b.lang === 'ts' && b.body.includes('createReconciler('));

let db: TestDatabase;
let su: pg.Client;
let app: SettleClient;
let dir: string;
let oncallUrl: string;
const ONCALL = `oncall_${process.pid}`;
const binding = { principal: 'svc-checkout', scopes: ['payments:write'], generation: 1 };

/** Unknown and dead-lettered needs_reconciliation: its only attempt lost its response. */
async function needsReconciliation(key: string): Promise<void> {
  const claim = await app.claim({
    tenant: 'acme',
    key,
    request: { amount: '45.00', order: key },
    binding,
    maxAttempts: 1,
  });
  if (claim.outcome !== 'acquired') throw new Error(`seed: ${claim.outcome}`);
  await app.reportUnknown(claim.attempt);
}

async function stateOf(key: string): Promise<Record<string, unknown> | undefined> {
  const { rows } = await su.query(
    `select status::text, result, error, dead_letter_reason, redrive_count from settle.operations where tenant = 'acme' and key = $1`,
    [key],
  );
  return rows[0];
}

/** Runs one documented line through sh, on a pseudo-terminal that answers `y`. */
function runAsWritten(line: string): Promise<{ code: number; output: string }> {
  const env = cliEnv({ PATH: `${dir}/bin:${process.env.PATH ?? ''}`, DATABASE_URL: oncallUrl });
  return new Promise((resolve) => {
    const child = execFile(
      SCRIPT,
      ['-qec', line, '/dev/null'],
      { cwd: dir, env, timeout: 240_000 },
      (error, stdout, stderr) => {
        resolve({
          code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1,
          output: `${stdout}${stderr}`,
        });
      },
    );
    child.stdin?.end('y\n');
  });
}

beforeAll(async () => {
  db = await createTestDatabase('runbook');
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  const appUrl = new URL(db.url);
  appUrl.searchParams.set('options', '-c role=settle_app');
  app = createSettleClient({ connectionString: appUrl.toString(), poolSize: 2 });
  for (const key of ['order-45', 'order-46', 'order-47', 'order-48', 'order-77', 'order-78', 'order-79'])
    await needsReconciliation(key);
  await su.query(`create role ${ONCALL} login in role settle_admin`);
  const url = new URL(db.url);
  url.username = ONCALL;
  oncallUrl = url.toString();
  dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-runbook-'));
  await mkdir(path.join(dir, 'bin'));
  await writeFile(path.join(dir, 'bin', 'pg-settle'), `#!/bin/sh\nexec "${process.execPath}" "${CLI_BIN}" "$@"\n`);
  await chmod(path.join(dir, 'bin', 'pg-settle'), 0o755);
  // The file of verified outcomes the runbook resolves (the header it documents).
  await writeFile(
    path.join(dir, 'outcomes.csv'),
    [
      'tenant,key,expected_attempt,outcome,result,error,reason,evidence',
      'acme,order-47,1,completed,"{""payment_id"": ""pay_47""}",,INC-4711: PSP statement line 12,"{""statement"": ""2026-11-30""}"',
      'acme,order-48,1,failed,,"{""code"": ""no_charge""}",,',
    ].join('\n'),
  );
});

afterAll(async () => {
  await app?.end();
  if (su !== undefined) {
    await su.query(`drop owned by ${ONCALL}`).catch(() => {});
    await su.query(`drop role if exists ${ONCALL}`).catch(() => {});
    await su.end();
  }
  await db?.drop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

describe('docs/operations.md "Needs reconciliation", as written', () => {
  it('documents the three paths: one key by hand, many keys from a file, automatically', () => {
    expect(commands.filter((c) => /^pg-settle resolve acme \S+ --(completed|failed)/.test(c))).toHaveLength(2);
    expect(commands.filter((c) => c.startsWith('pg-settle resolve --file outcomes.csv'))).toHaveLength(2);
    expect(reconcilerBlock, 'the reconciler snippet').toBeDefined();
    // The superuser recipe that claimed a new attempt (a dead-lettered unknown refuses it) is gone.
    expect(section().text).not.toMatch(/as superuser[\s\S]*settle\.claim/);
  });

  it.skipIf(!existsSync(SCRIPT))(
    `runs every pg-settle command of the section${existsSync(SCRIPT) ? '' : ` (skipped: ${SCRIPT} from util-linux is missing: no pseudo-terminal to confirm with)`}`,
    async () => {
      const seen: string[] = [];
      for (const line of commands) {
        const before = { file: [await stateOf('order-47'), await stateOf('order-48')] };
        const run = await runAsWritten(line);
        expect(run.code, `${line}\n${run.output}`).toBe(0);
        seen.push(line);
        if (line.includes('resolve acme order-45')) {
          expect(run.output).toContain('attempts'); // it showed the operation and its attempts first
          expect(await stateOf('order-45')).toMatchObject({
            status: 'completed',
            result: { payment_id: 'pay_45' },
            dead_letter_reason: null,
          });
        } else if (line.includes('resolve acme order-46')) {
          expect(await stateOf('order-46')).toMatchObject({ status: 'failed', error: { code: 'no_charge' } });
        } else if (line.includes('--file') && line.includes('--dry-run')) {
          expect([await stateOf('order-47'), await stateOf('order-48')], 'a dry run changes nothing').toEqual(
            before.file,
          );
        } else if (line.includes('--file')) {
          expect(run.output).toMatch(/resolved 2, skipped 0/);
          expect(await stateOf('order-47')).toMatchObject({ status: 'completed', result: { payment_id: 'pay_47' } });
          expect(await stateOf('order-48')).toMatchObject({ status: 'failed', error: { code: 'no_charge' } });
        } else if (line.startsWith('pg-settle redrive acme order-77')) {
          expect(await stateOf('order-77')).toMatchObject({
            status: 'unknown',
            dead_letter_reason: null,
            redrive_count: 1,
          });
        } else {
          throw new Error(`a command of the runbook this test does not check: ${line}`);
        }
      }
      expect(seen).toHaveLength(commands.length);
      // Every resolution is audited with the on-call login and the reason.
      const { rows } = await su.query(
        `select key, login, detail->>'reason' as reason from settle.audit_log
        where tenant = 'acme' and event = 'resolve' and outcome = 'resolved' order by key`,
      );
      expect(rows.map((r) => [r.key, r.login])).toEqual(
        ['order-45', 'order-46', 'order-47', 'order-48'].map((k) => [k, ONCALL]),
      );
      expect(rows.map((r) => r.reason)).toEqual([
        'INC-4711: PSP shows pay_45 captured',
        'INC-4712: PSP has no charge for order-46',
        'INC-4711: PSP statement line 12',
        'INC-4711', // the file's row without a reason takes --reason
      ]);
    },
  );

  it('runs the reconciler snippet: it resolves what the provider knows and leaves the rest', async () => {
    const source = ts.transpileModule(reconcilerBlock?.body ?? '', {
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.None },
    }).outputText;
    // A settle_reconciler login, as the runbook says.
    const role = `reconciler_${process.pid}`;
    await su.query(`create role ${role} login in role settle_reconciler`);
    const url = new URL(db.url);
    url.username = role;
    const client = createSettleClient({ connectionString: url.toString(), poolSize: 2 });
    // The payment provider: it captured order-78, knows nothing of order-79.
    const psp = {
      findCharge: async ({ idempotencyKey }: { idempotencyKey: string }) =>
        idempotencyKey === 'order-78' ? { id: 'ch_78', captured: true } : undefined,
    };
    const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor as new (
      ...args: string[]
    ) => (...values: unknown[]) => Promise<{ stop(): Promise<void> }>;
    const body = `${source}\nreturn reconciler;`;
    const reconciler = await new AsyncFunction('createReconciler', 'client', 'psp', body)(
      createReconciler,
      client,
      psp,
    );
    try {
      const deadline = Date.now() + 120_000;
      while ((await stateOf('order-78'))?.status !== 'completed') {
        if (Date.now() > deadline) throw new Error('the documented reconciler did not resolve order-78');
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    } finally {
      await reconciler.stop();
      await client.end();
    }
    expect(await stateOf('order-78')).toMatchObject({ status: 'completed', result: { payment_id: 'ch_78' } });
    expect(await stateOf('order-79')).toMatchObject({ status: 'unknown', dead_letter_reason: 'needs_reconciliation' });
    await su.query(`drop role ${role}`);
  });
});
