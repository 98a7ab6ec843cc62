import { recordHttpErrorAfterResponse } from '../../client/telemetry.js';
import type { Resolved } from './options.js';

/**
 * What Express reports when something answers after the handler's response was complete (an
 * error handler reached by a throw that came after res.json()): that answer is discarded.
 */
export class ResponseAfterResponseError extends Error {
  constructor(
    /** The status of the handler's own response, which is the one sent and stored. */
    readonly sentStatus: number,
    /** The status of the answer that came later and was discarded. */
    readonly discardedStatus: number,
  ) {
    super(
      `pg-settle: the handler's response (${sentStatus}) was complete; a later response (${discardedStatus}) was discarded, the ${sentStatus} is what the caller receives and what is replayed`,
    );
    this.name = 'ResponseAfterResponseError';
  }
}

/**
 * A handler failed after its response was complete: counted (pg_settle.http.errors_after_response)
 * and handed to `onErrorAfterResponse`, or to the framework's default log. Never sent.
 */
export function errorAfterResponse<Req>(
  o: Resolved<Req>,
  req: Req,
  error: unknown,
  log: (error: unknown) => void,
): void {
  recordHttpErrorAfterResponse(o.settle);
  try {
    if (o.onErrorAfterResponse === undefined) log(error);
    else o.onErrorAfterResponse(error, req);
  } catch {
    // A logger that throws must not turn a delivered response into a failed one.
  }
}
