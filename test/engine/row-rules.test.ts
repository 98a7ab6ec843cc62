import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { mustGetOperation } from './support/inspect.js';
import { acquire, reportUnknown, type Ticket } from './support/settle.js';

// The row rules of settle_private.operations and settle_private.attempts (checked by the guard
// triggers _100_guard_*, 00004) hold for a superuser writing directly, like the CHECK constraints
// they replace: SQLSTATE 23514, the rule's name as the constraint, nothing written.
const db = useEngineDatabase('row_rules');

interface RuleError {
  readonly code?: string;
  readonly constraint?: string;
  readonly table?: string;
  readonly schema?: string;
  readonly message?: string;
}

async function errorOf(promise: Promise<unknown>): Promise<RuleError> {
  try {
    await promise;
  } catch (error) {
    return error as RuleError;
  }
  throw new Error('expected the statement to be refused, but it succeeded');
}

/** A running operation (attempt 1 of max_attempts 5, leased) and a superuser connection. */
async function runningOperation(prefix: string): Promise<{ admin: pg.Client; ticket: Ticket }> {
  const [app, admin] = await Promise.all([db.app(), db.connect()]);
  const ticket = await acquire(app, newOperation(prefix, { max_attempts: 5 }));
  return { admin, ticket };
}

/** A valid new pending operation row; `columns` override the values (SQL expressions). */
function insertOperation(key: string, columns: Record<string, string> = {}): string {
  const values: Record<string, string> = {
    tenant: `'acme'`,
    key: `'${key}'`,
    fingerprint: `'v1:' || repeat('a', 64)`,
    request: `'{}'`,
    principal: `'dba'`,
    scopes: `'{}'`,
    binding_generation: '0',
    status: `'pending'`,
    attempt: '1',
    attempt_token: 'gen_random_uuid()',
    claimed_at: 'now()',
    max_attempts: '5',
    created_at: 'now()',
    updated_at: 'now()',
    ...columns,
  };
  return `insert into settle_private.operations (${Object.keys(values).join(', ')}) values (${Object.values(values).join(', ')})`;
}

/** A record of attempt 2 of `ticket`'s operation (which is at attempt 1); `columns` override the values. */
function insertAttempt(ticket: Ticket, columns: Record<string, string> = {}): string {
  const values: Record<string, string> = {
    tenant: `'${ticket.tenant}'`,
    key: `'${ticket.key}'`,
    attempt: '2',
    lease_token: 'gen_random_uuid()',
    claimed_at: 'now()',
    ...columns,
  };
  return `insert into settle_private.attempts (${Object.keys(values).join(', ')}) values (${Object.values(values).join(', ')})`;
}

const WHERE = 'where tenant = $1 and key = $2';

describe('row rules of settle_private.operations', () => {
  it('a valid row passes (the control of the cases below)', async () => {
    const admin = await db.connect();
    const key = uniqueKey('rule-control');
    await admin.query(insertOperation(key));
    expect(await mustGetOperation(admin, 'acme', key)).toMatchObject({ status: 'pending' });
  });

  const inserts: readonly { rule: string; columns: Record<string, string> }[] = [
    { rule: 'tenant_length_in_range', columns: { tenant: `''` } },
    { rule: 'key_length_in_range', columns: { key: `repeat('k', 256)` } },
    { rule: 'principal_length_in_range', columns: { principal: `repeat('p', 256)` } },
    { rule: 'fingerprint_is_versioned', columns: { fingerprint: `'v2:' || repeat('a', 64)` } },
    { rule: 'binding_generation_not_negative', columns: { binding_generation: '-1' } },
    { rule: 'attempt_within_budget', columns: { attempt: '6' } },
    // attempt 1 (the first epoch) within a budget of at least 1: a budget of 0 breaks this rule.
    { rule: 'attempt_within_budget', columns: { max_attempts: '0' } },
    { rule: 'lease_token_iff_lease_expiry', columns: { status: `'running'`, lease_token: 'gen_random_uuid()' } },
    {
      rule: 'pending_is_unleased',
      columns: {
        attempt_token: `'00000000-0000-4000-8000-000000000001'`,
        lease_token: `'00000000-0000-4000-8000-000000000001'`,
        lease_expires_at: `now() + interval '1 minute'`,
      },
    },
    { rule: 'running_is_leased', columns: { status: `'running'` } },
    {
      rule: 'lease_is_the_current_attempts',
      columns: {
        status: `'running'`,
        lease_token: 'gen_random_uuid()',
        lease_expires_at: `now() + interval '1 minute'`,
      },
    },
    { rule: 'claim_log_complete', columns: { claim_seq: '7' } },
  ];
  for (const { rule, columns } of inserts) {
    it(`INSERT breaking ${rule} fails with 23514 naming it`, async () => {
      const admin = await db.connect();
      const key = uniqueKey('rule-insert');
      const error = await errorOf(admin.query(insertOperation(key, columns)));
      expect(error).toMatchObject({
        code: '23514',
        constraint: rule,
        schema: 'settle_private',
        table: 'operations',
        message: `new row for relation "operations" violates check constraint "${rule}"`,
      });
      const { rows } = await admin.query('select 1 from settle_private.operations where tenant = $1 and key = $2', [
        'acme',
        key,
      ]);
      expect(rows).toEqual([]);
    });
  }

  const updates: readonly { rule: string; set: string }[] = [
    { rule: 'attempt_within_budget', set: 'max_attempts = 0' },
    { rule: 'lease_token_iff_lease_expiry', set: 'lease_expires_at = null' },
    { rule: 'running_is_leased', set: 'lease_token = null, lease_expires_at = null' },
    { rule: 'lease_is_the_current_attempts', set: 'lease_token = gen_random_uuid()' },
    { rule: 'terminal_is_unleased', set: `status = 'failed', error = '{}'` },
    { rule: 'failed_has_error', set: `status = 'failed', lease_token = null, lease_expires_at = null` },
    { rule: 'dead_letter_has_reason', set: 'dead_lettered_at = now()' },
    { rule: 'dead_letter_is_unleased', set: `dead_lettered_at = now(), dead_letter_reason = 'needs_reconciliation'` },
    {
      rule: 'dead_letter_reason_fits_status',
      set: `status = 'pending', lease_token = null, lease_expires_at = null, dead_lettered_at = now(), dead_letter_reason = 'needs_reconciliation'`,
    },
    {
      rule: 'completed_has_result',
      set: `status = 'completed', lease_token = null, lease_expires_at = null, settled_attempt = 1, settled_at = now()`,
    },
    {
      rule: 'completed_has_settlement',
      set: `status = 'completed', lease_token = null, lease_expires_at = null, result = '{}'`,
    },
    {
      rule: 'settled_attempt_was_opened',
      set: `status = 'completed', lease_token = null, lease_expires_at = null, result = '{}', settled_attempt = 3, settled_at = now()`,
    },
    {
      rule: 'settlement_is_logged',
      set: `status = 'completed', lease_token = null, lease_expires_at = null, result = '{}', settled_attempt = 1, settled_at = now()`,
    },
  ];
  for (const { rule, set } of updates) {
    it(`UPDATE breaking ${rule} fails with 23514 naming it and changes nothing`, async () => {
      const { admin, ticket } = await runningOperation('rule-update');
      const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
      const error = await errorOf(
        admin.query(`update settle_private.operations set ${set} ${WHERE}`, [ticket.tenant, ticket.key]),
      );
      expect(error).toMatchObject({ code: '23514', constraint: rule, table: 'operations' });
      expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
    });
  }

  it('the guards answer first where both would refuse (a negative redrive count is a move back: SE021)', async () => {
    const { admin, ticket } = await runningOperation('rule-guard-first');
    const error = await errorOf(
      admin.query(`update settle_private.operations set redrive_count = -1 ${WHERE}`, [ticket.tenant, ticket.key]),
    );
    expect(error.code).toBe('SE021');
    expect(
      (await errorOf(admin.query(insertOperation(uniqueKey('rule-guard-first'), { redrive_count: '-1' })))).code,
    ).toBe('SE021');
  });
});

