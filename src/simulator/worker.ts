import type pg from 'pg';
import { sql } from 'slonik';
import { z } from 'zod';
import { defaultClassify } from '../client/classify.js';
import type {
  AttemptHandle,
  BindingInput,
  Json,
  RunContext,
  RunInput,
  RunOutcome,
  SettleClient,
} from '../client/types.js';
import type { FaultName, SimulatorConfig } from './config.js';
import type { EngineCall, IntendedOperation, PayoutResult, Submission } from './history.js';
import type { Ledger, PayoutReceipt } from './ledger.js';
import { callScope, type CallScope } from './recording-pool.js';
import type { Recorder } from './recorder.js';
import type { NaivePoller } from './rewards.js';
import type { OperationPlan } from './schedule.js';
import type { Task, TaskQueue } from './task-queue.js';

/**
 * The workload: one operation is a payout. Its callers run it through the public run() of the
 * typed client, pay through the idempotent downstream (ledger.ts), and settle with a result
 * naming the payout; faults are injected around and inside the effect.
 * The fault plan decides what goes wrong; see docs/simulator.md for each fault's script.
 */
export interface WorkerContext {
  readonly client: SettleClient;
  readonly ledger: Ledger;
  /** Plain pg pool for the conflicting submissions, which read the raw settle.claim row. */
  readonly probes: pg.Pool;
  readonly queue: TaskQueue;
  readonly recorder: Recorder;
  readonly config: SimulatorConfig;
  readonly tenantPrefix: string;
  /** Called once per operation, when a caller first learns its final outcome. */
  readonly onFinal: () => void;
  /** Stalled effects (they wait outside the worker pool until the operation is final). */
  readonly zombies: { track(stall: Promise<void>): Promise<void> };
  /** The naive settled_at poller (slow-commit holds a settlement open until it has passed it); null when off. */
  readonly naive: NaivePoller | null;
  /** Resolves once the reconciler has decided (tenant, key), or the run stops reconciling. */
  readonly reconciled: (tenant: string, key: string) => Promise<void>;
}

export const BINDING_GENERATION = 1;
const SCOPES = ['payouts:write'];
/** Longest a stale attempt waits for the operation to settle elsewhere before it wakes anyway. */
const STALE_WAKE_TIMEOUT_FACTOR = 4;

class Deferred {
  done = false;
  readonly promise: Promise<void>;
  private resolveFn!: () => void;
  constructor() {
    this.promise = new Promise((resolve) => (this.resolveFn = resolve));
  }
  resolve(): boolean {
    if (this.done) return false;
    this.done = true;
    this.resolveFn();
    return true;
  }
}

class Operation {
  readonly tenant: string;
  readonly key: string;
  readonly request: Json;
  readonly binding: BindingInput;
  /** The first claim of any caller has been answered: the reservation exists. */
  readonly reserved = new Deferred();
  /** Some caller learned the final outcome (settled, replay or failed). */
  readonly final = new Deferred();
  /** The first-attempt fault has been applied (it applies once, to attempt 1). */
  fateApplied = false;
  /** caller-timeout, late-success-first: the late success the caller delivers before it retries. */
  lateSuccess: (() => Promise<void>) | null = null;
  /** provider-outage: the provider answers lookups again (once the operation needs reconciliation). */
  outageOver = false;

  constructor(
    readonly plan: OperationPlan,
    tenantPrefix: string,
  ) {
    this.tenant = `${tenantPrefix}${plan.tenant}`;
    this.key = plan.key;
    this.request = { amount_cents: plan.amountCents, currency: 'EUR', destination: `acct-${plan.index % 97}` };
    this.binding = { principal: `payer-${plan.tenant}`, scopes: SCOPES, generation: BINDING_GENERATION };
  }

  intended(): IntendedOperation {
    return {
      tenant: this.tenant,
      key: this.key,
      amountCents: this.plan.amountCents,
      bindingGeneration: BINDING_GENERATION,
    };
  }
}

