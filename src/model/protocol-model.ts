/**
 * The executable reference model of the pg-settle protocol (docs/protocol.md and its rules
 * for adversarial timing: lease from decision time, access under lock, no hostage-taking,
 * may-have-taken-effect, final failure after a possible effect, R9 conflict_on). Written from
 * those texts, not from the SQL: the model-based test
 * (test/reliability/model-based.test.ts) drives the real engine and checks every answer against
 * the set this module allows.
 *
 * Pure and dependency-free. Time is the model clock: microseconds, compared with lease expiries.
 * A call is decided at an instant the caller does not know exactly, only a window [lo, hi]
 * (lo: the last clock reading before the call could decide, e.g. the release of the row lock it
 * waited for; hi: the clock read right after the answer). Where a lease expiry falls inside the
 * window, both "live" and "lapsed" are legitimate: the model answers with every branch
 * (nondeterminism) and the test keeps the worlds consistent with what the engine answered.
 */

/** §2 The lattice; pending and running share rank 1 (lease bookkeeping). */
export type Status = 'pending' | 'running' | 'unknown' | 'conflict' | 'failed' | 'completed';
export const RANK: Readonly<Record<Status, number>> = {
  pending: 1,
  running: 1,
  unknown: 2,
  conflict: 3,
  failed: 4,
  completed: 5,
};
const atLeast = (s: Status, floor: Status): Status => (RANK[s] >= RANK[floor] ? s : floor);

/** §3 The reservation lock: request (its identity; the engine fingerprints it) and binding. */
export interface Lock {
  readonly request: string;
  readonly principal: string;
  /** Compared as a set. */
  readonly scopes: readonly string[];
  readonly generation: number;
}

export type DeadLetter = 'attempts_exhausted' | 'needs_reconciliation';

/** §4 One attempt epoch and its attempt-scoped settlement record. */
export interface Attempt {
  readonly token: string;
  /** Its first terminal observation, or `unknown` (which a later success of it still settles). */
  readonly observed: 'unknown' | 'failed' | 'completed' | 'conflict' | null;
  /** What it reported, to tell a repeat (`duplicate`) from another report. */
  readonly payload: string | null;
  /** It presented a mismatched success (§5 4b: R4 counts it even after a recorded failure). */
  readonly mismatchedSuccess: boolean;
}

export interface Operation {
  readonly lock: Lock;
  readonly status: Status;
  readonly maxAttempts: number;
  /** attempts[n - 1] is attempt n; the last one is the current epoch. */
  readonly attempts: readonly Attempt[];
  /** §4 The single lease: held by the current attempt until `expiresAt` (model clock). */
  readonly lease: { readonly attempt: number; readonly expiresAt: number } | null;
  readonly result: string | null;
  readonly settledAttempt: number | null;
  /** The canonical error when the model knows it (a recorded final failure). */
  readonly error: string | null;
  readonly deadLetter: DeadLetter | null;
  /** §13 Its generation is below the floor: converted to conflict (at its next touch). */
  readonly revoked: { readonly mayHaveTakenEffect: boolean; readonly statusBefore: Status } | null;
}

/** Everything the engine holds for the operations of one test sequence. */
export interface World {
  /** By `${tenant}/${key}`. */
  readonly ops: Readonly<Record<string, Operation>>;
  /** §13 Revocation floors by `${tenant}/${principal}`. */
  readonly floors: Readonly<Record<string, number>>;
  /** Keys purged (a later call with an old token is fenced, not "not found"). */
  readonly tombstones: readonly string[];
}

export const EMPTY_WORLD: World = { ops: {}, floors: {}, tombstones: [] };

export type Call =
  | {
      readonly kind: 'claim';
      readonly id: string;
      readonly lock: Lock;
      readonly leaseUs: number;
      readonly maxAttempts: number;
      /** settle.claim's rerun_after_unknown (default true); false answers in_doubt instead of re-running a reported unknown. */
      readonly rerunAfterUnknown?: boolean;
    }
  | {
      readonly kind: 'heartbeat';
      readonly id: string;
      readonly attempt: number;
      readonly token: string;
      readonly leaseUs: number;
    }
  | {
      readonly kind: 'complete';
      readonly id: string;
      readonly attempt: number;
      readonly token: string;
      readonly lock: Lock;
      readonly result: string;
    }
  | {
      readonly kind: 'fail';
      readonly id: string;
      readonly attempt: number;
      readonly token: string;
      readonly lock: Lock;
      readonly error: string;
      readonly retryable: boolean;
    }
  | {
      readonly kind: 'report_unknown';
      readonly id: string;
      readonly attempt: number;
      readonly token: string;
      readonly lock: Lock;
    }
  | { readonly kind: 'get'; readonly id: string; readonly lock: Lock }
  | { readonly kind: 'expire_leases' }
  | { readonly kind: 'redrive'; readonly id: string; readonly additional: number }
  | {
      readonly kind: 'resolve';
      readonly id: string;
      readonly outcome: 'completed' | 'failed';
      /** The result (completed) or error (failed) asserted. */
      readonly payload: string;
      /** The request whose fingerprint is presented (the reservation's, or another). */
      readonly request: string;
      /** The evidence's epoch: the attempt read when the downstream was checked. */
      readonly expectedAttempt: number;
      /** The status read with it (absent: not compared). */
      readonly expectedStatus?: Status;
    }
  | { readonly kind: 'revoke_binding'; readonly tenant: string; readonly principal: string; readonly below: number }
  | { readonly kind: 'purge' };

