import { recordFigures } from './figures.js';

/**
 * The figures of one scenario, accumulated while its test runs and appended by record()
 * (figures.ts: a no-op unless test/reliability/harness/report.ts runs the suite). Operations are
 * counted by wrapping the objects the test calls the engine through (countCalls), faults
 * where the test injects them (fault), violations from the checker or a failed invariant.
 */
export class ScenarioTally {
  operations = 0;
  faults = 0;
  violations = 0;
  readonly details: Record<string, number | string> = {};

  constructor(readonly scenario: string) {}

  /** One injected fault (or `n`), also counted under `kind` in the details. */
  fault(kind: string, n = 1): void {
    this.faults += n;
    this.details[kind] = Number(this.details[kind] ?? 0) + n;
  }

  /**
   * Appends the figures. A test that failed counts at least one violation: its invariant was
   * asserted and did not hold, even where no checker counted it.
   */
  record(failed = false): void {
    if (failed && this.violations === 0) this.violations = 1;
    recordFigures({
      scenario: this.scenario,
      operations: this.operations,
      faults: this.faults,
      violations: this.violations,
      details: this.details,
    });
  }
}

/** The client-visible calls of a SettleDriver or of the typed client. */
export const SETTLE_CALLS = ['claim', 'heartbeat', 'complete', 'fail', 'reportUnknown', 'get'] as const;

/**
 * `target` unchanged, except that each call of one of `methods` first calls `onCall`. The
 * methods run bound to the target itself (class private fields keep working).
 */
export function countCalls<T extends object>(target: T, methods: readonly string[], onCall: () => void): T {
  const counted = new Set(methods);
  return new Proxy(target, {
    get(object, property) {
      const value: unknown = Reflect.get(object, property, object);
      if (typeof property !== 'string' || !counted.has(property) || typeof value !== 'function') return value;
      return (...args: unknown[]): unknown => {
        onCall();
        return (value as (...a: unknown[]) => unknown).apply(object, args);
      };
    },
  });
}
