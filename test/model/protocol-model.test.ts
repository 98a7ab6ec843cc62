import { describe, expect, it } from 'vitest';
import {
  EMPTY_WORLD,
  meets,
  step,
  UNWAITED_SLACK_US,
  windowAfterWait,
  type Call,
} from '../../src/model/protocol-model.js';

// The decision window of a call that waited for another session's lock, as the model-based
// test judges it (test/reliability/harness/model-driver.ts).

const leaseUs = 1_000_000;
const claim: Call = {
  kind: 'claim',
  id: 't/k',
  leaseUs,
  maxAttempts: 3,
  lock: { request: 'r', principal: 'p', scopes: [], generation: 2 },
};
const acquiredWithLeaseFrom = (start: number, release: number, sent: number, firstClaim: boolean): boolean =>
  step(EMPTY_WORLD, claim, windowAfterWait(release, release + 2_000, { sent, firstClaim })).some((b) =>
    meets(b.expect, { outcome: 'acquired', status: 'running', attempt: 1, leaseExpiresAt: start + leaseUs }),
  );

describe('a first claim that waited behind a rolled-back first claim of the same key', () => {
  const release = 10_000_000;

  it('may measure its lease from its start when the wait was within the slack', () => {
    const sent = release - 4_500;
    expect(acquiredWithLeaseFrom(sent, release, sent, true)).toBe(true);
  });

  it('never from before its call began', () => {
    const sent = release - 4_500;
    expect(acquiredWithLeaseFrom(sent - 1, release, sent, true)).toBe(false);
  });

  it('never from earlier than the slack before the release, however early it was sent', () => {
    const sent = release - 2 * UNWAITED_SLACK_US;
    expect(acquiredWithLeaseFrom(release - UNWAITED_SLACK_US - 1, release, sent, true)).toBe(false);
    expect(acquiredWithLeaseFrom(release + 500, release, sent, true)).toBe(true);
  });

  it('a call that waited on a committed row decides after the release only', () => {
    const sent = release - 1_000;
    expect(acquiredWithLeaseFrom(sent, release, sent, false)).toBe(false);
    expect(acquiredWithLeaseFrom(release, release, sent, false)).toBe(true);
  });
});
