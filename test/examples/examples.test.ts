// The runnable examples (examples/*.ts) run as examples/README.md says: each documented command,
// exactly as written, as a child process that starts its own throwaway PostgreSQL, connects as
// logins granted only pg-settle's roles (never the superuser), prints what it did and exits 0.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const readme = readFileSync('examples/README.md', 'utf8');
const programs = readdirSync('examples')
  .filter((name) => name.endsWith('.ts'))
  .sort();

/** The documented commands: the lines of examples/README.md's sh block, without their comments. */
const commands = [...readme.matchAll(/^(npx tsx examples\/[a-z-]+\.ts)\s*(?:#.*)?$/gm)].map((m) => m[1]!);

/** What each example prints on stdout, line by line. */
const expectations: Record<string, (string | RegExp)[]> = {
  'examples/run.ts': [
    '1. first call (the provider is down): failed: {"name":"Error","message":"provider answered 503"}, final=false (a later call may try again unless final)',
    '2. second call: completed by attempt 2: {"amount":"19.99","chargeId":"ch_1"}',
    '3. a retry: replay of attempt 2: {"amount":"19.99","chargeId":"ch_1"} (the effect did not run)',
    '4. another amount under the same key: conflict on request (nothing ran)',
    '5. the same key from another caller: conflict on binding (nothing ran)',
    'the provider charged 1 time(s)',
  ],
  'examples/transaction.ts': [
    'deposit-1: completed, ledger entry {"entry":"1"}',
    'deposit-1 again: replay of attempt 1: no second ledger row',
    'acct-1 balance: 100.00',
    'deposit-2 (the effect throws after its insert): failed, final=false',
    'acct-2 balance: 0 (the insert rolled back with the attempt)',
  ],
  'examples/idempotent.ts': [
    'first call: bank-tr-1-alice (bank calls: 1)',
    'same call again: bank-tr-1-alice, replayed (bank calls: 1)',
    '5 concurrent calls: 1 distinct result (bank calls: 2)',
    'another amount under tr-1: IdempotencyConflictError, conflict on request (bank calls: 2)',
    'tr-2: OperationFailedError (bank unavailable), final=false',
    'tr-2 retried: bank-tr-2-bob (bank calls: 4)',
  ],
  'examples/reconcile.ts': [
    'order-7: unknown (effect_outcome_unknown): never a failure, the charge may exist',
    'order-8: unknown',
    'reconciler: acme/order-7 resolved_completed',
    'reconciler: acme/order-8 resolved_failed',
    'order-7 again: replay {"chargeId":"ch_77"}',
    'order-8 again: failed {"code":"not_attempted"}',
    'order-8-2 (a new key): completed {"chargeId":"ch_82"}',
  ],
  'examples/feed.ts': [
    /^event \d+: payout-1 completed \{"amount":"10.00","payoutId":"po_payout-1"\}$/,
    /^event \d+: payout-2 completed \{"amount":"25.50","payoutId":"po_payout-2"\}$/,
    /^event \d+: payout-3 failed \{"name":"Error","message":"account closed"\}$/,
    'next consume: payout-4 (the first three are not delivered again)',
    'ledger: 3 rows, total 36.50',
  ],
};

describe('examples/', () => {
  it('examples/README.md documents one command per program, and each has an expectation here', () => {
    expect([...commands].sort()).toEqual(programs.map((p) => `npx tsx examples/${p}`));
    expect(Object.keys(expectations).sort()).toEqual(programs.map((p) => `examples/${p}`));
  });

  it('the docs index links examples/README.md', () => {
    expect(readFileSync('docs/README.md', 'utf8')).toContain(
      '](https://github.com/pg-settle/pg-settle/blob/main/examples/README.md)',
    );
  });

  it.each(commands)(
    '`%s` runs as documented: prints what it did and exits 0',
    { timeout: 300_000 },
    async (command) => {
      const file = command.replace('npx tsx ', '');
      const { stdout, stderr } = await run('sh', ['-c', command], {
        env: { ...process.env },
        timeout: 290_000,
        maxBuffer: 16 << 20,
      });
      const lines = stdout.trim().split('\n');
      const expected = expectations[file] ?? [];
      expect(lines).toHaveLength(expected.length);
      expected.forEach((line, i) =>
        typeof line === 'string' ? expect(lines[i]).toBe(line) : expect(lines[i]).toMatch(line),
      );
      expect(stderr).toContain('example: starting a throwaway PostgreSQL');
    },
  );

  it('no example connects as the superuser or creates a table outside its own schema', () => {
    for (const program of programs) {
      const source = readFileSync(`examples/${program}`, 'utf8');
      expect(source, program).not.toMatch(/adminUrl|superuser|postgres:\/\/postgres/);
      for (const [, table] of source.matchAll(/create table (?:if not exists )?([\w.]+)/g))
        expect(table, program).toMatch(/^example\./);
    }
  });
});
