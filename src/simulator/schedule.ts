import { FATE_FAULTS, type FateFault, type SimulatorConfig } from './config.js';
import { deriveSeed, mulberry32 } from '../shared/prng.js';

/** How a caller-timeout plays out after `report_unknown`. */
export type CallerTimeoutVariant = 'late-success-first' | 'retry-first';
/** What a stalled, superseded attempt reports when it wakes up. */
export type StaleReportVariant = 'fail' | 'unknown' | 'heartbeat';
/**
 * provider-outage: whether the payment went through before the provider stopped answering, and
 * whether the reconciler's first lookup still times out (it is retried).
 */
export type OutageVariant = 'paid' | 'not-paid' | 'paid-slow-lookup';

/**
 * The fault plan of one operation: a pure function of (seed, index, rates), never of timing,
 * so the same `--seed` always injects the same faults into the same operations.
 */
export interface OperationPlan {
  readonly index: number;
  /** Tenant suffix (`t0`, `t1`, ...); the run prefixes it to keep runs apart. */
  readonly tenant: string;
  readonly key: string;
  readonly amountCents: number;
  /** What happens to the first attempt (null: nothing, it pays and settles). */
  readonly fate: FateFault | null;
  readonly variant: CallerTimeoutVariant | StaleReportVariant | OutageVariant | null;
  /** Extra callers submitting the same key and request at the same moment. */
  readonly duplicates: number;
  /** A retry with a different amount under the same key, or null. */
  readonly conflictingAmountCents: number | null;
  /** A retry with binding generation + 1 under the same key. */
  readonly bindingBump: boolean;
  /** When the conflicting retries arrive: racing the first attempt, or once it has settled. */
  readonly probeTiming: 'racing' | 'after-settlement';
}

export function planOperation(
  config: Pick<SimulatorConfig, 'seed' | 'tenants' | 'faults'>,
  index: number,
): OperationPlan {
  const rng = mulberry32(deriveSeed(config.seed, index));
  // Draw every number unconditionally and in a fixed order, so changing one rate does not
  // shift the draws (and thus the plan) of the other faults.
  const tenant = `t${rng.int(0, config.tenants - 1)}`;
  const amountCents = rng.int(100, 500_000);
  const fateDraw = rng.next();
  const variantDraw = rng.next();
  const duplicateDraw = rng.next();
  const payloadDraw = rng.next();
  const bindingDraw = rng.next();
  const timingDraw = rng.next();
  const conflictingDelta = rng.int(1, 9_999);

  let fate: FateFault | null = null;
  let cumulative = 0;
  for (const name of FATE_FAULTS) {
    cumulative += config.faults[name];
    if (fateDraw < cumulative) {
      fate = name;
      break;
    }
  }
  let variant: OperationPlan['variant'] = null;
  if (fate === 'caller-timeout') variant = variantDraw < 0.5 ? 'late-success-first' : 'retry-first';
  if (fate === 'stale-report') variant = variantDraw < 1 / 3 ? 'fail' : variantDraw < 2 / 3 ? 'unknown' : 'heartbeat';
  if (fate === 'provider-outage')
    variant = variantDraw < 1 / 3 ? 'paid' : variantDraw < 2 / 3 ? 'not-paid' : 'paid-slow-lookup';

  return {
    index,
    tenant,
    key: `op-${String(index).padStart(6, '0')}`,
    amountCents,
    fate,
    variant,
    duplicates: duplicateDraw < config.faults.duplicate ? 1 : 0,
    conflictingAmountCents: payloadDraw < config.faults['different-payload'] ? amountCents + conflictingDelta : null,
    bindingBump: bindingDraw < config.faults['binding-bump'],
    probeTiming: timingDraw < 0.5 ? 'racing' : 'after-settlement',
  };
}

/** The fault plan of the whole run, operation by operation. */
export function planOperations(
  config: Pick<SimulatorConfig, 'seed' | 'tenants' | 'faults' | 'operations'>,
): OperationPlan[] {
  return Array.from({ length: config.operations }, (_, index) => planOperation(config, index));
}