/** The task that starts one operation: its original caller, any duplicates, and the probes. */
export function operationTask(ctx: WorkerContext, plan: OperationPlan): { intended: IntendedOperation; task: Task } {
  const op = new Operation(plan, ctx.tenantPrefix);
  const task: Task = async () => {
    const callers = [submit(ctx, op, 'original', null)];
    for (let i = 0; i < plan.duplicates; i += 1) {
      ctx.recorder.inject('duplicate');
      callers.push(submit(ctx, op, 'duplicate', 'duplicate'));
    }
    const probeTrigger = plan.probeTiming === 'racing' ? op.reserved.promise : op.final.promise;
    const probeTimeout = ctx.config.leaseSeconds * 1000 * 10;
    if (plan.conflictingAmountCents !== null) {
      const request = { ...(op.request as Record<string, Json>), amount_cents: plan.conflictingAmountCents };
      ctx.queue.after(probeTrigger, probeTimeout, () =>
        probe(ctx, op, 'different-payload', request, BINDING_GENERATION),
      );
    }
    if (plan.bindingBump) {
      ctx.queue.after(probeTrigger, probeTimeout, () =>
        probe(ctx, op, 'binding-bump', op.request, BINDING_GENERATION + 1),
      );
    }
    await Promise.all(callers);
  };
  return { intended: op.intended(), task };
}

function record(
  ctx: WorkerContext,
  op: Operation,
  call: EngineCall,
  submission: Submission,
  fault: FaultName | null,
  attempt: number | null,
  answer: Readonly<Record<string, unknown>>,
): void {
  ctx.recorder.answer({ tenant: op.tenant, key: op.key, call, submission, fault, attempt, answer });
}

function markFinal(ctx: WorkerContext, op: Operation): void {
  if (op.final.resolve()) ctx.onFinal();
}

/** The result the simulator settles with, as a zod schema: run() checks it on settle and replay. */
const PayoutResultSchema = z.object({
  payout_id: z.string(),
  amount_cents: z.number().int(),
  credited_by_attempt: z.number().int(),
});

/** Thrown by the effect of a worker that "crashed", when its process is reaped: it never reports anything real. */
class WorkerCrashed extends Error {
  override readonly name = 'WorkerCrashed';
}

/** Faults whose first attempt stalls (no heartbeats: the lease must lapse for a retry to take over). */
const STALLING: ReadonlySet<FaultName | null> = new Set<FaultName | null>([
  'crash-after-claim',
  'crash-after-effect',
  'lease-expiry',
  'stale-report',
]);

/** Pauses between a caller's run() calls: after in_progress, after unknown. */
const RETRY_PAUSE_MS = 20;
/** Longest a caller waits for the reconciler before it asks again anyway. */
const RECONCILIATION_WAIT_MS = 60_000;

/**
 * One caller: the public run() until the operation is final for it. The effect pays through
 * the downstream; reconcile asks the downstream for a payout under the operation's key before
 * an attempt that follows a possibly-effective one pays again. The first-attempt fault is
 * applied inside the effect (the attempt that acquired attempt 1, whichever caller it is).
 */
async function submit(
  ctx: WorkerContext,
  op: Operation,
  submission: Submission,
  fault: FaultName | null,
): Promise<void> {
  const scope: CallScope = { tenant: op.tenant, key: op.key, submission, fault, attempt: null };
  if (op.plan.fate === 'slow-commit' && !op.fateApplied && submission === 'original') {
    op.fateApplied = true;
    ctx.recorder.inject('slow-commit');
    scope.fault = 'slow-commit';
    const outcome = await callScope.run(scope, () =>
      ctx.recorder.timed(ctx.recorder.runLatencyMs, () => slowCommit(ctx, op, scope)),
    );
    await settled(ctx, op, submission, scope.fault, outcome, false);
    return;
  }
  const stalls = STALLING.has(op.plan.fate) && !op.fateApplied;
  const stalled = new Deferred();
  const running = callScope.run(scope, () =>
    ctx.recorder.timed(ctx.recorder.runLatencyMs, () =>
      ctx.client.run(
        {
          ...runInput(ctx, op, submission),
          // A stalled worker renews nothing (its lease must lapse); an ordinary effect takes
          // milliseconds, far less than a lease.
          ...(stalls ? { heartbeatIntervalMs: ctx.config.leaseSeconds * 1000 * 3_600 } : {}),
        },
        (run) => effect(ctx, op, run, scope, stalled),
        { result: PayoutResultSchema, reconcile: (run) => reconcile(ctx, op, scope, run) },
      ),
    ),
  );
  // A stalled effect leaves the worker pool: its caller's retry is already queued.
  const first = await Promise.race([running.then((outcome) => ({ outcome })), stalled.promise.then(() => null)]);
  if (first === null) {
    void ctx.zombies.track(running.then((outcome) => settled(ctx, op, submission, scope.fault, outcome, true)));
    return;
  }
  await settled(ctx, op, submission, scope.fault, first.outcome, false);
}

