import { parseArgs } from 'node:util';
import { SCENARIOS, type ScenarioName } from './types.js';

export interface BenchOptions {
  readonly quick: boolean;
  readonly scenarios: readonly ScenarioName[];
  readonly clients: readonly number[];
  readonly durationS: number;
  readonly scaleRows: readonly number[];
  readonly hotkeyClients: number;
  readonly hotKeys: number;
  readonly threads: number;
  /** Measured runs per scenario and client count, alternated with their baselines (A B A B ...). */
  readonly repeat: number;
  /** Unmeasured seconds of the same script after the CHECKPOINT, before the measured run. */
  readonly warmupS: number;
  readonly verbose: boolean;
}

export const USAGE = `Usage: npm run bench -- [options]
  --quick               a few seconds per run; only floor2 and cycle at the second client count; scale 0 and 100k rows
  --scenarios a,b       subset of: ${SCENARIOS.join(', ')}
  --clients 8,32        client counts for every scenario but hotkey (default 8,32)
  --duration N          seconds per run (default 15, quick 4)
  --scale-rows 0,1e6    pre-existing operation rows for the scale scenario (default 0,1000000,10000000; quick 0,100000)
  --hotkey-clients N    clients of the hotkey scenario (default 64)
  --threads N           pgbench threads (default: number of CPUs)
  --repeat N            measured runs per scenario and client count, alternated with their baselines
                        (A B A B ...); ratios are the median of the per-round ratios (default 3, quick 1)
  --warmup N            unmeasured seconds of the same script after each run's CHECKPOINT, so the measured
                        window starts after the full-page images of first touches (default 3, quick 1; 0 = off)
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
  const durationS = values.duration === undefined ? (quick ? 4 : 15) : Number(values.duration);
  if (!Number.isInteger(durationS) || durationS < 1) throw new Error('--duration: expected whole seconds >= 1');
  const scaleRows = values['scale-rows'] === undefined ? (quick ? [0, 100_000] : [0, 1_000_000, 10_000_000]) : numberList(values['scale-rows'], '--scale-rows');
  const repeat = values.repeat === undefined ? (quick ? 1 : 3) : Number(values.repeat);
  if (!Number.isInteger(repeat) || repeat < 1) throw new Error('--repeat: expected a whole number >= 1');
  const warmupS = values.warmup === undefined ? (quick ? 1 : 3) : Number(values.warmup);
  if (!Number.isInteger(warmupS) || warmupS < 0) throw new Error('--warmup: expected whole seconds >= 0');
  return {
    quick,
    scenarios: scenarios as ScenarioName[],
    clients,
    durationS,
    scaleRows,
    hotkeyClients: values['hotkey-clients'] === undefined ? 64 : numberList(values['hotkey-clients'], '--hotkey-clients')[0] ?? 64,
    hotKeys: values['hot-keys'] === undefined ? 4 : numberList(values['hot-keys'], '--hot-keys')[0] ?? 4,
    threads: values.threads === undefined ? Math.max(1, cpus) : numberList(values.threads, '--threads')[0] ?? cpus,
    repeat,
    warmupS,
    verbose: values.verbose === true,
  };
}
