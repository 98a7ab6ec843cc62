/** Small summary statistics for the report. */

/** The q-quantile (0..1) of `samples` by nearest rank; 0 for no samples. */
export function quantile(samples: readonly number[], q: number): number {
  if (samples.length === 0) return 0;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank] ?? 0;
}

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

export function summarizeLatency(samples: readonly number[]): LatencySummary {
  const round = (n: number): number => Math.round(n * 100) / 100;
  return {
    count: samples.length,
    p50Ms: round(quantile(samples, 0.5)),
    p99Ms: round(quantile(samples, 0.99)),
    maxMs: round(samples.reduce((max, s) => Math.max(max, s), 0)),
  };
}

/** Counts of each value, keys in ascending numeric order. */
export function histogram(values: readonly number[]): Record<string, number> {
  const counts = new Map<number, number>();
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
  return Object.fromEntries([...counts.entries()].sort(([a], [b]) => a - b).map(([k, v]) => [String(k), v]));
}
