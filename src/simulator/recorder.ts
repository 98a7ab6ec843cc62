import type { FaultName } from './config.js';
import type { EngineCall, Submission, ToldAnswer } from './history.js';

/**
 * What the simulator saw while it ran: every engine answer (for the checker), the faults it
 * injected, latencies, and unexpected exceptions.
 */
export class Recorder {
  readonly told: ToldAnswer[] = [];
  readonly injected = new Map<FaultName, number>();
  /** Per fault: what happened next (engine answers, downstream deduplications), counted. */
  readonly consequences = new Map<FaultName, Map<string, number>>();
  readonly claimLatencyMs: number[] = [];
  readonly settleLatencyMs: number[] = [];
  /** Whole run() calls of the callers (claim, pay, complete; or a wait, a replay). */
  readonly runLatencyMs: number[] = [];
  /** run() answers by outcome (and reason): `completed`, `replay`, `unknown (effect_outcome_unknown)`, ... */
  readonly runOutcomes = new Map<string, number>();
  readonly errors: string[] = [];
  errorCount = 0;
  sweeps = 0;
  sweptLeases = 0;

  inject(fault: FaultName): void {
    this.injected.set(fault, (this.injected.get(fault) ?? 0) + 1);
  }

  note(fault: FaultName, what: string): void {
    let counts = this.consequences.get(fault);
    if (counts === undefined) this.consequences.set(fault, (counts = new Map()));
    counts.set(what, (counts.get(what) ?? 0) + 1);
  }

  answer(entry: {
    tenant: string;
    key: string;
    call: EngineCall;
    submission: Submission;
    fault: FaultName | null;
    attempt: number | null;
    answer: Readonly<Record<string, unknown>>;
  }): void {
    const outcome = String(entry.answer.outcome);
    this.told.push({ ...entry, outcome });
    if (entry.fault !== null) {
      const reason = entry.answer.reason;
      this.note(entry.fault, `${entry.call} ${outcome}${typeof reason === 'string' ? ` (${reason})` : ''}`);
    }
  }

  run(outcome: string, detail?: string): void {
    const label = detail === undefined ? outcome : `${outcome} (${detail})`;
    this.runOutcomes.set(label, (this.runOutcomes.get(label) ?? 0) + 1);
  }

  error(error: unknown): void {
    this.errorCount += 1;
    if (this.errors.length < 20) {
      const e = error as { name?: string; message?: string; code?: string };
      this.errors.push(
        `${e.name ?? 'Error'}${e.code === undefined ? '' : ` ${e.code}`}: ${e.message ?? String(error)}`,
      );
    }
  }

  /** Times `fn` into `samples`. */
  async timed<T>(samples: number[], fn: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await fn();
    } finally {
      samples.push(performance.now() - started);
    }
  }
}