function runInput(ctx: WorkerContext, op: Operation, submission: Submission): RunInput {
  return {
    tenant: op.tenant,
    key: op.key,
    request: op.request,
    binding: op.binding,
    leaseMs: ctx.config.leaseSeconds * 1000,
    worker: `sim-${submission}`,
    maxAttempts: ctx.config.maxAttempts,
    waitForMs: ctx.config.leaseSeconds * 1000 * 3,
    classify: (error) => (error instanceof WorkerCrashed ? 'unknown' : defaultClassify(error)),
  };
}

/**
 * run()'s reconcile: ask the downstream for a payout under the operation's key before an attempt
 * that follows a possibly-effective one pays again. During a provider outage the lookup times
 * out too: run() then reports the attempt unknown (reconcile_failed) and pays nothing.
 */
async function reconcile(
  ctx: WorkerContext,
  op: Operation,
  scope: CallScope,
  run: RunContext,
): Promise<PayoutResult | undefined> {
  scope.attempt = run.attemptNumber;
  if (op.plan.fate === 'provider-outage' && !op.outageOver) {
    ctx.recorder.note('provider-outage', 'the lookup timed out too');
    throw new DOMException('the payment provider does not answer', 'TimeoutError');
  }
  const found = await ctx.ledger.find(op.tenant, op.key);
  if (found === null) return undefined;
  if (scope.fault !== null) ctx.recorder.note(scope.fault, 'reconcile found the payout: not paid again');
  return { payout_id: found.payoutId, amount_cents: op.plan.amountCents, credited_by_attempt: found.creditedByAttempt };
}

/**
 * slow-commit: the caller settles inside a transaction of its own (runInTransaction with its
 * connection: claim, pay, complete) and commits late. The settlement's settled_at is stamped at
 * complete; the transaction stays open until the naive poller has moved its cursor past that
 * stamp (a later settlement committed and was polled), then commits. The feed delivers it; the
 * naive poller never sees it. Bounded by three leases (then it commits anyway).
 */
async function slowCommit(ctx: WorkerContext, op: Operation, scope: CallScope): Promise<RunOutcome<PayoutResult>> {
  const pool = await ctx.client.getPool();
  return pool.transaction(async (outer) => {
    const outcome = await ctx.client.runInTransaction(
      runInput(ctx, op, 'original'),
      async ({ attempt }) => {
        scope.attempt = attempt.attempt;
        return toResult(op, await pay(ctx, op, attempt.attempt, 'slow-commit')) as unknown as Json;
      },
      { connection: outer, result: PayoutResultSchema, reconcile: (run) => reconcile(ctx, op, scope, run) },
    );
    if (outcome.outcome === 'completed' && outcome.settledBy === 'this_attempt' && ctx.naive !== null) {
      const micros = await outer.oneFirst(sql.type(z.object({ micros: z.string() }))`
        select floor(extract(epoch from settled_at) * 1000000)::bigint::text as micros
          from settle.settlements where tenant = ${op.tenant} and key = ${op.key}`);
      const passed = await ctx.naive.waitPast(BigInt(micros), ctx.config.leaseSeconds * 1000 * 3);
      ctx.recorder.note(
        'slow-commit',
        passed ? 'held open until a later settlement was polled' : 'held open, no later settlement polled in time',
      );
    }
    return outcome as RunOutcome<PayoutResult>;
  });
}

