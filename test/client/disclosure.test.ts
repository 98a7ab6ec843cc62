import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateRow } from '../../src/client/interceptors.js';
import { claimRow, heartbeatRow, observationRow } from '../../src/client/rows.js';
import { SettleRowValidationError } from '../../src/index.js';
import { binding, type ClientTestContext, setupClientTest, uniqueKey } from './helpers.js';

// A conflict or an invalid token discloses nothing: the engine answers NULL in every other
// column. The client refuses a row that carries more, instead of silently dropping it.

const nulls = {
  status: null,
  attempt: null,
  lease_token: null,
  lease_expires_at: null,
  retry_after_ms: null,
  fingerprint: null,
  result: null,
  settled_attempt: null,
  error: null,
  dead_lettered: null,
  conflict_on: null,
  reason: null,
};
const observationNulls = {
  reason: null,
  status: null,
  attempt: null,
  settled_attempt: null,
  result: null,
  error: null,
  conflict_on: null,
};

function refusal(schema: Parameters<typeof validateRow>[0], row: Record<string, unknown>): SettleRowValidationError {
  try {
    validateRow(schema, row, 'select * from settle.crafted()');
  } catch (error) {
    if (error instanceof SettleRowValidationError) return error;
    throw error;
  }
  throw new Error(`row was accepted: ${JSON.stringify(row)}`);
}

describe('row parser: conflict and invalid_token disclose nothing', () => {
  it('a claim conflict that also carries a result, a status or an attempt is refused', () => {
    const conflict = { ...nulls, outcome: 'conflict', conflict_on: ['request'] };
    expect(validateRow(claimRow, conflict, 'x')).toEqual(conflict);
    for (const [column, value] of [
      ['result', { secret: 1 }],
      ['status', 'completed'],
      ['attempt', 3],
      ['settled_attempt', 2],
      ['error', 'boom'],
    ] as const) {
      const error = refusal(claimRow, { ...conflict, [column]: value });
      expect(error.issues).toEqual([
        { path: [column], message: 'must be NULL with outcome conflict (nothing is disclosed)' },
      ]);
    }
  });

  it('an observation conflict must say lock_mismatch and nothing else', () => {
    const conflict = { ...observationNulls, outcome: 'conflict', reason: 'lock_mismatch', conflict_on: ['binding'] };
    expect(validateRow(observationRow, conflict, 'x')).toEqual(conflict);
    expect(refusal(observationRow, { ...conflict, result: 'the stored result' }).issues[0]?.path).toEqual(['result']);
    expect(
      refusal(observationRow, { ...conflict, status: 'completed', settled_attempt: 1 }).issues.map((i) => i.path),
    ).toEqual([['status'], ['settled_attempt']]);
    expect(refusal(observationRow, { ...conflict, reason: 'current_attempt' }).issues[0]?.path).toEqual(['reason']);
  });

  it('an observation fenced with invalid_token carries no state', () => {
    const fenced = { ...observationNulls, outcome: 'fenced', reason: 'invalid_token' };
    expect(validateRow(observationRow, fenced, 'x')).toEqual(fenced);
    expect(refusal(observationRow, { ...fenced, status: 'running', attempt: 1 }).issues.map((i) => i.path)).toEqual([
      ['status'],
      ['attempt'],
    ]);
    // Other fenced reasons do report the canonical state.
    expect(() =>
      validateRow(observationRow, { ...fenced, reason: 'superseded', status: 'running', attempt: 2 }, 'x'),
    ).not.toThrow();
  });

  it('a heartbeat fenced with invalid_token carries no status or lease', () => {
    const fenced = { outcome: 'fenced', reason: 'invalid_token', status: null, lease_expires_at: null };
    expect(validateRow(heartbeatRow, fenced, 'x')).toEqual(fenced);
    expect(refusal(heartbeatRow, { ...fenced, status: 'running' }).issues[0]?.path).toEqual(['status']);
    expect(refusal(heartbeatRow, { ...fenced, lease_expires_at: new Date() }).issues[0]?.path).toEqual([
      'lease_expires_at',
    ]);
  });
});

describe('engine answers of conflict and invalid_token pass the stricter rows', () => {
  let t: ClientTestContext;
  beforeAll(async () => {
    t = await setupClientTest('client_disclosure');
  });
  afterAll(async () => {
    await t?.close();
  });

  it('claim conflict, complete conflict, complete and heartbeat with a forged token', async () => {
    const key = uniqueKey();
    const claimed = await t.app.claim({ tenant: 'acme', key, request: { amount: 1 }, binding });
    if (claimed.outcome !== 'acquired') throw new Error('expected acquired');

    expect(await t.app.claim({ tenant: 'acme', key, request: { amount: 2 }, binding })).toEqual({
      outcome: 'conflict',
      conflictOn: ['request'],
    });
    const forged = { ...claimed.attempt, leaseToken: '00000000-0000-4000-8000-000000000000' };
    expect(await t.app.heartbeat(forged)).toEqual({ outcome: 'fenced', reason: 'invalid_token', status: null });
    expect(await t.app.complete(forged, 'x')).toEqual({ outcome: 'fenced', reason: 'invalid_token' });
    const otherBinding = { ...claimed.attempt, binding: { ...binding, generation: 8n } };
    expect(await t.app.complete(otherBinding, 'x')).toEqual({
      outcome: 'conflict',
      reason: 'lock_mismatch',
      conflictOn: ['binding'],
    });
  });

  it('the raw rows of a settled operation answered with conflict and invalid_token are all NULL but the contract columns', async () => {
    const key = uniqueKey();
    const claimed = await t.app.claim({ tenant: 'acme', key, request: { amount: 1 }, binding });
    if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
    expect(await t.app.complete(claimed.attempt, { paid: true })).toMatchObject({ outcome: 'settled' });

    // After settlement there is a result to leak: read the engine's rows as they are.
    const conflict = await t.su.query(
      `select * from settle.claim(tenant => 'acme', key => $1, request => '{"amount": 2}', principal => 'alice',
                                  scopes => array['payments:write'], binding_generation => 7)`,
      [key],
    );
    expect(() => validateRow(claimRow, conflict.rows[0], 'claim')).not.toThrow();
    expect(conflict.rows[0]).toMatchObject({ outcome: 'conflict', result: null, status: null });

    const invalid = await t.su.query(
      `select * from settle.complete(tenant => 'acme', key => $1, attempt => 1, lease_token => gen_random_uuid(),
                                     fingerprint => $2, principal => 'alice', scopes => array['payments:write'],
                                     binding_generation => 7, result => '1')`,
      [key, claimed.attempt.fingerprint],
    );
    expect(() => validateRow(observationRow, invalid.rows[0], 'complete')).not.toThrow();
    expect(invalid.rows[0]).toMatchObject({ outcome: 'fenced', reason: 'invalid_token', result: null });
  });
});