/** An engine answer, normalized by the driver (NULL columns are null). */
export interface Answer {
  readonly outcome: string;
  readonly reason?: string | null;
  readonly status?: string | null;
  readonly attempt?: number | null;
  readonly result?: string | null;
  readonly settledAttempt?: number | null;
  readonly error?: string | null;
  readonly deadLettered?: boolean | null;
  readonly deadLetterReason?: string | null;
  readonly conflictOn?: readonly string[] | null;
  readonly leaseExpiresAt?: number | null;
  readonly leaseToken?: string | null;
  readonly inFlight?: boolean | null;
  readonly mayHaveTakenEffect?: boolean | null;
  readonly maxAttempts?: number | null;
  readonly floor?: number | null;
  /** outcome 'error': the SQLSTATE raised. */
  readonly sqlstate?: string | null;
}

/** What one legitimate answer looks like: listed fields must be equal; absent ones are free. */
export type Expect = { readonly [K in keyof Answer]?: Answer[K] | readonly string[] } & {
  /** acquired / extended: the new lease must end in this window (decision window + lease). */
  readonly newLeaseWithin?: { readonly lo: number; readonly hi: number };
};

export interface Branch {
  readonly expect: Expect;
  /** The world after this answer (acquired takes its token and expiry from the answer). */
  readonly next: (answer: Answer) => World;
}

export interface Window {
  readonly lo: number;
  readonly hi: number;
}

/**
 * §3 A first claim whose insert returned within this many microseconds of the call's start is
 * taken as not having waited: it decides at its first read, so its lease is measured from the
 * call's start. A claim that waited behind another session's uncommitted first claim of the same
 * key for less than this may therefore carry a lease measured up to this long before the moment
 * the wait ended (never from before the call began); a longer wait is judged again after it.
 */
export const UNWAITED_SLACK_US = 5_000;

/**
 * The window in which a call that waited for a lock decides: after the holder released it
 * (`release`, read inside the holder's transaction right before its end) and before the answer
 * arrived; a first claim may have decided at its start instead (UNWAITED_SLACK_US).
 */
export function windowAfterWait(
  release: number,
  answered: number,
  wait: { readonly sent: number; readonly firstClaim: boolean },
): Window {
  return { lo: wait.firstClaim ? Math.max(wait.sent, release - UNWAITED_SLACK_US) : release, hi: answered };
}

// ---------------------------------------------------------------------------------------------
// Judgements shared by the calls.

const floorOf = (w: World, tenant: string, principal: string): number => w.floors[`${tenant}/${principal}`] ?? 0;
const tenantOf = (id: string): string => id.slice(0, id.indexOf('/'));
const sameSet = (a: readonly string[], b: readonly string[]): boolean =>
  new Set(a).size === new Set(b).size && a.every((s) => b.includes(s));

/** R9: `request` only when the binding is the same and only the request differs. */
export function lockDiff(reserved: Lock, presented: Lock): readonly string[] | null {
  const sameBinding =
    reserved.principal === presented.principal &&
    sameSet(reserved.scopes, presented.scopes) &&
    reserved.generation === presented.generation;
  if (!sameBinding) return ['binding'];
  return reserved.request === presented.request ? null : ['request'];
}

/**
 * R4 May-have-taken-effect: status unknown or conflict, or an attempt (but `except`) that did
 * not record a failure, or presented a mismatched success.
 */
export function mayHaveTakenEffect(op: Operation, except?: number): boolean {
  if (op.status === 'unknown' || op.status === 'conflict') return true;
  return op.attempts.some((a, i) => i + 1 !== except && (a.observed !== 'failed' || a.mismatchedSuccess));
}

/** R1: is the lease live at the decision instant? Both answers when the expiry falls inside the window. */
function judgeLease(op: Operation, win: Window): { live: boolean; win: Window }[] {
  if (op.lease === null) return [{ live: false, win }];
  const e = op.lease.expiresAt;
  const out: { live: boolean; win: Window }[] = [];
  if (win.lo < e) out.push({ live: true, win: { lo: win.lo, hi: Math.min(win.hi, e - 1) } });
  if (win.hi >= e) out.push({ live: false, win: { lo: Math.max(win.lo, e), hi: win.hi } });
  return out;
}

const withOp = (w: World, id: string, op: Operation | undefined): World => {
  const ops = { ...w.ops };
  if (op === undefined) delete ops[id];
  else ops[id] = op;
  return normalize({ ...w, ops });
};
const setAttempt = (op: Operation, n: number, f: (a: Attempt) => Attempt): Operation => ({
  ...op,
  attempts: op.attempts.map((a, i) => (i + 1 === n ? f(a) : a)),
});