/** What a caller does with run()'s answer. A stalled attempt's answer (`stale`) only counts. */
async function settled(
  ctx: WorkerContext,
  op: Operation,
  submission: Submission,
  fault: FaultName | null,
  outcome: RunOutcome<PayoutResult>,
  stale: boolean,
): Promise<void> {
  op.reserved.resolve();
  const detail =
    outcome.outcome === 'unknown'
      ? outcome.reason
      : outcome.outcome === 'completed' && outcome.reconciled === true
        ? 'reconciled'
        : undefined;
  ctx.recorder.run(outcome.outcome, detail);
  if (fault !== null || stale)
    ctx.recorder.note(
      fault ?? op.plan.fate ?? 'duplicate',
      `run() ${outcome.outcome}${detail === undefined ? '' : ` (${detail})`}`,
    );
  if (stale) return;
  switch (outcome.outcome) {
    case 'completed':
    case 'replay':
      markFinal(ctx, op);
      return;
    case 'failed':
      if (outcome.final) markFinal(ctx, op);
      else ctx.queue.later(RETRY_PAUSE_MS, () => submit(ctx, op, submission, fault));
      return;
    case 'unknown': {
      if (outcome.reason === 'needs_reconciliation') {
        // The budget is spent and an attempt may have paid: the reconciler checks the provider
        // (its outage is over by now) and resolves the operation; then the caller asks again.
        op.outageOver = true;
        ctx.queue.after(ctx.reconciled(op.tenant, op.key), RECONCILIATION_WAIT_MS, () =>
          submit(ctx, op, submission, fault),
        );
        return;
      }
      // A late success that arrives before the caller's retry (caller-timeout, late-success-first).
      const late = op.lateSuccess;
      op.lateSuccess = null;
      if (late !== null) await late();
      // Timeout means unknown: retry with the same key (the next attempt reconciles first).
      if (!op.final.done) ctx.queue.later(RETRY_PAUSE_MS, () => submit(ctx, op, submission, fault));
      return;
    }
    case 'in_progress':
      if (!op.final.done) ctx.queue.later(RETRY_PAUSE_MS, () => submit(ctx, op, submission, fault));
      return;
    case 'fenced':
      // This caller's attempt lost its lease before it could report (on a loaded machine a 1 s
      // lease can lapse under a slow effect): the caller still wants its payout, so it runs
      // the key again, like any caller after a timeout; the next attempt reconciles first.
      if (!op.final.done) ctx.queue.later(RETRY_PAUSE_MS, () => submit(ctx, op, submission, fault));
      return;
    case 'conflict':
      // Never expected for the reserved request (the checker's answers and report show it).
      return;
  }
}

/**
 * The effect of the attempt run() acquired: pay, or play the operation's first-attempt fault.
 * A stall hands the caller's retry to the queue and waits (outside the worker pool) until the
 * operation is final elsewhere, or for a few leases at most.
 */
async function effect(
  ctx: WorkerContext,
  op: Operation,
  run: RunContext,
  scope: CallScope,
  stalled: Deferred,
): Promise<PayoutResult> {
  scope.attempt = run.attemptNumber;
  const fate = run.attemptNumber === 1 && !op.fateApplied ? op.plan.fate : null;
  if (run.attemptNumber === 1) op.fateApplied = true;
  if (fate === null) return toResult(op, await pay(ctx, op, run.attemptNumber, scope.fault));
  ctx.recorder.inject(fate);
  // Every later call of this run() (report_unknown, complete, fail) belongs to the fault.
  scope.fault = fate;
  const scoped: CallScope = { ...scope };
  const retry = (): void => retryAfterLease(ctx, op, run.attempt, scope.submission, fate);
  const stall = (): Promise<void> => {
    stalled.resolve();
    return waitForFinal(ctx, op);
  };
  switch (fate) {
    case 'crash-after-claim':
      // The worker vanishes: no effect, no report. The caller retries once the lease lapses.
      retry();
      await stall();
      throw new WorkerCrashed('the worker crashed after its claim');
    case 'crash-after-effect':
      await pay(ctx, op, run.attemptNumber, fate);
      retry();
      await stall();
      throw new WorkerCrashed('the worker crashed after paying');
    case 'lease-expiry': {
      // The effect stalls past the lease; the caller's retry takes over. The slow worker then
      // finishes, ignoring its lease: its heartbeat is fenced, the downstream deduplicates,
      // its success is late (run() answers the other attempt's result).
      retry();
      await stall();
      await callScope.run(scoped, () => run.heartbeat().catch(() => null));
      return toResult(op, await pay(ctx, op, run.attemptNumber, fate));
    }
    case 'caller-timeout': {
      // Paid, then the caller loses the answer: run() reports unknown. The success of this
      // attempt arrives late, before or after the caller's retry.
      const receipt = await pay(ctx, op, run.attemptNumber, fate);
      const handle = run.attempt;
      const lateSuccess = (): Promise<void> =>
        callScope.run({ ...scoped, submission: scope.submission, attempt: handle.attempt }, async () => {
          await ctx.client.complete(handle, toResult(op, receipt) as unknown as Json);
        });
      if (op.plan.variant === 'late-success-first') op.lateSuccess = lateSuccess;
      else ctx.queue.after(op.final.promise, ctx.config.leaseSeconds * 1000 * STALE_WAKE_TIMEOUT_FACTOR, lateSuccess);
      throw new DOMException('the payment answer timed out', 'TimeoutError');
    }
    case 'provider-outage':
      // The provider stops answering: the payment went through or not, the caller cannot tell.
      if (op.plan.variant !== 'not-paid') await pay(ctx, op, run.attemptNumber, fate);
      throw new DOMException('the payment provider does not answer', 'TimeoutError');
    case 'slow-commit':
      // Played by slowCommit() (submit); an attempt 1 acquired by another caller just pays.
      return toResult(op, await pay(ctx, op, run.attemptNumber, fate));
    case 'stale-report':
      // Stalls before any effect; the retry takes over and settles; then it wakes and reports.
      retry();
      await stall();
      if (op.plan.variant === 'fail') throw new Error('worker stalled before the effect');
      if (op.plan.variant === 'unknown') throw new DOMException('stalled', 'TimeoutError');
      await run.heartbeat().catch(() => null);
      throw run.signal.reason ?? new Error('stalled');
  }
}

