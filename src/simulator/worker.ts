import type pg from 'pg';
import type { SettleClient } from '../client/client.js';
import type { AttemptHandle, BindingInput, ClaimOutcome, Json } from '../client/types.js';
import type { FaultName, SimulatorConfig } from './config.js';
import type { EngineCall, IntendedOperation, PayoutResult, Submission } from './history.js';
import type { Ledger, PayoutReceipt } from './ledger.js';
import type { Recorder } from './recorder.js';
import type { OperationPlan } from './schedule.js';
import type { Task, TaskQueue } from './task-queue.js';

/**
 * The workload: one operation is a payout. Its callers claim it through the typed client, pay
 * through the idempotent downstream (ledger.ts), and settle with a result naming the payout.
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
}

export const BINDING_GENERATION = 1;
const SCOPES = ['payouts:write'];
/** Longest a stale attempt waits for the operation to settle elsewhere before it wakes anyway. */
const STALE_WAKE_TIMEOUT_FACTOR = 4;
/** Longest wait between two claims of a caller that was told in_progress. */
const MAX_IN_PROGRESS_WAIT_MS = 200;

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
    return { tenant: this.tenant, key: this.key, amountCents: this.plan.amountCents, bindingGeneration: BINDING_GENERATION };
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
      ctx.queue.after(probeTrigger, probeTimeout, () => probe(ctx, op, 'different-payload', request, BINDING_GENERATION));
    }
    if (plan.bindingBump) {
      ctx.queue.after(probeTrigger, probeTimeout, () => probe(ctx, op, 'binding-bump', op.request, BINDING_GENERATION + 1));
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

function claimAnswer(outcome: ClaimOutcome): Record<string, unknown> {
  if (outcome.outcome !== 'acquired') return { ...outcome };
  const { attempt } = outcome;
  return { outcome: 'acquired', status: outcome.status, attempt: attempt.attempt, fingerprint: attempt.fingerprint };
}

/** One caller's claim, and whatever the answer leads to. */
async function submit(ctx: WorkerContext, op: Operation, submission: Submission, fault: FaultName | null): Promise<void> {
  const outcome = await ctx.recorder.timed(ctx.recorder.claimLatencyMs, () =>
    ctx.client.claim({
      tenant: op.tenant,
      key: op.key,
      request: op.request,
      binding: op.binding,
      leaseMs: ctx.config.leaseSeconds * 1000,
      worker: `sim-${submission}`,
      maxAttempts: ctx.config.maxAttempts,
    }),
  );
  record(ctx, op, 'claim', submission, fault, null, claimAnswer(outcome));
  op.reserved.resolve();
  switch (outcome.outcome) {
    case 'acquired':
      return execute(ctx, op, outcome.attempt, submission, fault);
    case 'in_progress':
      ctx.queue.later(Math.min(outcome.retryAfterMs + 10, MAX_IN_PROGRESS_WAIT_MS), () => submit(ctx, op, submission, fault));
      return;
    case 'replay':
    case 'failed':
      markFinal(ctx, op);
      return;
    case 'conflict':
      // Never expected for the reserved request: the checker's answers and report show it.
      return;
  }
}

/**
 * The attempt a caller acquired: apply the first-attempt fault, or pay and settle. `cause` is
 * the fault that led this caller here (a retry after a crash), for the report's fault table.
 */
async function execute(
  ctx: WorkerContext,
  op: Operation,
  handle: AttemptHandle,
  submission: Submission,
  cause: FaultName | null,
): Promise<void> {
  const fate = handle.attempt === 1 && !op.fateApplied ? op.plan.fate : null;
  if (handle.attempt === 1) op.fateApplied = true;
  if (fate === null) {
    await payAndComplete(ctx, op, handle, submission, cause);
    return;
  }
  ctx.recorder.inject(fate);
  const wakeTimeout = ctx.config.leaseSeconds * 1000 * STALE_WAKE_TIMEOUT_FACTOR;
  switch (fate) {
    case 'crash-after-claim':
      // The worker is gone: nothing is reported. The caller retries once the lease lapses.
      retryAfterLease(ctx, op, handle, submission, fate);
      return;
    case 'crash-after-effect':
      await pay(ctx, op, handle, fate);
      retryAfterLease(ctx, op, handle, submission, fate);
      return;
    case 'lease-expiry':
      // The effect stalls past the lease; the caller's retry takes over. The slow worker then
      // finishes: its heartbeat is fenced, the downstream deduplicates, its success is late.
      retryAfterLease(ctx, op, handle, submission, fate);
      ctx.queue.after(op.final.promise, wakeTimeout, async () => {
        const beat = await ctx.client.heartbeat(handle, { leaseMs: ctx.config.leaseSeconds * 1000 });
        record(ctx, op, 'heartbeat', submission, fate, handle.attempt, { ...beat });
        await payAndComplete(ctx, op, handle, submission, fate);
      });
      return;
    case 'caller-timeout': {
      const receipt = await pay(ctx, op, handle, fate);
      const unknown = await ctx.recorder.timed(ctx.recorder.settleLatencyMs, () => ctx.client.reportUnknown(handle));
      record(ctx, op, 'reportUnknown', submission, fate, handle.attempt, { ...unknown });
      if (op.plan.variant === 'late-success-first') {
        await complete(ctx, op, handle, submission, fate, receipt);
      } else {
        ctx.queue.push(() => submit(ctx, op, submission, fate));
        ctx.queue.after(op.final.promise, wakeTimeout, () => complete(ctx, op, handle, submission, fate, receipt));
      }
      return;
    }
    case 'stale-report':
      retryAfterLease(ctx, op, handle, submission, fate);
      ctx.queue.after(op.final.promise, wakeTimeout, () => staleReport(ctx, op, handle, submission));
      return;
  }
}

function retryAfterLease(ctx: WorkerContext, op: Operation, handle: AttemptHandle, submission: Submission, fault: FaultName): void {
  const delay = handle.leaseExpiresAt.getTime() - Date.now() + 25;
  ctx.queue.later(delay, () => submit(ctx, op, submission, fault));
}

async function staleReport(ctx: WorkerContext, op: Operation, handle: AttemptHandle, submission: Submission): Promise<void> {
  const fault = 'stale-report';
  switch (op.plan.variant) {
    case 'fail': {
      const answer = await ctx.client.fail(handle, { code: 'stalled', message: 'worker stalled before the effect' });
      record(ctx, op, 'fail', submission, fault, handle.attempt, { ...answer });
      return;
    }
    case 'unknown': {
      const answer = await ctx.client.reportUnknown(handle);
      record(ctx, op, 'reportUnknown', submission, fault, handle.attempt, { ...answer });
      return;
    }
    default: {
      const answer = await ctx.client.heartbeat(handle, { leaseMs: ctx.config.leaseSeconds * 1000 });
      record(ctx, op, 'heartbeat', submission, fault, handle.attempt, { ...answer });
    }
  }
}

async function pay(ctx: WorkerContext, op: Operation, handle: AttemptHandle, fault: FaultName | null): Promise<PayoutReceipt> {
  const receipt = await ctx.ledger.pay({
    tenant: op.tenant,
    key: op.key,
    attempt: handle.attempt,
    amountCents: op.plan.amountCents,
    bindingGeneration: BINDING_GENERATION,
  });
  if (fault !== null) ctx.recorder.note(fault, receipt.credited ? 'downstream credited' : 'downstream deduplicated');
  return receipt;
}

async function payAndComplete(
  ctx: WorkerContext,
  op: Operation,
  handle: AttemptHandle,
  submission: Submission,
  fault: FaultName | null,
): Promise<void> {
  const receipt = await pay(ctx, op, handle, fault);
  await complete(ctx, op, handle, submission, fault, receipt);
}

async function complete(
  ctx: WorkerContext,
  op: Operation,
  handle: AttemptHandle,
  submission: Submission,
  fault: FaultName | null,
  receipt: PayoutReceipt,
): Promise<void> {
  const result: PayoutResult = {
    payout_id: receipt.payoutId,
    amount_cents: op.plan.amountCents,
    credited_by_attempt: receipt.creditedByAttempt,
  };
  const answer = await ctx.recorder.timed(ctx.recorder.settleLatencyMs, () =>
    ctx.client.complete(handle, result as unknown as Json),
  );
  record(ctx, op, 'complete', submission, fault, handle.attempt, { ...answer });
  if (answer.outcome === 'settled' || answer.outcome === 'already_settled' || answer.outcome === 'duplicate') markFinal(ctx, op);
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
