import type pg from 'pg';
import type { Binding, ClaimArgs, ClaimRow, ObservationRow, Ticket } from './settle.js';

/** settle.claim_many and settle.complete_many with named arguments, as a DBA would call them. */

export interface ClaimManyArgs extends Binding {
  readonly tenant: string | null;
  readonly keys: readonly (string | null)[] | null;
  readonly requests: readonly unknown[] | null;
  readonly lease?: string;
  readonly worker?: string | null;
  readonly max_attempts?: number;
  readonly rerun_after_unknown?: boolean;
}

export interface ClaimManyRow extends ClaimRow {
  ordinal: number;
  key: string;
  /** refused only: binding_revoked. */
  reason: string | null;
}

export interface CompleteManyRow extends ObservationRow {
  ordinal: number;
  key: string;
}

const json = (value: unknown): string | null => (value === null ? null : JSON.stringify(value));

export async function claimMany(client: pg.ClientBase, args: ClaimManyArgs): Promise<ClaimManyRow[]> {
  const values: unknown[] = [
    args.tenant,
    args.keys,
    args.requests === null ? null : args.requests.map(json),
    args.principal,
    args.scopes ?? [],
    args.binding_generation ?? 0,
    args.lease ?? '30 seconds',
    args.worker ?? null,
    args.max_attempts ?? 5,
    args.rerun_after_unknown ?? true,
  ];
  const { rows } = await client.query<ClaimManyRow>(
    `select r.*, r.result::text as result_text
       from settle.claim_many(tenant => $1::text, keys => $2::text[], requests => $3::jsonb[], principal => $4::text,
                              scopes => $5::text[], binding_generation => $6::bigint, lease => $7::interval,
                              worker => $8::text, max_attempts => $9::integer, rerun_after_unknown => $10::boolean) r`,
    values,
  );
  return rows;
}

export interface CompleteManyArgs extends Binding {
  readonly tenant: string | null;
  readonly keys: readonly (string | null)[] | null;
  readonly attempts: readonly (number | null)[] | null;
  readonly lease_tokens: readonly (string | null)[] | null;
  readonly fingerprints: readonly (string | null)[] | null;
  readonly results: readonly unknown[] | null;
}

export async function completeMany(client: pg.ClientBase, args: CompleteManyArgs): Promise<CompleteManyRow[]> {
  const { rows } = await client.query<CompleteManyRow>(
    `select r.*, r.result::text as result_text
       from settle.complete_many(tenant => $1::text, keys => $2::text[], attempts => $3::integer[],
                                 lease_tokens => $4::uuid[], fingerprints => $5::text[], principal => $6::text,
                                 scopes => $7::text[], binding_generation => $8::bigint, results => $9::jsonb[]) r`,
    [
      args.tenant,
      args.keys,
      args.attempts,
      args.lease_tokens,
      args.fingerprints,
      args.principal,
      args.scopes ?? [],
      args.binding_generation ?? 0,
      args.results === null ? null : args.results.map(json),
    ],
  );
  return rows;
}

/** The claim_many arguments of `ops` (one tenant, one binding: the first op's). */
export function claimManyOf(ops: readonly ClaimArgs[]): ClaimManyArgs {
  const first = ops[0];
  if (first === undefined) throw new Error('claimManyOf: no operation');
  return {
    tenant: first.tenant,
    keys: ops.map((o) => o.key),
    requests: ops.map((o) => o.request),
    principal: first.principal,
    scopes: first.scopes ?? [],
    binding_generation: first.binding_generation ?? 0,
    lease: '30 seconds',
    worker: first.worker ?? null,
  };
}

/** The complete_many arguments of tickets (one tenant, one binding: the first ticket's). */
export function completeManyOf(tickets: readonly Ticket[], results: readonly unknown[]): CompleteManyArgs {
  const first = tickets[0];
  if (first === undefined) throw new Error('completeManyOf: no ticket');
  return {
    tenant: first.tenant,
    keys: tickets.map((t) => t.key),
    attempts: tickets.map((t) => t.attempt),
    lease_tokens: tickets.map((t) => t.lease_token),
    fingerprints: tickets.map((t) => t.fingerprint),
    principal: first.principal,
    scopes: first.scopes ?? [],
    binding_generation: first.binding_generation ?? 0,
    results,
  };
}

/** Tickets of the acquired rows of a claim_many answer (same binding as `args`). */
export function ticketsOf(args: ClaimManyArgs, rows: readonly ClaimManyRow[]): Ticket[] {
  return rows.flatMap((row) =>
    row.outcome === 'acquired' && row.attempt !== null && row.lease_token !== null && row.fingerprint !== null
      ? [
          {
            tenant: args.tenant as string,
            key: row.key,
            attempt: row.attempt,
            lease_token: row.lease_token,
            fingerprint: row.fingerprint,
            principal: args.principal,
            scopes: args.scopes ?? [],
            binding_generation: args.binding_generation ?? 0,
          },
        ]
      : [],
  );
}
