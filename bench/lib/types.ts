/** Shapes shared by the bench runner, its reports and results/latest.json. */

export const SCENARIOS = [
  'floor2',
  'spec4',
  'cycle',
  'proto',
  'client',
  'stripe',
  'batch',
  'proto-batch',
  'local',
  'lww',
  'replay',
  'pkread',
  'hotkey',
  'feedlag',
  'scale',
  'cpu',
  'http',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];
/** Plain-SQL baselines: no engine code runs in them. */
export type BaselineScenario = Extract<ScenarioName, 'floor2' | 'spec4' | 'lww' | 'stripe'>;

/** A run lasts a number of seconds (pgbench -T) or a number of transactions per client (-t). */
export type RunLength =
  | { readonly kind: 'seconds'; readonly seconds: number }
  | { readonly kind: 'transactions'; readonly perClient: number };

export interface Check {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}

export interface RunResult {
  readonly scenario: ScenarioName;
  /** `cycle`, or `scale@1000000` for a scale level. */
  readonly label: string;
  readonly clients: number;
  /** 1-based round: with --repeat N every scenario runs N times, alternated with its baselines. */
  readonly round: number;
  readonly driver: 'pgbench' | 'client';
  /** Wall-clock seconds of the measured run (for a counted run: how long its transactions took). */
  readonly durationS: number;
  /** Transactions per client of a counted run; null for a timed run. */
  readonly transactionsPerClient: number | null;
  readonly tps: number;
  readonly processed: number;
  readonly failed: number;
  readonly retried: number;
  readonly latencyAverageMs: number | null;
  readonly latencyStddevMs: number | null;
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
  /** WAL bytes written per processed transaction, from pg_current_wal_lsn() before/after. */
  readonly walBytesPerOp: number | null;
  /** Full-page images per processed transaction (pg_stat_wal.wal_fpi, cluster-wide). */
  readonly fpiPerOp: number | null;
  /** Checkpoints that started during the measured window (pg_stat_bgwriter, cluster-wide). */
  readonly checkpointsDuring: number;
  /** Wall-clock seconds of the unmeasured warm-up after the CHECKPOINT, before the measured window. */
  readonly warmupS: number;
  /** Average latency per pgbench command (or client call). */
  readonly statements: readonly { readonly command: string; readonly latencyMs: number }[];
  /** Outcome counts and other facts read from the database after the run. */
  readonly counters: Readonly<Record<string, number>>;
  readonly checks: readonly Check[];
  readonly scaleRows?: number;
}

export interface TargetResult {
  readonly name: string;
  readonly clients: number;
  /** Median over the rounds of the per-round value. */
  readonly value: number | null;
  /** The value of each round, in round order (one entry without --repeat). */
  readonly rounds: readonly number[];
  readonly threshold: number;
  /** `>=` throughput ratio targets, `<=` cost ratio targets (server CPU per cycle), `<` latency targets. */
  readonly comparison: '>=' | '<=' | '<';
  readonly unit: 'x' | 'ms';
  readonly verdict: 'PASS' | 'MISS' | 'n/a';
  readonly detail: string;
}

/**
 * A ratio reported for reference, not one of the bench's targets: no threshold, no verdict
 * (e.g. cycle / spec4, the engine's cost over the rows the specification requires).
 */
export interface ReferenceRatio {
  readonly name: string;
  readonly clients: number;
  /** Median over the rounds of the per-round ratio (a ratio not measured is not reported). */
  readonly value: number;
  readonly rounds: readonly number[];
  /** What the ratio says, for the report. */
  readonly meaning: string;
  readonly detail: string;
}

export interface BenchReport {
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly quick: boolean;
  readonly machine: {
    readonly cpus: number;
    readonly cpuModel: string;
    readonly memoryGiB: number;
    readonly os: string;
    readonly node: string;
    readonly postgres: string;
    readonly pgbench: string | null;
    readonly provision: string;
    readonly settings: Readonly<Record<string, string>>;
  };
  readonly options: Readonly<Record<string, unknown>>;
  readonly runs: readonly RunResult[];
  readonly targets: readonly TargetResult[];
  readonly references: readonly ReferenceRatio[];
  readonly notes: readonly string[];
}