/** §4 A lapsed lease ends: the attempt keeps no observation (it may have taken effect). */
const endLease = (op: Operation): Operation => ({
  ...op,
  lease: null,
  status: op.status === 'running' ? 'pending' : op.status,
});

/** §7 Budget spent: which dead letter (R4/R5). */
function deadLetter(op: Operation): Operation {
  if (!mayHaveTakenEffect(op)) return { ...op, status: 'failed', deadLetter: 'attempts_exhausted', lease: null };
  return { ...op, status: atLeast(op.status, 'unknown'), deadLetter: 'needs_reconciliation', lease: null };
}

/**
 * §13 An operation reserved under a revoked generation that is not completed can no longer
 * complete: it becomes conflict (a failed one stays failed), its lease ends. The engine does it
 * at the next touch; the model does it as soon as it holds, and the test compares the status of
 * revoked operations leniently.
 */
function normalize(w: World): World {
  let changed = false;
  const ops: Record<string, Operation> = {};
  for (const [id, op] of Object.entries(w.ops)) {
    ops[id] = op;
    if (op.lock.generation >= floorOf(w, tenantOf(id), op.lock.principal)) continue;
    const terminal = op.status === 'completed' || op.status === 'failed';
    const revoked = op.revoked ?? { mayHaveTakenEffect: mayHaveTakenEffect(op), statusBefore: op.status };
    const status: Status = terminal ? op.status : 'conflict';
    const lease = terminal ? op.lease : null;
    if (revoked === op.revoked && status === op.status && lease === op.lease) continue;
    ops[id] = { ...op, revoked, status, lease };
    changed = true;
  }
  return changed ? { ...w, ops } : w;
}

const nothingDisclosed = { status: null, attempt: null, result: null, error: null } as const;
const stay = (w: World) => (): World => w;

// ---------------------------------------------------------------------------------------------
// The calls. Each returns every legitimate (answer, next world) pair.

/** §3 Locked reservation, R1 (lease from decision time), R2 (floor judged at decision). */
function claim(w: World, c: Extract<Call, { kind: 'claim' }>, win: Window): Branch[] {
  const tenant = tenantOf(c.id);
  const op = w.ops[c.id];
  if (c.lock.generation < floorOf(w, tenant, c.lock.principal)) {
    const refused = { outcome: 'refused', reason: 'binding_revoked', ...nothingDisclosed } as const;
    if (op !== undefined) return [{ expect: refused, next: stay(w) }];
    // A claim that waited behind another session's first claim of the key, which then rolled
    // back, inserts the reservation itself; refused after the wait, it leaves that reservation
    // converted (§13: conflict, attempt 1 ended before anything ran) — or nothing at all.
    const leftover: Operation = {
      lock: c.lock,
      status: 'running',
      maxAttempts: c.maxAttempts,
      attempts: [{ token: '', observed: null, payload: null, mismatchedSuccess: false }],
      lease: null,
      result: null,
      settledAttempt: null,
      error: null,
      deadLetter: null,
      revoked: null,
    };
    return [
      { expect: refused, next: stay(w) },
      { expect: refused, next: () => withOp(w, c.id, leftover) },
    ];
  }
  if (op === undefined) {
    return [
      {
        expect: { outcome: 'acquired', status: 'running', attempt: 1, newLeaseWithin: plus(win, c.leaseUs) },
        next: (a) =>
          withOp({ ...w, tombstones: w.tombstones.filter((t) => t !== c.id) }, c.id, {
            lock: c.lock,
            status: 'running',
            maxAttempts: c.maxAttempts,
            attempts: [{ token: a.leaseToken ?? '', observed: null, payload: null, mismatchedSuccess: false }],
            lease: { attempt: 1, expiresAt: a.leaseExpiresAt ?? 0 },
            result: null,
            settledAttempt: null,
            error: null,
            deadLetter: null,
            revoked: null,
          }),
      },
    ];
  }
  const diff = lockDiff(op.lock, c.lock);
  if (diff !== null) return [{ expect: { outcome: 'conflict', conflictOn: diff, ...nothingDisclosed }, next: stay(w) }];
  const n = op.attempts.length;
  if (op.status === 'completed') {
    return [
      {
        expect: {
          outcome: 'replay',
          status: 'completed',
          result: op.result,
          settledAttempt: op.settledAttempt,
          attempt: n,
        },
        next: stay(w),
      },
    ];
  }
  if (op.status === 'failed') {
    return [
      {
        expect: {
          outcome: 'failed',
          status: 'failed',
          deadLettered: op.deadLetter !== null,
          deadLetterReason: op.deadLetter,
          ...(op.error === null ? {} : { error: op.error }),
        },
        next: stay(w),
      },
    ];
  }
  if (op.deadLetter === 'needs_reconciliation') {
    return [
      {
        expect: { outcome: 'unknown', status: op.status, deadLettered: true, deadLetterReason: 'needs_reconciliation' },
        next: stay(w),
      },
    ];
  }
  return judgeLease(op, win).map(({ live, win: at }): Branch => {
    if (live && op.lease !== null) {
      return {
        expect: { outcome: 'in_progress', status: op.status, attempt: n, leaseExpiresAt: op.lease.expiresAt },
        next: stay(w),
      };
    }
    // An attempt reported unknown (only report_unknown raises the status to unknown), no lease is
    // live, not dead-lettered: a caller that asked not to re-run it gets in_doubt and nothing
    // changes. A pending/running operation's lapsed lease (nothing reported) is taken over below.
    if (c.rerunAfterUnknown === false && op.status === 'unknown') {
      return { expect: { outcome: 'in_doubt', status: 'unknown', attempt: n, deadLettered: false }, next: stay(w) };
    }
    const ended = endLease(op);
    if (n >= ended.maxAttempts) {
      const dead = deadLetter(ended);
      return dead.status === 'failed'
        ? {
            expect: { outcome: 'failed', status: 'failed', deadLettered: true, deadLetterReason: 'attempts_exhausted' },
            next: () => withOp(w, c.id, dead),
          }
        : {
            expect: {
              outcome: 'unknown',
              status: dead.status,
              deadLettered: true,
              deadLetterReason: 'needs_reconciliation',
            },
            next: () => withOp(w, c.id, dead),
          };
    }
    const status: Status = RANK[ended.status] === 1 ? 'running' : ended.status;
    return {
      expect: { outcome: 'acquired', status, attempt: n + 1, newLeaseWithin: plus(at, c.leaseUs) },
      next: (a) =>
        withOp(w, c.id, {
          ...ended,
          status,
          attempts: [
            ...ended.attempts,
            { token: a.leaseToken ?? '', observed: null, payload: null, mismatchedSuccess: false },
          ],
          lease: { attempt: n + 1, expiresAt: a.leaseExpiresAt ?? 0 },
        }),
    };
  });
}

