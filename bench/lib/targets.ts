import { FEED_LAG_P99_LIMIT_MS, FEED_RATE } from './batch.js';
import type { ReferenceRatio, RunResult, TargetResult } from './types.js';

/**
 * The targets of the per-call engine, each a ratio of two runs from the same bench run (or, for
 * hotkey, a latency). With --repeat N every pair runs alternately N times (A B A B ...): the ratio is
 * computed per round, from the two runs seconds apart, and the target reports the median of
 * those per-round ratios. Reported PASS/MISS; never fails the run.
 */
/** Picks one run from the runs of one client count (and one round). */
type RunPicker = (runs: readonly RunResult[]) => RunResult | undefined;

interface RatioTarget {
  readonly name: string;
  /** Picks the numerator's label from all runs at one client count. */
  readonly numerator: RunPicker;
  readonly denominator: RunPicker;
  /** The required ratio at a client count (cycle / floor2 asks less at 32 clients than at 8). */
  readonly threshold: (clients: number) => number;
  /**
   * `>=`: numerator tps / denominator tps must reach the threshold. `<=`: a cost ratio, the
   * numerator's cost per operation over the denominator's (the inverse of the tps ratio),
   * must stay within it.
   */
  readonly comparison: '>=' | '<=';
  /** Client counts the target is evaluated at; default: the run's --clients. */
  readonly clients?: readonly number[];
  /** The denominator's client count, when it is not the numerator's (the cycle's own 8-client rate). */
  readonly denominatorClients?: number;
  /**
   * What is compared: throughput (default) or WAL bytes per operation (a cost: `<=` compares
   * the numerator's bytes over the denominator's directly).
   */
  readonly metric?: 'tps' | 'wal';
}

const byLabel =
  (label: string) =>
  (runs: readonly RunResult[]): RunResult | undefined =>
    runs.find((r) => r.label === label);

const largestScale = (runs: readonly RunResult[]): RunResult | undefined =>
  runs.filter((r) => r.scenario === 'scale').sort((a, b) => (b.scaleRows ?? 0) - (a.scaleRows ?? 0))[0];

const fixed = (x: number) => (): number => x;

const RATIO_TARGETS: readonly RatioTarget[] = [
  {
    name: 'cycle / stripe',
    numerator: byLabel('cycle'),
    denominator: byLabel('stripe'),
    threshold: fixed(1),
    comparison: '>=',
  },
  // The cycle keeps its rate under concurrency: at 32 clients at least 0.95x its own rate at 8.
  {
    name: 'cycle@32 / cycle@8',
    numerator: byLabel('cycle'),
    denominator: byLabel('cycle'),
    threshold: fixed(0.95),
    comparison: '>=',
    clients: [32],
    denominatorClients: 8,
  },
  {
    name: 'replay / pkread',
    numerator: byLabel('replay'),
    denominator: byLabel('pkread'),
    threshold: fixed(0.5),
    comparison: '>=',
  },
  // WAL bytes per cycle over the Stripe pattern's per operation.
  {
    name: 'WAL/op: cycle / stripe',
    numerator: byLabel('cycle'),
    denominator: byLabel('stripe'),
    threshold: fixed(2),
    comparison: '<=',
    metric: 'wal',
  },
  // Settled keys per second, 100 keys per claim_many + complete_many, against the Stripe pattern's
  // single keys (issue 51: 8x, stretch 10x) ...
  {
    name: 'batch / stripe (settled keys per second)',
    numerator: byLabel('batch'),
    denominator: byLabel('stripe'),
    threshold: fixed(8),
    comparison: '>=',
  },
  // ... and against the lean prototype's set-based batch of the same keys (proto-batch).
  {
    name: 'batch / proto-batch (settled keys per second)',
    numerator: byLabel('batch'),
    denominator: byLabel('proto-batch'),
    threshold: fixed(0.6),
    comparison: '>=',
  },
  {
    name: 'client / cycle',
    numerator: byLabel('client'),
    denominator: byLabel('cycle'),
    threshold: fixed(0.8),
    comparison: '>=',
  },
  // Through the stack: the Express app with the middleware against the same app doing the Stripe
  // pattern by hand on the same database (requests per second).
  {
    name: 'http / http-stripe (Express: middleware / Stripe pattern by hand)',
    numerator: byLabel('http'),
    denominator: byLabel('http-stripe'),
    threshold: fixed(1),
    comparison: '>=',
  },
  {
    name: 'scale@max / scale@0',
    numerator: largestScale,
    denominator: byLabel('scale@0'),
    threshold: fixed(0.85),
    comparison: '>=',
  },
];

