import { describe, expect, it } from 'vitest';
import { perRoundRatios, renderLadderTable, summarizeLadder } from '../../bench/lib/ladder-summary.js';
import type { RunResult } from '../../bench/lib/types.js';

// The ladder's table arithmetic (bench/lib/ladder-summary.ts): ratios are medians of per-round
// ratios of runs in the same round, a step's delta is against its base in the same round, WAL is
// per operation at the first client count.

function run(label: string, clients: number, round: number, tps: number, wal: number | null = 1000): RunResult {
  return {
    scenario: 'proto',
    label,
    clients,
    round,
    driver: 'pgbench',
    durationS: 15,
    transactionsPerClient: null,
    tps,
    processed: tps * 15,
    failed: 0,
    retried: 0,
    latencyAverageMs: null,
    latencyStddevMs: null,
    p50Ms: null,
    p99Ms: null,
    walBytesPerOp: wal,
    fpiPerOp: null,
    checkpointsDuring: 0,
    warmupS: 3,
    statements: [],
    counters: {},
    checks: [],
  };
}

const runs: RunResult[] = [
  // round 1, a fast phase; round 2 slow; round 3 in between
  run('stripe', 8, 1, 3000, 650),
  run('s0', 8, 1, 3300, 1300),
  run('s1', 8, 1, 3000, 1400),
  run('stripe', 8, 2, 2000, 660),
  run('s0', 8, 2, 2400, 1310),
  run('s1', 8, 2, 2280, 1420),
  run('stripe', 8, 3, 2500, 655),
  run('s0', 8, 3, 2500, 1290),
  run('s1', 8, 3, 2250, 1380),
  run('stripe', 32, 1, 3000),
  run('s0', 32, 1, 1500),
  // s1 at 32 clients only in round 1; round 2 of s0 has no Stripe run to pair with
  run('s1', 32, 1, 1200),
  run('s0', 32, 2, 9999),
];

describe('ladder summary', () => {
  it('pairs runs round by round and leaves out a round without either side', () => {
    expect(perRoundRatios(runs, 's0', 'stripe', 8)).toEqual([1.1, 1.2, 1]);
    expect(perRoundRatios(runs, 's0', 'stripe', 32)).toEqual([0.5]);
    expect(perRoundRatios(runs, 'missing', 'stripe', 8)).toEqual([]);
  });

  it('gives each step its median ratio to Stripe, its delta to its base and its WAL against the base', () => {
    const rows = summarizeLadder(
      runs,
      [
        { label: 'stripe', title: 'Stripe', base: null },
        { label: 's0', title: 'prototype', base: null },
        { label: 's1', title: 'keys', base: 's0' },
      ],
      [8, 32],
      new Map([['s1', [{ wait: 'LWLock:WALWrite', share: 0.6 }]]]),
      // Server CPU per cycle by round; s1's second round was not measured.
      new Map([
        ['s0', [400, 500, 440]],
        ['s1', [440, undefined, 462]],
      ]),
    );
    const [stripe, s0, s1] = rows;
    expect(stripe?.byClients[8]).toMatchObject({ vsStripe: 1, tps: 2500, delta: null });
    expect(s0?.byClients[8]?.vsStripe).toBeCloseTo(1.1);
    expect(s0?.byClients[8]?.vsStripeRounds).toEqual([1.1, 1.2, 1]);
    // s1 / s0 per round: 0.909, 0.95, 0.9 -> median 0.909: 9.1% slower than its base.
    expect(s1?.byClients[8]?.delta).toBeCloseTo(3000 / 3300 - 1);
    expect(s1?.byClients[32]).toMatchObject({ vsStripe: 0.4, vsStripeRounds: [0.4] });
    expect(s1?.byClients[32]?.delta).toBeCloseTo(1200 / 1500 - 1);
    expect(s0?.walPerOp).toBe(1300);
    expect(s1?.walPerOp).toBe(1400);
    expect(s1?.walDelta).toBe(100);
    expect(s1?.waits).toEqual([{ wait: 'LWLock:WALWrite', share: 0.6 }]);
    expect(s0?.cpuUs).toBe(440);
    expect(s0?.cpuDelta).toBeNull();
    expect(s1?.cpuUs).toBe(451);
    // Rounds 1 and 3 only: 440 / 400 and 462 / 440, median 1.075.
    expect(s1?.cpuDelta).toBeCloseTo(0.075);

    const table = renderLadderTable(rows, [8, 32]);
    const lines = table.split('\n');
    expect(lines[0]).toBe(
      '| step | 8 clients: x Stripe | 8: vs previous | 32 clients: x Stripe | 32: vs previous | server CPU us/op | vs previous | WAL B/op (8 clients) | vs previous | top waits at 32 clients |',
    );
    expect(lines).toHaveLength(5);
    expect(lines[4]).toBe(
      '| s1: keys | 1.00x | −9.1% | 0.40x | −20.0% | 451 | +7.5% | 1400 | +100 | LWLock:WALWrite 60% |',
    );
  });
});
