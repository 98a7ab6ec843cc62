import type pg from 'pg';

/** Superuser reads of the private tables, to check what the engine stored. */

export interface StoredOperation {
  tenant: string;
  key: string;
  fingerprint: string;
  principal: string;
  scopes: string[];
  binding_generation: string;
  status: string;
  attempt: number;
  max_attempts: number;
  lease_token: string | null;
  lease_expires_at: Date | null;
  result: unknown;
  result_text: string | null;
  settled_attempt: number | null;
  error: unknown;
  dead_lettered_at: Date | null;
  dead_letter_reason: string | null;
  redrive_count: number;
  /** The whole row as JSON text, for before/after comparisons. */
  row_text: string;
}

export async function storedOperation(
  admin: pg.ClientBase,
  tenant: string,
  key: string,
): Promise<StoredOperation | undefined> {
  const { rows } = await admin.query<StoredOperation>(
    `select o.*, o.result::text as result_text, to_jsonb(o)::text as row_text
       from settle_private.operations o where o.tenant = $1 and o.key = $2`,
    [tenant, key],
  );
  return rows[0];
}

export async function mustGetOperation(admin: pg.ClientBase, tenant: string, key: string): Promise<StoredOperation> {
  const row = await storedOperation(admin, tenant, key);
  if (row === undefined) throw new Error(`no operation ${tenant}/${key}`);
  return row;
}

export interface StoredAttempt {
  attempt: number;
  observation: string | null;
  settled: boolean;
  end_reason: string | null;
  retryable: boolean | null;
  error: unknown;
  late_result: unknown;
}

export async function storedAttempts(admin: pg.ClientBase, tenant: string, key: string): Promise<StoredAttempt[]> {
  const { rows } = await admin.query<StoredAttempt>(
    `select attempt, observation::text, settled, end_reason, retryable, error, late_result
       from settle.attempts where tenant = $1 and key = $2 order by attempt`,
    [tenant, key],
  );
  return rows;
}

export interface AuditRow {
  event: string;
  outcome: string;
  attempt: number | null;
  status_before: string | null;
  status_after: string | null;
  detail: Record<string, unknown> | null;
}

/** The trail as settle.audit_log shows it: audit rows and the events logged on attempt rows. */
export async function auditTrail(admin: pg.ClientBase, tenant: string, key: string): Promise<AuditRow[]> {
  const { rows } = await admin.query<AuditRow>(
    `select event, outcome, attempt, status_before::text, status_after::text, detail
       from settle.audit_log where tenant = $1 and key = $2 order by seq, audit_id`,
    [tenant, key],
  );
  return rows;
}

/** Rows of settle_private.operations, optionally for one tenant. */
export async function countOperations(admin: pg.ClientBase, tenant?: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    'select count(*)::int as n from settle_private.operations where $1::text is null or tenant = $1',
    [tenant ?? null],
  );
  return rows[0]?.n ?? 0;
}