/**
 * Ratios reported for reference, not targets (no threshold, no PASS/MISS): the lean prototype's
 * ratios (the targets' stretch), and what the rows the specification requires cost against the
 * two-write floor.
 */
const REFERENCE_RATIOS: readonly {
  readonly name: string;
  readonly numerator: RunPicker;
  readonly denominator: RunPicker;
  readonly meaning: string;
}[] = [
  {
    name: 'proto / stripe',
    numerator: byLabel('proto'),
    denominator: byLabel('stripe'),
    meaning: "the lean prototype's cycle against the Stripe pattern: the stretch of cycle / stripe",
  },
  {
    name: 'cycle / proto',
    numerator: byLabel('cycle'),
    denominator: byLabel('proto'),
    meaning: "the engine's cycle against the lean prototype's (docs/performance.md, Ladder: what each guarantee costs)",
  },
  {
    name: 'proto-batch / stripe',
    numerator: byLabel('proto-batch'),
    denominator: byLabel('stripe'),
    meaning:
      "the prototype's batch, settled keys per second, against the Stripe pattern (batch / stripe's stretch: 10x)",
  },
  {
    name: 'cycle / floor2',
    numerator: byLabel('cycle'),
    denominator: byLabel('floor2'),
    meaning: 'the cycle against the two-write floor (an INSERT, then an UPDATE, two commits)',
  },
  {
    name: 'cycle / spec4',
    numerator: byLabel('cycle'),
    denominator: byLabel('spec4'),
    meaning: 'the cycle against the rows it writes, in plain SQL, one statement per transaction',
  },
  {
    name: 'local / lww',
    numerator: byLabel('local'),
    denominator: byLabel('lww'),
    meaning: 'effect and settlement in one transaction against one last-write-wins upsert',
  },
  {
    // tps of a cpu run is ops per CPU-second, so spec4 tps / cycle tps = cycle us / spec4 us.
    name: 'cpu: cycle / spec4 (server CPU per op)',
    numerator: byLabel('cpu:spec4'),
    denominator: byLabel('cpu:cycle'),
    meaning:
      'server CPU per operation in one backend without commits (bench/sql/cycle-cpu-loop.sql), engine over plain SQL',
  },
  {
    name: 'spec4 / floor2',
    numerator: byLabel('spec4'),
    denominator: byLabel('floor2'),
    meaning: 'the required rows, in plain SQL, against the two-write floor',
  },
  {
    // tps of a cpu run is ops per CPU-second, so spec4 tps / cycle tps = cycle us / spec4 us.
    name: 'cpu-call: cycle / spec4 (server CPU per op)',
    numerator: byLabel('cpu-call:spec4'),
    denominator: byLabel('cpu-call:cycle'),
    meaning:
      'server CPU per operation, engine over plain SQL, statement by statement as pgbench sends them (each its own transaction: commits and per-transaction set-up included)',
  },
];

export const HOTKEY_P99_LIMIT_MS = 10;

/** Median (mean of the middle two for an even count); null for no values. */
export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? null) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
}

const roundsOf = (runs: readonly RunResult[]): number[] => [...new Set(runs.map((r) => r.round))].sort((a, b) => a - b);

interface RoundRatios {
  /** The numerator's label (the largest scale level for scale@max), if measured at all. */
  readonly numLabel: string | undefined;
  readonly ratios: number[];
  readonly numTps: number;
  readonly denTps: number;
}

/**
 * The per-round ratios of two runs at one client count. The numerator's label is chosen over
 * all rounds (the largest scale level measured at all), then paired round by round; a round
 * without either side is left out.
 */
