import { z } from 'zod';
import { errorClasses, type InputIssue, SettleInputError, type SettleSqlstate } from './errors.js';
import { findJsonProblem, jsonbTextLength } from './json.js';
import type { Json } from './types.js';

// ---------------------------------------------------------------------------------------------
// Inputs: the engine's limits, checked before any round trip. The database's own checks remain
// the authority: the limits are written once, in settle_private._limits()
// (sql/migrations/00003_input_rules.sql), and test/engine/limits.test.ts holds LIMITS to them.
// ---------------------------------------------------------------------------------------------

/** Input limits the client checks before a round trip (the same as the engine's; docs/sql-api.md). */
export const LIMITS = {
  tenantBytes: 64,
  keyBytes: 255,
  principalBytes: 255,
  scopeBytes: 128,
  maxScopes: 64,
  workerBytes: 128,
  reasonBytes: 1024,
  requestBytes: 65_536,
  resultBytes: 1_048_576,
  errorBytes: 65_536,
  minLeaseMs: 1_000,
  maxLeaseMs: 86_400_000,
  maxAttempts: 1_000,
  maxBatchSize: 100_000,
  /** Keys of one batch call (claimMany, completeMany, runMany). */
  maxBatchKeys: 1_000,
  /** The JSON text of one batch call's requests (claimMany), or results (completeMany), together. */
  maxBatchBytes: 16_777_216,
  /** What the audit log keeps of a refused or fenced payload; larger ones: size and SHA-256. */
  evidenceBytes: 8_192,
  /** Refused, fenced or conflicting audit rows one key keeps in full; the rest are counted (settle.audit_overflow). */
  refusalRows: 20,
} as const;

const INT8_MAX = 2n ** 63n - 1n;
const CONTROL_CHARACTER = /\p{Cc}/u;
// The same set as settle_private._is_blank: white space and invisible formatting characters.
const BLANK = /^[\s\u180e\u200b-\u200d\u2060]*$/u;

// Printable ASCII: one byte per character, no control characters, already NFC.
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
// The same set as settle_private._lookalike_spaces: spaces other than U+0020 and U+2800 BRAILLE
// PATTERN BLANK, refused anywhere in a name.
const LOOKALIKE_SPACE = /[\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u2800\u3000]/u;
const EDGE_SPACE = /^\s|\s$/u;

/** Mirrors settle_private._check_name: present, not blank, <= maxBytes UTF-8, no controls, no white space at either end, no look-alike space, NFC. */
export function nameSchema(field: string, maxBytes: number) {
  return z.string({ error: `${field} must be a string` }).superRefine((value, ctx) => {
    const problem = nameProblem(value, maxBytes);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: `${field} ${problem}` });
  });
}

function nameProblem(value: string, maxBytes: number): string | null {
  if (PRINTABLE_ASCII.test(value)) {
    // The same verdicts as below, without encoding or normalizing: blank means spaces only.
    if (value.trim() === '') return 'must not be empty or whitespace only';
    if (value.length > maxBytes) return `must be at most ${maxBytes} bytes of UTF-8 (got ${value.length})`;
    return value.startsWith(' ') || value.endsWith(' ') ? 'must not begin or end with white space' : null;
  }
  const bytes = Buffer.byteLength(value, 'utf8');
  return BLANK.test(value)
    ? 'must not be empty or whitespace only'
    : bytes > maxBytes
      ? `must be at most ${maxBytes} bytes of UTF-8 (got ${bytes})`
      : CONTROL_CHARACTER.test(value)
        ? 'must not contain control characters'
        : EDGE_SPACE.test(value)
          ? 'must not begin or end with white space'
          : LOOKALIKE_SPACE.test(value)
            ? 'must not contain a space other than U+0020 or a blank pattern'
            : value.normalize('NFC') !== value
              ? 'must be in Unicode normalization form NFC (use value.normalize("NFC"))'
              : null;
}

/** A finite, plain JSON value whose jsonb text is at most maxBytes (the engine's measure). */
export function jsonSchema(field: string, maxBytes: number) {
  return z.custom<Json>().superRefine((value, ctx) => {
    const problem = findJsonProblem(value);
    if (problem !== null) {
      ctx.addIssue({ code: 'custom', message: `${field}: ${problem.message}`, path: problem.path });
      return;
    }
    const bytes = jsonbTextLength(value);
    if (bytes > maxBytes) {
      ctx.addIssue({
        code: 'custom',
        message: `${field} must be at most ${maxBytes} bytes of JSON text (got ${bytes})`,
      });
    }
  });
}

