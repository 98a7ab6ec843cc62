import fc from 'fast-check';
import { createPool } from 'slonik';
import { describe, expect, it } from 'vitest';
import { SettleRowValidationError } from '../../src/client/errors.js';
import { settleTypeParsers, validateRow } from '../../src/client/interceptors.js';
import { claimQuery, completeQuery } from '../../src/client/queries.js';
import { checkClaimRow, checkObservationRow, type RowCheck } from '../../src/client/row-checks.js';
import { claimRow, observationRow } from '../../src/client/rows.js';
import { asRole, binding, useClientTest, uniqueKey } from './helpers.js';

// The hand-written checks of claim's and complete's rows (src/client/row-checks.ts) sit in front
// of their zod schemas in validateRow: (1) whatever a check accepts, the schema accepts with the
// same value; (2) on the rows the client's own pool produces (plain objects of the schema's
// columns, Date timestamps, number int4s) a check accepts exactly the rows the schema accepts;
// (3) validateRow answers exactly as the schema does, value or typed error, on any row.

type Schema = typeof claimRow | typeof observationRow;

const zodAnswer = (schema: Schema, row: unknown): { ok: true; value: unknown } | { ok: false } => {
  const parsed = schema.safeParse(row);
  return parsed.success ? { ok: true, value: parsed.data } : { ok: false };
};

const answerOf = (run: () => unknown): unknown => {
  try {
    return { value: run() };
  } catch (error) {
    return {
      error: (error as Error).constructor.name,
      message: (error as Error).message,
      issues: (error as SettleRowValidationError).issues,
    };
  }
};

const zodValidateRow = (schema: Schema, row: unknown): unknown => {
  // validateRow without the hand-written check: the schema's answer through the same error path.
  const bare = {
    '~standard': { ...schema['~standard'], validate: (value: unknown) => schema['~standard'].validate(value) },
  };
  return validateRow(bare as typeof schema, row, 'select * from settle.x()');
};

// Values of the types the client's pool produces, valid and invalid for each column.
const int4 = fc.oneof(
  { arbitrary: fc.integer({ min: 0, max: 10 }), weight: 5 },
  fc.constantFrom(null, null, -1, 2 ** 31, 2 ** 53, -(2 ** 53), 1.5, Number.NaN, Infinity, -0),
);
const text = fc.oneof({ arbitrary: fc.string({ maxLength: 8 }), weight: 3 }, fc.constant(null));
const date = fc.oneof(
  { arbitrary: fc.date({ noInvalidDate: true }), weight: 3 },
  fc.constantFrom(null, new Date(Number.NaN)),
);
const bool = fc.constantFrom(true, false, null);
const json = fc.oneof({ arbitrary: fc.jsonValue({ maxDepth: 2 }), weight: 3 }, fc.constant(null));
const conflictOn = fc.oneof(
  fc.constant(null),
  fc.array(fc.constantFrom('request', 'binding'), { maxLength: 2 }),
  fc.constantFrom(['principal'], [1], [, 'request'], 'request'), // eslint-disable-line no-sparse-arrays
);
const word = (words: readonly string[]) =>
  fc.oneof({ arbitrary: fc.constantFrom(...words), weight: 6 }, fc.constantFrom(null, '', 'other', 7));
const STATUS = ['pending', 'running', 'unknown', 'conflict', 'failed', 'completed'];
const DEAD = ['attempts_exhausted', 'needs_reconciliation'];
/** Any column's value of another column's type, now and then. */
const anyType = fc.oneof(int4, text, date, bool, json, conflictOn);
const column = <T>(arbitrary: fc.Arbitrary<T>) => fc.oneof({ arbitrary, weight: 12 }, anyType);

