/**
 * One reconciler process for test/client/reconciler-processes.test.ts: `createReconciler` over its
 * own client (a login role with settle_reconciler), asking a "downstream" that lives in the same
 * database (schema `downstream`, shared by every process, as a payment provider would be):
 *
 *   downstream.charges (key, outcome)   what the provider knows: completed | failed | hangs | flaky
 *   downstream.lookups (key, holder)    one row per lookup, written when it starts
 *
 * `hangs` never answers (the reconciler's check timeout aborts it); `flaky` does not answer its
 * first lookup (whichever process made it) and answers `completed` afterwards. This process
 * resolves nothing until the other one has started a lookup too: both then hold leases at the
 * same time (the test proves the sharing without depending on timing).
 *
 * Usage: node --import tsx test/support/reconciler-process.ts <database url> <holder>
 * Sweeps (as reconciler.start() does) until SIGTERM, then stops and prints one JSON line: what
 * its sweeps did.
 */
import pg from 'pg';
import { createReconciler, createSettleClient, type ReconcileDecision, type ReconcileResult } from '../../src/index.js';

const [url, holder] = process.argv.slice(2);
if (url === undefined || holder === undefined) {
  process.stderr.write('usage: reconciler-process.ts <database url> <holder>\n');
  process.exit(2);
}

const downstream = new pg.Pool({ connectionString: url, max: 4 });
const client = createSettleClient({ connectionString: url, poolSize: 2 });
const results: Partial<Record<ReconcileResult, number>> = {};
let sawPeer = false;

async function waitForPeer(signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (!signal.aborted) {
    const { rows } = await downstream.query<{ n: number }>(
      'select count(distinct holder)::int as n from downstream.lookups',
    );
    if ((rows[0]?.n ?? 0) >= 2) return;
    if (Date.now() > deadline) throw new Error(`${holder}: the other reconciler never started a lookup`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const reconciler = createReconciler({
  client,
  holder,
  batchSize: 3,
  // Long enough for the first lookups, which wait for the other process to start one.
  checkTimeoutMs: 8_000,
  retryAfterMs: 500,
  idleMs: 200,
  async check(op, { signal }): Promise<ReconcileDecision | undefined> {
    await downstream.query('insert into downstream.lookups (key, holder) values ($1, $2)', [op.key, holder]);
    const { rows } = await downstream.query<{ outcome: string; lookups: number }>(
      `select c.outcome, (select count(*)::int from downstream.lookups l where l.key = c.key) as lookups
         from downstream.charges c where c.key = $1`,
      [op.key],
    );
    const charge = rows[0];
    if (charge === undefined) return undefined; // not ours: leave it
    if (!sawPeer) {
      // Until the other process has started a lookup, this one resolves nothing: it keeps its
      // leases (a timeout here releases the operation, and the next one waits again).
      await waitForPeer(signal);
      if (signal.aborted) return undefined;
      sawPeer = true;
    }
    if (charge.outcome === 'hangs' || (charge.outcome === 'flaky' && charge.lookups === 1)) {
      // The provider does not answer: the reconciler's timeout aborts the lookup.
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      return { outcome: 'completed', result: { too: 'late' } };
    }
    if (charge.outcome === 'failed')
      return {
        outcome: 'failed',
        error: { code: 'no_charge' },
        evidence: { psp: 'none' },
        reason: 'PSP has no charge',
      };
    return {
      outcome: 'completed',
      result: { charge: `ch_${op.key}` },
      evidence: { psp: op.key },
      reason: 'PSP shows the charge',
    };
  },
  onError: (error) => process.stderr.write(`${holder}: ${String(error)}\n`),
});

// The loop of reconciler.start(), here with a tally of what each sweep did (printed at the end).
let stopping = false;
const loop = (async () => {
  while (!stopping) {
    try {
      const summary = await reconciler.sweep();
      for (const [result, n] of Object.entries(summary.results) as [ReconcileResult, number][]) {
        if (n > 0) results[result] = (results[result] ?? 0) + n;
      }
      if (summary.leased === 0) await new Promise((resolve) => setTimeout(resolve, 200));
    } catch (error) {
      process.stderr.write(`${holder}: sweep failed: ${String(error)}\n`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
})();

process.once('SIGTERM', () => {
  void (async () => {
    stopping = true;
    await loop;
    await reconciler.stop();
    await client.end();
    await downstream.end();
    process.stdout.write(`${JSON.stringify({ holder, results })}\n`);
    process.exit(0);
  })();
});

process.stdout.write(`${JSON.stringify({ holder, started: true })}\n`);
