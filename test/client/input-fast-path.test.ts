import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { findJsonProblem, jsonbTextLength } from '../../src/client/json.js';
import { claimInputSchema, parseClaimInput, parseInput, parseResult, resultSchema } from '../../src/client/schemas.js';

// parseClaimInput and parseResult check the common input by hand before falling back to the
// zod schema: they must answer exactly as the schema does, value or typed error.

const outcome = (parse: () => unknown): unknown => {
  try {
    return { value: parse() };
  } catch (error) {
    return { error: (error as Error).constructor.name, message: (error as Error).message };
  }
};

// Mostly valid values, so that each field's edge cases are met with every other field valid.
const name = fc.oneof(
  { arbitrary: fc.constantFrom('acme', 'k-1', 'payments.write'), weight: 6 },
  fc.constantFrom('', '  ', 'a\nb', 'cafe\u0301', 'é'.repeat(40), 'p'.repeat(256), 'w'.repeat(200), '\u200b'),
  fc.string({ maxLength: 80 }),
);
const json = fc.oneof(
  { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 6 },
  fc.constantFrom(undefined, Number.NaN, 1e21, 'a\u0000b', '\ud800', new Date(0), [1, , 3], 10n),
);
const int = fc.oneof(
  { arbitrary: fc.constantFrom(undefined, 1000, 30_000, 5), weight: 6 },
  fc.integer({ min: -10, max: 90_000_000 }),
  fc.constantFrom(0, 1, 999, 1001, 86_400_000, 86_400_001),
  fc.constantFrom(0.5, Number.NaN, Infinity, '5', null),
);
const binding = fc.oneof(
  fc.record(
    {
      principal: name,
      scopes: fc.oneof(
        { arbitrary: fc.array(name, { maxLength: 3 }), weight: 4 },
        fc.array(name, { maxLength: 3 }),
        fc.constantFrom(
          undefined,
          'x',
          [1],
          Array.from({ length: 65 }, () => 's'),
        ),
      ),
      generation: fc.oneof(
        { arbitrary: fc.nat(), weight: 3 },
        fc.bigInt({ min: -1n, max: 2n ** 64n }),
        fc.constantFrom(-1, 1.5, Number.MAX_SAFE_INTEGER + 2, '0', undefined),
      ),
    },
    { requiredKeys: ['principal', 'generation'] },
  ),
  fc.constantFrom(null, [], 'binding'),
);
const claimInput = fc.oneof(
  {
    weight: 9,
    arbitrary: fc.record(
      {
        tenant: name,
        key: name,
        request: json,
        binding,
        leaseMs: int,
        worker: fc.oneof(name, fc.constant(null)),
        maxAttempts: int,
        rerunAfterUnknown: fc.oneof({ arbitrary: fc.boolean(), weight: 4 }, fc.constantFrom(null, 'false', 0)),
        extra: fc.anything(),
      },
      { requiredKeys: ['tenant', 'key', 'request', 'binding'] },
    ),
  },
  fc.constantFrom(null, [], 'input', 7),
);

describe('input fast paths', () => {
  it('parseClaimInput answers as claimInputSchema does', () => {
    fc.assert(
      fc.property(claimInput, (input) => {
        expect(outcome(() => parseClaimInput(input))).toEqual(outcome(() => parseInput(claimInputSchema, input)));
      }),
      { numRuns: 5000 },
    );
  });

  it('parseResult answers as resultSchema does', () => {
    fc.assert(
      fc.property(json, (result) => {
        expect(outcome(() => parseResult(result))).toEqual(outcome(() => parseInput(resultSchema, result, ['result'])));
      }),
      { numRuns: 2000 },
    );
  });

  it('strings: the printable-ASCII shortcut measures and checks as JSON.stringify and the general checks do', () => {
    const text = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary' }),
      fc.constantFrom('a"b', 'a\\b', 'a\u0000', '\u007f', '\ud800x', 'é'),
    );
    fc.assert(
      fc.property(text, (value) => {
        if (findJsonProblem(value) === null)
          expect(jsonbTextLength(value)).toBe(Buffer.byteLength(JSON.stringify(value)));
        const loneSurrogate = /[\ud800-\udfff]/.test(value.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ''));
        expect(findJsonProblem(value) === null).toBe(!value.includes('\u0000') && !loneSurrogate);
      }),
      { numRuns: 3000 },
    );
  });

  it('the parsed binding is a copy: freezing the issued handle leaves the caller scopes alone', () => {
    const scopes = ['payments.write'];
    const parsed = parseClaimInput({
      tenant: 'acme',
      key: 'k',
      request: {},
      binding: { principal: 'p', scopes, generation: 0 },
    });
    expect(parsed.binding.scopes).not.toBe(scopes);
    expect(parsed.binding.scopes).toEqual(scopes);
  });
});