describe('row rules of settle_private.attempts', () => {
  const inserts: readonly { rule: string; columns: Record<string, string> }[] = [
    { rule: 'attempt_is_positive', columns: { attempt: '0' } },
    { rule: 'observation_is_an_outcome', columns: { observation: `'running'`, observed_at: 'now()' } },
    { rule: 'observed_iff_observation', columns: { observation: `'unknown'` } },
    { rule: 'end_reason_iff_ended', columns: { ended_at: 'now()' } },
    { rule: 'end_reason_is_known', columns: { ended_at: 'now()', end_reason: `'bored'` } },
    { rule: 'failure_has_error', columns: { observation: `'failed'`, observed_at: 'now()', retryable: 'true' } },
    {
      rule: 'late_result_only_with_completion',
      columns: { observation: `'unknown'`, observed_at: 'now()', late_result: `'{}'` },
    },
    { rule: 'claim_log_complete', columns: { claim_seq: '7' } },
    { rule: 'claim_log_complete', columns: { claim_seq: '7', claim_audit_id: '7' } },
  ];
  for (const { rule, columns } of inserts) {
    it(`INSERT breaking ${rule} fails with 23514 naming it`, async () => {
      const { admin, ticket } = await runningOperation('rule-attempt');
      const error = await errorOf(admin.query(insertAttempt(ticket, columns)));
      expect(error).toMatchObject({ code: '23514', constraint: rule, schema: 'settle_private', table: 'attempts' });
      // The running attempt has no record yet (00002): nothing was written.
      const { rows } = await admin.query<{ n: number }>(
        `select count(*)::int as n from settle_private.attempts ${WHERE}`,
        [ticket.tenant, ticket.key],
      );
      expect(rows[0]?.n).toBe(0);
    });
  }

  it('an UPDATE is held to them too, also under session_replication_role = replica', async () => {
    const { admin, ticket } = await runningOperation('rule-attempt-update');
    const args = [ticket.tenant, ticket.key];
    // The attempt reports unknown: its record is written, ended and observed.
    expect((await reportUnknown(await db.app(), ticket)).outcome).toBe('recorded');
    expect(
      await errorOf(admin.query(`update settle_private.attempts set observation = 'failed' ${WHERE}`, args)),
    ).toMatchObject({
      code: '23514',
      constraint: 'failure_has_error',
    });
    await admin.query('set session_replication_role = replica');
    expect(
      await errorOf(admin.query(`update settle_private.attempts set late_result = '{}' ${WHERE}`, args)),
    ).toMatchObject({
      code: '23514',
      constraint: 'late_result_only_with_completion',
    });
    expect(
      await errorOf(admin.query(`update settle_private.operations set lease_expires_at = now() ${WHERE}`, args)),
    ).toMatchObject({
      code: '23514',
      constraint: 'lease_token_iff_lease_expiry',
    });
  });
});