const plus = (win: Window, us: number): Window => ({ lo: win.lo + us, hi: win.hi + us });

/** §4 heartbeat: only the current attempt's lease is extended (a lapsed one too, if not taken over). */
function heartbeat(w: World, c: Extract<Call, { kind: 'heartbeat' }>, win: Window): Branch[] {
  const op = w.ops[c.id];
  const gate = tokenGate(w, c.id, c.attempt, c.token);
  const fenced = (reason: string | readonly string[]): Branch[] => [
    { expect: { outcome: 'fenced', reason }, next: stay(w) },
  ];
  if (gate !== undefined || op === undefined)
    return op?.revoked ? [...(gate ?? []), ...fenced('binding_revoked')] : (gate ?? []);
  if (op.revoked !== null)
    return fenced(op.status === 'completed' ? ['binding_revoked', 'settled'] : 'binding_revoked');
  if (op.status === 'completed' || op.status === 'failed') return fenced('settled');
  const n = op.attempts.length;
  if (c.attempt < n) return fenced('superseded');
  if (op.attempts[c.attempt - 1]?.observed === 'conflict') return fenced(['attempt_conflicted', 'lease_released']);
  if (op.lease === null) return fenced('lease_released');
  return [
    {
      expect: { outcome: 'extended', status: op.status, newLeaseWithin: plus(win, c.leaseUs) },
      next: (a) => withOp(w, c.id, { ...op, lease: { attempt: n, expiresAt: a.leaseExpiresAt ?? 0 } }),
    },
  ];
}

/**
 * R3 token gate: an attempt that does not exist or a token that is not its own is fenced
 * (`invalid_token`, nothing disclosed); a key never claimed is an error (SE010).
 */
function tokenGate(w: World, id: string, attempt: number, token: string): Branch[] | undefined {
  const op = w.ops[id];
  if (op === undefined && !w.tombstones.includes(id))
    return [{ expect: { outcome: 'error', sqlstate: 'SE010' }, next: stay(w) }];
  if (op === undefined || op.attempts[attempt - 1]?.token !== token) {
    return [{ expect: { outcome: 'fenced', reason: 'invalid_token', ...nothingDisclosed }, next: stay(w) }];
  }
  return undefined;
}

/** True when R3 requires the answer from a plain read, without waiting for the row lock. */
export function mustNotWait(w: World, c: Call): boolean {
  switch (c.kind) {
    case 'heartbeat':
      return tokenGate(w, c.id, c.attempt, c.token) !== undefined;
    case 'complete':
    case 'fail':
    case 'report_unknown':
      // The holder of the attempt's own token may wait even under a revoked generation: it is
      // the "valid-token holder" whose touch converts the revoked operation (R3, last sentence).
      return tokenGate(w, c.id, c.attempt, c.token) !== undefined;
    case 'claim':
    case 'get':
      return c.lock.generation < floorOf(w, tenantOf(c.id), c.lock.principal);
    default:
      return false;
  }
}

type Observation = Extract<Call, { kind: 'complete' | 'fail' | 'report_unknown' }>;

