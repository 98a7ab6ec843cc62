import type pg from 'pg';
import type { SimulatorConfig } from './config.js';
import { installSimulatorSql, type Ledger, type PayoutReceipt } from './ledger.js';
import type { OperationPlan } from './schedule.js';

/**
 * The baseline: the same seeded operations and faults, settled the way code without pg-settle
 * usually does it — a keys table written with a plain upsert (last write wins): look the key up,
 * and unless it says completed, mark it running, pay, and write the outcome. No lock, no
 * fingerprint, no binding, no lease, no lattice. The same downstream ledger (idempotent, unless
 * --unsafe-downstream) is paid. What it gets wrong is counted, for the side-by-side summary.
 */
export interface NaiveTally {
  readonly operations: number;
  /** Operations with more than one credited payout. */
  readonly doublePayouts: number;
  /** Writes that replaced `completed` with a weaker status (running, unknown, failed). */
  readonly downgradedOutcomes: number;
  /** Operations where money moved but the final record is not completed with the payout's result. */
  readonly lostResults: number;
  /** Retries with another amount or binding under the same key that were executed or answered as success. */
  readonly conflictingPayloadsAccepted: number;
  readonly workloadMs: number;
}

const INSTALL_SQL = `
create schema if not exists settle_sim;
create table if not exists settle_sim.naive_operations (
  tenant text not null,
  key text not null,
  status text not null,
  result jsonb,
  amount_cents bigint,
  constraint naive_operations_pkey primary key (tenant, key)
);
comment on table settle_sim.naive_operations is
  'pg-settle simulator: the naive baseline, an idempotency-keys table written with last-write-wins upserts.';
`;

