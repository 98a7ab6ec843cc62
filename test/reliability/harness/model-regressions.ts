import type { Step } from './model-driver.js';

/**
 * Regression cases: sequences the random run found against an engine without the adversarial-timing fixes (kept as
 * scripts: the same steps, whatever the seed). `maxAttempts` is per operation.
 */
export const REGRESSIONS: readonly {
  readonly name: string;
  readonly maxAttempts: readonly number[];
  readonly steps: readonly Step[];
}[] = [
  {
    // Defect 1: the waiter's lease was computed from its call start, before the lock wait.
    name: 'R1: a claim that waited for the row lock gets a lease measured from after the lock',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'end', commit: false, longWait: true },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
    ],
  },
  {
    // Defect 1, heartbeat: an extension decided after a wait is measured from the decision.
    name: 'R1: a heartbeat that waited for the row lock extends from after the lock',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: false } },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: true } },
      { t: 'end', commit: true, longWait: true },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
    ],
  },
  {
    // A first claim that waited behind another session's first claim of the same new key, which
    // rolled back at once: the wait was shorter than the engine can tell from none, so its lease
    // is measured from its call's start, before the rollback (UNWAITED_SLACK_US in the model).
    name: 'R1: a first claim that waited briefly on a rolled-back first claim measures its lease from its start',
    maxAttempts: [3, 3],
    steps: [
      { t: 'begin', conn: 0 },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'newer', short: false, answerUnknown: true } },
      { t: 'end', commit: false },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'newer' } },
    ],
  },
  {
    // The same wait held past the waiter's 1-second lease: judged again after the wait, its
    // lease is live when the answer arrives.
    name: 'R1: a first claim that waited past its lease on a rolled-back first claim gets a live lease',
    maxAttempts: [3, 3],
    steps: [
      { t: 'begin', conn: 0 },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'newer', short: true, answerUnknown: true } },
      { t: 'end', commit: false, longWait: true },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: false } },
    ],
  },
  {
    // The same long wait when the first claim commits: its 1-second lease lapsed during the
    // wait, so the waiter takes the key over with a lease of its own.
    name: "R1: a first claim that waited past a committed first claim's lapsed lease takes it over",
    maxAttempts: [3, 3],
    steps: [
      { t: 'begin', conn: 0 },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'end', commit: true, longWait: true },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
    ],
  },
  {
    // A revocation that commits while a claim waits behind the key's uncommitted first claim,
    // which then commits: the waiter decides with the new floor and is refused.
    name: 'R2: a claim waiting on a first claim while its generation is revoked is refused',
    maxAttempts: [3, 3],
    steps: [
      { t: 'begin', conn: 0 },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'revoke', op: 0 },
      { t: 'end', commit: true },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'newer' } },
    ],
  },
  {
    // Defect 2: the floor was read before the lock wait; the revocation committed during it.
    name: 'R2: a claim waiting while its generation is revoked is refused, never acquired',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'revoke', op: 0 },
      { t: 'end', commit: false },
      { t: 'call', conn: 0, call: { kind: 'get', op: 0, variant: 'newer' } },
    ],
  },
  {
    // Defect 4: a conflict (a mismatched success of an attempt that had failed) erased to failed.
    name: 'R4: after a mismatched success the last failure is needs_reconciliation, never failed',
    maxAttempts: [2, 2],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'latest', mismatch: 'generation' } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'redrive', op: 0 },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
    ],
  },
  {
    // Defect 5: a later final failure overrode an earlier unknown.
    name: 'R5: a final failure after an unknown attempt is needs_reconciliation, and its success still settles',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
      { t: 'purge' },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'first' } },
    ],
  },
  {
    // Defect 5 with a lapsed lease instead of a reported unknown.
    name: 'R5: a final failure after a lapsed attempt is needs_reconciliation',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'lapse', op: 0 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'first' } },
    ],
  },
  {
    // R3: the attempt's own token under a revoked generation may wait and convert; the
    // heartbeat of the same token waits behind it, the new generation's read sees the conversion.
    name: 'R3: the revoked holder converts its operation under the lock; nobody else waits on a refusal',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'revoke', op: 0 },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'end', commit: true },
      { t: 'call', conn: 0, call: { kind: 'get', op: 0, variant: 'newer' } },
    ],
  },
  {
    // R3: a forged token inside an open transaction holds nobody's row.
    name: 'R3: an open transaction of forged-token calls does not hold the lease holder hostage',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'forged' } },
      { t: 'call', conn: 1, call: { kind: 'heartbeat', op: 0, ticket: 'forged', short: false } },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: false } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'latest' } },
      { t: 'end', commit: true },
    ],
  },
  {
    // R3, as CI found it on PostgreSQL 18 under load (seed 2098819397): with conn 1's
    // transaction open after a forged-token report_unknown, the lease holder's mismatched
    // complete was seen waiting on a lock. The driver now names the lock and its holders, and
    // R3 holds when the open transaction's backend is among them.
    name: 'R3: a forged report_unknown in an open transaction does not hold a reported-unknown row',
    maxAttempts: [4, 4],
    steps: [
      { t: 'begin', conn: 0 },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'previous' } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'expire' },
      { t: 'end', commit: true, longWait: true },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'first', retryable: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 1, variant: 'tenant', short: false, answerUnknown: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: true, answerUnknown: true } },
      { t: 'revoke', op: 1 },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'call', conn: 2, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'redrive', op: 0 },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'report_unknown', op: 0, ticket: 'previous' } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'latest', mismatch: 'generation' } },
      { t: 'end', commit: true },
    ],
  },
  {
    // R2 on the new-key path: a claim that waited for another session's first claim of the
    // key, rolled back, while its generation was revoked: refused, never attempt 1 under it.
    name: 'R2: a claim waiting on a concurrent first claim whose generation is revoked meanwhile is refused (insert rolled back)',
    maxAttempts: [2, 4],
    steps: [
      { t: 'begin', conn: 2 },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'revoke', op: 1 },
      { t: 'end', commit: false },
    ],
  },
  {
    // rerun_after_unknown => false answers a reported unknown with in_doubt
    // (nothing opened, from every connection, inside a transaction too); a claim that asks to
    // re-run opens attempt 2; a crashed attempt (lapsed lease, nothing reported) is taken over.
    name: 'I21: a claim that does not re-run a reported unknown answers in_doubt; a crashed attempt is still taken over',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false, answerUnknown: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false, answerUnknown: true } },
      { t: 'end', commit: true },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'request', short: false, answerUnknown: true } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'lapse', op: 0 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false, answerUnknown: true } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'lapse', op: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 1, variant: 'same', short: false, answerUnknown: true } },
    ],
  },
  {
    // settle.resolve. Only an unknown or conflict operation is resolved (not a running
    // one); a failed resolution waits for the lease holder; another request's fingerprint is
    // refused; a failed resolution judges every open attempt, so their late successes settle
    // nothing; a completed one settles through an epoch of its own and ends the held lease.
    name: 'I20: resolve only what lost its outcome, never under a live lease for failed, and exactly one final outcome after it',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'resolve', op: 0, outcome: 'completed' },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'resolve', op: 0, outcome: 'failed' },
      { t: 'call', conn: 1, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'resolve', op: 0, outcome: 'failed', forged: true },
      { t: 'resolve', op: 0, outcome: 'failed' },
      { t: 'call', conn: 2, call: { kind: 'complete', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 2, call: { kind: 'complete', op: 0, ticket: 'first' } },
      { t: 'resolve', op: 0, outcome: 'completed' },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 1, ticket: 'latest', mismatch: 'fingerprint' } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'resolve', op: 1, outcome: 'completed' },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 1, ticket: 'latest' } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 1, ticket: 'latest', short: false } },
    ],
  },
  {
    // A purged key claimed again in a transaction that rolls back after a long wait, while its
    // generation is revoked: the waiting claim is refused and leaves the new reservation
    // converted to conflict. That is a new operation, not the purged one lowered from completed.
    name: 'a purged key reserved again by a refused waiter starts a new history',
    maxAttempts: [4, 4],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'fail', op: 1, ticket: 'previous', retryable: true } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false, answerUnknown: true } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false, answerUnknown: true } },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'principal' } },
      { t: 'purge' },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 1, variant: 'same', short: true } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 1, ticket: 'latest' } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'purge' },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 1, variant: 'same', short: false, answerUnknown: true } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 1, variant: 'same', short: true, answerUnknown: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'revoke', op: 1 },
      { t: 'end', commit: false, longWait: true },
    ],
  },
  {
    // The evidence's epoch: attempt 1 lost its response; the reconciler read the operation
    // (attempt 1, unknown) and checked the downstream; the client retried: attempt 2 ran and lost
    // its response too. The verdict read for attempt 1 is refused (SE053): it never judges attempt
    // 2, whose success then settles. Read again and checked again, a verdict of attempt 2 applies.
    name: 'resolve: a verdict read for attempt 1 never judges attempt 2 (SE053); attempt 2 still settles',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'check', op: 0 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'resolve', op: 0, outcome: 'failed' },
      { t: 'resolve', op: 0, outcome: 'completed' },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'check', op: 1 },
      { t: 'call', conn: 2, call: { kind: 'complete', op: 1, ticket: 'latest', mismatch: 'generation' } },
      { t: 'resolve', op: 1, outcome: 'failed' },
      { t: 'check', op: 1 },
      { t: 'resolve', op: 1, outcome: 'failed' },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 1, ticket: 'latest' } },
    ],
  },
  {
    // A mismatched success presenting the attempt's own token while it holds the lease: conflict
    // (conflict_on binding), the status moves to conflict, the attempt records conflict, loses its
    // lease and is fenced for good (its later failure is attempt_conflicted); the operation never
    // becomes failed through it: the last failure is needs_reconciliation, a redrive keeps it in
    // doubt.
    name: "a mismatched success with the attempt's own token: conflict, the attempt fenced for good, never failed after it",
    maxAttempts: [2, 2],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'latest', mismatch: 'generation' } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'redrive', op: 0 },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
    ],
  },
  {
    // A mismatched success presenting a token that is not the attempt's (a guessed or stale one):
    // the token gate answers first, fenced invalid_token, and nothing changes: no conflict status,
    // nothing on the attempt, nothing disclosed. The attempt's own final failure then settles
    // failed (running -> failed), and a redrive of nothing is refused.
    name: "a mismatched success with a token that is not the attempt's: fenced invalid_token, nothing changes",
    maxAttempts: [2, 2],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'forged', mismatch: 'generation' } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'forged', mismatch: 'fingerprint' } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'redrive', op: 0 },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
    ],
  },
  {
    // Found by seed 718993782: an unknown operation dead-lettered for reconciliation, its binding
    // then revoked. The model converts it to conflict at once; the engine converts it at the next
    // call of the binding, which a redrive is not: the redrive answers the status the row holds
    // (unknown), and the re-opened operation still refuses its binding's calls.
    name: 'a redrive of a revoked operation that needs reconciliation answers the unconverted status',
    maxAttempts: [1, 1],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'revoke', op: 0 },
      { t: 'redrive', op: 0 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
    ],
  },
  {
    // Found by a hidden interleaving tester (reliability round 4): conflicting claims fill the
    // key's 20 refusal rows kept in full, attempt 1's lease lapses and attempt 2 takes it over,
    // then attempt 1's success arrives with its own token and another request's fingerprint. The
    // answer is conflict and the status moves from running to conflict (docs/sql-api.md); the
    // move was folded into settle.audit_overflow with the refusals, so the history never showed
    // it. The driver checks after every step that the history's last move ends where the status is
    // (the takeover's claim row, after the expiry's, starts at pending).
    name: "a stale attempt's mismatched success past the refusal rows moves the status, and the history shows it",
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'lapse', op: 0 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      ...Array.from(
        { length: 21 },
        (): Step => ({
          t: 'call',
          conn: 2,
          call: { kind: 'claim', op: 0, variant: 'request', short: false },
        }),
      ),
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'first', mismatch: 'fingerprint' } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'latest' } },
    ],
  },
  {
    // Found by a soak (seed 101): alice's binding is revoked while her operation runs; the sweeper
    // ends its lapsed attempt (running -> pending) without converting it, as it is not a call of
    // the binding; a resolve that read pending is answered from the row (SE050, nothing to
    // resolve), where the model, which converts at once, only allowed SE053.
    name: 'a resolve of a revoked operation the sweeper left pending answers the row it reads',
    maxAttempts: [2, 2],
    steps: [
      { t: 'call', conn: 1, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'call', conn: 2, call: { kind: 'get', op: 1, variant: 'same' } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 1, ticket: 'latest' } },
      { t: 'feed', action: 'reregister', startAt: 'latest' },
      { t: 'call', conn: 2, call: { kind: 'complete', op: 1, ticket: 'first' } },
      { t: 'call', conn: 2, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'check', op: 1 },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'resolve', op: 1, outcome: 'failed' },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'previous', retryable: true } },
      { t: 'begin', conn: 2 },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 0, ticket: 'first', short: false } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false, answerUnknown: true } },
      { t: 'revoke', op: 0 },
      { t: 'end', commit: true, longWait: true },
      { t: 'expire' },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 1, variant: 'same', short: false, answerUnknown: true } },
      { t: 'call', conn: 2, call: { kind: 'report_unknown', op: 1, ticket: 'latest' } },
      { t: 'lapse', op: 0 },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 1, ticket: 'latest', short: false } },
      { t: 'expire' },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'principal', short: true, answerUnknown: true } },
      { t: 'resolve', op: 0, outcome: 'failed' },
    ],
  },
];