function roundRatios(
  runs: readonly RunResult[],
  clients: number,
  numerator: RunPicker,
  denominator: RunPicker,
  denominatorClients: number = clients,
  metric: 'tps' | 'wal' = 'tps',
): RoundRatios {
  const atClients = runs.filter((r) => r.clients === clients);
  const denAtClients = runs.filter((r) => r.clients === denominatorClients);
  const numLabel = numerator(atClients)?.label;
  const value = (r: RunResult): number => (metric === 'wal' ? (r.walBytesPerOp ?? 0) : r.tps);
  const pairs = roundsOf(atClients)
    .map((round) => ({
      num: atClients.find((r) => r.round === round && r.label === numLabel),
      den: denominator(denAtClients.filter((r) => r.round === round)),
    }))
    .filter(
      (p): p is { num: RunResult; den: RunResult } =>
        p.num !== undefined &&
        p.den !== undefined &&
        value(p.den) > 0 &&
        value(p.num) > 0 &&
        !(p.num.scenario === 'scale' && p.num.label === p.den.label),
    );
  return {
    numLabel: pairs[0]?.num.label,
    ratios: pairs.map((p) => value(p.num) / value(p.den)),
    numTps: median(pairs.map((p) => value(p.num))) ?? 0,
    denTps: median(pairs.map((p) => value(p.den))) ?? 0,
  };
}

const roundsDetail = (r: RoundRatios): string =>
  `median of ${r.ratios.length} round${r.ratios.length === 1 ? '' : 's'}` +
  (r.ratios.length > 1 ? ` (${r.ratios.map((x) => x.toFixed(2)).join(', ')})` : '') +
  `; median tps ${r.numTps.toFixed(0)} / ${r.denTps.toFixed(0)}`;

const walDetail = (r: RoundRatios): string =>
  `median of ${r.ratios.length} round${r.ratios.length === 1 ? '' : 's'}` +
  (r.ratios.length > 1 ? ` (${r.ratios.map((x) => x.toFixed(2)).join(', ')})` : '') +
  `; median WAL ${r.numTps.toFixed(0)} / ${r.denTps.toFixed(0)} B per op`;

/** A cost target's rounds and each side's median cost per operation (µs, from ops per CPU-second). */
const costDetail = (ratios: readonly number[], r: RoundRatios): string =>
  `median of ${ratios.length} round${ratios.length === 1 ? '' : 's'}` +
  (ratios.length > 1 ? ` (${ratios.map((x) => x.toFixed(2)).join(', ')})` : '') +
  `; median ${(r.numTps > 0 ? 1e6 / r.numTps : 0).toFixed(1)} / ${(r.denTps > 0 ? 1e6 / r.denTps : 0).toFixed(1)} us per op`;

/** A latency target's rounds: their count and, with several, each p99. */
const p99Rounds = (p99s: readonly number[]): string =>
  `median of ${p99s.length} round${p99s.length === 1 ? '' : 's'}` +
  (p99s.length > 1 ? ` (${p99s.map((v) => v.toFixed(1)).join(', ')} ms)` : '');