const intInRange = (field: string, min: number, max: number) =>
  z
    .number({ error: `${field} must be a number` })
    .int(`${field} must be an integer`)
    .min(min, `${field} must be at least ${min}`)
    .max(max, `${field} must be at most ${max}`);

export const tenantSchema = nameSchema('tenant', LIMITS.tenantBytes);
export const keySchema = nameSchema('key', LIMITS.keyBytes);

export const generationSchema = z
  .union([z.number().int().nonnegative().refine(Number.isSafeInteger), z.bigint().nonnegative().max(INT8_MAX)], {
    error: 'generation must be a non-negative safe integer or a bigint below 2^63',
  })
  .transform((value) => BigInt(value));

export const bindingSchema = z.object({
  principal: nameSchema('principal', LIMITS.principalBytes),
  scopes: z
    .array(nameSchema('scope', LIMITS.scopeBytes))
    .max(LIMITS.maxScopes, `at most ${LIMITS.maxScopes} scopes`)
    .default([]),
  generation: generationSchema,
});

export const leaseMsSchema = intInRange('leaseMs', LIMITS.minLeaseMs, LIMITS.maxLeaseMs);

export const claimInputSchema = z.object({
  tenant: tenantSchema,
  key: keySchema,
  request: jsonSchema('request', LIMITS.requestBytes),
  binding: bindingSchema,
  leaseMs: leaseMsSchema.default(30_000),
  worker: nameSchema('worker', LIMITS.workerBytes).optional(),
  maxAttempts: intInRange('maxAttempts', 1, LIMITS.maxAttempts).default(5),
  rerunAfterUnknown: z.boolean({ error: 'rerunAfterUnknown must be a boolean' }).default(true),
});

export type ParsedClaimInput = z.output<typeof claimInputSchema>;

/**
 * claimInputSchema's answer, with the common input checked by hand first (the schema's own
 * checks: nameProblem, the JSON checks, the ranges, the defaults): zod's object, union and
 * refinement machinery cost more than the checks themselves, on every claim of every run().
 * Whatever the hand check does not accept goes to the schema, which answers as before (the
 * same value, or the same typed error with every issue).
 */
export function parseClaimInput(input: unknown): ParsedClaimInput {
  return claimInputFast(input) ?? parseInput(claimInputSchema, input);
}

/** resultSchema's answer, the same way: the JSON checks by hand, the schema for the errors. */
export function parseResult(result: unknown): Json {
  return isJson(result, LIMITS.resultBytes) ? result : parseInput(resultSchema, result, ['result']);
}

function claimInputFast(input: unknown): ParsedClaimInput | null {
  if (!isRecord(input)) return null;
  const { tenant, key, request, binding, leaseMs = 30_000, worker, maxAttempts = 5, rerunAfterUnknown = true } = input;
  if (!isName(tenant, LIMITS.tenantBytes) || !isName(key, LIMITS.keyBytes) || !isJson(request, LIMITS.requestBytes))
    return null;
  if (!isIntIn(leaseMs, LIMITS.minLeaseMs, LIMITS.maxLeaseMs) || !isIntIn(maxAttempts, 1, LIMITS.maxAttempts))
    return null;
  if (worker !== undefined && !isName(worker, LIMITS.workerBytes)) return null;
  if (typeof rerunAfterUnknown !== 'boolean') return null;
  const parsedBinding = bindingFast(binding);
  if (parsedBinding === null) return null;
  return {
    tenant,
    key,
    request,
    binding: parsedBinding,
    leaseMs,
    ...(worker === undefined ? {} : { worker }),
    maxAttempts,
    rerunAfterUnknown,
  };
}

