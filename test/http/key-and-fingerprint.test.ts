// Pure parts of the core, property-tested: the Idempotency-Key parser against the RFC 8941
// serializer, and the fingerprint's independence from JSON key order.
import fc from 'fast-check';
import { serializeItem, Token } from 'structured-headers';
import { describe, expect, it } from 'vitest';
import { canonicalJson, defaultFingerprint, type RequestView } from '../../src/http/core/fingerprint.js';
import { parseIdempotencyKey } from '../../src/http/core/key.js';

const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  minLength: 1,
  maxLength: 255,
});

describe('parseIdempotencyKey', () => {
  it('reads back every sf-string the RFC 8941 serializer writes (1-255 printable ASCII, not blank), strict or not', () => {
    fc.assert(
      fc.property(
        printable.filter((s) => s.trim() !== ''),
        fc.boolean(),
        (key, strict) => {
          expect(parseIdempotencyKey(serializeItem(key), { strict })).toEqual({ kind: 'ok', key, form: 'sf-string' });
        },
      ),
    );
  });

  it('accepts a bare token unless strict, and the same key quoted or bare is the same key', () => {
    const tchar = fc.constantFrom(..."abcXYZ0189-._~!#$%&'*+^`|:/".split(''));
    fc.assert(
      fc.property(
        fc.array(tchar, { minLength: 1, maxLength: 64 }).map((a) => a.join('')),
        (key) => {
          expect(parseIdempotencyKey(key)).toMatchObject({ kind: 'ok', key });
          expect(parseIdempotencyKey(key, { strict: true }).kind).toBe('malformed');
        },
      ),
    );
    expect(parseIdempotencyKey(serializeItem(new Token('tok')))).toMatchObject({
      kind: 'ok',
      key: 'tok',
      form: 'token',
    });
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324')).toMatchObject({ kind: 'ok', form: 'token' });
  });

  it('refuses what is not one key: missing, blank, too long, several field lines, non-ASCII, inner whitespace', () => {
    expect(parseIdempotencyKey(undefined)).toEqual({ kind: 'missing' });
    for (const raw of [
      '',
      '   ',
      '""',
      '"   "',
      `"${'k'.repeat(256)}"`,
      '"a", "b"',
      'a b',
      '"unterminated',
      '"caf\u00e9"',
      'caf\u00e9',
    ]) {
      expect(parseIdempotencyKey(raw).kind, JSON.stringify(raw)).toBe('malformed');
    }
    expect(parseIdempotencyKey(['"a"', '"b"']).kind).toBe('malformed');
    expect(parseIdempotencyKey('"abc"', { maxLength: 2 }).kind).toBe('malformed');
  });
});

describe('fingerprint', () => {
  const view = (body: unknown): RequestView => ({
    method: 'POST',
    url: '/orders',
    route: '/orders',
    headers: { 'x-a': '1' },
    body,
    hasBody: true,
  });

  it('does not depend on the order of JSON object keys, and does depend on every value', () => {
    const json = fc.jsonValue({ maxDepth: 3 });
    const shuffleKeys = (value: unknown, seed: number): unknown => {
      if (Array.isArray(value)) return value.map((v, i) => shuffleKeys(v, seed + i));
      if (value === null || typeof value !== 'object') return value;
      // Rotate the insertion order by the seed (JS keeps insertion order for non-integer keys).
      const entries = Object.entries(value);
      const cut = entries.length === 0 ? 0 : Math.abs(seed) % entries.length;
      entries.push(...entries.splice(0, cut));
      return Object.fromEntries(entries.map(([k, v]) => [k, shuffleKeys(v, seed + 1)]));
    };
    fc.assert(
      fc.property(json, fc.integer(), (value, seed) => {
        expect(canonicalJson(shuffleKeys(value, seed))).toBe(canonicalJson(value));
        expect(defaultFingerprint(view(shuffleKeys(value, seed)), [])).toEqual(defaultFingerprint(view(value), []));
      }),
    );
    expect(defaultFingerprint(view({ a: 1 }), [])).not.toEqual(defaultFingerprint(view({ a: 2 }), []));
  });

  it('covers the concrete path and query string by default; fingerprintTarget narrows it to the path or the route pattern', () => {
    const at = (url: string): RequestView => ({ ...view({ amount: 1 }), url, route: '/accounts/:id/payouts' });
    const a = at('/accounts/acct_A/payouts?currency=EUR');
    for (const other of [
      '/accounts/acct_B/payouts?currency=EUR',
      '/accounts/acct_A/payouts?currency=USD',
      '/accounts/acct_A/payouts',
    ]) {
      expect(defaultFingerprint(at(other), []), other).not.toEqual(defaultFingerprint(a, []));
    }
    expect(defaultFingerprint(at('/accounts/acct_A/payouts?currency=USD'), [], 'path')).toEqual(
      defaultFingerprint(a, [], 'path'),
    );
    expect(defaultFingerprint(at('/accounts/acct_B/payouts'), [], 'path')).not.toEqual(
      defaultFingerprint(a, [], 'path'),
    );
    expect(defaultFingerprint(at('/accounts/acct_B/payouts?currency=USD'), [], 'route')).toEqual(
      defaultFingerprint(a, [], 'route'),
    );
  });

  it('covers method, target, raw bytes and the selected headers', () => {
    const base = defaultFingerprint(view(Buffer.from('abc')), ['x-a']);
    expect(defaultFingerprint({ ...view(Buffer.from('abc')), method: 'PATCH' }, ['x-a'])).not.toEqual(base);
    expect(defaultFingerprint({ ...view(Buffer.from('abc')), url: '/other' }, ['x-a'])).not.toEqual(base);
    expect(defaultFingerprint(view(Buffer.from('abd')), ['x-a'])).not.toEqual(base);
    expect(defaultFingerprint({ ...view(Buffer.from('abc')), headers: { 'x-a': '2' } }, ['x-a'])).not.toEqual(base);
    expect(defaultFingerprint({ ...view(Buffer.from('abc')), headers: { 'x-a': '2' } }, [])).toEqual(
      defaultFingerprint(view(Buffer.from('abc')), []),
    );
  });
});