export function evaluateTargets(runs: readonly RunResult[], clientCounts: readonly number[]): TargetResult[] {
  const results: TargetResult[] = [];
  for (const target of RATIO_TARGETS) {
    for (const clients of target.clients ?? clientCounts) {
      const metric = target.metric ?? 'tps';
      const measured = roundRatios(
        runs,
        clients,
        target.numerator,
        target.denominator,
        target.denominatorClients ?? clients,
        metric,
      );
      const name = target.name.replace('scale@max', measured.numLabel ?? 'scale@max');
      const threshold = target.threshold(clients);
      const comparison = target.comparison;
      // A cost ratio from throughputs is the inverse of the tps ratio of each round; WAL bytes are a cost already.
      const ratios = comparison === '<=' && metric === 'tps' ? measured.ratios.map((r) => 1 / r) : measured.ratios;
      const value = median(ratios);
      if (value === null) {
        results.push({
          name,
          clients,
          value: null,
          rounds: [],
          threshold,
          comparison,
          unit: 'x',
          verdict: 'n/a',
          detail: 'not measured in this run',
        });
        continue;
      }
      const pass = comparison === '<=' ? value <= threshold : value >= threshold;
      results.push({
        name,
        clients,
        value,
        rounds: ratios,
        threshold,
        comparison,
        unit: 'x',
        verdict: pass ? 'PASS' : 'MISS',
        detail:
          metric === 'wal'
            ? walDetail(measured)
            : comparison === '<='
              ? costDetail(ratios, measured)
              : roundsDetail(measured),
      });
    }
  }
  const hotClients = [...new Set(runs.filter((r) => r.scenario === 'hotkey').map((r) => r.clients))];
  for (const clients of hotClients) {
    const hot = runs.filter((r) => r.scenario === 'hotkey' && r.clients === clients && r.p99Ms !== null);
    const p99s = hot.map((r) => r.p99Ms ?? 0);
    const p99 = median(p99s);
    const floor = median(
      runs
        .filter((r) => r.label === 'pkread@hotkey' && r.clients === clients && r.p99Ms !== null)
        .map((r) => r.p99Ms ?? 0),
    );
    results.push({
      name: 'hotkey p99 claim latency',
      clients,
      value: p99,
      rounds: p99s,
      threshold: HOTKEY_P99_LIMIT_MS,
      comparison: '<',
      unit: 'ms',
      verdict: p99 === null ? 'n/a' : p99 < HOTKEY_P99_LIMIT_MS ? 'PASS' : 'MISS',
      detail:
        p99Rounds(p99s) +
        `; p50 ${median(hot.map((r) => r.p50Ms ?? 0))?.toFixed(2) ?? '-'} ms` +
        (floor === null
          ? ''
          : `; a primary-key read at ${clients} clients in the same rounds: p99 ${floor.toFixed(1)} ms`),
    });
  }
  const feed = runs.filter((r) => r.scenario === 'feedlag' && r.p99Ms !== null);
  const feedLag = (name: string, p99s: readonly number[], detail: string): void => {
    const p99 = median(p99s);
    results.push({
      name: `feed lag p99 at ${FEED_RATE} settlements/s${name}`,
      clients: feed[0]?.clients ?? 0,
      value: p99,
      rounds: p99s,
      threshold: FEED_LAG_P99_LIMIT_MS,
      comparison: '<',
      unit: 'ms',
      verdict: p99 === null ? 'n/a' : p99 < FEED_LAG_P99_LIMIT_MS ? 'PASS' : 'MISS',
      detail: p99Rounds(p99s) + detail,
    });
  };
  if (feed.length > 0) {
    const drain = median(feed.map((r) => r.counters.drainEventsPerSecond ?? 0));
    feedLag(
      '',
      feed.map((r) => r.p99Ms ?? 0),
      `; p50 ${median(feed.map((r) => r.p50Ms ?? 0))?.toFixed(1) ?? '-'} ms; produced ${median(feed.map((r) => r.counters.producedPerSecond ?? 0))?.toFixed(0) ?? '-'}/s` +
        `; backlog drain ${drain?.toFixed(0) ?? '-'} events/s`,
    );
    const clientP99s = feed.flatMap((r) => (r.counters.clientP99Ms === undefined ? [] : [r.counters.clientP99Ms]));
    if (clientP99s.length > 0) {
      feedLag(
        ', typed client',
        clientP99s,
        `; p50 ${median(feed.map((r) => r.counters.clientP50Ms ?? 0))?.toFixed(1) ?? '-'} ms; client.consume with its defaults beside the bench's consumer`,
      );
    }
  }
  return results;
}

/** The reference ratios measured in this run (a ratio whose sides were not both measured is left out). */
export function evaluateReferenceRatios(runs: readonly RunResult[], clientCounts: readonly number[]): ReferenceRatio[] {
  return REFERENCE_RATIOS.flatMap((ref) =>
    [...clientCounts, 1].flatMap((clients): ReferenceRatio[] => {
      const measured = roundRatios(runs, clients, ref.numerator, ref.denominator);
      const value = median(measured.ratios);
      return value === null
        ? []
        : [
            {
              name: ref.name,
              clients,
              value,
              rounds: measured.ratios,
              meaning: ref.meaning,
              detail: roundsDetail(measured),
            },
          ];
    }),
  );
}

export function formatTargetValue(t: TargetResult): string {
  if (t.value === null) return '-';
  return t.unit === 'x' ? `${t.value.toFixed(2)}x` : `${t.value.toFixed(2)} ms`;
}