function bindingFast(binding: unknown): z.output<typeof bindingSchema> | null {
  if (!isRecord(binding)) return null;
  const { principal, scopes = [], generation } = binding;
  if (!isName(principal, LIMITS.principalBytes) || !Array.isArray(scopes) || scopes.length > LIMITS.maxScopes)
    return null;
  for (let i = 0; i < scopes.length; i += 1) if (!isName(scopes[i], LIMITS.scopeBytes)) return null;
  const valid =
    typeof generation === 'number'
      ? Number.isSafeInteger(generation) && generation >= 0
      : typeof generation === 'bigint' && generation >= 0n && generation <= INT8_MAX;
  if (!valid) return null;
  // A copy of scopes, as the schema makes: the client freezes the handle's binding it issues.
  return { principal, scopes: scopes.slice() as string[], generation: BigInt(generation as number | bigint) };
}

// The schemas' checks, as predicates (z.object refuses null and arrays; z.number NaN and infinities).
const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const isName = (value: unknown, maxBytes: number): value is string =>
  typeof value === 'string' && nameProblem(value, maxBytes) === null;
const isJson = (value: unknown, maxBytes: number): value is Json =>
  findJsonProblem(value) === null && jsonbTextLength(value as Json) <= maxBytes;
const isIntIn = (value: unknown, min: number, max: number): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;

export const refSchema = z.object({ tenant: tenantSchema, key: keySchema });

export const getInputSchema = z.object({
  tenant: tenantSchema,
  key: keySchema,
  request: jsonSchema('request', LIMITS.requestBytes),
  binding: bindingSchema,
});

export const handleSchema = z.object({
  tenant: tenantSchema,
  key: keySchema,
  attempt: intInRange('attempt', 1, 2_147_483_647),
  leaseToken: z.uuid('leaseToken must be the UUID returned by claim'),
  fingerprint: z.string().regex(/^v[0-9]+:[0-9a-f]{64}$/, 'fingerprint must be the value returned by claim'),
  binding: bindingSchema,
});

export const resultSchema = jsonSchema('result', LIMITS.resultBytes);
export const failureSchema = z.object({
  error: jsonSchema('error', LIMITS.errorBytes),
  retryable: z.boolean({ error: 'retryable must be true or false' }),
});

export const batchSizeSchema = intInRange('batchSize', 1, LIMITS.maxBatchSize);

export const redriveInputSchema = z.object({
  tenant: tenantSchema,
  key: keySchema,
  additionalAttempts: intInRange('additionalAttempts', 1, LIMITS.maxAttempts).default(1),
  request: jsonSchema('request', LIMITS.requestBytes).optional(),
  reason: z
    .string()
    .refine(
      (value) => Buffer.byteLength(value, 'utf8') <= LIMITS.reasonBytes,
      `reason must be at most ${LIMITS.reasonBytes} bytes`,
    )
    .optional(),
});

export const purgeInputSchema = z.object({
  olderThanMs: z.number().int().nonnegative('olderThanMs must be >= 0').refine(Number.isSafeInteger),
  batchSize: batchSizeSchema.default(1000),
});

export const limitSchema = intInRange('limit', 1, 10_000);

/** Which SQLSTATE the engine would raise for a problem at this input path. */
function sqlstateFor(path: readonly PropertyKey[]): SettleSqlstate {
  switch (path[0]) {
    case 'tenant':
      return 'SE001';
    case 'key':
      return 'SE002';
    case 'binding':
      return 'SE003';
    case 'request':
    case 'fingerprint':
      return 'SE004';
    case 'result':
      return 'SE005';
    case 'error':
    case 'retryable':
      return 'SE006';
    case 'leaseMs':
      return 'SE007';
    default:
      return 'SE008';
  }
}

/**
 * Parses `value` with `schema` or throws the SettleInputError subclass the engine would have
 * raised for the first problem (InvalidTenantError for a bad tenant, ...), with every zod issue.
 * `prefix` places the value in the caller's input (e.g. ['result']) for paths and codes.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, prefix: PropertyKey[] = []): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issues: InputIssue[] = parsed.error.issues.map((issue) => ({
    path: [...prefix, ...issue.path],
    message: issue.message,
  }));
  const first = issues[0] ?? { path: prefix, message: 'invalid input' };
  const sqlstate = sqlstateFor(first.path);
  const ErrorClass = errorClasses[sqlstate] as unknown as typeof SettleInputError;
  const where = first.path.length > 0 ? `${first.path.map(String).join('.')}: ` : '';
  return throwInput(new ErrorClass(`invalid input: ${where}${first.message}`, { code: sqlstate, issues }));
}

function throwInput(error: SettleInputError): never {
  throw error;
}