interface NaiveContext {
  readonly pool: pg.Pool;
  readonly ledger: Ledger;
  readonly config: SimulatorConfig;
  readonly tenantPrefix: string;
  downgraded: number;
  accepted: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** The plain upsert; counts a write that replaced completed with something weaker. */
async function upsert(
  ctx: NaiveContext,
  tenant: string,
  key: string,
  status: string,
  result: unknown,
  amountCents: number,
): Promise<void> {
  const { rows } = await ctx.pool.query<{ before: string | null }>(
    `with old as (select status from settle_sim.naive_operations where tenant = $1 and key = $2)
     insert into settle_sim.naive_operations as n (tenant, key, status, result, amount_cents)
     values ($1, $2, $3, $4::jsonb, $5)
     on conflict (tenant, key) do update set status = excluded.status, result = excluded.result, amount_cents = excluded.amount_cents
     returning (select status from old) as before`,
    [tenant, key, status, result === null ? null : JSON.stringify(result), amountCents],
  );
  if (rows[0]?.before === 'completed' && status !== 'completed') ctx.downgraded += 1;
}

async function lookup(ctx: NaiveContext, tenant: string, key: string): Promise<{ status: string } | null> {
  const { rows } = await ctx.pool.query<{ status: string }>(
    'select status from settle_sim.naive_operations where tenant = $1 and key = $2',
    [tenant, key],
  );
  return rows[0] ?? null;
}

const resultOf = (receipt: PayoutReceipt, amountCents: number) => ({
  payout_id: receipt.payoutId,
  amount_cents: amountCents,
  credited_by_attempt: receipt.creditedByAttempt,
});

/** One naive caller: look up, mark running, pay, write the outcome. `stage` plays a fault. */
async function naiveCall(
  ctx: NaiveContext,
  plan: OperationPlan,
  attempt: number,
  opts: { readonly amountCents?: number; readonly fate?: OperationPlan['fate']; readonly conflicting?: boolean } = {},
): Promise<void> {
  const tenant = `${ctx.tenantPrefix}${plan.tenant}`;
  const amountCents = opts.amountCents ?? plan.amountCents;
  const leaseMs = ctx.config.leaseSeconds * 1000;
  const existing = await lookup(ctx, tenant, plan.key);
  if (existing?.status === 'completed') {
    // Answered with the stored result, whatever the request: a different one is "accepted".
    if (opts.conflicting === true) ctx.accepted += 1;
    return;
  }
  if (opts.conflicting === true) ctx.accepted += 1;
  await upsert(ctx, tenant, plan.key, 'running', null, amountCents);
  const pay = () => ctx.ledger.pay({ tenant, key: plan.key, attempt, amountCents, bindingGeneration: 1 });
  const retry = async (): Promise<void> => {
    await sleep(leaseMs);
    await naiveCall(ctx, plan, attempt + 1);
  };
  switch (opts.fate ?? null) {
    case 'crash-after-claim':
      return retry();
    case 'crash-after-effect':
      await pay();
      return retry();
    case 'lease-expiry': {
      // The slow worker finishes after the retry, and its write lands last.
      await retry();
      const receipt = await pay();
      return upsert(ctx, tenant, plan.key, 'completed', resultOf(receipt, amountCents), amountCents);
    }
    case 'caller-timeout': {
      const receipt = await pay();
      await upsert(ctx, tenant, plan.key, 'unknown', null, amountCents);
      const late = () => upsert(ctx, tenant, plan.key, 'completed', resultOf(receipt, amountCents), amountCents);
      if (plan.variant === 'late-success-first') return late();
      await naiveCall(ctx, plan, attempt + 1);
      return late();
    }
    case 'stale-report': {
      await retry();
      // The stalled worker wakes and writes what it has to say: last write wins.
      if (plan.variant === 'fail') return upsert(ctx, tenant, plan.key, 'failed', null, amountCents);
      if (plan.variant === 'unknown') return upsert(ctx, tenant, plan.key, 'unknown', null, amountCents);
      const receipt = await pay();
      return upsert(ctx, tenant, plan.key, 'completed', resultOf(receipt, amountCents), amountCents);
    }
    case 'provider-outage':
      // The provider stops answering (paid or not) and the lookups time out: the naive code
      // writes unknown, and nothing ever looks at that key again.
      if (plan.variant !== 'not-paid') await pay();
      return upsert(ctx, tenant, plan.key, 'unknown', null, amountCents);
    default: {
      const receipt = await pay();
      return upsert(ctx, tenant, plan.key, 'completed', resultOf(receipt, amountCents), amountCents);
    }
  }
}

async function naiveOperation(ctx: NaiveContext, plan: OperationPlan): Promise<void> {
  const callers = [naiveCall(ctx, plan, 1, { fate: plan.fate })];
  for (let i = 0; i < plan.duplicates; i += 1) callers.push(naiveCall(ctx, plan, 100 + i));
  const probes: (() => Promise<void>)[] = [];
  if (plan.conflictingAmountCents !== null) {
    const amountCents = plan.conflictingAmountCents;
    probes.push(() => naiveCall(ctx, plan, 200, { amountCents, conflicting: true }));
  }
  // Naive code has no notion of a binding: a retry after re-authentication is the same request.
  if (plan.bindingBump) probes.push(() => naiveCall(ctx, plan, 300, { conflicting: true }));
  if (plan.probeTiming === 'racing') callers.push(...probes.map((probe) => probe()));
  await Promise.all(callers);
  if (plan.probeTiming !== 'racing') for (const probe of probes) await probe();
}

/** Runs the plans through the naive settlement, `config.workers` at a time, and counts. */
export async function runNaive(options: {
  readonly pool: pg.Pool;
  readonly ledger: Ledger;
  readonly config: SimulatorConfig;
  readonly plans: readonly OperationPlan[];
  readonly tenantPrefix: string;
}): Promise<NaiveTally> {
  const ctx: NaiveContext = {
    pool: options.pool,
    ledger: options.ledger,
    config: options.config,
    tenantPrefix: options.tenantPrefix,
    downgraded: 0,
    accepted: 0,
  };
  await installSimulatorSql(options.pool, INSTALL_SQL);
  const started = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let plan = options.plans[next++]; plan !== undefined; plan = options.plans[next++])
      await naiveOperation(ctx, plan);
  };
  await Promise.all(Array.from({ length: options.config.workers }, worker));
  const workloadMs = performance.now() - started;

  const { rows } = await options.pool.query<{ double_payouts: number; lost_results: number }>(
    `with credited as (
       select tenant, key, count(*) as n, min(payout_id) as payout_id
         from settle_sim.sim_payouts where starts_with(tenant, $1) and credited group by tenant, key)
     select count(*) filter (where c.n > 1)::int as double_payouts,
            count(*) filter (where n.status is distinct from 'completed' or n.result is null
                               or not exists (select 1 from settle_sim.sim_payouts p
                                               where p.tenant = c.tenant and p.key = c.key and p.credited
                                                 and p.payout_id::text = n.result ->> 'payout_id'))::int as lost_results
       from credited c left join settle_sim.naive_operations n using (tenant, key)`,
    [options.tenantPrefix],
  );
  return {
    operations: options.plans.length,
    doublePayouts: rows[0]?.double_payouts ?? 0,
    downgradedOutcomes: ctx.downgraded,
    lostResults: rows[0]?.lost_results ?? 0,
    conflictingPayloadsAccepted: ctx.accepted,
    workloadMs: Math.round(workloadMs),
  };
}
