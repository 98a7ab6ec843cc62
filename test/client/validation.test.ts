import { sql } from 'slonik';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  type AttemptHandle,
  type ClaimInput,
  InvalidArgumentError,
  InvalidBindingError,
  InvalidFailureError,
  InvalidKeyError,
  InvalidLeaseError,
  InvalidRequestError,
  InvalidResultError,
  InvalidTenantError,
  type Json,
  jsonbTextLength,
  LIMITS,
  mapDatabaseError,
  SettleInputError,
} from '../../src/index.js';
import { binding, useClientTest, tableCounts, uniqueKey } from './helpers.js';

const t = useClientTest('client_validation');

const good: ClaimInput = { tenant: 'acme', key: 'k-1', request: { a: 1 }, binding };
const circular: Record<string, unknown> = {};
circular.self = circular;

type Case = readonly [label: string, input: unknown, errorClass: typeof SettleInputError];

const claimCases: Case[] = [
  ['empty tenant', { ...good, tenant: '' }, InvalidTenantError],
  ['blank tenant', { ...good, tenant: '  \t' }, InvalidTenantError],
  ['tenant of 65 bytes', { ...good, tenant: 'é'.repeat(32) + 'x' }, InvalidTenantError],
  ['non-string tenant', { ...good, tenant: 42 }, InvalidTenantError],
  ['empty key', { ...good, key: '' }, InvalidKeyError],
  ['key of 256 bytes', { ...good, key: 'k'.repeat(256) }, InvalidKeyError],
  ['key with a control character', { ...good, key: 'a\nb' }, InvalidKeyError],
  ['key not in NFC', { ...good, key: 'cafe\u0301' }, InvalidKeyError],
  ['empty principal', { ...good, binding: { ...binding, principal: '' } }, InvalidBindingError],
  ['principal of 256 bytes', { ...good, binding: { ...binding, principal: 'p'.repeat(256) } }, InvalidBindingError],
  [
    '65 scopes',
    { ...good, binding: { ...binding, scopes: Array.from({ length: 65 }, (_, i) => `s${i}`) } },
    InvalidBindingError,
  ],
  ['scope of 129 bytes', { ...good, binding: { ...binding, scopes: ['s'.repeat(129)] } }, InvalidBindingError],
  ['empty scope', { ...good, binding: { ...binding, scopes: [''] } }, InvalidBindingError],
  ['negative generation', { ...good, binding: { ...binding, generation: -1 } }, InvalidBindingError],
  ['fractional generation', { ...good, binding: { ...binding, generation: 1.5 } }, InvalidBindingError],
  ['unsafe integer generation', { ...good, binding: { ...binding, generation: 2 ** 53 } }, InvalidBindingError],
  ['generation above int8', { ...good, binding: { ...binding, generation: 2n ** 63n } }, InvalidBindingError],
  ['NaN in request', { ...good, request: { amount: Number.NaN } }, InvalidRequestError],
  ['Infinity in request', { ...good, request: [Number.POSITIVE_INFINITY] }, InvalidRequestError],
  ['undefined in request', { ...good, request: { a: undefined } }, InvalidRequestError],
  ['undefined request', { ...good, request: undefined }, InvalidRequestError],
  ['function in request', { ...good, request: { f: () => 1 } }, InvalidRequestError],
  ['bigint in request', { ...good, request: { n: 1n } }, InvalidRequestError],
  ['Date in request', { ...good, request: { at: new Date(0) } }, InvalidRequestError],
  ['circular request', { ...good, request: circular }, InvalidRequestError],
  ['U+0000 in request', { ...good, request: 'a\u0000b' }, InvalidRequestError],
  ['lone surrogate in request', { ...good, request: '\uD800' }, InvalidRequestError],
  ['request over 64 KiB', { ...good, request: 'x'.repeat(LIMITS.requestBytes) }, InvalidRequestError],
  ['lease under 1 s', { ...good, leaseMs: 999 }, InvalidLeaseError],
  ['lease over 1 day', { ...good, leaseMs: 86_400_001 }, InvalidLeaseError],
  ['worker of 129 bytes', { ...good, worker: 'w'.repeat(129) }, InvalidArgumentError],
  ['maxAttempts 0', { ...good, maxAttempts: 0 }, InvalidArgumentError],
  ['maxAttempts 1001', { ...good, maxAttempts: 1001 }, InvalidArgumentError],
];