/** §5 The binding-gated monotonic merge. */
function observe(w: World, c: Observation): Branch[] {
  const gate = tokenGate(w, c.id, c.attempt, c.token);
  const op = w.ops[c.id];
  const revoked: Branch = {
    expect: { outcome: 'fenced', reason: 'binding_revoked', ...nothingDisclosed },
    next: stay(w),
  };
  const presentsRevoked = c.lock.generation < floorOf(w, tenantOf(c.id), c.lock.principal);
  // R3 answers both from a plain read; which of the two refusals comes first is not specified.
  if (gate !== undefined || op === undefined)
    return presentsRevoked && w.ops[c.id] !== undefined ? [...(gate ?? []), revoked] : (gate ?? []);
  if (presentsRevoked) {
    // Whether an attempt that already reported hears of that first or of the revocation is not
    // specified: both tell the worker nothing it did not know.
    const me = op.attempts[c.attempt - 1];
    if (me?.observed === null || me?.observed === 'unknown') return [revoked];
    const unrevoked = observe({ ...w, floors: {} }, c).filter((b) =>
      ['duplicate', 'already_settled', 'fenced'].includes(b.expect.outcome as string),
    );
    return [revoked, ...unrevoked.map((b) => ({ expect: b.expect, next: stay(w) }))];
  }
  const n = op.attempts.length;
  const me = op.attempts[c.attempt - 1] as Attempt;
  const canonical = {
    status: op.status,
    attempt: n,
    settledAttempt: op.settledAttempt,
    result: op.result,
    deadLettered: op.deadLetter !== null,
    deadLetterReason: op.deadLetter,
  };
  const fenced = (reason: string | readonly string[]): Branch => ({
    expect: { outcome: 'fenced', reason, status: op.status },
    next: stay(w),
  });
  const alreadyObserved: Branch = {
    expect: { outcome: 'already_settled', reason: 'attempt_already_observed', status: op.status },
    next: stay(w),
  };

  // 2. Binding gate (only complete presents a mismatched lock in the tests).
  const diff = lockDiff(op.lock, c.lock);
  if (diff !== null) {
    const conflict: Branch = {
      expect: { outcome: 'conflict', conflictOn: diff, ...nothingDisclosed },
      next: () => {
        let next = setAttempt(op, c.attempt, (a) => ({
          ...a,
          observed: a.observed === null || a.observed === 'unknown' ? 'conflict' : a.observed,
          mismatchedSuccess: a.mismatchedSuccess || c.kind === 'complete',
        }));
        if (next.lease?.attempt === c.attempt) next = endLease(next);
        if (c.kind === 'complete' && RANK[next.status] < RANK.conflict) next = { ...next, status: 'conflict' };
        return withOp(w, c.id, next);
      },
    };
    return me.observed === 'conflict' || me.mismatchedSuccess ? [conflict, fenced('attempt_conflicted')] : [conflict];
  }
  // 4b. An attempt that presented a mismatched lock is done.
  if (me.observed === 'conflict') return [fenced('attempt_conflicted')];
  const conflicted = me.mismatchedSuccess ? [fenced('attempt_conflicted')] : [];
  const holder = op.lease?.attempt === c.attempt;
  const notHolder = (): Branch[] => {
    if (op.status === 'completed' || op.status === 'failed')
      return [fenced(c.attempt < n ? ['settled', 'superseded'] : 'settled')];
    if (c.attempt < n) return [fenced('superseded')];
    return [fenced('lease_released')];
  };

  if (c.kind === 'complete') {
    // 3. Attempt-scoped settlement lock.
    if (me.observed === 'completed') {
      return [
        ...conflicted,
        me.payload === c.result ? { expect: { outcome: 'duplicate', ...canonical }, next: stay(w) } : alreadyObserved,
      ];
    }
    if (me.observed === 'failed') return [...conflicted, alreadyObserved];
    // 4. Success.
    if (op.status === 'completed') {
      return [
        {
          expect: { outcome: 'already_settled', reason: 'late_success', ...canonical },
          next: () =>
            withOp(
              w,
              c.id,
              setAttempt(op, c.attempt, (a) => ({ ...a, observed: 'completed', payload: c.result })),
            ),
        },
      ];
    }
    const reason = c.attempt < n ? 'superseded_attempt' : holder ? 'current_attempt' : 'lease_released';
    const settled: Operation = {
      ...setAttempt(op, c.attempt, (a) => ({ ...a, observed: 'completed', payload: c.result })),
      status: 'completed',
      result: c.result,
      settledAttempt: c.attempt,
      lease: null,
      error: null,
      deadLetter: null,
    };
    return [
      {
        expect: {
          outcome: 'settled',
          reason,
          status: 'completed',
          result: c.result,
          settledAttempt: c.attempt,
          attempt: n,
        },
        next: () => withOp(w, c.id, settled),
      },
    ];
  }

  if (c.kind === 'fail') {
    const payload = `${c.error}|${c.retryable}`;
    if (me.observed === 'failed') {
      return [
        ...conflicted,
        me.payload === payload
          ? { expect: { outcome: 'duplicate', status: op.status }, next: stay(w) }
          : alreadyObserved,
      ];
    }
    if (me.observed === 'completed') return [...conflicted, alreadyObserved];
    // The protocol has a reported unknown's later failure both ways (§5 step 3 vs "order independence").
    if (me.observed === 'unknown') return [alreadyObserved, ...notHolder()];
    if (!holder) return notHolder();
    // 6. Failure from the lease holder.
    const recorded = setAttempt(op, c.attempt, (a) => ({ ...a, observed: 'failed', payload }));
    const released: Operation = { ...recorded, lease: null };
    const last = !c.retryable || n >= op.maxAttempts;
    if (!last) {
      const next: Operation = { ...released, status: op.status === 'running' ? 'pending' : op.status };
      return [
        {
          expect: { outcome: 'recorded', reason: 'retryable_failure', status: next.status, deadLettered: false },
          next: () => withOp(w, c.id, next),
        },
      ];
    }
    // R5: a final failure after a possible effect is recorded on its attempt only.
    if (mayHaveTakenEffect(op, c.attempt)) {
      const next: Operation = {
        ...released,
        status: atLeast(op.status, 'unknown'),
        deadLetter: 'needs_reconciliation',
      };
      return [
        {
          expect: {
            outcome: 'recorded',
            reason: 'needs_reconciliation',
            status: next.status,
            deadLettered: true,
            deadLetterReason: 'needs_reconciliation',
          },
          next: () => withOp(w, c.id, next),
        },
      ];
    }
    const dl: DeadLetter | null = c.retryable ? 'attempts_exhausted' : null;
    const next: Operation = { ...released, status: 'failed', error: c.error, deadLetter: dl };
    return [
      {
        expect: {
          outcome: 'settled',
          reason: c.retryable ? 'attempts_exhausted' : 'final_failure',
          status: 'failed',
          error: c.error,
          deadLettered: dl !== null,
          deadLetterReason: dl,
        },
        next: () => withOp(w, c.id, next),
      },
    ];
  }

  // report_unknown
  if (me.observed === 'completed') return [...conflicted, alreadyObserved];
  if (me.observed === 'failed') return [...conflicted, alreadyObserved, ...notHolder()];
  if (me.observed === 'unknown' || !holder) return notHolder();
  // 7. Unknown from the lease holder: timeout means unknown, never failure.
  let next: Operation = {
    ...setAttempt(op, c.attempt, (a) => ({ ...a, observed: 'unknown' })),
    lease: null,
    status: atLeast(op.status, 'unknown'),
  };
  if (n >= op.maxAttempts) next = { ...next, deadLetter: 'needs_reconciliation' };
  return [
    {
      expect: {
        outcome: 'recorded',
        reason: 'outcome_unknown',
        status: next.status,
        deadLettered: next.deadLetter !== null,
      },
      next: () => withOp(w, c.id, next),
    },
  ];
}

