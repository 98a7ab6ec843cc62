import type { ClaimInput, Json } from '../../client/types.js';
import { replayAnswer } from './answers.js';
import { downstreamKeyOf } from './context.js';
import { answer, type FlowResult, notAcquired, type RunHandler, TIMEOUT, withTimeout } from './flow-result.js';
import type { Resolved } from './options.js';
import { problem } from './problem.js';
import { type CapturedResponse, toStored } from '../../client/stored-response.js';

/** The handler answered with a response the policy does not store: roll its writes back. */
class NotStored extends Error {
  constructor(
    readonly captured: CapturedResponse,
    readonly final: boolean,
  ) {
    super(`response ${captured.status} is not stored`);
  }
}
class HandlerTimedOut extends Error {}
/** runInTransaction re-runs its effect after a serialization failure; an HTTP handler cannot run twice. */
class HandlerAlreadyRan extends Error {}

/**
 * Transaction mode: claim, the handler's SQL (on `context.transaction`) and the stored response
 * commit in ONE transaction (client.runInTransaction). A response the policy does not store, a
 * thrown error or a timeout rolls the handler's writes back and records a failure; the response
 * is sent only after the commit, so a caller never sees a success that did not commit.
 */
export async function runInRequestTransaction(
  input: ClaimInput,
  clientKey: string,
  o: Resolved<never>,
  runHandler: RunHandler,
): Promise<FlowResult> {
  let ran = false;
  const outcome = await o.settle.runInTransaction(
    {
      ...input,
      waitForMs: o.waitForMs,
      ...(o.isolation === undefined ? {} : { isolation: o.isolation }),
      classify: (error) => (error instanceof NotStored && error.final ? 'final' : 'retryable'),
      errorToJson: (error): Json =>
        error instanceof NotStored
          ? { httpStatus: error.captured.status }
          : { name: (error as Error).name ?? 'Error', message: String((error as Error).message ?? error) },
    },
    async ({ transaction, attempt }) => {
      if (ran) throw new HandlerAlreadyRan('the transaction was retried after the handler ran');
      ran = true;
      const captured = await withTimeout(
        runHandler({
          key: clientKey,
          operationKey: attempt.key,
          tenant: attempt.tenant,
          attempt: attempt.attempt,
          // Earlier attempts of a transaction-mode key rolled back or failed; an unknown can
          // only come from a lease-mode route sharing the key, which this context cannot see.
          earlier: { count: attempt.attempt - 1, reportedUnknown: false, mayHaveTakenEffect: attempt.attempt > 1 },
          downstreamKey: downstreamKeyOf(attempt.tenant, attempt.key),
          signal: new AbortController().signal,
          transaction,
        }),
        o.handlerTimeoutMs,
      );
      if (captured === TIMEOUT) throw new HandlerTimedOut();
      const decision = o.responsePolicy(captured.status);
      if (decision !== 'store') throw new NotStored(captured, decision === 'final');
      return toStored(captured, o.replayHeaders);
    },
  );
  switch (outcome.outcome) {
    case 'completed':
      return outcome.settledBy === 'this_attempt' ? { kind: 'captured' } : answer(replayAnswer(outcome.result, o));
    case 'failed':
      if (outcome.cause instanceof NotStored) return { kind: 'captured' };
      if (outcome.cause instanceof HandlerTimedOut) {
        return answer(
          problem(
            'handler-timeout',
            o.problemTypeBase,
            `the handler did not respond within ${o.handlerTimeoutMs} ms; its writes were rolled back`,
            {},
            { 'retry-after': '1' },
          ),
        );
      }
      if (outcome.cause !== undefined) {
        return answer(
          problem(
            'settlement-unavailable',
            o.problemTypeBase,
            'the request transaction failed and was rolled back; retry with the same key',
            {},
            { 'retry-after': '1' },
          ),
        );
      }
      return notAcquired(
        {
          outcome: 'failed',
          error: outcome.error,
          deadLettered: outcome.deadLettered,
          deadLetterReason: null,
          attempt: outcome.attempt,
        },
        o,
      );
    case 'replay':
      return answer(replayAnswer(outcome.result, o));
    case 'conflict':
    case 'refused':
      return notAcquired(outcome, o);
    case 'in_progress':
      return notAcquired({ ...outcome, status: 'running' }, o);
    case 'fenced':
    case 'unknown':
      return answer(
        problem(
          'settlement-unavailable',
          o.problemTypeBase,
          'whether the request transaction committed is unknown; retry with the same key',
          {},
          { 'retry-after': '1' },
        ),
      );
  }
}
