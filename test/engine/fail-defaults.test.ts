import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';

// settle.fail takes claim's defaults for the binding (scopes '{}', binding_generation 0), so a
// caller that claimed without them reports a failure without them. error defaults
// to {} only because PostgreSQL wants every parameter after a defaulted one to have a default.
// Through a settle_app login, as a deployment calls it.
const db = useEngineDatabase('fail_defaults');

describe('settle.fail defaults', () => {
  it('claim and fail with named arguments, neither naming scopes nor binding_generation', async () => {
    const app = await db.app();
    const claim = await app.query<{ outcome: string; attempt: number; lease_token: string; fingerprint: string }>(
      `select outcome, attempt, lease_token, fingerprint from settle.claim(tenant => 'acme', key => 'fail-defaults',
         request => '{"amount": 1}', principal => 'svc')`,
    );
    const claimed = claim.rows[0];
    expect(claimed?.outcome).toBe('acquired');
    const failed = await app.query<{ outcome: string; reason: string; status: string }>(
      `select outcome, reason, status from settle.fail(tenant => 'acme', key => 'fail-defaults', attempt => $1,
         lease_token => $2, fingerprint => $3, principal => 'svc', error => '{"code": "declined"}', retryable => false)`,
      [claimed?.attempt, claimed?.lease_token, claimed?.fingerprint],
    );
    expect(failed.rows[0]).toEqual({ outcome: 'settled', reason: 'final_failure', status: 'failed' });

    const second = await app.query<{ outcome: string; attempt: number; lease_token: string; fingerprint: string }>(
      `select outcome, attempt, lease_token, fingerprint from settle.claim(tenant => 'acme', key => 'fail-bare',
         request => '{}', principal => 'svc')`,
    );
    const bare = await app.query<{ outcome: string; reason: string }>(
      `select outcome, reason from settle.fail(tenant => 'acme', key => 'fail-bare', attempt => $1, lease_token => $2,
         fingerprint => $3, principal => 'svc')`,
      [second.rows[0]?.attempt, second.rows[0]?.lease_token, second.rows[0]?.fingerprint],
    );
    expect(bare.rows[0]).toEqual({ outcome: 'recorded', reason: 'retryable_failure' });
    const stored = await (await db.connect()).query<{ error: unknown }>(
      `select error from settle.attempts where tenant = 'acme' and key = 'fail-bare' and attempt = 1`,
    );
    expect(stored.rows[0]?.error).toEqual({});
  });

  it('a binding presented at claim must still be presented to fail (the defaults are no wildcard)', async () => {
    const app = await db.app();
    const claim = await app.query<{ attempt: number; lease_token: string; fingerprint: string }>(
      `select attempt, lease_token, fingerprint from settle.claim(tenant => 'acme', key => 'fail-bound',
         request => '{}', principal => 'svc', scopes => '{payments:write}', binding_generation => 7)`,
    );
    const c = claim.rows[0];
    const omitted = await app.query<{ outcome: string }>(
      `select outcome from settle.fail(tenant => 'acme', key => 'fail-bound', attempt => $1, lease_token => $2,
         fingerprint => $3, principal => 'svc', error => '{}')`,
      [c?.attempt, c?.lease_token, c?.fingerprint],
    );
    expect(omitted.rows[0]?.outcome).toBe('conflict');
  });
});
