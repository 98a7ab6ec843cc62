import type pg from 'pg';
import { callNamed } from './api.js';

/** Thin wrappers over the settle API with named arguments, as a DBA would call them. */

export interface Binding {
  readonly principal: string | null;
  readonly scopes?: readonly (string | null)[] | null;
  readonly binding_generation?: number | null;
}

export interface ClaimArgs extends Binding {
  readonly tenant: string | null;
  readonly key: string | null;
  readonly request: unknown;
  readonly lease?: string | null;
  readonly worker?: string | null;
  readonly max_attempts?: number | null;
  readonly rerun_after_unknown?: boolean | null;
}

export interface ClaimRow {
  outcome: 'acquired' | 'in_progress' | 'replay' | 'failed' | 'unknown' | 'in_doubt' | 'conflict' | 'refused';
  status: string | null;
  attempt: number | null;
  lease_token: string | null;
  lease_expires_at: Date | null;
  retry_after_ms: number | null;
  fingerprint: string | null;
  result: unknown;
  result_text: string | null;
  settled_attempt: number | null;
  error: unknown;
  dead_lettered: boolean | null;
  conflict_on: string[] | null;
  dead_letter_reason: string | null;
}

/** What an observation re-presents: the acquired attempt, its token and the reservation lock. */
export interface Ticket extends Binding {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly lease_token: string;
  readonly fingerprint: string;
}

/** The operation-state columns an observation and settle.get both answer (NULL when nothing is disclosed). */
export interface StateColumns {
  reason: string | null;
  status: string | null;
  attempt: number | null;
  settled_attempt: number | null;
  result: unknown;
  result_text: string | null;
  error: unknown;
  conflict_on: string[] | null;
  dead_lettered: boolean | null;
}

export interface ObservationRow extends StateColumns {
  outcome: 'settled' | 'recorded' | 'duplicate' | 'already_settled' | 'fenced' | 'conflict';
  dead_letter_reason: string | null;
}

export interface HeartbeatRow {
  outcome: 'extended' | 'fenced';
  reason: string | null;
  status: string | null;
  lease_expires_at: Date | null;
}

const WITH_RESULT_TEXT = 'r.*, r.result::text as result_text';

export function claim(client: pg.ClientBase, args: ClaimArgs): Promise<ClaimRow> {
  return callNamed(client, 'claim', { ...args }, WITH_RESULT_TEXT);
}

/** Claims and insists on `acquired`; returns the ticket for observations. */
export async function acquire(client: pg.ClientBase, args: ClaimArgs): Promise<Ticket> {
  const row = await claim(client, args);
  if (row.outcome !== 'acquired' || row.attempt === null || row.lease_token === null || row.fingerprint === null) {
    throw new Error(`expected claim to acquire ${args.key}, got ${JSON.stringify(row)}`);
  }
  return ticketOf(args, row);
}

export function ticketOf(args: ClaimArgs, row: ClaimRow): Ticket {
  if (
    args.tenant === null ||
    args.key === null ||
    row.attempt === null ||
    row.lease_token === null ||
    row.fingerprint === null
  ) {
    throw new Error(`not an acquired claim: ${JSON.stringify(row)}`);
  }
  return {
    tenant: args.tenant,
    key: args.key,
    attempt: row.attempt,
    lease_token: row.lease_token,
    fingerprint: row.fingerprint,
    principal: args.principal,
    scopes: args.scopes ?? [],
    binding_generation: args.binding_generation ?? 0,
  };
}

export function complete(client: pg.ClientBase, ticket: Ticket, result: unknown): Promise<ObservationRow> {
  return callNamed(client, 'complete', { ...ticket, result }, WITH_RESULT_TEXT);
}

export function fail(
  client: pg.ClientBase,
  ticket: Ticket,
  error: unknown,
  retryable?: boolean,
): Promise<ObservationRow> {
  return callNamed(client, 'fail', { ...ticket, error, retryable }, WITH_RESULT_TEXT);
}

export function reportUnknown(client: pg.ClientBase, ticket: Ticket): Promise<ObservationRow> {
  return callNamed(client, 'report_unknown', { ...ticket }, WITH_RESULT_TEXT);
}

export function heartbeat(client: pg.ClientBase, ticket: Ticket, lease?: string): Promise<HeartbeatRow> {
  const { tenant, key, attempt, lease_token } = ticket;
  return callNamed(client, 'heartbeat', { tenant, key, attempt, lease_token, lease });
}

export interface RedriveArgs {
  readonly tenant: string;
  readonly key: string;
  readonly additional_attempts?: number;
  readonly request?: unknown;
  readonly reason?: string;
}

/** settle.redrive: the re-opened row of settle.operations. */
export function redrive(client: pg.ClientBase, args: RedriveArgs): Promise<Record<string, unknown>> {
  return callNamed(client, 'redrive', { ...args });
}

export async function expireLeases(client: pg.ClientBase): Promise<{ expired: number; dead_lettered: number }> {
  const { rows } = await client.query<{ expired: number; dead_lettered: number }>(
    'select * from settle.expire_leases(batch_size => 1000)',
  );
  const row = rows[0];
  if (row === undefined) throw new Error('settle.expire_leases returned no row');
  return row;
}

export interface GetRow extends StateColumns {
  outcome: 'found' | 'not_found' | 'conflict' | 'refused';
  in_flight: boolean | null;
  created_at: Date | null;
}

/** settle.get: the lock-gated read (tenant, key, request and binding of the reservation). */
export function get(client: pg.ClientBase, args: ClaimArgs): Promise<GetRow> {
  const { tenant, key, request, principal, scopes, binding_generation } = args;
  return callNamed(client, 'get', { tenant, key, request, principal, scopes, binding_generation }, WITH_RESULT_TEXT);
}
