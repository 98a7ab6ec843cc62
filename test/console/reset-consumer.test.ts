import { describe, expect, it } from 'vitest';
import { laneEffects, resetTargetOf } from '../../src/console/reset-consumer.js';

describe('the reset form', () => {
  it('reads its target: every retained event by default, now, or a time (UTC unless zoned)', () => {
    const form = (fields: Record<string, string>) => resetTargetOf(new URLSearchParams(fields));
    expect(form({})).toBe('earliest');
    expect(form({ to: 'now' })).toBe('now');
    expect(form({ to: 'time', at: '2026-12-01T10:00' })).toBe('2026-12-01T10:00:00.000Z');
    expect(form({ to: 'time', at: '2026-12-01 10:00:30+02:00' })).toBe('2026-12-01T08:00:30.000Z');
    expect(form({ to: 'time', at: 'yesterday' })).toMatchObject({ problem: expect.stringContaining('ISO 8601') });
    expect(form({ to: 'time', at: '2026-13-45T10:00' })).toMatchObject({
      problem: expect.stringContaining('not a valid'),
    });
  });

  it('counts what a lane skips (forward) and delivers again (back)', () => {
    const lane = (lag: number) => ({ lane: 0, lag_events: lag }) as never;
    const row = (before: string, after: string, toDeliver: number) => ({
      lane: 0,
      position_before: before,
      position_after: after,
      events_to_deliver: toDeliver,
      applied: false,
    });
    expect(laneEffects([row('753/0', '785/0', 0)], [lane(14)])[0]).toMatchObject({ skipped: 14, again: 0 });
    expect(laneEffects([row('785/0', '0/0', 20)], [lane(14)])[0]).toMatchObject({ skipped: 0, again: 6 });
    expect(laneEffects([row('753/0', '785/0', 0)], null)[0]).toMatchObject({ skipped: null });
  });
});
