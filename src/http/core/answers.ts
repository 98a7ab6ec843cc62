import type { Json } from '../../client/types.js';
import { type HttpAnswer, problem } from './problem.js';
import type { Resolved } from './options.js';
import { fromStored } from '../../client/stored-response.js';

/** The answer to a retry: the stored status, allowlisted headers and body bytes, marked as replayed. */
export function replayAnswer(result: Json, options: Resolved<never>): HttpAnswer {
  const stored = fromStored(result);
  const marker: Record<string, string> =
    options.replayedHeader === null ? {} : { [options.replayedHeader.toLowerCase()]: 'true' };
  if (stored === null) {
    return problem(
      'idempotency-misconfigured',
      options.problemTypeBase,
      'this key holds a result that the HTTP middleware did not write',
    );
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of stored.headers) headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  if (!stored.stored) {
    const kept: Record<string, string> = {};
    for (const name of ['location', 'etag']) if (headers[name] !== undefined) kept[name] = headers[name];
    const answer = problem(
      'response-not-stored',
      options.problemTypeBase,
      `the request was processed once and answered ${stored.status} with a ${stored.bytes}+ byte body, larger than the store limit; it is not replayed`,
      { originalStatus: stored.status },
      { ...kept, ...marker },
    );
    return { ...answer, replayed: true };
  }
  return {
    status: stored.status,
    headers: { ...headers, ...marker },
    body: Buffer.from(stored.body, 'base64'),
    replayed: true,
  };
}

export const retryAfterSeconds = (ms: number): string => String(Math.max(1, Math.ceil(ms / 1000)));
