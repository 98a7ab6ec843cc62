import { AsyncLocalStorage } from 'node:async_hooks';
import { createPool, type DatabasePool, type Interceptor } from 'slonik';
import { settleInterceptors, settleTypeParsers } from '../client/interceptors.js';
import type { FaultName } from './config.js';
import type { EngineCall, Submission } from './history.js';
import type { Recorder } from './recorder.js';

/**
 * The simulator drives the public client (run(), and the low-level calls a fault needs) over a
 * slonik pool of its own whose interceptor records every answer of the engine, raw, as the
 * checker needs it. Which operation, caller and fault a query belongs to travels with the
 * asynchronous call (AsyncLocalStorage), so run() needs no hook of its own.
 */
export interface CallScope {
  readonly tenant: string;
  readonly key: string;
  readonly submission: Submission;
  /** Set by the effect when it plays the operation's first-attempt fault. */
  fault: FaultName | null;
  /** The attempt the next observation or heartbeat is made for (set by the effect). */
  attempt: number | null;
}

export const callScope = new AsyncLocalStorage<CallScope>();

const CALLS: readonly (readonly [string, EngineCall])[] = [
  ['settle.claim(', 'claim'],
  ['settle.complete(', 'complete'],
  ['settle.fail(', 'fail'],
  ['settle.report_unknown(', 'reportUnknown'],
  ['settle.heartbeat(', 'heartbeat'],
];

export async function createRecordingPool(
  connectionString: string,
  maxPoolSize: number,
  recorder: Recorder,
): Promise<DatabasePool> {
  const recordAnswers: Interceptor = {
    name: 'pg-settle-simulator-recorder',
    afterQueryExecution: (context, query, result) => {
      const scope = callScope.getStore();
      const call = CALLS.find(([needle]) => query.sql.includes(needle))?.[1];
      const row = result.rows[0];
      if (call !== undefined) {
        // queryInputTime is process.hrtime.bigint() when slonik received the query.
        const elapsedMs = Number(process.hrtime.bigint() - BigInt(context.queryInputTime)) / 1e6;
        (call === 'claim' ? recorder.claimLatencyMs : recorder.settleLatencyMs).push(elapsedMs);
      }
      if (scope !== undefined && call !== undefined && row !== undefined) {
        recorder.answer({
          tenant: scope.tenant,
          key: scope.key,
          call,
          submission: scope.submission,
          fault: scope.fault,
          attempt: call === 'claim' ? null : (scope.attempt ?? (typeof row.attempt === 'number' ? row.attempt : null)),
          answer: { ...row },
        });
      }
      return null;
    },
  };
  return createPool(connectionString, {
    maxPoolSize,
    typeParsers: settleTypeParsers(),
    interceptors: [...settleInterceptors(), recordAnswers],
  });
}