/** §12 The lock-gated read; §13 the re-authenticated read of a revoked operation. */
function get(w: World, c: Extract<Call, { kind: 'get' }>, win: Window): Branch[] {
  if (c.lock.generation < floorOf(w, tenantOf(c.id), c.lock.principal)) {
    return [{ expect: { outcome: 'refused', reason: 'binding_revoked', ...nothingDisclosed }, next: stay(w) }];
  }
  const op = w.ops[c.id];
  if (op === undefined) return [{ expect: { outcome: 'not_found', ...nothingDisclosed }, next: stay(w) }];
  const diff = lockDiff(op.lock, c.lock);
  const found = (reason: string | null, extra: Expect = {}): Branch[] =>
    judgeLease(op, win).map(({ live }) => ({
      expect: {
        outcome: 'found',
        reason,
        status: op.status,
        attempt: op.attempts.length,
        settledAttempt: op.settledAttempt,
        result: op.result,
        deadLettered: op.deadLetter !== null,
        inFlight: live,
        ...extra,
      },
      next: stay(w),
    }));
  if (diff !== null) {
    const reauth =
      op.revoked !== null &&
      op.lock.principal === c.lock.principal &&
      op.lock.request === c.lock.request &&
      sameSet(op.lock.scopes, c.lock.scopes) &&
      c.lock.generation > op.lock.generation;
    if (reauth) {
      // §13: a conversion to conflict records whether an attempt may have taken effect (an
      // operation already in conflict keeps its status; then the status says it).
      const extra: Expect =
        op.status === 'conflict' && op.revoked?.statusBefore !== 'conflict'
          ? { mayHaveTakenEffect: op.revoked?.mayHaveTakenEffect ?? null }
          : {};
      return found('reauthenticated', { ...extra, deadLettered: undefined, inFlight: false });
    }
    return [{ expect: { outcome: 'conflict', conflictOn: diff, ...nothingDisclosed }, next: stay(w) }];
  }
  return found(null, op.error === null ? {} : { error: op.error });
}

/**
 * §9 expire_leases: every lapsed lease ends; a spent budget dead-letters (R4/R5). Rows locked
 * by an open transaction are skipped (SKIP LOCKED): `maybeLocked` lists the ones that may be.
 */
