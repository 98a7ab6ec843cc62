import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import { binding, useClientTest, waitFor } from './helpers.js';

// The reconciler in two OS processes (node + tsx, each with its own client and pool,
// logged in as a role granted settle_reconciler), against one database with operations that
// need reconciliation and a downstream lookup that sometimes times out. Every decidable
// operation is resolved exactly once, by one process; those the downstream never answers for
// stay unresolved; both processes take leases at the same time (test/support/reconciler-process.ts
// holds its first resolution until the other process has started a lookup).
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = path.join(ROOT, 'test/support/reconciler-process.ts');
const t = useClientTest('reconciler_processes');
const tenant = 'psp';

// Two tsx start-ups, timeouts of 8 s and retries on a loaded 2-core machine.
vi.setConfig({ testTimeout: 300_000 });

interface Child {
  readonly process: ChildProcess;
  readonly lines: string[];
  readonly exited: Promise<number | null>;
}

function startReconciler(url: string, holder: string): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, url, holder], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  let buffered = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    const parts = buffered.split('\n');
    buffered = parts.pop() ?? '';
    lines.push(...parts.filter((l) => l !== ''));
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { process: child, lines, exited };
}

/** An operation whose only attempt lost its response: unknown, dead-lettered needs_reconciliation. */
async function needsReconciliation(key: string): Promise<void> {
  const claim = await t.app.claim({ tenant, key, request: { amount: '5.00', charge: key }, binding, maxAttempts: 1 });
  if (claim.outcome !== 'acquired') throw new Error(`claim answered ${claim.outcome}`);
  expect(await t.app.reportUnknown(claim.attempt)).toMatchObject({ outcome: 'recorded' });
}

