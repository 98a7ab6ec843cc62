import { durationMs } from '../shared/duration.js';
import { UsageError } from './usage-error.js';

/** durationMs for a CLI flag: a UsageError (exit code 2) naming the flag when it does not parse. */
export function parseDuration(text: string, flag: string): number {
  const ms = durationMs(text);
  if (ms === undefined)
    throw new UsageError(`${flag} must be a duration like 7d, 12h, 30m or 1h30m (got ${JSON.stringify(text)})`);
  return ms;
}
