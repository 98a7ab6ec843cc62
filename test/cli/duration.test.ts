import { describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/cli/duration.js';
import { durationMs } from '../../src/shared/duration.js';
import { UsageError } from '../../src/cli/usage-error.js';
import { configFromFlags } from '../../src/simulator/config.js';

// The command line's one duration grammar (purge --older-than, simulate --duration). Pure
// parsing: no database involved.

describe('duration grammar', () => {
  it.each([
    ['500ms', 500],
    ['45s', 45_000],
    ['1.5s', 1_500],
    ['30m', 1_800_000],
    ['1h30m', 5_400_000],
    ['7d', 604_800_000],
    ['2w', 1_209_600_000],
    [' 0s ', 0],
  ])('%j is %d ms', (text, ms) => {
    expect(durationMs(text)).toBe(ms);
  });

  it.each(['', '30', '1.5', 's', '5 s', '5sec', '-5s', '1h 30m', '1y', '5s5'])('%j is refused', (text) => {
    expect(durationMs(text)).toBeUndefined();
  });

  it('each caller refuses with its own error, naming the flag', () => {
    expect(() => parseDuration('30', '--older-than')).toThrow(UsageError);
    expect(() => parseDuration('30', '--older-than')).toThrow(/--older-than must be a duration/);
    expect(() => configFromFlags({ duration: '30' })).toThrow(/--duration must be a duration like 500ms/);
    expect(configFromFlags({ duration: '1m30s' }).durationMs).toBe(90_000);
  });
});