describe('createReconciler in two processes', () => {
  it('every decidable operation resolved exactly once, by one process; those the downstream never answers for stay unresolved', async () => {
    // The downstream (a payment provider's records), shared by both processes.
    await t.su.query(`create schema downstream`);
    await t.su.query(`create table downstream.charges (key text primary key, outcome text not null)`);
    await t.su.query(
      `create table downstream.lookups (lookup_id bigint generated always as identity, key text not null, holder text not null)`,
    );
    // Oldest dead letters are leased first: the decidable ones first, so that each process's
    // first batch holds some.
    const plan: [string, string][] = [
      ...Array.from({ length: 6 }, (_, i): [string, string] => [`charged-${i}`, 'completed']),
      ...Array.from({ length: 4 }, (_, i): [string, string] => [`no-charge-${i}`, 'failed']),
      ['flaky-0', 'flaky'],
      ['flaky-1', 'flaky'],
      ['hangs-0', 'hangs'],
      ['hangs-1', 'hangs'],
    ];
    for (const [key, outcome] of plan) {
      await needsReconciliation(key);
      await t.su.query('insert into downstream.charges (key, outcome) values ($1, $2)', [key, outcome]);
    }
    const decidable = plan.filter(([, o]) => o !== 'hangs').map(([k]) => k);
    const hanging = plan.filter(([, o]) => o === 'hangs').map(([k]) => k);

    // The reconciler's login role: settle_reconciler, and the downstream's tables.
    const role = `reconciler_${randomBytes(4).toString('hex')}`;
    await t.su.query(`create role ${role} login in role settle_reconciler`);
    await t.su.query(`grant usage on schema downstream to ${role}`);
    await t.su.query(`grant select, insert on downstream.charges, downstream.lookups to ${role}`);
    const url = new URL(t.db.url);
    url.username = role;
    url.password = '';

    const a = startReconciler(url.toString(), 'proc-a');
    const b = startReconciler(url.toString(), 'proc-b');
    try {
      // Until every decidable operation is final (the hanging ones are retried meanwhile).
      await waitFor(async () => {
        const { rows } = await t.su.query<{ n: number }>(
          `select count(*)::int as n from settle.operations where tenant = $1 and key = any($2::text[]) and status in ('completed', 'failed')`,
          [tenant, decidable],
        );
        return rows[0]?.n === decidable.length;
      }, 240_000);
    } finally {
      a.process.kill('SIGTERM');
      b.process.kill('SIGTERM');
    }
    expect(await a.exited).toBe(0);
    expect(await b.exited).toBe(0);
    const summaries = [a, b].map(
      (c) => JSON.parse(c.lines.at(-1) ?? '{}') as { holder: string; results: Record<string, number> },
    );

    // Exactly once: one resolve row per decidable operation, written by one of the processes,
    // one final outcome in the settlement feed; the verdict is the downstream's.
    const { rows: resolutions } = await t.su.query<{
      key: string;
      reason: string;
      checked_by: string;
      status_after: string;
    }>(
      `select key, detail->>'reason' as reason, detail->'evidence'->>'checked_by' as checked_by, status_after::text
         from settle.audit_log where tenant = $1 and event = 'resolve' and outcome = 'resolved' order by key`,
      [tenant],
    );
    expect(resolutions.map((r) => r.key)).toEqual([...decidable].sort());
    for (const r of resolutions) {
      expect(r.reason.startsWith(`reconciler ${r.checked_by}: `), r.key).toBe(true);
      const expected = plan.find(([k]) => k === r.key)?.[1] === 'failed' ? 'failed' : 'completed';
      expect(r.status_after, r.key).toBe(expected);
    }
    const { rows: feed } = await t.su.query<{ key: string; n: number }>(
      `select key, count(*)::int as n from settle_private.feed_events where tenant = $1 group by key order by key`,
      [tenant],
    );
    expect(feed).toEqual([...decidable].sort().map((key) => ({ key, n: 1 })));

    // Shared: both processes resolved some, and the totals add up to one resolution each.
    const byHolder = new Map<string, number>();
    for (const r of resolutions) byHolder.set(r.checked_by, (byHolder.get(r.checked_by) ?? 0) + 1);
    expect([...byHolder.keys()].sort()).toEqual(['proc-a', 'proc-b']);
    const resolvedBy = (s: (typeof summaries)[number]) =>
      (s.results.resolved_completed ?? 0) + (s.results.resolved_failed ?? 0);
    expect(summaries.map((s) => [s.holder, resolvedBy(s)])).toEqual([
      ['proc-a', byHolder.get('proc-a')],
      ['proc-b', byHolder.get('proc-b')],
    ]);
    expect(
      summaries.reduce((n, s) => n + (s.results.already_final ?? 0), 0),
      'no process resolved what the other had',
    ).toBe(0);

    // The downstream's timeouts: the flaky lookups were retried (by either process) and resolved
    // once; the hanging ones stay unknown, dead-lettered, unresolved.
    const { rows: lookups } = await t.su.query<{ key: string; n: number }>(
      `select key, count(*)::int as n from downstream.lookups group by key`,
    );
    const lookupsOf = (key: string) => lookups.find((l) => l.key === key)?.n ?? 0;
    for (const key of ['flaky-0', 'flaky-1', ...hanging])
      expect(lookupsOf(key), key).toBeGreaterThanOrEqual(key.startsWith('flaky') ? 2 : 1);
    expect(summaries.reduce((n, s) => n + (s.results.check_timeout ?? 0), 0)).toBeGreaterThanOrEqual(
      2 + hanging.length,
    );
    const { rows: left } = await t.su.query(
      `select key, status::text, dead_letter_reason from settle.operations where tenant = $1 and key = any($2::text[]) order by key`,
      [tenant, hanging],
    );
    expect(left).toEqual(
      hanging.map((key) => ({ key, status: 'unknown', dead_letter_reason: 'needs_reconciliation' })),
    );
    await t.su.query(`drop owned by ${role}`);
    await t.su.query(`drop role ${role}`);
  });
});
