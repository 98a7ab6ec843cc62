import { describe, expect, it } from 'vitest';
import { EDGE, minuteCounts, type SampledRow } from '../../src/console/overview-data.js';

// The chart's per-minute counts from bounded samples (overview-data.ts): exact up to 2 × EDGE,
// else estimated from the rates of the first and last EDGE, or a lower bound where the samples
// arrive in clumps of one timestamp.

const minute = new Date('2026-12-06T10:00:00Z');
const at = (ms: number) => new Date(minute.getTime() + ms);

/** A minute of `total` operations arriving every `gapMs` from `startMs`, one status. */
function steady(total: number, gapMs: number, startMs = 0): SampledRow {
  const read = Math.min(total, 2 * EDGE);
  const estimated = total >= 2 * EDGE;
  return {
    minute,
    status: 'completed',
    total: read,
    first_n: Math.min(total, EDGE),
    all_n: read,
    last_n: estimated ? EDGE : 0,
    first_start: at(startMs),
    first_end: at(startMs + (Math.min(total, EDGE) - 1) * gapMs),
    first_distinct: Math.min(total, EDGE),
    last_start: estimated ? at(startMs + (total - EDGE) * gapMs) : null,
    last_end: estimated ? at(startMs + (total - 1) * gapMs) : null,
    last_distinct: estimated ? EDGE : 0,
  };
}

describe('minute counts from bounded samples', () => {
  it('counts a quiet minute exactly', () => {
    expect(minuteCounts([steady(37, 1000)])).toEqual([{ minute, status: 'completed', n: 37, kind: 'exact' }]);
  });

  it('estimates steady traffic and a single burst within a few percent', () => {
    for (const [total, gap, start] of [
      [3000, 20, 0],
      [1000, 1, 30_000],
    ] as const) {
      const [row] = minuteCounts([steady(total, gap, start)]);
      expect(row?.kind).toBe('estimated');
      expect(Math.abs((row?.n ?? 0) - total) / total).toBeLessThan(0.05);
    }
  });

  it('gives a lower bound, not a guess, for batches stamped with one time', () => {
    const batch: SampledRow = { ...steady(5000, 0), first_distinct: 1, last_distinct: 1 };
    expect(minuteCounts([batch])).toEqual([{ minute, status: 'completed', n: 2 * EDGE, kind: 'at-least' }]);
  });

  it("splits a minute's estimate by the statuses of its samples", () => {
    const base = steady(3000, 20);
    const rows = minuteCounts([
      { ...base, status: 'completed', first_n: EDGE - 5, last_n: EDGE - 5, all_n: 2 * EDGE - 10 },
      { ...base, status: 'failed', first_n: 5, last_n: 5, all_n: 10 },
    ]);
    const completed = rows[0]?.n ?? 0;
    const failed = rows[1]?.n ?? 0;
    expect(Math.abs(completed + failed - 3000) / 3000).toBeLessThan(0.05);
    expect(failed / (completed + failed)).toBeCloseTo(0.1, 2);
  });
});