const claimColumns = (outcomes: readonly string[]) => ({
  outcome: word(outcomes),
  status: column(word(STATUS)),
  attempt: column(int4),
  lease_token: column(text),
  // Not a string or number: the schema accepts those (a caller's pool), the client's pool gives Dates.
  lease_expires_at: fc.oneof({ arbitrary: date, weight: 12 }, fc.constantFrom(true, [], {}, ['request'])),
  retry_after_ms: column(int4),
  fingerprint: column(text),
  result: column(json),
  settled_attempt: column(int4),
  error: column(json),
  dead_lettered: column(bool),
  conflict_on: column(conflictOn),
  reason: column(word(['binding_revoked'])),
  dead_letter_reason: column(word(DEAD)),
});
const OBSERVATION_REASONS = [
  'current_attempt',
  'superseded_attempt',
  'final_failure',
  'attempts_exhausted',
  'retryable_failure',
  'outcome_unknown',
  'late_success',
  'attempt_already_observed',
  'superseded',
  'settled',
  'lease_released',
  'lock_mismatch',
  'needs_reconciliation',
  'attempt_conflicted',
];
const observationColumns = (outcomes: readonly string[], reasons: readonly string[]) => ({
  outcome: word(outcomes),
  reason: column(word(reasons)),
  status: column(word(STATUS)),
  attempt: column(int4),
  settled_attempt: column(int4),
  result: column(json),
  error: column(json),
  conflict_on: column(conflictOn),
  dead_lettered: column(bool),
  dead_letter_reason: column(word(DEAD)),
});
// The pool's rows: every column present but the nullish ones, which may be absent.
const poolRow = (columns: Record<string, fc.Arbitrary<unknown>>) =>
  fc.record(columns, {
    requiredKeys: Object.keys(columns).filter((c) => c !== 'dead_letter_reason' && c !== 'dead_lettered'),
  });

const CLAIM_OUTCOMES = ['acquired', 'in_progress', 'replay', 'failed', 'unknown', 'in_doubt'];
const OBSERVATION_OUTCOMES = ['settled', 'recorded', 'duplicate', 'already_settled', 'fenced'];

// Anything: the pool's rows, the disclosing outcomes, extra or missing columns, other timestamp
// and integer shapes (a caller's pool), non-objects and objects of other prototypes.
const oddRow = (columns: Record<string, fc.Arbitrary<unknown>>) =>
  fc.oneof(
    { arbitrary: poolRow(columns), weight: 4 },
    fc.record({ ...columns, extra: fc.anything() }, { requiredKeys: [] }),
    poolRow(columns).map((row) => ({
      ...row,
      ...('lease_expires_at' in row ? { lease_expires_at: '2026-01-02T03:04:05Z' } : {}),
      attempt: '3',
    })),
    poolRow(columns).map((row) => Object.assign(Object.create({ inherited: 1 }) as object, row)),
    poolRow(columns).map((row) => ({ ...row, dead_letter_reason: undefined })),
    fc.constantFrom(null, undefined, [], 'row', 7, new Date(0)),
  );

const cases: readonly {
  name: string;
  schema: Schema;
  check: RowCheck;
  pool: fc.Arbitrary<Record<string, unknown>>;
  odd: fc.Arbitrary<unknown>;
}[] = [
  {
    name: 'claim',
    schema: claimRow,
    check: checkClaimRow,
    pool: poolRow(claimColumns(CLAIM_OUTCOMES)),
    odd: oddRow(claimColumns([...CLAIM_OUTCOMES, 'conflict', 'refused'])),
  },
  {
    name: 'observation',
    schema: observationRow,
    check: checkObservationRow,
    pool: poolRow(observationColumns(OBSERVATION_OUTCOMES, OBSERVATION_REASONS)),
    odd: oddRow(
      observationColumns(
        [...OBSERVATION_OUTCOMES, 'conflict'],
        [...OBSERVATION_REASONS, 'invalid_token', 'binding_revoked'],
      ),
    ),
  },
];