describe('claim() input validation', () => {
  it.each(claimCases)('%s -> %o is refused before any round trip', async (_label, bad, errorClass) => {
    const before = await tableCounts(t.su);
    const error = await t.app.claim(bad as ClaimInput).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(errorClass);
    expect(error).toBeInstanceOf(SettleInputError);
    expect((error as SettleInputError).sqlstate).toBeNull();
    expect((error as SettleInputError).issues.length).toBeGreaterThan(0);
    expect(await tableCounts(t.su)).toEqual(before);
  });

  it('accepts the limits themselves, and the client measures JSON size as jsonb text like the engine', async () => {
    const tenant = 't'.repeat(LIMITS.tenantBytes);
    const key = 'é'.repeat(127) + 'k'; // 255 bytes
    // Exactly 65536 bytes of jsonb text: '"' + 65534 chars + '"'.
    const request = 'x'.repeat(LIMITS.requestBytes - 2);
    expect(jsonbTextLength(request)).toBe(LIMITS.requestBytes);
    const outcome = await t.app.claim({
      tenant,
      key,
      request,
      binding: { principal: 'p'.repeat(255), generation: 2n ** 63n - 1n },
    });
    expect(outcome.outcome).toBe('acquired');
  });

  it('agrees with PostgreSQL on the jsonb text length of awkward values', async () => {
    const values: Json[] = [
      { b: [1, 2.5, -0, 1e21, 1.5e-7, 'é"\\\n'], a: { z: null, y: true, x: false } },
      [],
      {},
      'plain',
      0.1,
    ];
    for (const value of values) {
      const { rows } = await t.su.query<{ n: number }>('select octet_length($1::jsonb::text) as n', [
        JSON.stringify(value),
      ]);
      expect(jsonbTextLength(value), JSON.stringify(value)).toBe(rows[0]?.n);
    }
  });
});

describe('settle calls validate handles and payloads', () => {
  let handle: AttemptHandle;
  beforeAll(async () => {
    const outcome = await t.app.claim({ ...good, key: uniqueKey() });
    if (outcome.outcome !== 'acquired') throw new Error('expected acquired');
    handle = outcome.attempt;
  });

  it.each([
    ['result with NaN', () => t.app.complete(handle, { n: Number.NaN }), InvalidResultError],
    ['result over 1 MiB', () => t.app.complete(handle, 'x'.repeat(LIMITS.resultBytes)), InvalidResultError],
    ['error with undefined', () => t.app.fail(handle, { e: undefined } as never), InvalidFailureError],
    ['error over 64 KiB', () => t.app.fail(handle, 'x'.repeat(LIMITS.errorBytes)), InvalidFailureError],
    ['retryable not boolean', () => t.app.fail(handle, {}, { retryable: 'yes' as never }), InvalidFailureError],
    ['handle without lease token', () => t.app.complete({ ...handle, leaseToken: 'nope' }, 1), InvalidArgumentError],
    ['handle with attempt 0', () => t.app.reportUnknown({ ...handle, attempt: 0 }), InvalidArgumentError],
    [
      'handle with forged fingerprint format',
      () => t.app.complete({ ...handle, fingerprint: 'abc' }, 1),
      InvalidRequestError,
    ],
    ['heartbeat lease too short', () => t.app.heartbeat(handle, { leaseMs: 10 }), InvalidLeaseError],
    ['get with a blank key', () => t.app.get({ tenant: 'acme', key: ' ', request: {}, binding }), InvalidKeyError],
    ['expireLeases batch 0', () => t.admin.expireLeases({ batchSize: 0 }), InvalidArgumentError],
    ['purge negative age', () => t.admin.purge({ olderThanMs: -1 }), InvalidArgumentError],
    [
      'redrive 0 attempts',
      () => t.admin.redrive({ tenant: 'acme', key: 'k', additionalAttempts: 0 }),
      InvalidArgumentError,
    ],
  ] as const)('%s', async (_label, call, errorClass) => {
    const before = await tableCounts(t.su);
    await expect(call()).rejects.toBeInstanceOf(errorClass);
    expect(await tableCounts(t.su)).toEqual(before);
  });

  it('the handle claim issued is frozen: the client uses it as built, an edited copy is validated again', () => {
    expect(Object.isFrozen(handle)).toBe(true);
    expect(Object.isFrozen(handle.binding)).toBe(true);
    expect(Object.isFrozen(handle.binding.scopes)).toBe(true);
    expect(() => {
      (handle as { leaseToken: string }).leaseToken = 'nope';
    }).toThrow(TypeError);
  });
});

describe('the database stays the authority', () => {
  it.each([
    [
      'SE001',
      sql.unsafe`select settle.claim(tenant => '', key => 'k', request => '{}', principal => 'p')`,
      InvalidTenantError,
    ],
    [
      'SE002',
      sql.unsafe`select settle.claim(tenant => 't', key => E'a\\tb', request => '{}', principal => 'p')`,
      InvalidKeyError,
    ],
    [
      'SE003',
      sql.unsafe`select settle.claim(tenant => 't', key => 'k', request => '{}', principal => 'p', binding_generation => -1)`,
      InvalidBindingError,
    ],
    [
      'SE004',
      sql.unsafe`select settle.claim(tenant => 't', key => 'k', request => null, principal => 'p')`,
      InvalidRequestError,
    ],
    [
      'SE007',
      sql.unsafe`select settle.claim(tenant => 't', key => 'k', request => '{}', principal => 'p', lease => '1 ms')`,
      InvalidLeaseError,
    ],
    [
      'SE008',
      sql.unsafe`select settle.claim(tenant => 't', key => 'k', request => '{}', principal => 'p', max_attempts => 0)`,
      InvalidArgumentError,
    ],
  ] as const)('%s raised by the engine maps to the same class family', async (code, query, errorClass) => {
    const pool = await t.app.getPool();
    const error = mapDatabaseError(await pool.query(query).catch((e: unknown) => e));
    expect(error).toBeInstanceOf(errorClass);
    expect(error).toMatchObject({
      code,
      sqlstate: code,
      detail: expect.objectContaining({ field: expect.any(String) }),
    });
  });
});