function expireLeases(w: World, win: Window, maybeLocked: readonly string[]): Branch[] {
  let worlds: World[] = [w];
  for (const id of Object.keys(w.ops)) {
    const next: World[] = [];
    for (const world of worlds) {
      const op = world.ops[id] as Operation;
      if (maybeLocked.includes(id)) next.push(world);
      if (op.deadLetter !== null || op.status === 'completed' || op.status === 'failed') {
        if (!maybeLocked.includes(id)) next.push(world);
        continue;
      }
      for (const { live } of judgeLease(op, win)) {
        if (live) next.push(world);
        else {
          const ended = op.lease === null ? op : endLease(op);
          const after = ended.attempts.length >= ended.maxAttempts ? deadLetter(ended) : ended;
          next.push(after === op ? world : withOp(world, id, after));
        }
      }
    }
    worlds = next;
  }
  return worlds.map((world) => ({ expect: { outcome: 'expired' }, next: () => world }));
}

/** §7 redrive: only a dead letter; attempts_exhausted re-opens as pending, never below its status. */
function redrive(w: World, c: Extract<Call, { kind: 'redrive' }>): Branch[] {
  const op = w.ops[c.id];
  if (op === undefined) return [{ expect: { outcome: 'error', sqlstate: 'SE010' }, next: stay(w) }];
  const refused: Branch = { expect: { outcome: 'error', sqlstate: 'SE011' }, next: stay(w) };
  if (op.deadLetter === null) return [refused];
  const reopened: Operation = {
    ...op,
    deadLetter: null,
    maxAttempts: op.attempts.length + c.additional,
    status: op.deadLetter === 'attempts_exhausted' ? 'pending' : op.status,
    error: op.deadLetter === 'attempts_exhausted' ? null : op.error,
  };
  // §13 redrive is not a call of the binding: it does not convert a revoked operation, so it
  // answers the status the row still holds, unknown or conflict for reconciliation's dead letter.
  const status =
    op.revoked !== null && op.deadLetter === 'needs_reconciliation' ? ['unknown', 'conflict'] : reopened.status;
  const ok: Branch = {
    expect: { outcome: 'redriven', status, attempt: op.attempts.length, maxAttempts: reopened.maxAttempts },
    next: () => withOp(w, c.id, reopened),
  };
  // RULES-18 keeps "redrive only from attempts_exhausted failed"; protocol §7 also redrives a
  // needs_reconciliation dead letter keeping its status. Either is safe: the status stays.
  return op.deadLetter === 'attempts_exhausted' ? [ok] : [ok, refused];
}

/** The payload recorded on the attempts a failed resolution judges (never a worker's report). */
export const RESOLVED_FAILED = '(resolved failed)';

/**
 * Reconciliation (docs/reconciliation.md, settle.resolve): the verified outcome of an operation
 * that lost it. Only an unknown or conflict operation is resolved; a failed resolution only
 * while no attempt holds a lease (that attempt may still take effect). completed settles
 * through an attempt epoch of its own (N + 1, whose token nobody holds), ending a held lease;
 * failed records the verdict on every attempt without a terminal observation, so a late success
 * of one is already_settled, never a second final outcome. A final operation answers
 * already_final and nothing changes. The evidence has an epoch: a resolution presents the attempt
 * (and optionally the status) read when the downstream was checked, and is refused (SE053) when
 * the operation moved on since (a newer attempt, which the check did not see, or another status);
 * already_final is answered first, so a repeat stays harmless.
 */
function resolve(w: World, c: Extract<Call, { kind: 'resolve' }>): Branch[] {
  const op = w.ops[c.id];
  const error = (sqlstate: string): Branch => ({ expect: { outcome: 'error', sqlstate }, next: stay(w) });
  if (op === undefined) return [error('SE010')];
  if (op.lock.request !== c.request) return [error('SE052')];
  const n = op.attempts.length;
  if (op.status === 'completed' || op.status === 'failed') {
    const matches = op.status === c.outcome && (op.status === 'failed' || op.result === c.payload);
    return [
      {
        expect: {
          outcome: 'already_final',
          reason: matches ? 'matches' : 'differs',
          status: op.status,
          attempt: n,
          settledAttempt: op.settledAttempt,
          result: op.result,
        },
        next: stay(w),
      },
    ];
  }
  // §13 The engine converts a revoked operation at its next touch by a call of the binding;
  // settle.resolve is not one, so it may still see the status and lease from before.
  const unconverted = op.revoked === null ? [] : [error('SE050'), error('SE051')];
  if (n !== c.expectedAttempt) return [error('SE053')];
  if (c.expectedStatus !== undefined) {
    // An unconverted revoked operation may still hold the status it had before, or pending
    // where it was running: the sweeper (not a call of the binding) ends a lapsed attempt
    // without converting. Any of these may be the one compared.
    const before = op.revoked?.statusBefore;
    const seen =
      before === undefined ? [op.status] : [op.status, before, ...(before === 'running' ? (['pending'] as const) : [])];
    if (!seen.includes(c.expectedStatus)) return [error('SE053')];
    if (seen.some((st) => st !== c.expectedStatus)) unconverted.push(error('SE053'));
  }
  if (op.status !== 'unknown' && op.status !== 'conflict') return [error('SE050')];
  if (c.outcome === 'failed' && op.lease !== null) return [error('SE051')];
  if (c.outcome === 'completed') {
    const settled: Operation = {
      ...op,
      status: 'completed',
      result: c.payload,
      settledAttempt: n + 1,
      lease: null,
      error: null,
      deadLetter: null,
      maxAttempts: Math.max(op.maxAttempts, n + 1),
      attempts: [...op.attempts, { token: '', observed: 'completed', payload: c.payload, mismatchedSuccess: false }],
    };
    return [
      ...unconverted,
      {
        expect: { outcome: 'resolved', status: 'completed', attempt: n + 1, settledAttempt: n + 1, result: c.payload },
        next: () => withOp(w, c.id, settled),
      },
    ];
  }
  const judged: Operation = {
    ...op,
    status: 'failed',
    error: c.payload,
    deadLetter: null,
    attempts: op.attempts.map((a) =>
      a.observed === null || a.observed === 'unknown' ? { ...a, observed: 'failed', payload: RESOLVED_FAILED } : a,
    ),
  };
  return [
    ...unconverted,
    {
      expect: { outcome: 'resolved', status: 'failed', attempt: n, settledAttempt: null, error: c.payload },
      next: () => withOp(w, c.id, judged),
    },
  ];
}

