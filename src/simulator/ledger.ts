import type pg from 'pg';
import type { PayoutRow } from './history.js';

/**
 * The simulated downstream: a payout ledger in its own schema (settle_sim), one row per attempt
 * that ran the effect, keyed by (tenant, key, attempt). It stands for a payment provider that
 * honours an idempotency key, as Stripe does: settle_sim.pay() credits at most one payout per
 * (tenant, key) and answers a repeated request with the payout it already made.
 *
 * `idempotent: false` (flag --unsafe-downstream) turns that off, so every attempt that runs the
 * effect is credited: a demonstration that the checker catches a double payout.
 */
export const LEDGER_SCHEMA = 'settle_sim';

const INSTALL_SQL = `
create schema if not exists settle_sim;
create table if not exists settle_sim.sim_payouts (
  tenant text not null,
  key text not null,
  attempt integer not null,
  payout_id bigint generated always as identity,
  amount_cents bigint not null,
  binding_generation bigint not null,
  credited boolean not null,
  duplicate_of bigint,
  created_at timestamptz not null default clock_timestamp(),
  constraint sim_payouts_pkey primary key (tenant, key, attempt),
  constraint credited_or_duplicate check (credited = (duplicate_of is null))
);
comment on table settle_sim.sim_payouts is
  'pg-settle simulator: the external effect (payouts), one row per attempt that ran it; credited marks the one that moved money.';
create or replace function settle_sim.pay(
  tenant text, key text, attempt integer, amount_cents bigint, binding_generation bigint, idempotent boolean)
returns table (payout_id bigint, credited boolean, credited_by_attempt integer)
language plpgsql
as $$
declare
  v_existing settle_sim.sim_payouts;
begin
  -- The idempotency key of the downstream is (tenant, key): serialize payments per key.
  perform pg_advisory_xact_lock(hashtextextended(pay.tenant || '/' || pay.key, 5115));
  if pay.idempotent then
    select * into v_existing from settle_sim.sim_payouts p
     where p.tenant = pay.tenant and p.key = pay.key and p.credited;
  end if;
  if v_existing.payout_id is null then
    return query
      insert into settle_sim.sim_payouts as p (tenant, key, attempt, amount_cents, binding_generation, credited)
      values (pay.tenant, pay.key, pay.attempt, pay.amount_cents, pay.binding_generation, true)
      returning p.payout_id, true, p.attempt;
  else
    insert into settle_sim.sim_payouts (tenant, key, attempt, amount_cents, binding_generation, credited, duplicate_of)
    values (pay.tenant, pay.key, pay.attempt, pay.amount_cents, pay.binding_generation, false, v_existing.payout_id);
    return query select v_existing.payout_id, false, v_existing.attempt;
  end if;
end
$$;
`;

export interface PayoutRequest {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly amountCents: number;
  readonly bindingGeneration: number;
}

export interface PayoutReceipt {
  /** The payout that moved the money for this (tenant, key): this attempt's or an earlier one. */
  readonly payoutId: string;
  /** Whether this call moved money (false: the downstream answered with an earlier payout). */
  readonly credited: boolean;
  readonly creditedByAttempt: number;
}

export interface Ledger {
  install(): Promise<void>;
  pay(request: PayoutRequest): Promise<PayoutReceipt>;
  /** The payout that moved money under (tenant, key), if any: what a reconcile asks the provider. */
  find(tenant: string, key: string): Promise<PayoutReceipt | null>;
  /** The payout that moved money under (tenant, key) with its amount: what the reconciler asks the provider. */
  lookup(
    tenant: string,
    key: string,
  ): Promise<{ readonly payoutId: string; readonly amountCents: number; readonly creditedByAttempt: number } | null>;
  /** Every payout row of tenants starting with `tenantPrefix`. */
  readBack(tenantPrefix: string): Promise<PayoutRow[]>;
}

/**
 * Runs the simulator's own DDL (settle_sim tables and functions) in one transaction under an
 * advisory lock: concurrent installs (parallel test files) would race on CREATE ... IF NOT EXISTS.
 */
export async function installSimulatorSql(pool: pg.Pool, ddl: string): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('select pg_advisory_xact_lock(5115)');
    await client.query(ddl);
    await client.query('commit');
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

export function createLedger(pool: pg.Pool, options: { readonly idempotent: boolean }): Ledger {
  return {
    install: () => installSimulatorSql(pool, INSTALL_SQL),

    async pay(request) {
      const { rows } = await pool.query<{ payout_id: string; credited: boolean; credited_by_attempt: number }>(
        'select payout_id::text, credited, credited_by_attempt from settle_sim.pay($1, $2, $3, $4, $5, $6)',
        [
          request.tenant,
          request.key,
          request.attempt,
          request.amountCents,
          request.bindingGeneration,
          options.idempotent,
        ],
      );
      const [row] = rows;
      if (row === undefined) throw new Error('settle_sim.pay returned no row');
      return { payoutId: row.payout_id, credited: row.credited, creditedByAttempt: row.credited_by_attempt };
    },

    async find(tenant, key) {
      const { rows } = await pool.query<{ payout_id: string; attempt: number }>(
        `select payout_id::text, attempt from settle_sim.sim_payouts
          where tenant = $1 and key = $2 and credited order by payout_id limit 1`,
        [tenant, key],
      );
      const [row] = rows;
      return row === undefined ? null : { payoutId: row.payout_id, credited: true, creditedByAttempt: row.attempt };
    },
    async lookup(tenant, key) {
      const { rows } = await pool.query<{ payout_id: string; attempt: number; amount_cents: string }>(
        `select payout_id::text, attempt, amount_cents::text from settle_sim.sim_payouts
          where tenant = $1 and key = $2 and credited order by payout_id limit 1`,
        [tenant, key],
      );
      const [row] = rows;
      return row === undefined
        ? null
        : { payoutId: row.payout_id, amountCents: Number(row.amount_cents), creditedByAttempt: row.attempt };
    },
    async readBack(tenantPrefix) {
      const { rows } = await pool.query<{
        tenant: string;
        key: string;
        attempt: number;
        payout_id: string;
        amount_cents: string;
        binding_generation: string;
        credited: boolean;
      }>(
        `select tenant, key, attempt, payout_id::text, amount_cents::text, binding_generation::text, credited
           from settle_sim.sim_payouts where starts_with(tenant, $1) order by payout_id`,
        [tenantPrefix],
      );
      return rows.map((row) => ({
        tenant: row.tenant,
        key: row.key,
        attempt: row.attempt,
        payoutId: row.payout_id,
        amountCents: Number(row.amount_cents),
        bindingGeneration: Number(row.binding_generation),
        credited: row.credited,
      }));
    },
  };
}
