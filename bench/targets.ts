import type { RunResult, TargetResult } from './types.js';

/**
 * The targets of issue #5, each a ratio of two runs from the same bench run (or, for hotkey,
 * a latency). Reported PASS/MISS; never fails the run.
 */
interface RatioTarget {
  readonly name: string;
  readonly numerator: (runs: readonly RunResult[], clients: number) => RunResult | undefined;
  readonly denominator: (runs: readonly RunResult[], clients: number) => RunResult | undefined;
  readonly threshold: number;
}

const byLabel = (label: string) => (runs: readonly RunResult[], clients: number): RunResult | undefined =>
  runs.find((r) => r.label === label && r.clients === clients);

const largestScale = (runs: readonly RunResult[], clients: number): RunResult | undefined =>
  runs.filter((r) => r.scenario === 'scale' && r.clients === clients).sort((a, b) => (b.scaleRows ?? 0) - (a.scaleRows ?? 0))[0];

const RATIO_TARGETS: readonly RatioTarget[] = [
  { name: 'cycle / floor2', numerator: byLabel('cycle'), denominator: byLabel('floor2'), threshold: 0.8 },
  { name: 'cycle / stripe', numerator: byLabel('cycle'), denominator: byLabel('stripe'), threshold: 2 },
  { name: 'local / lww', numerator: byLabel('local'), denominator: byLabel('lww'), threshold: 0.8 },
  { name: 'client / cycle', numerator: byLabel('client'), denominator: byLabel('cycle'), threshold: 0.7 },
  { name: 'scale@max / scale@0', numerator: largestScale, denominator: byLabel('scale@0'), threshold: 0.85 },
];

export const HOTKEY_P99_LIMIT_MS = 10;

export function evaluateTargets(runs: readonly RunResult[], clientCounts: readonly number[]): TargetResult[] {
  const results: TargetResult[] = [];
  for (const target of RATIO_TARGETS) {
    for (const clients of clientCounts) {
      const num = target.numerator(runs, clients);
      const den = target.denominator(runs, clients);
      const name = target.name.replace('scale@max', num?.label ?? 'scale@max');
      if (num === undefined || den === undefined || den.tps === 0 || (num.scenario === 'scale' && num.label === den.label)) {
        results.push({ name, clients, value: null, threshold: target.threshold, comparison: '>=', unit: 'x', verdict: 'n/a', detail: 'not measured in this run' });
        continue;
      }
      const value = num.tps / den.tps;
      results.push({
        name,
        clients,
        value,
        threshold: target.threshold,
        comparison: '>=',
        unit: 'x',
        verdict: value >= target.threshold ? 'PASS' : 'MISS',
        detail: `${num.tps.toFixed(0)} / ${den.tps.toFixed(0)} tps`,
      });
    }
  }
  for (const hot of runs.filter((r) => r.scenario === 'hotkey')) {
    const p99 = hot.p99Ms;
    results.push({
      name: 'hotkey p99 claim latency',
      clients: hot.clients,
      value: p99,
      threshold: HOTKEY_P99_LIMIT_MS,
      comparison: '<',
      unit: 'ms',
      verdict: p99 === null ? 'n/a' : p99 < HOTKEY_P99_LIMIT_MS ? 'PASS' : 'MISS',
      detail: `p50 ${hot.p50Ms?.toFixed(2) ?? '-'} ms, claim avg ${hot.statements[0]?.latencyMs.toFixed(2) ?? '-'} ms`,
    });
  }
  return results;
}

export function formatTargetValue(t: TargetResult): string {
  if (t.value === null) return '-';
  return t.unit === 'x' ? `${t.value.toFixed(2)}x` : `${t.value.toFixed(2)} ms`;
}