describe.each(cases)('the $name row check', ({ schema, check, pool, odd }) => {
  it('accepts exactly the rows of the client pool that the schema accepts, with the same value', () => {
    let accepted = 0;
    fc.assert(
      fc.property(pool, (row) => {
        const zod = zodAnswer(schema, row);
        const fast = check(row);
        expect(fast !== undefined).toBe(zod.ok);
        if (zod.ok) {
          accepted += 1;
          expect(fast).toEqual(zod.value);
        }
      }),
      { numRuns: 6000 },
    );
    // The generator reaches both sides (a property over rejected rows only would prove little).
    expect(accepted).toBeGreaterThan(100);
  });

  it('never accepts a row the schema refuses, on any row; validateRow answers as the schema does', () => {
    fc.assert(
      fc.property(odd, (row) => {
        const fast = check(row);
        if (fast !== undefined) expect(zodAnswer(schema, row)).toEqual({ ok: true, value: fast });
        expect(answerOf(() => validateRow(schema, row, 'select * from settle.x()'))).toEqual(
          answerOf(() => zodValidateRow(schema, row)),
        );
      }),
      { numRuns: 6000 },
    );
  });
});

const t = useClientTest('client_row_checks');

describe('the row checks on the engine rows', () => {
  it("accept claim's and complete's real rows of a cycle unchanged (the fast path is the one taken)", async () => {
    // A pool with the client's type parsers and no interceptor: the rows as the driver hands them over.
    const pool = await createPool(asRole(t.db.url, 'settle_app'), { typeParsers: settleTypeParsers() });
    try {
      const input = {
        tenant: 'acme',
        key: uniqueKey(),
        request: { amount: '5.00' },
        binding: { ...binding, scopes: [...binding.scopes], generation: 7n },
        leaseMs: 30_000,
        maxAttempts: 5,
      };
      const claimed = (await pool.query(claimQuery(input))).rows[0] as Record<string, unknown>;
      expect(claimed.outcome).toBe('acquired');
      expect(checkClaimRow(claimed)).toBe(claimed);
      const inProgress = (await pool.query(claimQuery(input))).rows[0] as Record<string, unknown>;
      expect(inProgress.outcome).toBe('in_progress');
      expect(checkClaimRow(inProgress)).toBe(inProgress);
      const handle = {
        tenant: input.tenant,
        key: input.key,
        attempt: claimed.attempt as number,
        leaseToken: claimed.lease_token as string,
        fingerprint: claimed.fingerprint as string,
        binding: input.binding,
      };
      const settled = (await pool.query(completeQuery(handle, { charge: 'ch_1' }))).rows[0] as Record<string, unknown>;
      expect(settled).toMatchObject({ outcome: 'settled', status: 'completed' });
      expect(checkObservationRow(settled)).toBe(settled);
      const duplicate = (await pool.query(completeQuery(handle, { charge: 'ch_1' }))).rows[0] as Record<
        string,
        unknown
      >;
      expect(checkObservationRow(duplicate)).toBe(duplicate);
      const replay = (await pool.query(claimQuery(input))).rows[0] as Record<string, unknown>;
      expect(replay).toMatchObject({ outcome: 'replay', result: { charge: 'ch_1' } });
      expect(checkClaimRow(replay)).toBe(replay);
      // A conflict discloses nothing: the schema checks it (the check defers), and accepts it.
      const conflict = (await pool.query(claimQuery({ ...input, request: { amount: '6.00' } }))).rows[0] as Record<
        string,
        unknown
      >;
      expect(conflict.outcome).toBe('conflict');
      expect(checkClaimRow(conflict)).toBeUndefined();
      expect(claimRow.safeParse(conflict).success).toBe(true);
    } finally {
      await pool.end();
    }
  });

  it('a row the schema refuses is a SettleRowValidationError with its issues, through the check', () => {
    const row = { outcome: 'acquired', status: 'running', attempt: 1.5 };
    expect(() => validateRow(claimRow, row, 'select * from settle.claim()')).toThrow(SettleRowValidationError);
    expect(checkClaimRow(row)).toBeUndefined();
  });
});
