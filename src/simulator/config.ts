import { durationMs } from '../shared/duration.js';

/**
 * Simulator flags and their defaults. Defaults are sized so `npm start` finishes well under a
 * minute on a 2-core machine, embedded PostgreSQL start-up included.
 */

/**
 * What can go wrong with an operation. The first seven decide the fate of the operation's first
 * attempt (at most one of them per operation); the last three add extra submissions of the
 * same key by other callers.
 */
export const FAULTS = [
  {
    name: 'crash-after-claim',
    kind: 'fate',
    defaultRate: 0.03,
    summary:
      'the worker crashes right after its claim: no effect, no report; the lease must lapse before a retry takes over',
  },
  {
    name: 'crash-after-effect',
    kind: 'fate',
    defaultRate: 0.03,
    summary: 'the worker pays, then crashes before settling; the retry must not pay again',
  },
  {
    name: 'lease-expiry',
    kind: 'fate',
    defaultRate: 0.02,
    summary: 'a slow worker outlives its lease mid-effect; a retry takes over and settles; the slow one reports late',
  },
  {
    name: 'caller-timeout',
    kind: 'fate',
    defaultRate: 0.04,
    summary:
      'the caller times out after the effect and reports unknown; the success arrives late (sometimes after a retry)',
  },
  {
    name: 'stale-report',
    kind: 'fate',
    defaultRate: 0.02,
    summary: 'a stalled attempt (no effect) is superseded, then reports a failure, an unknown or a heartbeat late',
  },
  {
    name: 'slow-commit',
    kind: 'fate',
    defaultRate: 0.02,
    summary: 'the caller settles inside its own transaction and commits late, after later settlements committed',
  },
  {
    name: 'provider-outage',
    kind: 'fate',
    defaultRate: 0.02,
    summary:
      'the provider stops answering mid-payment (paid or not) and every lookup times out until the budget is spent',
  },
  {
    name: 'duplicate',
    kind: 'submission',
    defaultRate: 0.05,
    summary: 'a second caller submits the same key and request at the same time',
  },
  {
    name: 'different-payload',
    kind: 'submission',
    defaultRate: 0.03,
    summary: 'a retry under the same key carries a different amount: must get conflict, never execute',
  },
  {
    name: 'binding-bump',
    kind: 'submission',
    defaultRate: 0.03,
    summary: 'a retry after re-authentication (binding generation + 1) under the same key: must get conflict',
  },
] as const;

export type FaultName = (typeof FAULTS)[number]['name'];
export type FateFault = Extract<(typeof FAULTS)[number], { kind: 'fate' }>['name'];
export type SubmissionFault = Extract<(typeof FAULTS)[number], { kind: 'submission' }>['name'];

export const FAULT_NAMES: readonly FaultName[] = FAULTS.map((fault) => fault.name);
export const FATE_FAULTS: readonly FateFault[] = FAULTS.filter((f) => f.kind === 'fate').map(
  (f) => f.name as FateFault,
);

export interface SimulatorConfig {
  readonly seed: number;
  /** Concurrent workers, and the size of the connection pool. */
  readonly workers: number;
  readonly operations: number;
  /** Stop issuing new operations after this many ms (in-flight ones still finish); null = no limit. */
  readonly durationMs: number | null;
  /** Operations are spread over this many tenants. */
  readonly tenants: number;
  /** Lease of every claim, in whole seconds (the engine's minimum is 1 s). */
  readonly leaseSeconds: number;
  readonly maxAttempts: number;
  /** How often the sweeper calls settle.expire_leases. */
  readonly sweepIntervalMs: number;
  readonly faults: Readonly<Record<FaultName, number>>;
}

export const DEFAULT_CONFIG: SimulatorConfig = {
  seed: 42,
  workers: 24,
  operations: 2000,
  durationMs: null,
  tenants: 4,
  leaseSeconds: 1,
  maxAttempts: 10,
  sweepIntervalMs: 250,
  faults: Object.fromEntries(FAULTS.map((f) => [f.name, f.defaultRate])) as Record<FaultName, number>,
};

