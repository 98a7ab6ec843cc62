import { appendFileSync } from 'node:fs';

/**
 * Figures a reliability scenario reports for docs/reliability.md: how many operations it ran,
 * how many faults it injected and how many invariant violations its checker found. Tests call
 * recordFigures(); when RELIABILITY_FIGURES_FILE is set (test/reliability/harness/report.ts sets it)
 * each call appends one JSON line there, otherwise it does nothing.
 */
export interface ScenarioFigures {
  /** Stable scenario name, e.g. `failover/synchronous`. */
  readonly scenario: string;
  /** Client-visible calls issued (claims, completes, ...). */
  readonly operations: number;
  /** Faults injected (processes killed, cancels, walreceivers stopped, hostile inputs sent...). */
  readonly faults: number;
  /** Invariant violations the checker found. */
  readonly violations: number;
  /** Free-form extra figures (acknowledged settlements, unknown answers, ...). */
  readonly details?: Readonly<Record<string, number | string>>;
}

export const FIGURES_FILE_ENV = 'RELIABILITY_FIGURES_FILE';

export function recordFigures(figures: ScenarioFigures): void {
  const file = process.env[FIGURES_FILE_ENV];
  if (file === undefined || file === '') return;
  appendFileSync(file, `${JSON.stringify(figures)}\n`);
}
