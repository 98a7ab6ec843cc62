import { UsageError } from './usage-error.js';

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * Parses a duration such as `7d`, `12h`, `30m`, `45s`, `1h30m` or `0s` into milliseconds.
 * Units: ms, s, m, h, d, w. A bare number is refused (say which unit you mean).
 */
export function parseDuration(text: string, flag: string): number {
  const trimmed = text.trim();
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy;
  let total = 0;
  let consumed = 0;
  for (let match = part.exec(trimmed); match !== null; match = part.exec(trimmed)) {
    total += Number(match[1]) * (UNIT_MS[match[2] ?? ''] ?? Number.NaN);
    consumed = part.lastIndex;
  }
  if (trimmed === '' || consumed !== trimmed.length || !Number.isFinite(total)) {
    throw new UsageError(`${flag} must be a duration like 7d, 12h, 30m or 1h30m (got ${JSON.stringify(text)})`);
  }
  return Math.round(total);
}