export class SimulatorConfigError extends Error {
  override readonly name = 'SimulatorConfigError';
}

/** parseArgs option definitions for the simulator's flags (all strings, parsed below). */
export const SIMULATOR_FLAGS = {
  seed: { type: 'string' },
  workers: { type: 'string' },
  operations: { type: 'string' },
  duration: { type: 'string' },
  tenants: { type: 'string' },
  lease: { type: 'string' },
  'max-attempts': { type: 'string' },
  faults: { type: 'string' },
  ...Object.fromEntries(FAULT_NAMES.map((name) => [`fault-${name}`, { type: 'string' }])),
} as const satisfies Record<string, { type: 'string' }>;

export type SimulatorFlagValues = Partial<Record<string, string | boolean | undefined>>;

/**
 * Builds a config from parsed flag values (strings). `--faults=<rate>` sets every fault at
 * once (`--faults=0` turns injection off); `--fault-<name>=<rate>` then overrides one fault.
 * Durations accept `500ms`, `30s`, `2m` or a bare number of seconds.
 */
export function configFromFlags(values: SimulatorFlagValues, base: SimulatorConfig = DEFAULT_CONFIG): SimulatorConfig {
  const faults: Record<FaultName, number> = { ...base.faults };
  const all = stringFlag(values, 'faults');
  if (all !== undefined) {
    const rate = parseRate('faults', all);
    for (const name of FAULT_NAMES) faults[name] = rate;
  }
  for (const name of FAULT_NAMES) {
    const value = stringFlag(values, `fault-${name}`);
    if (value !== undefined) faults[name] = parseRate(`fault-${name}`, value);
  }
  const fateTotal = FATE_FAULTS.reduce((sum, name) => sum + faults[name], 0);
  if (fateTotal > 1 + 1e-9) {
    throw new SimulatorConfigError(
      `the first-attempt faults (${FATE_FAULTS.join(', ')}) are exclusive: their rates add up to ${fateTotal.toFixed(3)}, at most 1`,
    );
  }
  const duration = stringFlag(values, 'duration');
  return {
    seed: intFlag(values, 'seed', base.seed, 0, 0xffffffff),
    workers: intFlag(values, 'workers', base.workers, 1, 200),
    operations: intFlag(values, 'operations', base.operations, 1, 1_000_000),
    durationMs: duration === undefined ? base.durationMs : parseDurationMs('duration', duration),
    tenants: intFlag(values, 'tenants', base.tenants, 1, 1000),
    leaseSeconds: intFlag(values, 'lease', base.leaseSeconds, 1, 60),
    maxAttempts: intFlag(values, 'max-attempts', base.maxAttempts, 2, 1000),
    sweepIntervalMs: base.sweepIntervalMs,
    faults,
  };
}

function stringFlag(values: SimulatorFlagValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

function intFlag(values: SimulatorFlagValues, name: string, fallback: number, min: number, max: number): number {
  const text = stringFlag(values, name);
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text.trim()))
    throw new SimulatorConfigError(`--${name} must be a whole number (got ${JSON.stringify(text)})`);
  const value = Number(text);
  if (value < min || value > max)
    throw new SimulatorConfigError(`--${name} must be between ${min} and ${max} (got ${value})`);
  return value;
}

function parseRate(name: string, text: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < 0 || value > 1) {
    throw new SimulatorConfigError(`--${name} must be a rate between 0 and 1 (got ${JSON.stringify(text)})`);
  }
  return value;
}

function parseDurationMs(name: string, text: string): number {
  const ms = durationMs(text);
  if (ms === undefined)
    throw new SimulatorConfigError(
      `--${name} must be a duration like 500ms, 30s, 2m or 1m30s (got ${JSON.stringify(text)})`,
    );
  return ms;
}
