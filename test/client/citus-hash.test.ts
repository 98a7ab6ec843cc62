import { describe, expect, it } from 'vitest';
import { postgresHashText } from '../../src/client/citus-hash.js';
import { useClientTest } from './helpers.js';

// postgresHashText must answer what the server's hashtext() answers, for every tail length of
// hash_bytes (0..11 bytes after the 12-byte blocks) and for multi-byte UTF-8: one query hashes
// every generated string on a real PostgreSQL and the two columns must be equal.

const t = useClientTest('client_citus_hash');

/** mulberry32: a fixed-seed PRNG, so every run hashes the same strings. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let x = Math.imul(state ^ (state >>> 15), 1 | state);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** Code points of every UTF-8 length: 1 byte (no NUL: text holds none), 2, 3 (no surrogates), 4. */
const RANGES: readonly (readonly [number, number])[] = [
  [0x01, 0x7f],
  [0x80, 0x7ff],
  [0x800, 0xd7ff],
  [0xe000, 0xffff],
  [0x10000, 0x10ffff],
];

function generatedStrings(): string[] {
  const random = prng(20240601);
  const pick = (n: number): number => Math.floor(random() * n);
  const strings: string[] = [''];
  const ascii = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/:.~ {}"\\,';
  // ASCII of every length 0..40: every tail case, after 0 to 3 whole 12-byte blocks, 10 times over.
  for (let round = 0; round < 10; round += 1) {
    for (let length = 0; length <= 40; length += 1) {
      strings.push(Array.from({ length }, () => ascii[pick(ascii.length)]).join(''));
    }
  }
  while (strings.length < 2000) {
    const length = 1 + pick(200);
    const chars: string[] = [];
    for (let i = 0; i < length; i += 1) {
      const [low, high] = RANGES[pick(RANGES.length)]!;
      chars.push(String.fromCodePoint(low + pick(high - low + 1)));
    }
    strings.push(chars.join(''));
  }
  return strings;
}

describe('postgresHashText', () => {
  it('answers what hashtext() answers on the server, for 2000 strings', async () => {
    const { rows: encoding } = await t.su.query<{ server_encoding: string }>('show server_encoding');
    expect(encoding[0]?.server_encoding).toBe('UTF8');

    const strings = generatedStrings();
    const { rows } = await t.su.query<{ h: number }>(
      `select hashtext(x) as h from unnest($1::text[]) with ordinality as v(x, n) order by n`,
      [strings],
    );
    expect(rows).toHaveLength(strings.length);
    const mismatches = strings
      .map((s, i) => ({ s, server: rows[i]?.h, client: postgresHashText(s) }))
      .filter(({ server, client }) => server !== client);
    expect(mismatches.slice(0, 5)).toEqual([]);
  });

  it('knows a few values observed from PostgreSQL 15.18 (x86_64)', () => {
    // select hashtext(''), hashtext('acme/k1'), hashtext('päyment-€-𝄞-0123456789');
    expect(postgresHashText('')).toBe(-1477818771);
    expect(postgresHashText('acme/k1')).toBe(1295244624);
    expect(postgresHashText('päyment-€-𝄞-0123456789')).toBe(-1895936145);
  });
});