/** §9 purge: terminal operations that are not dead letters (SKIP LOCKED as expire_leases). */
function purge(w: World, maybeLocked: readonly string[]): Branch[] {
  // §9 the tombstone rule: a later purge removes the tombstone of a key without operation once
  // its rows are older than the cutoff (then a straggler gets SE010, as for a key never claimed).
  let worlds: World[] = [w, ...(w.tombstones.length > 0 ? [{ ...w, tombstones: [] }] : [])];
  for (const [id, op] of Object.entries(w.ops)) {
    if (!((op.status === 'completed' || op.status === 'failed') && op.deadLetter === null)) continue;
    const purged = (world: World): World => ({
      ...withOp(world, id, undefined),
      tombstones: [...world.tombstones.filter((t) => t !== id), id],
    });
    worlds = worlds.flatMap((world) => (maybeLocked.includes(id) ? [world, purged(world)] : [purged(world)]));
  }
  return worlds.map((world) => ({ expect: { outcome: 'purged' }, next: () => world }));
}

/** Every legitimate (answer, next world) for `call` decided at an instant within `win`. */
export function step(w: World, call: Call, win: Window, maybeLocked: readonly string[] = []): Branch[] {
  switch (call.kind) {
    case 'claim':
      return claim(w, call, win);
    case 'heartbeat':
      return heartbeat(w, call, win);
    case 'complete':
    case 'fail':
    case 'report_unknown':
      return observe(w, call);
    case 'get':
      return get(w, call, win);
    case 'expire_leases':
      return expireLeases(w, win, maybeLocked);
    case 'redrive':
      return redrive(w, call);
    case 'resolve':
      return resolve(w, call);
    case 'purge':
      return purge(w, maybeLocked);
    case 'revoke_binding': {
      const key = `${call.tenant}/${call.principal}`;
      const floor = Math.max(w.floors[key] ?? 0, call.below);
      return [
        {
          expect: { outcome: 'revoked', floor },
          next: () => normalize({ ...w, floors: { ...w.floors, [key]: floor } }),
        },
      ];
    }
  }
}

/** Does `answer` meet `expect`? (An array in `expect` lists the values allowed.) */
export function meets(expect: Expect, answer: Answer): boolean {
  for (const [field, want] of Object.entries(expect)) {
    if (want === undefined) continue;
    if (field === 'newLeaseWithin') {
      const e = answer.leaseExpiresAt;
      const win = want as Window;
      if (e === null || e === undefined || e < win.lo || e > win.hi) return false;
      continue;
    }
    const got = (answer as unknown as Record<string, unknown>)[field] ?? null;
    if (field === 'conflictOn') {
      if (JSON.stringify(got) !== JSON.stringify(want)) return false;
    } else if (Array.isArray(want)) {
      if (!want.includes(got as string)) return false;
    } else if (got !== want) return false;
  }
  return true;
}

/**
 * What one open transaction sees and, at commit, leaves: the committed world with the
 * operations that transaction changed (`own`: its version, or null for none) laid over it.
 */
export function overlay(committed: World, own: Readonly<Record<string, Operation | null>>): World {
  const ops: Record<string, Operation> = { ...committed.ops };
  for (const [id, op] of Object.entries(own)) {
    if (op === null) delete ops[id];
    else ops[id] = op;
  }
  const tombstones = committed.tombstones.filter((t) => ops[t] === undefined);
  return normalize({ ops, floors: committed.floors, tombstones });
}

// The settlement feed: which final outcomes each consumer must (and may) receive (feed-model.ts).
export { EMPTY_FEED, feedStep, undelivered } from './feed-model.js';
export type { FeedCall, FeedConsumerState, FeedEvent, FeedJudgement, FeedWorld } from './feed-model.js';