function toResult(op: Operation, receipt: PayoutReceipt): PayoutResult {
  return {
    payout_id: receipt.payoutId,
    amount_cents: op.plan.amountCents,
    credited_by_attempt: receipt.creditedByAttempt,
  };
}

/** Until the operation is final elsewhere, or a few leases at most. */
async function waitForFinal(ctx: WorkerContext, op: Operation): Promise<void> {
  const timeout = ctx.config.leaseSeconds * 1000 * STALE_WAKE_TIMEOUT_FACTOR;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([op.final.promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeout)))]);
  clearTimeout(timer);
}

function retryAfterLease(
  ctx: WorkerContext,
  op: Operation,
  handle: AttemptHandle,
  submission: Submission,
  fault: FaultName,
): void {
  const delay = handle.leaseExpiresAt.getTime() - Date.now() + 25;
  ctx.queue.later(delay, () => submit(ctx, op, submission, fault));
}

async function pay(
  ctx: WorkerContext,
  op: Operation,
  attempt: number,
  fault: FaultName | null,
): Promise<PayoutReceipt> {
  const receipt = await ctx.ledger.pay({
    tenant: op.tenant,
    key: op.key,
    attempt,
    amountCents: op.plan.amountCents,
    bindingGeneration: BINDING_GENERATION,
  });
  if (fault !== null) ctx.recorder.note(fault, receipt.credited ? 'downstream credited' : 'downstream deduplicated');
  return receipt;
}

/**
 * A conflicting submission (different amount, or a bumped binding generation) under the same
 * key, sent as plain SQL so the checker sees every column of the raw settle.claim row.
 */
async function probe(
  ctx: WorkerContext,
  op: Operation,
  fault: 'different-payload' | 'binding-bump',
  request: Json,
  bindingGeneration: number,
): Promise<void> {
  ctx.recorder.inject(fault);
  const { rows } = await ctx.recorder.timed(ctx.recorder.claimLatencyMs, () =>
    ctx.probes.query<Record<string, unknown>>(
      `select * from settle.claim(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[],
                                  binding_generation => $6, lease => make_interval(secs => $7), worker => $8,
                                  max_attempts => $9)`,
      [
        op.tenant,
        op.key,
        JSON.stringify(request),
        op.binding.principal,
        SCOPES,
        bindingGeneration,
        ctx.config.leaseSeconds,
        `sim-${fault}`,
        ctx.config.maxAttempts,
      ],
    ),
  );
  const [row] = rows;
  if (row === undefined) throw new Error('settle.claim returned no row');
  record(ctx, op, 'claim', fault, fault, null, row);
  if (row.outcome === 'acquired') {
    // The engine let a conflicting request in: the checker fails on the answer. Do not run
    // its effect (that would only add a second symptom of the same defect).
    ctx.recorder.note(fault, 'NOT REFUSED');
  }
}
