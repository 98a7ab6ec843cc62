import { parseArgs } from 'node:util';
import { SCENARIOS, type RunLength, type ScenarioName } from './types.js';

export interface BenchOptions {
  readonly quick: boolean;
  readonly scenarios: readonly ScenarioName[];
  readonly clients: readonly number[];
  /** How long each measured run lasts: seconds (-T) or transactions per client (-t). */
  readonly length: RunLength;
  readonly scaleRows: readonly number[];
  readonly hotkeyClients: number;
  readonly hotKeys: number;
  readonly threads: number;
  /** Measured runs per scenario and client count, alternated with their baselines (A B A B ...). */
  readonly repeat: number;
  /** Unmeasured run of the same script after the CHECKPOINT, before the measured run (null = none). */
  readonly warmup: RunLength | null;
  readonly verbose: boolean;
}

export const USAGE = `Usage: npm run bench -- [options]
  --quick               counted runs (100 transactions per client, 20 warm-up) so a loaded machine can never
                        produce an empty window; only floor2, cycle, proto, stripe, batch and proto-batch
                        at the second client count; scale 0 and 100k rows
  --scenarios a,b       subset of: ${SCENARIOS.join(', ')}
  --clients 8,32        client counts for every scenario but hotkey (default 8,32)
  --duration N          seconds per run (default 15)
  --transactions N      instead of seconds: N transactions per client (-t); the warm-up is N/5 per client
  --scale-rows 0,1e6    pre-existing operation rows for the scale scenario (default 0,1000000,10000000; quick 0,100000)
  --hotkey-clients N    clients of the hotkey scenario (default 64)
  --threads N           pgbench threads (default: number of CPUs)
  --repeat N            measured runs per scenario and client count, alternated with their baselines
                        (A B A B ...); ratios are the median of the per-round ratios (default 3, quick 1)
  --warmup N            unmeasured seconds of the same script after each run's CHECKPOINT, so the measured
                        window starts after the full-page images of first touches (default 3; 0 = off; with
                        --transactions or --quick any N > 0 means the counted warm-up)
  --verbose             log provisioning and generation steps
  --help`;

function numberList(value: string, flag: string): number[] {
  const list = value.split(',').map((part) => Number(part.trim()));
  if (list.length === 0 || list.some((n) => !Number.isFinite(n) || n < 0 || !Number.isInteger(n))) {
    throw new Error(`${flag}: expected a comma-separated list of non-negative integers, got ${value}`);
  }
  return list;
}

export function parseBenchArgs(argv: readonly string[], cpus: number): BenchOptions | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      quick: { type: 'boolean', default: false },
      scenarios: { type: 'string' },
      clients: { type: 'string' },
      duration: { type: 'string' },
      transactions: { type: 'string' },
      'scale-rows': { type: 'string' },
      'hotkey-clients': { type: 'string' },
      'hot-keys': { type: 'string' },
      threads: { type: 'string' },
      repeat: { type: 'string' },
      warmup: { type: 'string' },
      verbose: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help === true) return 'help';
  const quick = values.quick === true;
  const scenarios = values.scenarios === undefined ? [...SCENARIOS] : values.scenarios.split(',').map((s) => s.trim());
  for (const scenario of scenarios) {
    if (!(SCENARIOS as readonly string[]).includes(scenario)) {
      throw new Error(`--scenarios: unknown scenario ${scenario}; expected some of ${SCENARIOS.join(', ')}`);
    }
  }
  const clients = values.clients === undefined ? [8, 32] : numberList(values.clients, '--clients');
  if (clients.some((c) => c < 1)) throw new Error('--clients: every client count must be >= 1');
  if (values.duration !== undefined && values.transactions !== undefined)
    throw new Error('--duration and --transactions: give one of them');
  const length = runLength(values.duration, values.transactions, quick);
  const scaleRows =
    values['scale-rows'] === undefined
      ? quick
        ? [0, 100_000]
        : [0, 1_000_000, 10_000_000]
      : numberList(values['scale-rows'], '--scale-rows');
  const repeat = values.repeat === undefined ? (quick ? 1 : 3) : Number(values.repeat);
  if (!Number.isInteger(repeat) || repeat < 1) throw new Error('--repeat: expected a whole number >= 1');
  const warmupS = values.warmup === undefined ? (quick ? 1 : 3) : Number(values.warmup);
  if (!Number.isInteger(warmupS) || warmupS < 0) throw new Error('--warmup: expected whole seconds >= 0');
  const warmup: RunLength | null =
    warmupS === 0
      ? null
      : length.kind === 'seconds'
        ? { kind: 'seconds', seconds: warmupS }
        : { kind: 'transactions', perClient: Math.max(1, Math.round(length.perClient / 5)) };
  return {
    quick,
    scenarios: scenarios as ScenarioName[],
    clients,
    length,
    scaleRows,
    hotkeyClients:
      values['hotkey-clients'] === undefined ? 64 : (numberList(values['hotkey-clients'], '--hotkey-clients')[0] ?? 64),
    hotKeys: values['hot-keys'] === undefined ? 4 : (numberList(values['hot-keys'], '--hot-keys')[0] ?? 4),
    threads: values.threads === undefined ? Math.max(1, cpus) : (numberList(values.threads, '--threads')[0] ?? cpus),
    repeat,
    warmup,
    verbose: values.verbose === true,
  };
}

/**
 * Quick runs are counted, not timed: a `-T 1` window on a loaded machine can close before 64
 * connections have opened and process nothing. A counted run always measures
 * exactly clients x N transactions, however slow the machine is.
 */
function runLength(duration: string | undefined, transactions: string | undefined, quick: boolean): RunLength {
  if (transactions !== undefined || (quick && duration === undefined)) {
    const perClient = transactions === undefined ? QUICK_TRANSACTIONS_PER_CLIENT : Number(transactions);
    if (!Number.isInteger(perClient) || perClient < 1) throw new Error('--transactions: expected a whole number >= 1');
    return { kind: 'transactions', perClient };
  }
  const seconds = duration === undefined ? 15 : Number(duration);
  if (!Number.isInteger(seconds) || seconds < 1) throw new Error('--duration: expected whole seconds >= 1');
  return { kind: 'seconds', seconds };
}

const QUICK_TRANSACTIONS_PER_CLIENT = 100;

/** `15 s` or `100 tx/client`, for logs and reports. */
export const describeLength = (length: RunLength): string =>
  length.kind === 'seconds' ? `${length.seconds} s` : `${length.perClient} tx/client`;
